"""Foundation-model access: the litellm client and ledger, the sandbox FM gateway, local servers, and
the offline model registry.

- `LLMClient`, `Endpoint`, `Completion`, `Ledger`, `MemoryLedger`, `derive_seed`, `request_hash`,
  `answer_key`, `probe_endpoint`: calls to any litellm model or OpenAI-compatible server, with retries, a
  response cache and a ledger entry per call;
- `ArchiveLedger`: the ledger kept in a run's archive;
- `FMGateway`, `AgentChannel`, `prompt_token_bound`: the host side of an agent's FM socket (budgets, every
  call recorded, no key inside the sandbox);
- `GatewayListener`, `SocketRelay`, `RelayGrant`, `RemoteAgent`: the same gateway for agents on other machines
  (a TCP listener on the driver with one token per evaluation, a socket relay on each node);
- `LocalServer`, `serve_forever`, `choose_backend`, `free_port`: llama.cpp (CPU) or vLLM (GPU) servers;
- `REGISTRY`, `pull`, `resolve`, `verify`, `list_models`, `is_local_model`: named models that install offline;
- `LLMError` and its subclasses, each with a `fix`.

litellm fetches a price map over the network at import time unless told to use
its bundled copy. Every module that imports litellm lives below this package,
so setting the flag here covers them all, whatever imports first.
"""

from __future__ import annotations

import logging
import os

from cambrian.meta_agent.llm._client import (
    CallRecord,
    Completion,
    Endpoint,
    Ledger,
    LedgerEntry,
    LLMClient,
    MemoryLedger,
    answer_key,
    close_http_sessions,
    derive_seed,
    probe_endpoint,
    request_hash,
    unavailable_fix,
)
from cambrian.meta_agent.llm._errors import (
    ChecksumMismatch,
    FMAuthError,
    FMBadRequest,
    FMUnavailable,
    LLMError,
    ModelDownloadError,
    ModelNotFound,
    ServerStartError,
)
from cambrian.meta_agent.llm._gateway import (
    DEFAULT_SANDBOX_SOCKET,
    MAX_BODY_BYTES,
    SOCKET_ENV,
    TOKEN_ENV,
    AgentChannel,
    FMGateway,
    GatewayError,
    RepeatFilter,
    prompt_token_bound,
    quiet_repeats,
)
from cambrian.meta_agent.llm._ledger import ArchiveLedger
from cambrian.meta_agent.llm._models import (
    REGISTRY,
    ModelSource,
    ModelSpec,
    ModelStatus,
    get_spec,
    is_local_model,
    list_models,
    model_label,
    model_names,
    model_path,
    models_dir,
    pull,
    resolve,
    verify,
)
from cambrian.meta_agent.llm._remote import GatewayListener, RelayGrant, RemoteAgent, SocketRelay
from cambrian.meta_agent.llm._serve import (
    GRAMMAR_FIELDS,
    Backend,
    LocalServer,
    choose_backend,
    default_threads,
    free_port,
    gpu_available,
    serve_forever,
    server_grammar_field,
)

__all__ = [
    "AgentChannel", "ArchiveLedger", "Backend", "CallRecord", "ChecksumMismatch", "Completion",
    "DEFAULT_SANDBOX_SOCKET", "Endpoint", "FMAuthError", "FMBadRequest", "FMGateway", "FMUnavailable",
    "GRAMMAR_FIELDS", "GatewayError", "GatewayListener", "LLMClient", "LLMError", "Ledger", "LedgerEntry",
    "LocalServer", "MAX_BODY_BYTES", "MemoryLedger", "ModelDownloadError", "ModelNotFound", "ModelSource",
    "ModelSpec", "ModelStatus", "REGISTRY", "RelayGrant", "RemoteAgent", "RepeatFilter", "SOCKET_ENV",
    "SocketRelay", "ServerStartError", "TOKEN_ENV", "answer_key", "choose_backend", "close_http_sessions",
    "default_threads", "derive_seed", "free_port", "get_spec", "gpu_available", "is_local_model", "list_models",
    "model_label", "model_names", "model_path", "models_dir", "probe_endpoint", "prompt_token_bound", "pull",
    "quiet_repeats", "request_hash", "resolve", "serve_forever", "server_grammar_field", "unavailable_fix", "verify",
]  # fmt: skip


def _quiet_litellm() -> None:
    """Keep litellm offline at import and off the console (the CLI owns the console)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
        logging.getLogger(name).setLevel(logging.WARNING)


_quiet_litellm()
