"""What an FM call's failure means: retry it or not (`classify`), how to say it (`describe`), and what the
user should do about an FM that did not answer (`unavailable_fix`)."""

from __future__ import annotations

import asyncio
from typing import Literal

from cambrian.meta_agent.llm._request import Endpoint

Failure = Literal["transient", "auth", "bad_request"]


def unavailable_fix(endpoint: Endpoint, last_error: BaseException | None) -> str:
    """What to do about an FM that did not answer, by what it did: nothing there, a failing server, limits, time."""
    where = endpoint.api_base or endpoint.model
    code = None if last_error is None or connection_failed(last_error) else status_code(last_error)
    if code == 429:
        return f"{where} is rate-limiting: lower fm.concurrency, or wait and `cambrian resume` the run"
    if code is not None and code >= 500:
        return (
            f"the server at {where} is running but failing (HTTP {code}): read its log (a prompt over its "
            "context or out of memory are common causes); restarting it may help"
        )
    if isinstance(last_error, (asyncio.TimeoutError, TimeoutError)) or "Timeout" in type(last_error).__name__:
        return f"{where} is too slow for fm.timeout_s: raise it (or fm.retries), or use a smaller model"
    if endpoint.api_base:
        return (
            f"nothing answers at {endpoint.api_base}: start the server (`cambrian serve MODEL`), fix --api-base, "
            "or give --model with a local model name and no --api-base to let cambrian start one"
        )
    return f"check network access and the provider's status for {endpoint.model}"


def status_code(exc: BaseException) -> int | None:
    """The HTTP status an error carries (on itself or its response), or None."""
    for holder in (exc, getattr(exc, "response", None)):
        code = getattr(holder, "status_code", None)
        if isinstance(code, int):
            return code
    return None


def classify(exc: BaseException) -> Failure | None:
    """transient (retry), auth or bad_request (do not retry); None for errors that are not the FM's."""
    import openai  # litellm's exceptions subclass openai's

    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return "transient"
    if isinstance(exc, openai.APIConnectionError):
        return "transient"  # refused, reset, DNS, timeouts (APITimeoutError is a subclass)
    code = status_code(exc)
    if code is None:
        return "transient" if isinstance(exc, openai.APIError) else None
    if code in (401, 403):
        return "auth"
    if code in (408, 409, 425, 429) or code >= 500:
        return "transient"
    if 400 <= code < 500:
        return "bad_request"
    return "transient"


def connection_failed(exc: BaseException | None) -> bool:
    """Did no server answer at all (refused, reset, unreachable)? litellm reports that as an HTTP 500 whose
    cause is openai's APIConnectionError: look through the chain."""
    import openai

    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError):
            return True
        if isinstance(exc, ConnectionError) or type(exc).__name__ in ("ConnectError", "RemoteProtocolError"):
            return True
        if "Connection error." in str(exc) or "Connection refused" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def describe(exc: BaseException | None) -> str:
    """An error in one line for the ledger and messages: its type, its HTTP status, and at most 500 characters."""
    if exc is None:
        return "none"
    if connection_failed(exc):
        return "no server answered (connection refused, reset or unreachable)"
    code = status_code(exc)
    text = " ".join(str(exc).split())[:500]
    prefix = f"{type(exc).__name__}" + (f" (HTTP {code})" if code is not None else "")
    return f"{prefix}: {text}" if text else prefix
