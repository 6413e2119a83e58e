"""The FM client: any litellm provider or OpenAI-compatible server, as a pipeline of steps over a `Request`.

`LLMClient.complete(request)` passes one request through these steps, each a method that calls the next:

1. grammar fallback (`complete`): a request whose grammar the server refuses is asked again without it;
   that request only, so the others, concurrent or later, keep theirs;
2. cache (`_cached`): an answer the ledger holds for this exact request (or for the same greedy question
   asked with another reply limit it fits in) is returned, and recorded as a hit;
3. retries (`_retried`): a transient failure is tried again after a backoff; an auth or bad-request error,
   never;
4. limit (`_limited`): at most `concurrency` attempts in flight;
5. ledger (`_recorded`): every attempt is recorded, fresh answers cached first, failures with their error;
6. transport (`_send`): the litellm call, under the attempt's timeout.

The request's hash, seed included, keys the cache (`_request`): a replayed run reproduces its FM answers
exactly and pays nothing, while two proposals from the same parent still differ.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import logging
import os
import random
import sys
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from cambrian.meta_agent.llm._calls import CallRecord, Ledger
from cambrian.meta_agent.llm._errors import FMAuthError, FMBadRequest, FMUnavailable, LLMError
from cambrian.meta_agent.llm._failures import classify, describe, unavailable_fix
from cambrian.meta_agent.llm._request import Completion, Endpoint, Request, answer_key, request_hash

_UNUSED_KEY = "sk-unused"  # local OpenAI-compatible servers ignore the key, but the SDK wants one


@dataclasses.dataclass(frozen=True)
class Asked:
    """A `Request` as the client sends it: with its defaults filled in, and the keys the cache knows it by.

    params: the sampling parameters sent besides the messages (temperature, max_tokens, seed, extra_body with
    any grammar); what the request hash covers. key: that hash. answer_key: the greedy question's second key
    (`_request.answer_key`); None for a sampled request.
    """

    request: Request
    params: Mapping[str, Any]
    key: str
    answer_key: str | None


class LLMClient:
    """Calls one FM endpoint with bounded concurrency, retries, a response cache and a ledger.

    concurrency: attempts in flight at once (>= 1). timeout_s: per attempt, seconds.
    retries: extra attempts after a transient failure (0 = try once).
    backoff_s: the first retry's wait, doubled each time, with jitter in
    [0.5x, 1.5x). temperature (0..2) and max_tokens are the defaults of a
    `Request` that leaves them None. constrained: send the grammars requests
    carry in the endpoint's `grammar_field` (ignored when it has none); a request
    whose grammar the server refuses is asked again without it, and `on_warning`
    is told the first time.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        ledger: Ledger,
        concurrency: int = 2,
        timeout_s: float = 300.0,
        retries: int = 3,
        backoff_s: float = 2.0,
        temperature: float = 0.8,
        max_tokens: int = 2048,
        constrained: bool = False,
        on_warning: Callable[[str], None] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.endpoint = endpoint
        self.ledger = ledger
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retries = max(0, retries)
        self.backoff_s = backoff_s
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._jitter = random.Random()  # jitter only spreads retries; it need not be reproducible
        self.grammar_field = endpoint.grammar_field if constrained else None  # set once, never changed
        self.on_warning = on_warning or (lambda message: None)
        self._warned = False  # a refused grammar is told once; each refused request falls back on its own
        # A semaphore belongs to the event loop it first waits on; complete_sync makes a new loop per call.
        self._semaphore: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    @property
    def constrained(self) -> bool:
        """Whether grammars are sent (a request whose grammar is refused is asked again without it)."""
        return self.grammar_field is not None

    def asked(self, request: Request) -> Asked:
        """`request` with the client's defaults filled in, as it is sent, cached and recorded."""
        extra_body = dict(self.endpoint.extra_body)
        if request.grammar is not None and self.grammar_field is not None:
            extra_body[self.grammar_field] = request.grammar
        params = {
            "temperature": self.temperature if request.temperature is None else request.temperature,
            "max_tokens": self.max_tokens if request.max_tokens is None else request.max_tokens,
            "seed": request.seed,
            "extra_body": extra_body,
        }
        model = self.endpoint.model
        return Asked(
            request, params, request_hash(model, request.messages, params), answer_key(model, request.messages, params)
        )

    async def complete(self, request: Request) -> Completion:
        """One chat completion: from the cache when this exact request was answered before.

        Raises FMUnavailable (no answer after every retry), FMAuthError or FMBadRequest (never retried).
        The grammar-fallback step: a refused grammar is dropped for this request alone.
        """
        try:
            return await self._cached(self.asked(request))
        except FMBadRequest as exc:
            if request.grammar is None or self.grammar_field is None:
                raise
            self._warn_once(
                f"{self.endpoint.where()} refused a grammar in {self.grammar_field!r} ({exc}); such a request is "
                "asked again without it (set fm.constrained=off to skip the attempt)"
            )
        return await self._cached(self.asked(dataclasses.replace(request, grammar=None)))

    def complete_sync(self, request: Request) -> Completion:
        """`complete` for code without an event loop (CLI tools); not callable from inside one."""

        async def complete_then_close() -> Completion:
            try:
                return await self.complete(request)
            finally:
                await close_http_sessions()

        return asyncio.run(complete_then_close())

    def refuse(self, request: Request, reason: str) -> None:
        """Record `request` as refused before it was asked (an agent over its budget): an error row, no call.

        Its messages are not kept: a refused request's prompt is the asker's, and nothing was spent on it.
        """
        asked = self.asked(request)
        self._record(dataclasses.replace(asked, request=dataclasses.replace(request, messages=())), None, reason)

    async def _cached(self, asked: Asked) -> Completion:
        """The cache step: a stored answer to this request, or to the same greedy question within its limit."""
        started = time.monotonic()
        cached = self.ledger.cached(asked.key)
        if cached is None and asked.answer_key is not None:
            cached = self.ledger.cached_greedy(asked.answer_key, asked.params["max_tokens"])
            if cached is not None:  # the same greedy question, asked with another limit it fits in
                self.ledger.store(dataclasses.replace(cached, request_hash=asked.key, cost_usd=0.0))
        if cached is None:
            return await self._retried(asked)
        hit = dataclasses.replace(
            cached,
            cost_usd=0.0,
            cache_hit=True,
            latency_s=time.monotonic() - started,
            seed=asked.request.seed,
            request_hash=asked.key,
        )
        self._record(asked, hit)
        return hit

    async def _retried(self, asked: Asked) -> Completion:
        """The retry step: transient failures again after a backoff; auth and bad requests raised at once."""
        self._api_key()  # a missing key is a config error, not an attempt
        last_error: BaseException | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self._backoff(attempt))
            try:
                return await self._limited(asked)
            except Exception as exc:  # classified below; anything unknown is re-raised
                failure = classify(exc)
                if failure is None:
                    raise
                if failure == "auth":
                    raise self._auth_error(exc) from exc
                if failure == "bad_request":
                    raise self._bad_request(exc) from exc
                last_error = exc
        raise FMUnavailable(
            f"FM endpoint {self.endpoint.where()} did not answer after {self.retries + 1} attempts; "
            f"last error: {describe(last_error)}",
            fix=unavailable_fix(self.endpoint, last_error),
        ) from last_error

    async def _limited(self, asked: Asked) -> Completion:
        """The limit step: at most `concurrency` attempts in flight."""
        async with self._limit():
            return await self._recorded(asked)

    async def _recorded(self, asked: Asked) -> Completion:
        """The ledger step: one attempt, recorded; a fresh answer is cached before its row is written (the
        archive writes both in one transaction). Latency counts from a free slot."""
        started = time.monotonic()
        try:
            response = await asyncio.wait_for(self._send(asked), timeout=self.timeout_s + 5.0)
        except Exception as exc:
            self._record(asked, None, describe(exc), time.monotonic() - started)
            raise
        completion = self._completion(response, asked, latency_s=time.monotonic() - started)
        stopped = _finish_reason(response) == "stop" and completion.completion_tokens > 0
        self.ledger.store(completion, answer_key=asked.answer_key if stopped else None)
        self._record(asked, completion)
        return completion

    async def _send(self, asked: Asked) -> Any:
        """The transport step: the litellm call, without the SDK's own retries (the ledger sees every attempt)."""
        params = asked.params
        kwargs: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": [dict(m) for m in asked.request.messages],
            "temperature": params["temperature"],
            "max_tokens": params["max_tokens"],
            "seed": params["seed"],
            "timeout": self.timeout_s,
            "max_retries": 0,
            "num_retries": 0,
        }
        if params["extra_body"]:
            kwargs["extra_body"] = dict(params["extra_body"])
        if self.endpoint.api_base:
            kwargs["api_base"] = self.endpoint.api_base
        api_key = self._api_key()
        if api_key is not None:
            kwargs["api_key"] = api_key
        return await _litellm().acompletion(**kwargs)

    def _record(
        self, asked: Asked, completion: Completion | None, error: str | None = None, latency_s: float = 0.0
    ) -> None:
        request = asked.request
        self.ledger.record(
            CallRecord(
                completion,
                request_hash=asked.key,
                seed=request.seed,
                purpose=request.purpose,
                agent_id=request.agent_id,
                iteration=request.iteration,
                error=error,
                model=self.endpoint.label,
                messages=request.messages,
                params=asked.params if request.messages else None,
                latency_s=latency_s,
                proposal_id=request.proposal_id,
            )
        )

    def _warn_once(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            self.on_warning(message)

    def _limit(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._semaphore[0] is not loop:
            self._semaphore = (loop, asyncio.Semaphore(self.concurrency))
        return self._semaphore[1]

    def _backoff(self, attempt: int) -> float:
        """Seconds to wait before retry `attempt` (1-based): exponential with jitter."""
        return float(self.backoff_s * 2 ** (attempt - 1) * self._jitter.uniform(0.5, 1.5))

    def _api_key(self) -> str | None:
        name = self.endpoint.api_key_env
        if name:
            key = os.environ.get(name)
            if not key:
                raise FMAuthError(
                    f"environment variable {name} (the API key of {self.endpoint.where()}) is not set",
                    fix=f"export {name}=<your key> before starting cambrian",
                )
            return key
        return _UNUSED_KEY if self.endpoint.api_base else None

    def _completion(self, response: Any, asked: Asked, *, latency_s: float) -> Completion:
        usage = getattr(response, "usage", None)
        text = response.choices[0].message.content or ""
        return Completion(
            text=text,
            model=self.endpoint.label,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            cost_usd=_cost_usd(response),
            latency_s=latency_s,
            cache_hit=False,
            request_hash=asked.key,
            seed=asked.request.seed,
        )

    def _auth_error(self, exc: BaseException) -> LLMError:
        where = self.endpoint.where()
        if self.endpoint.api_key_env:
            fix = f"check the key in ${self.endpoint.api_key_env} is valid for {where}"
        else:
            fix = f"set api_key_env in the model config to the variable that holds the key for {where}"
        return FMAuthError(f"FM endpoint {where} refused the credentials: {describe(exc)}", fix=fix)

    def _bad_request(self, exc: BaseException) -> LLMError:
        where = self.endpoint.where()
        return FMBadRequest(
            f"FM endpoint {where} rejected the request: {describe(exc)}",
            fix=f"check that the model name {self.endpoint.model!r} exists at that endpoint "
            "(for a local server: openai/<alias>) and that the prompt plus max_tokens fits its context",
        )


def probe_endpoint(endpoint: Endpoint, *, timeout_s: float = 3.0) -> None:
    """Fail in about a second, before any work, where an FM endpoint cannot serve: nothing listens at its
    api_base, it refuses the key, it answers 5xx, or a hosted provider's credentials are missing.

    An OpenAI-compatible server is asked `GET <api_base>/models` (free); a hosted provider is not called
    (that costs tokens): only its credentials are looked for. Raises FMUnavailable or FMAuthError.
    """
    key_env = endpoint.api_key_env
    if key_env and not os.environ.get(key_env):
        raise FMAuthError(
            f"environment variable {key_env} (the API key of {endpoint.where()}) is not set",
            fix=f"export {key_env}=<your key> before starting cambrian",
        )
    if not endpoint.api_base:
        try:
            missing = list(_litellm().validate_environment(model=endpoint.model).get("missing_keys") or [])
        except Exception:  # noqa: BLE001 - an unknown provider: its first call will say what is wrong
            missing = []
        if missing and not key_env:
            raise FMAuthError(
                f"no credentials for {endpoint.model}: {', '.join(missing)} is not set",
                fix=f"export {missing[0]}=<your key>, or name your key's variable with --api-key-env NAME; "
                "for a local or self-hosted server give --api-base URL",
            )
        return
    import httpx

    url = endpoint.api_base.rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {os.environ[key_env]}"} if key_env else {}
    try:
        response = httpx.get(url, headers=headers, timeout=timeout_s)
    except httpx.TimeoutException as exc:
        raise FMUnavailable(
            f"the FM server at {endpoint.api_base} did not answer within {timeout_s:g} s",
            fix=unavailable_fix(endpoint, exc),
        ) from exc
    except httpx.HTTPError as exc:
        raise FMUnavailable(
            f"no FM server answers at {endpoint.api_base} ({type(exc).__name__}: {exc})",
            fix=unavailable_fix(endpoint, ConnectionError(str(exc))),
        ) from exc
    if response.status_code in (401, 403):
        raise FMAuthError(
            f"the FM server at {endpoint.api_base} refused the credentials (HTTP {response.status_code})",
            fix=(
                f"check the key in ${key_env}" if key_env else "pass --api-key-env NAME, the variable holding the key"
            ),
        )
    if response.status_code >= 500:
        raise FMUnavailable(
            f"the FM server at {endpoint.api_base} answered HTTP {response.status_code} to GET /models",
            fix="the server is running but failing: read its log; restarting it may help",
        )


async def close_http_sessions() -> None:
    """Close the HTTP sessions litellm keeps for the running event loop; call before the loop ends.

    Left open, Python prints "Unclosed client session" for each one at exit.
    """
    module = sys.modules.get("litellm")
    if module is not None:
        await module.close_litellm_async_clients()


def _litellm() -> ModuleType:
    """litellm, imported on first use (it takes seconds) with its console chatter off."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    module: Any = importlib.import_module("litellm")  # an untyped module: its flags are plain attributes
    module.suppress_debug_info = True
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return module


def _finish_reason(response: Any) -> str | None:
    """Why the server ended the reply: "stop" (by itself), "length" (its limit), ...; None if unsaid."""
    choices = getattr(response, "choices", None) or [None]
    return getattr(choices[0], "finish_reason", None)


def _cost_usd(response: Any) -> float:
    """The call's price from litellm's price map; 0.0 when unknown (local models)."""
    try:
        cost = _litellm().completion_cost(completion_response=response)
    except Exception:  # noqa: BLE001 - litellm raises for any model missing from its price map
        return 0.0
    return float(cost or 0.0)
