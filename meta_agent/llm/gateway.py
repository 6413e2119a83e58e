"""The host side of the sandbox FM socket: agents call the FM without a key or a network.

Each agent under evaluation gets its own Unix socket, `<socket_dir>/agent-<id>-<random>.sock`,
mounted into its sandbox. The socket's identity IS the agent, so nothing secret
goes inside: the program speaks a small OpenAI-shaped HTTP/1.1 subset over it
(`_cambrian_llm.llm(...)` in the sandbox does this) and the gateway forwards
each call through the run's `LLMClient`, which records it in the ledger with
purpose "agent" and the agent id. Budgets (calls, and prompt + completion
tokens) are per agent; a refused call answers 429 and is recorded too. Before a
call is forwarded, an upper bound of its prompt tokens (one per UTF-8 byte, plus
the chat template's overhead) and its completion cap are reserved, so no number
of concurrent calls can spend past the budget. Each agent may have at most
`max_in_flight` calls in flight and `max_connections` connections open; a
connection past that is answered 503 at once and closed, so an agent cannot
exhaust the host process's file descriptors.

The gateway runs on the caller's event loop (the search loop's), so every
archive write happens on that one thread while sandboxes run in worker threads
and reach it over the socket. Endpoints:

    POST /v1/chat/completions   messages, temperature, max_tokens, seed (the rest is ignored)
    GET  /v1/models             the run's one model
    GET  /health                {"status": "ok", "calls_left": .., "tokens_left": ..}

No response ever carries a key, the FM's address or anything of the host's environment.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import secrets
import stat
import time
from pathlib import Path
from typing import Any

from cambrian.meta_agent.llm._client import LLMClient
from cambrian.meta_agent.llm._errors import LLMError
from cambrian.meta_agent.llm._http import (
    MAX_BODY_BYTES,
    MAX_LINE_BYTES,
    REASONS,
    ChatRequest,
    HTTPError,
    HTTPRequest,
    error_body,
    parse_chat,
    read_request,
)
from cambrian.meta_agent.llm._request import Request, derive_seed
from cambrian.sandbox.base import Mount

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

SOCKET_ENV = "CAMBRIAN_FM_SOCKET"  # the variable naming the socket inside the sandbox
#: The variable holding the agent's own token, which every request on its socket must carry (`Authorization:
#: Bearer`): a socket's name is listed in /proc/net/unix, so another program (another agent, another user of the
#: machine) can find it, and without the token it gets 401 and spends nothing of this agent's budget.
TOKEN_ENV = "CAMBRIAN_FM_TOKEN"
DEFAULT_SANDBOX_SOCKET = "/run/cambrian/fm.sock"
AGENT_CALL_SEED_BASE = 1000  # agent call k gets derive_seed(run seed, iteration, 1000 + k): apart from mutations
PROMPT_OVERHEAD_TOKENS = 64  # chat-template tokens of one call (a default system prompt, the generation prompt)
MESSAGE_OVERHEAD_TOKENS = 16  # chat-template tokens around each message
_MAX_SOCKET_PATH_BYTES = 107  # Linux sun_path is 108 bytes with the trailing NUL
_ROUTES = {"/v1/chat/completions": "POST", "/v1/models": "GET", "/health": "GET"}


class GatewayError(LLMError):
    """The gateway cannot serve an agent (socket dir unusable, socket path too long)."""


class AgentChannel:
    """One agent's socket, budget and counters. Made by `FMGateway.open_agent`; serves until `close()`.

    max_calls: FM calls the agent may make (>= 0). max_tokens: prompt + completion
    tokens it may use in total (>= 0); a call reserves `prompt_token_bound` of its
    messages plus its completion cap, which is lowered to what is left after the
    prompt's bound; a call whose prompt alone may not fit is refused.
    """

    def __init__(
        self,
        gateway: FMGateway,
        agent_id: int | None,
        *,
        socket_path: Path | None,
        max_calls: int,
        max_tokens: int,
        run_seed: int,
        iteration: int,
        purpose: str = "agent",
        proposal_id: str | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.purpose = purpose
        self.proposal_id = proposal_id
        self.socket_path = socket_path
        self.max_calls = max_calls
        self.max_tokens = max_tokens
        self.run_seed = run_seed
        self.iteration = iteration
        self.calls_used = 0  # calls forwarded to the FM (cache hits included)
        self.tokens_used = 0  # prompt + completion tokens of those calls
        self.prompt_tokens_used = 0
        self.completion_tokens_used = 0
        self.cost_usd = 0.0  # of those calls (0 for local models and cache hits)
        self.refusals = 0  # calls refused with 429
        self._gateway = gateway
        self._calls_started = 0  # forwarded or in flight: the next call's index
        self._tokens_reserved = 0  # prompt bound + max_tokens of the calls in flight
        self._in_flight = 0  # chat calls forwarded and not answered yet
        self.connections_refused = 0  # connections past max_connections, answered 503
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self.closed = False
        # Every request must carry the agent's own token (TOKEN_ENV), on its own socket or through a node's
        # relay (whose own token, checked by the listener, proves only the relay).
        self.token = secrets.token_urlsafe(32)
        self.unauthorized = 0  # requests refused for a missing or wrong token (charged nothing)

    @property
    def calls_left(self) -> int:
        return max(0, self.max_calls - self._calls_started)

    @property
    def tokens_left(self) -> int:
        return max(0, self.max_tokens - self.tokens_used - self._tokens_reserved)

    def mount(self, sandbox_path: str = DEFAULT_SANDBOX_SOCKET) -> Mount:
        """The socket as a RunSpec mount (read-only is fine: connecting to a socket is not a write to the mount)."""
        if self.socket_path is None:
            raise ValueError("a remote channel has no socket of its own: its node serves one (GatewayListener)")
        return Mount(host_path=str(self.socket_path), sandbox_path=sandbox_path, read_only=True)

    def env(self, sandbox_path: str = DEFAULT_SANDBOX_SOCKET) -> dict[str, str]:
        """The RunSpec env entries that tell `_cambrian_llm` where the socket is inside the sandbox and the token
        its requests carry."""
        return {SOCKET_ENV: sandbox_path, TOKEN_ENV: self.token}

    async def start(self) -> None:
        """Bind the socket and make it connectable by the sandbox's non-root user (none for a remote channel,
        whose connections arrive through `serve` from the gateway's TCP listener)."""
        if self.socket_path is None:
            return
        if self.socket_path.exists() or self.socket_path.is_symlink():
            self.socket_path.unlink()  # left by a crashed run; binding would fail on it
        self._server = await asyncio.start_unix_server(
            self._serve_connection, path=str(self.socket_path), limit=MAX_LINE_BYTES
        )
        os.chmod(self.socket_path, 0o666)

    async def close(self) -> None:
        """Stop serving, cut calls in flight and remove the socket file. Idempotent; counters stay readable."""
        if self.closed:
            return
        self.closed = True
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        if self.socket_path is None:
            return
        try:
            self.socket_path.unlink()
        except FileNotFoundError:
            pass

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer one HTTP request arriving on an already-accepted connection (the TCP listener's, once it has
        checked the connection's token), under this channel's budget and connection limits."""
        if self.closed:
            writer.close()
            return
        await self._serve_connection(reader, writer)

    # ----- one connection: one request, one response (no keep-alive) -----

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        over = len(self._connections) >= self._gateway.max_connections
        if task is not None and not over:
            self._connections.add(task)
        headers: dict[str, str]
        try:
            if over:  # answered without reading a byte: the descriptor is freed at once
                self.connections_refused += 1
                message = f"more than {self._gateway.max_connections} connections open; close some and retry"
                status, payload, headers = 503, error_body("too_many_connections", message), {}
            else:
                status, payload, headers = await self._respond(reader, writer)
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            head = [
                f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}",
                "Content-Type: application/json",
                f"Content-Length: {len(body)}",
                "Connection: close",
                *(f"{name}: {value}" for name, value in headers.items()),
            ]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the agent hung up: nobody is left to answer
        except asyncio.CancelledError:
            pass  # the channel closed: this connection ends here (a connection's task is the top level)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, asyncio.CancelledError):
                pass
            if task is not None:
                self._connections.discard(task)

    async def _respond(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        try:
            try:
                request = await asyncio.wait_for(read_request(reader, writer), timeout=self._gateway.read_timeout_s)
            except asyncio.TimeoutError:
                return 408, error_body("timeout", "the request did not arrive in time"), {}
            if not hmac.compare_digest(request.authorization, f"Bearer {self.token}"):
                self.unauthorized += 1
                raise HTTPError(401, "unauthorized", f"this socket serves one agent: send its token ({TOKEN_ENV})")
            return 200, await self._route(request), {}
        except HTTPError as exc:
            return exc.status, error_body(exc.kind, str(exc)), exc.headers
        except LLMError as exc:
            return 502, error_body("fm_error", self._gateway.public_message(exc)), {}
        except (ConnectionError, asyncio.IncompleteReadError):
            raise  # the agent hung up mid-request: nothing to answer
        except Exception:  # one broken request must not take the gateway (and the run) down
            log.exception("FM gateway: unexpected error serving agent %s", self.agent_id)
            return 500, error_body("internal_error", "the gateway failed on this request"), {}

    async def _route(self, request: HTTPRequest) -> dict[str, Any]:
        allowed = _ROUTES.get(request.path)
        if allowed is None:
            raise HTTPError(404, "not_found", f"no endpoint {request.path!r}; try POST /v1/chat/completions")
        if request.method != allowed:
            raise HTTPError(
                405,
                "method_not_allowed",
                f"{request.path} takes {allowed}, not {request.method}",
                headers={"Allow": allowed},
            )
        if request.path == "/health":
            return {"status": "ok", "calls_left": self.calls_left, "tokens_left": self.tokens_left}
        label = self._gateway.llm.endpoint.label
        if request.path == "/v1/models":
            return {"object": "list", "data": [{"id": label, "object": "model", "owned_by": "cambrian"}]}
        return await self._chat(parse_chat(request.body))

    async def _chat(self, chat: ChatRequest) -> dict[str, Any]:
        llm = self._gateway.llm
        call_index = self._calls_started
        seed = (
            chat.seed
            if chat.seed is not None
            else derive_seed(self.run_seed, self.iteration, AGENT_CALL_SEED_BASE + call_index)
        )
        wanted = chat.max_tokens if chat.max_tokens is not None else llm.max_tokens
        prompt_bound = prompt_token_bound(chat.messages)
        cap = min(wanted, self._gateway.max_tokens_per_call, self.tokens_left - prompt_bound)
        request = Request(
            chat.messages,
            seed=seed,
            purpose=self.purpose,
            agent_id=self.agent_id,
            iteration=self.iteration,
            proposal_id=self.proposal_id,
            temperature=chat.temperature,
            max_tokens=max(cap, 0),
        )
        refusal = self._refusal(prompt_bound)
        if refusal is not None:
            self.refusals += 1
            llm.refuse(request, f"budget_exceeded: {refusal}")
            raise HTTPError(429, "budget_exceeded", refusal)
        # Reserve before the first await: concurrent calls of one agent must not overspend together.
        self._calls_started += 1
        self._tokens_reserved += prompt_bound + cap
        self._in_flight += 1
        try:
            completion = await llm.complete(request)
        except BaseException:
            self._calls_started -= 1  # a failed call spends nothing of the agent's budget
            raise
        finally:
            self._tokens_reserved -= prompt_bound + cap
            self._in_flight -= 1
        self.calls_used += 1
        self.tokens_used += completion.prompt_tokens + completion.completion_tokens
        self.prompt_tokens_used += completion.prompt_tokens
        self.completion_tokens_used += completion.completion_tokens
        self.cost_usd += completion.cost_usd
        return {
            "id": f"chatcmpl-{completion.request_hash[:24]}",
            "object": "chat.completion",
            "created": 0,  # a replay must produce byte-identical responses
            "model": completion.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": completion.text},
                    "finish_reason": "length" if completion.completion_tokens >= cap else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": completion.completion_tokens,
                "total_tokens": completion.prompt_tokens + completion.completion_tokens,
            },
        }

    def _refusal(self, prompt_bound: int) -> str | None:
        """Why the next call (whose prompt may take up to `prompt_bound` tokens) may not go ahead, or None."""
        who = f"agent {self.agent_id}" if self.agent_id is not None else "this agent"
        if self.calls_left <= 0:
            return f"{who} has used all {self.max_calls} FM calls of its budget"
        if self.tokens_left <= 0:
            return f"{who} has used all {self.max_tokens} FM tokens of its budget"
        if self._in_flight >= self._gateway.max_in_flight:
            return f"{who} already has {self._in_flight} FM calls in flight (at most {self._gateway.max_in_flight})"
        if prompt_bound >= self.tokens_left:
            return (
                f"the prompt may take up to {prompt_bound} tokens (one per byte, plus the chat template) and "
                f"{who} has {self.tokens_left} FM tokens left (reserved calls in flight included)"
            )
        return None


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


def prompt_token_bound(messages: list[dict[str, str]]) -> int:
    """An upper bound of the prompt tokens of `messages`: byte-level tokenizers (BPE, and sentencepiece with
    byte fallback) never use more than one token per UTF-8 byte, and chat templates add a few per message."""
    return PROMPT_OVERHEAD_TOKENS + sum(
        len(m["content"].encode("utf-8")) + len(m["role"]) + MESSAGE_OVERHEAD_TOKENS for m in messages
    )


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
