"""One agent's FM channel: its socket, its budget, and the small HTTP server the agent's calls arrive at.

An `AgentChannel` is made and owned by the gateway (`gateway.FMGateway.open_agent`, or `open_remote_agent` for
an agent on another machine); it reads from its gateway only what `ChannelHost` names: the run's `LLMClient`
and the limits every agent shares. Each request carries the agent's own token (`TOKEN_ENV`) and is answered
once, no keep-alive. A chat call is forwarded through the client, recorded in the ledger with the channel's
purpose, agent id and proposal id; a refused call answers 429 and is recorded too. Before a call is
forwarded, an upper bound of its prompt tokens (`prompt_token_bound`: one per UTF-8 byte, plus the chat
template's overhead) and its completion cap are reserved, so no number of concurrent calls can spend past the
budget. Each agent may have at most `max_in_flight` calls in flight and `max_connections` connections open; a
connection past that is answered 503 at once and closed, so an agent cannot exhaust the host process's file
descriptors. Endpoints:

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
from pathlib import Path
from typing import Any, Protocol

from cambrian.meta_agent.llm._client import LLMClient
from cambrian.meta_agent.llm._errors import LLMError
from cambrian.meta_agent.llm._http import (
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
    "ChannelHost",
    "DEFAULT_SANDBOX_SOCKET",
    "MESSAGE_OVERHEAD_TOKENS",
    "PROMPT_OVERHEAD_TOKENS",
    "SOCKET_ENV",
    "TOKEN_ENV",
    "prompt_token_bound",
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
_ROUTES = {"/v1/chat/completions": "POST", "/v1/models": "GET", "/health": "GET"}


class ChannelHost(Protocol):
    """What a channel reads from the gateway that made it (`gateway.FMGateway`): the client every call goes
    through and the limits all its agents share."""

    llm: LLMClient
    max_tokens_per_call: int  # the most completion tokens one call may ask for (>= 1)
    read_timeout_s: float  # seconds a connection may take to send its request
    max_in_flight: int  # chat calls one agent may have forwarded and unanswered at once (>= 1)
    max_connections: int  # connections one agent may hold open at once (>= 1)

    def public_message(self, exc: LLMError) -> str:
        """An FM error as the agent may see it (no address, key or host env value)."""
        ...


class AgentChannel:
    """One agent's socket, budget and counters. Made by `FMGateway.open_agent` (its `gateway`, the
    `ChannelHost` whose client and limits it serves under); serves until `close()`.

    max_calls: FM calls the agent may make (>= 0). max_tokens: prompt + completion
    tokens it may use in total (>= 0); a call reserves `prompt_token_bound` of its
    messages plus its completion cap, which is lowered to what is left after the
    prompt's bound; a call whose prompt alone may not fit is refused.
    """

    def __init__(
        self,
        gateway: ChannelHost,
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


def prompt_token_bound(messages: list[dict[str, str]]) -> int:
    """An upper bound of the prompt tokens of `messages`: byte-level tokenizers (BPE, and sentencepiece with
    byte fallback) never use more than one token per UTF-8 byte, and chat templates add a few per message."""
    return PROMPT_OVERHEAD_TOKENS + sum(
        len(m["content"].encode("utf-8")) + len(m["role"]) + MESSAGE_OVERHEAD_TOKENS for m in messages
    )
