"""Foundation-model access: the litellm client and ledger, local servers, offline model registry.

litellm fetches a price map over the network at import time unless told to use
its bundled copy. Every module that imports litellm lives below this package,
so setting the flag here covers them all, whatever imports first.
"""

from __future__ import annotations

import logging
import os


def _quiet_litellm() -> None:
    """Keep litellm offline at import and off the console (the CLI owns the console)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
        logging.getLogger(name).setLevel(logging.WARNING)


_quiet_litellm()
