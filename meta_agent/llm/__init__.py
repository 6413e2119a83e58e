"""Foundation-model access: the client every FM call goes through, its ledger, and its errors.

- `LLMClient`, `Request`, `Endpoint`, `Completion`, `CallRecord`, `probe_endpoint`, `derive_seed`,
  `close_http_sessions`: calls to any litellm model or OpenAI-compatible server, one `Request` at a time
  through a pipeline of steps (grammar fallback, cache, retries, limit, ledger);
- `Ledger`, `LedgerEntry`, `MemoryLedger`, `ArchiveLedger`: where those entries go (memory, or a run's
  archive);
- `LLMError` and its subclasses (`FMAuthError`, `FMBadRequest`, `FMUnavailable`, `ModelNotFound`,
  `ModelDownloadError`, `ChecksumMismatch`, `ServerStartError`, `EmbeddingUnavailable`), each with a `fix`.

By role, in modules of their own:

- `cambrian.meta_agent.llm.models`: named models that install offline (`pull`, `resolve`, `list_models`,
  `is_local_model`, `REGISTRY`);
- `cambrian.meta_agent.llm.serve`: local inference servers, llama.cpp on CPU or vLLM on GPU (`LocalServer`,
  `choose_backend`, `serve_forever`);
- `cambrian.meta_agent.llm.embeddings`: code embeddings from a local model's own llama.cpp server
  (`LocalEmbeddings`: long texts in chunks, the server's failures as `EmbeddingUnavailable`);
- `cambrian.meta_agent.llm.gateway`: the host side of an agent's FM socket (`FMGateway`, `AgentChannel`:
  budgets, every call recorded, no key inside the sandbox);
- `cambrian.meta_agent.llm.remote`: the same gateway for agents on other machines (`GatewayListener`,
  `SocketRelay`, `RelayGrant`, `RemoteAgent`).

litellm fetches a price map over the network at import time unless told to use
its bundled copy. Every module that imports litellm lives below this package,
so setting the flag here covers them all, whatever imports first.
"""

from __future__ import annotations

import logging
import os

from cambrian.meta_agent.llm._calls import CallRecord, Ledger, LedgerEntry, MemoryLedger
from cambrian.meta_agent.llm._client import LLMClient, close_http_sessions, probe_endpoint
from cambrian.meta_agent.llm._errors import (
    ChecksumMismatch,
    EmbeddingUnavailable,
    FMAuthError,
    FMBadRequest,
    FMUnavailable,
    LLMError,
    ModelDownloadError,
    ModelNotFound,
    ServerStartError,
)
from cambrian.meta_agent.llm._ledger import ArchiveLedger
from cambrian.meta_agent.llm._request import Completion, Endpoint, Request, derive_seed

__all__ = [
    "ArchiveLedger",
    "CallRecord",
    "ChecksumMismatch",
    "Completion",
    "EmbeddingUnavailable",
    "Endpoint",
    "FMAuthError",
    "FMBadRequest",
    "FMUnavailable",
    "LLMClient",
    "LLMError",
    "Ledger",
    "LedgerEntry",
    "MemoryLedger",
    "ModelDownloadError",
    "ModelNotFound",
    "Request",
    "ServerStartError",
    "close_http_sessions",
    "derive_seed",
    "probe_endpoint",
]


def _quiet_litellm() -> None:
    """Keep litellm offline at import and off the console (the CLI owns the console)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
        logging.getLogger(name).setLevel(logging.WARNING)


_quiet_litellm()
