"""The small OpenAI-shaped HTTP/1.1 subset an agent's FM socket speaks: one request read and checked.

Every problem is an `HTTPError` with its status, a JSON error type and a message the agent is shown; the
limits (line, header and body sizes) keep a hostile program from holding the host's memory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_BODY_BYTES = 1_000_000  # a larger request body is refused with 413
MAX_LINE_BYTES = 8192  # one request or header line
_MAX_HEADERS = 100  # header LINES (a repeated name counts each time)
_SEED_LIMIT = 2**31  # llama.cpp and most providers take a signed 32-bit seed
_ROLES = ("system", "user", "assistant")
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    503: "Service Unavailable",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
}


class HTTPError(Exception):
    """A request the gateway refuses: its status, a JSON error type and a message for the agent."""

    def __init__(self, status: int, kind: str, message: str, *, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.headers = dict(headers or {})


@dataclass(frozen=True)
class HTTPRequest:
    method: str
    path: str  # without the query string
    body: bytes
    authorization: str = ""  # the Authorization header, as sent


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat request, before the budget caps max_tokens and picks the default seed."""

    messages: list[dict[str, str]]
    temperature: float | None
    max_tokens: int | None
    seed: int | None


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message}}


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> HTTPRequest:
    """Parse one HTTP/1.1 request: request line, headers, a Content-Length body of at most 1 MB."""
    parts = (await read_line(reader)).split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HTTPError(400, "bad_request", "malformed HTTP request line; expected 'METHOD /path HTTP/1.1'")
    method, target, _version = parts
    headers: dict[str, str] = {}
    lines = 0
    while True:
        line = await read_line(reader)
        if not line:
            break
        lines += 1
        if lines > _MAX_HEADERS:
            raise HTTPError(431, "bad_request", f"more than {_MAX_HEADERS} request header lines")
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise HTTPError(400, "bad_request", f"malformed header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    if "transfer-encoding" in headers:
        raise HTTPError(400, "bad_request", "chunked request bodies are not supported; send Content-Length")
    body = b""
    if "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise HTTPError(400, "bad_request", "Content-Length is not a number") from None
        if length < 0:
            raise HTTPError(400, "bad_request", "Content-Length is negative")
        if length > MAX_BODY_BYTES:
            raise HTTPError(413, "request_too_large", f"request body of {length} bytes is over {MAX_BODY_BYTES}")
        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits for this before sending a body
            await writer.drain()
        body = await reader.readexactly(length)
    elif method == "POST":
        raise HTTPError(411, "bad_request", "a POST needs a Content-Length header")
    return HTTPRequest(
        method=method, path=target.split("?", 1)[0], body=body, authorization=headers.get("authorization", "")
    )


async def read_line(reader: asyncio.StreamReader) -> str:
    try:
        raw = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise HTTPError(431, "bad_request", f"a request line or header is over {MAX_LINE_BYTES} bytes") from None
    return raw.decode("latin-1").rstrip("\r\n")


def parse_chat(body: bytes) -> ChatRequest:
    """Validate an OpenAI chat body; every problem is a 400 naming the field. Unknown fields are ignored."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPError(400, "invalid_request", f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise HTTPError(400, "invalid_request", "the request body is nested too deeply") from None
    if not isinstance(data, dict):
        raise HTTPError(400, "invalid_request", "the request body must be a JSON object")
    raw_messages = data.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise HTTPError(400, "invalid_request", "'messages' is missing or not a non-empty list")
    messages: list[dict[str, str]] = []
    for i, message in enumerate(raw_messages):
        if not isinstance(message, dict):
            raise HTTPError(400, "invalid_request", f"messages[{i}] must be an object with 'role' and 'content'")
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES:
            raise HTTPError(400, "invalid_request", f"messages[{i}].role must be one of {', '.join(_ROLES)}")
        if not isinstance(content, str):
            raise HTTPError(400, "invalid_request", f"messages[{i}].content must be a string")
        messages.append({"role": role, "content": content})  # other keys dropped: they must not change the hash
    temperature = data.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2
    ):
        raise HTTPError(400, "invalid_request", "'temperature' must be a number from 0 to 2")
    max_tokens = data.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise HTTPError(400, "invalid_request", "'max_tokens' must be a positive integer")
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < _SEED_LIMIT):
        raise HTTPError(400, "invalid_request", f"'seed' must be an integer from 0 to {_SEED_LIMIT - 1}")
    return ChatRequest(
        messages=messages,
        temperature=None if temperature is None else float(temperature),
        max_tokens=max_tokens,
        seed=seed,
    )
