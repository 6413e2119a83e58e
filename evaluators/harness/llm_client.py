"""The agent's way to the FM from inside the sandbox: `from _cambrian_llm import llm`.

Standard library only: this file is copied into the sandbox as `_cambrian_llm.py`
next to the agent's files. It holds no key and needs no network: it speaks
HTTP/1.1 over the Unix socket named by the environment variable
CAMBRIAN_FM_SOCKET, which the host's FM gateway serves and mounts into the
sandbox; each request carries the agent's own token (CAMBRIAN_FM_TOKEN: a
capability to its own budget, not a key). The gateway forwards each call to the
run's model, counts it against this agent's budget, and records it.

    from _cambrian_llm import llm, LLMBudgetExceeded

    answer = llm("Say hi", max_tokens=8)
    answer = llm([{"role": "system", "content": "Be terse."},
                  {"role": "user", "content": "2 + 2?"}], temperature=0.0, seed=7)

`llm` raises LLMBudgetExceeded when the agent's calls or tokens are used up
(HTTP 429) and LLMError for anything else, with the gateway's message.

The host side is at the bottom: `llm_client_text` and `LLM_CLIENT_FILE` let a
benchmark place this file into its RunSpec.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

LLM_CLIENT_FILE = "_cambrian_llm.py"  # the name this file gets inside the sandbox
SOCKET_ENV = "CAMBRIAN_FM_SOCKET"
TOKEN_ENV = "CAMBRIAN_FM_TOKEN"  # this agent's token: every request carries it (another program's gets 401)
DEFAULT_TIMEOUT_S = 600.0  # one call on a slow CPU model can take minutes

Messages = str | Sequence[Mapping[str, str]]


class LLMError(Exception):
    """An FM call from inside the sandbox failed. `status` is the gateway's HTTP status (None: no answer)."""

    def __init__(self, message: str, *, status: int | None = None, fix: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.fix = fix


class LLMBudgetExceeded(LLMError):
    """This agent has used all the FM calls or tokens its evaluation allows (HTTP 429)."""


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over an AF_UNIX socket: the host part of the URL is only a Host header."""

    def __init__(self, socket_path: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _socket_path() -> str:
    path = os.environ.get(SOCKET_ENV, "")
    if not path:
        raise LLMError(
            f"{SOCKET_ENV} is not set: this program is not running under a Cambrian FM gateway",
            fix="run the agent through cambrian (its evaluation mounts the FM socket), not on its own",
        )
    return path


def request(
    method: str, path: str, body: Mapping[str, Any] | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[str, Any]:
    """One request to the gateway; the parsed JSON answer. Raises LLMBudgetExceeded on 429, LLMError otherwise.

    timeout_s: seconds for the whole call (connect, FM time, reply).
    """
    socket_path = _socket_path()
    payload = None if body is None else json.dumps(body).encode("utf-8")
    headers = {"Content-Type": "application/json"} if payload is not None else {}
    token = os.environ.get(TOKEN_ENV, "")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    connection = UnixHTTPConnection(socket_path, timeout=timeout_s)
    try:
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        status, raw = response.status, response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise LLMError(
            f"cannot reach the FM gateway at {socket_path}: {type(exc).__name__}: {exc}",
            fix="the gateway may have closed (the evaluation ended) or the socket is not mounted",
        ) from exc
    finally:
        connection.close()
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        data = None
    if status == 200 and isinstance(data, dict):
        return data
    message = f"the FM gateway answered HTTP {status}"
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        message = str(data["error"].get("message") or message)
    if status == 429:
        raise LLMBudgetExceeded(message, status=status, fix="make fewer or shorter FM calls")
    raise LLMError(message, status=status)


def chat_completion(
    messages: Messages,
    *,
    temperature: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """The gateway's whole OpenAI-format answer (choices, usage) to `messages`; see `llm`."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    body: dict[str, Any] = {"messages": [dict(m) for m in messages]}
    for name, value in (("temperature", temperature), ("max_tokens", max_tokens), ("seed", seed)):
        if value is not None:
            body[name] = value
    return request("POST", "/v1/chat/completions", body, timeout_s=timeout_s)


def llm(
    messages: Messages,
    *,
    temperature: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> str:
    """Ask the run's FM; returns the reply text.

    messages: a string (sent as one user message) or chat messages [{"role", "content"}].
    temperature: 0..2 (default: the run's). max_tokens: reply length cap, further capped by
    the agent's remaining token budget. seed: fixes sampling (default: one derived by the
    host, so a replayed run gets the same answers).
    """
    answer = chat_completion(messages, temperature=temperature, max_tokens=max_tokens, seed=seed, timeout_s=timeout_s)
    try:
        return str(answer["choices"][0]["message"]["content"] or "")
    except (KeyError, IndexError, TypeError) as exc:
        raise LLMError(f"the FM gateway's answer has no message content ({exc!r})") from exc


def budget_left() -> dict[str, int]:
    """{"calls_left": .., "tokens_left": ..}: what this agent may still spend."""
    health = request("GET", "/health", timeout_s=30.0)
    return {"calls_left": int(health.get("calls_left", 0)), "tokens_left": int(health.get("tokens_left", 0))}


# ---- host side: used by benchmarks, never inside the sandbox ----


@functools.lru_cache(maxsize=1)
def llm_client_text() -> str:
    """This file's text, read as package data so it works from a wheel too (once per process)."""
    from importlib import resources

    return resources.files("cambrian.evaluators.harness").joinpath("llm_client.py").read_text(encoding="utf-8")
