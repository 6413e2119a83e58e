"""Foundation-model access: the litellm client and ledger, local servers, offline model registry.

litellm fetches a price map over the network at import time unless told to use
its bundled copy; this package is imported before any litellm import, so the
flag is set here once for every module below.
"""

from __future__ import annotations

import logging
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# litellm logs every call and prints provider hints at INFO; the CLI owns the console.
for _name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "httpx"):
    logging.getLogger(_name).setLevel(logging.WARNING)
