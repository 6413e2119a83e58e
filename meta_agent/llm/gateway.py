"""The host side of the sandbox FM socket: agents call the FM without a key or a network.

Each agent under evaluation gets its own Unix socket, `<socket_dir>/agent-<id>-<random>.sock`,
mounted into its sandbox. The socket's identity IS the agent, so nothing secret
goes inside: the program speaks a small OpenAI-shaped HTTP/1.1 subset over it
(`_cambrian_llm.llm(...)` in the sandbox does this) and the gateway forwards
each call through the run's `LLMClient`, which records it in the ledger with
purpose "agent" and the agent id. Budgets (calls, and prompt + completion
tokens) are per agent, each held by the agent's `AgentChannel` (`_channel`:
its socket, its budget reserved before a call is forwarded, its limits on calls
in flight and open connections, the endpoints it answers); `FMGateway` opens and
closes the channels, keeps their socket folder usable and private, and says what
an FM error may show an agent.

The gateway runs on the caller's event loop (the search loop's), so every
archive write happens on that one thread while sandboxes run in worker threads
and reach it over the socket. No response ever carries a key, the FM's address
or anything of the host's environment.

Public here: `FMGateway`, `GatewayError`, `RepeatFilter` and `quiet_repeats` (log lines held back when
they repeat), and the channel's names: `AgentChannel`, `SOCKET_ENV`, `TOKEN_ENV`, `DEFAULT_SANDBOX_SOCKET`,
`AGENT_CALL_SEED_BASE`, `PROMPT_OVERHEAD_TOKENS`, `MESSAGE_OVERHEAD_TOKENS`, `prompt_token_bound`,
`MAX_BODY_BYTES`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import stat
import time
from pathlib import Path

from cambrian.meta_agent.llm import _channel
from cambrian.meta_agent.llm._channel import (
    AGENT_CALL_SEED_BASE,
    DEFAULT_SANDBOX_SOCKET,
    MESSAGE_OVERHEAD_TOKENS,
    PROMPT_OVERHEAD_TOKENS,
    SOCKET_ENV,
    TOKEN_ENV,
    AgentChannel,
    prompt_token_bound,
)
from cambrian.meta_agent.llm._client import LLMClient
from cambrian.meta_agent.llm._errors import LLMError
from cambrian.meta_agent.llm._http import MAX_BODY_BYTES

__all__ = [
    "AGENT_CALL_SEED_BASE",
    "AgentChannel",
    "DEFAULT_SANDBOX_SOCKET",
    "FMGateway",
    "GatewayError",
    "MAX_BODY_BYTES",
    "MESSAGE_OVERHEAD_TOKENS",
    "PROMPT_OVERHEAD_TOKENS",
    "prompt_token_bound",
    "quiet_repeats",
    "RepeatFilter",
    "SOCKET_ENV",
    "TOKEN_ENV",
]

log = logging.getLogger(__name__)

_MAX_SOCKET_PATH_BYTES = 107  # Linux sun_path is 108 bytes with the trailing NUL


class GatewayError(LLMError):
    """The gateway cannot serve an agent (socket dir unusable, socket path too long)."""


class FMGateway:
    """Serves one Unix socket per agent on the running event loop, forwarding calls through `llm`.

    socket_dir: where the sockets live; created with `folder_mode` when missing. Keep its path short: a socket
        path may be at most 107 bytes.
    folder_mode: the socket folder's mode, `sandbox.base.socket_folder_mode(sandbox)`: 0o711 (the default)
        lets the local sandbox's run uids pass to their socket, and is added (o+x) to an existing folder;
        0o700 keeps every other host user out (Docker and bubblewrap bind the socket into the sandbox).
    max_tokens_per_call: the gateway's cap on one call's completion tokens (>= 1).
    read_timeout_s: seconds a connection may take to send its request.
    max_in_flight: chat calls one agent may have forwarded and unanswered at once (>= 1).
    max_connections: connections one agent may hold open at once (>= 1); more are answered 503 and closed.
    """

    def __init__(
        self,
        llm: LLMClient,
        *,
        socket_dir: Path,
        max_tokens_per_call: int = 4096,
        read_timeout_s: float = 30.0,
        max_in_flight: int = 4,
        max_connections: int = 32,
        folder_mode: int = 0o711,
    ) -> None:
        if max_tokens_per_call < 1 or max_in_flight < 1 or max_connections < 1:
            raise ValueError(
                "max_tokens_per_call, max_in_flight and max_connections must be >= 1, got "
                f"{max_tokens_per_call}, {max_in_flight}, {max_connections}"
            )
        self.llm = llm
        self.socket_dir = Path(socket_dir)
        self.folder_mode = folder_mode
        self.max_tokens_per_call = max_tokens_per_call
        self.read_timeout_s = read_timeout_s
        self.max_in_flight = max_in_flight
        self.max_connections = max_connections
        quiet_repeats(logging.getLogger("asyncio"))  # "Too many open files" from an accept loop, once a minute
        quiet_repeats(log)
        quiet_repeats(_channel.log)  # a request that breaks the same way again and again, once a minute
        self._channels: dict[int | str, AgentChannel] = {}  # by agent id, or socket path for id-less runs

    async def open_agent(
        self,
        agent_id: int | None,
        *,
        max_calls: int,
        max_tokens: int,
        run_seed: int,
        iteration: int,
        socket_path: str | os.PathLike[str] | None = None,
        purpose: str = "agent",
        proposal_id: str | None = None,
    ) -> AgentChannel:
        """Start serving `agent_id` on `<socket_dir>/agent-<id>-<random>.sock` with a fresh budget.

        agent_id: recorded with each call; None for an agent run that is not an archive agent yet (a parent
            writing its child under `self_modify`): its calls are linked to the child by `proposal_id`.
        max_calls / max_tokens: the agent's budget (>= 0; 0 refuses every call).
        run_seed, iteration: derive the default seed of each call, so a replay repeats it.
        socket_path: serve here instead (the folder a sandbox container has mounted for its agent);
            required when agent_id is None.
        purpose: the ledger's purpose for these calls ("agent"; "self_modify" for a parent writing its child).
        proposal_id: recorded with each call: the proposal a parent writing its child works for.
        """
        if max_calls < 0 or max_tokens < 0:
            raise ValueError(f"budgets must be >= 0, got max_calls={max_calls}, max_tokens={max_tokens}")
        if agent_id is None and socket_path is None:
            raise ValueError("a channel without an agent id needs an explicit socket_path")
        key: int | str = agent_id if agent_id is not None else str(socket_path)
        current = self._channels.get(key)
        if current is not None and not current.closed:
            raise ValueError(f"agent {agent_id} already has an open FM channel; close it first")
        self._prepare_dir()
        # A random part: in a folder others may pass through but not list (0711), a program in a sandbox that
        # shares the host's file system cannot guess another agent's socket and spend its budget.
        name = f"agent-{agent_id}-{secrets.token_hex(8)}.sock"
        path = Path(socket_path) if socket_path is not None else self.socket_dir / name
        if len(os.fsencode(str(path))) > _MAX_SOCKET_PATH_BYTES:
            raise GatewayError(
                f"the FM socket path {str(path)!r} is longer than the {_MAX_SOCKET_PATH_BYTES} bytes "
                "a Unix socket path may have",
                fix="give the gateway a shorter socket_dir, such as /tmp/cambrian-<run name>",
            )
        channel = AgentChannel(
            self,
            agent_id,
            socket_path=path,
            max_calls=max_calls,
            max_tokens=max_tokens,
            run_seed=run_seed,
            iteration=iteration,
            purpose=purpose,
            proposal_id=proposal_id,
        )
        try:
            await channel.start()
        except OSError as exc:
            raise GatewayError(
                f"cannot open the FM socket {path}: {exc}",
                fix=f"check that {self.socket_dir} is a writable local folder (not a network file system)",
            ) from exc
        self._channels[key] = channel
        return channel

    async def open_remote_agent(
        self,
        agent_id: int | None,
        *,
        max_calls: int,
        max_tokens: int,
        run_seed: int,
        iteration: int,
        purpose: str = "agent",
        key: str | None = None,
        proposal_id: str | None = None,
    ) -> AgentChannel:
        """Like `open_agent`, for an agent on another machine: no socket here; its requests arrive through the
        gateway's TCP listener (`GatewayListener`), which hands each connection with a valid token to
        `AgentChannel.serve`. Same budget, ledger and limits as a local agent's. key: the channel's name
        here when there is no agent id (a parent writing its child on a node); required then."""
        if max_calls < 0 or max_tokens < 0:
            raise ValueError(f"budgets must be >= 0, got max_calls={max_calls}, max_tokens={max_tokens}")
        if agent_id is None and key is None:
            raise ValueError("a remote channel without an agent id needs a key")
        name: int | str = agent_id if agent_id is not None else str(key)
        current = self._channels.get(name)
        if current is not None and not current.closed:
            raise ValueError(f"agent {name} already has an open FM channel; close it first")
        channel = AgentChannel(
            self,
            agent_id,
            socket_path=None,
            max_calls=max_calls,
            max_tokens=max_tokens,
            run_seed=run_seed,
            iteration=iteration,
            purpose=purpose,
            proposal_id=proposal_id,
        )
        self._channels[name] = channel
        return channel

    def channel(self, agent_id: int) -> AgentChannel | None:
        """The open channel of `agent_id`, or None."""
        current = self._channels.get(agent_id)
        return current if current is not None and not current.closed else None

    async def close(self) -> None:
        """Close every agent's channel (their socket files are removed). Idempotent."""
        channels = list(self._channels.values())
        self._channels.clear()
        await asyncio.gather(*(channel.close() for channel in channels))

    async def __aenter__(self) -> FMGateway:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def public_message(self, exc: LLMError) -> str:
        """An FM error as the agent may see it: the FM's address, the key and host env values blanked out."""
        text = f"the foundation model call failed: {exc}"
        endpoint = self.llm.endpoint
        secrets = [endpoint.api_base or ""]
        if endpoint.api_key_env:
            secrets.append(os.environ.get(endpoint.api_key_env, ""))
        # Any host env value long enough to be specific (a key, a path, a canary) could name the host.
        secrets += [value for value in os.environ.values() if len(value) >= 6]
        for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
            text = text.replace(secret, "<redacted>")
        return text

    def _prepare_dir(self) -> None:
        try:
            if not self.socket_dir.is_dir():
                self.socket_dir.mkdir(parents=True, exist_ok=True)
                os.chmod(self.socket_dir, self.folder_mode)  # others may pass (not list) only when runs need it
            elif not os.access(self.socket_dir, os.W_OK | os.X_OK):
                raise OSError(f"{self.socket_dir} is not writable")
            elif self.folder_mode & stat.S_IXOTH:
                mode = stat.S_IMODE(self.socket_dir.stat().st_mode)
                if not mode & stat.S_IXOTH:  # sandbox uids (local backend as root) must pass through to a socket
                    os.chmod(self.socket_dir, mode | stat.S_IXOTH)
        except OSError as exc:
            raise GatewayError(
                f"cannot use {self.socket_dir} as the FM socket folder: {exc}",
                fix="pass a socket_dir on a local disk that the cambrian user can write",
            ) from exc


class RepeatFilter(logging.Filter):
    """Lets a log line through once per `window_s` seconds; the next one that passes says how many were held back."""

    def __init__(self, window_s: float = 60.0) -> None:
        super().__init__("cambrian-repeats")
        self.window_s = window_s
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}  # (logger, level, msg) -> (last shown, held)

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = time.monotonic()
        shown, held = self._seen.get(key, (-1e18, 0))
        if now - shown < self.window_s:
            self._seen[key] = (shown, held + 1)
            return False
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[key] = (now, 0)
        if held:
            record.msg = f"{record.msg} [{held} more like this in the last {self.window_s:g} s were not logged]"
        return True


def quiet_repeats(logger: logging.Logger) -> None:
    """Install one RepeatFilter on `logger` (idempotent)."""
    if not any(isinstance(f, RepeatFilter) for f in logger.filters):
        logger.addFilter(RepeatFilter())
