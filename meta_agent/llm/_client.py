"""The FM client: any litellm provider or OpenAI-compatible server, with retries, a cache and a ledger.

Every call carries a seed derived from (run seed, iteration, attempt), and the
response cache is keyed by a hash of everything that determines the response,
seed included: a replayed run reproduces its FM answers exactly (and pays
nothing), while two proposals from the same parent still differ. A greedy
request (temperature 0) is keyed without its seed, which it does not depend
on: agents asking the same greedy question get the same answer. Every call,
cache hits and failed attempts included, is recorded in a `Ledger`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import importlib
import json
import logging
import os
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import Any, Literal, Protocol

from cambrian.meta_agent.llm._errors import FMAuthError, FMBadRequest, FMUnavailable, LLMError

Messages = Sequence[Mapping[str, Any]]
_Failure = Literal["transient", "auth", "bad_request"]

_SEED_RANGE = 2**31  # llama.cpp and most providers take a signed 32-bit seed
_UNUSED_KEY = "sk-unused"  # local OpenAI-compatible servers ignore the key, but the SDK wants one


def derive_seed(run_seed: int, iteration: int, attempt: int) -> int:
    """The FM seed of one call: sha256 of (run seed, iteration, attempt), in [0, 2**31)."""
    digest = hashlib.sha256(f"{run_seed}:{iteration}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % _SEED_RANGE


def request_hash(model: str, messages: Messages, params: Mapping[str, Any]) -> str:
    """sha256 (hex) of canonical JSON of the model, the messages and every sampling parameter.

    `params` holds everything else that shapes the answer (temperature,
    max_tokens, top_p, seed, extra body...). Key order does not matter. The seed
    counts only where sampling uses it: a greedy request (temperature 0) has one
    answer whatever its seed, so two agents that ask the same greedy question get
    one answer (the second from the cache), and their scores differ where their
    code does, not by a local server's run-to-run noise (batching, prompt cache).
    `answer_key` goes one step further for greedy requests with another reply limit.
    """
    if _greedy(params):
        params = {name: value for name, value in params.items() if name != "seed"}
    return _canonical_hash(model, messages, params)


def answer_key(model: str, messages: Messages, params: Mapping[str, Any]) -> str | None:
    """The response cache's second key: for a greedy request, sha256 of the request but its seed and
    `max_tokens`; None for a sampled one.

    A reply limit only cuts a greedy answer short: a reply that stopped by itself after N tokens is what a
    deterministic server answers to the same question asked with any limit of N or more. So an agent that
    only raises its MAX_TOKENS asks nothing new, and its score moves only where the longer limit lets an
    answer finish, not by the server's noise on a fresh call. The ledger keeps such replies under this key
    (`Ledger.store`) and the client answers from them (`Ledger.cached_greedy`).
    """
    if not _greedy(params):
        return None
    return _canonical_hash(
        model, messages, {name: value for name, value in params.items() if name not in ("seed", "max_tokens")}
    )


def _greedy(params: Mapping[str, Any]) -> bool:
    return params.get("temperature") == 0


def _canonical_hash(model: str, messages: Messages, params: Mapping[str, Any]) -> str:
    canonical = json.dumps(
        {"model": model, "messages": [dict(m) for m in messages], "params": dict(params)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Endpoint:
    """Where and how to reach one FM.

    model: a litellm model string: "openai/<alias>" for an OpenAI-compatible
        server at `api_base`, "openai/gpt-4o-mini", "anthropic/...", ...
    api_base: the server's API root (e.g. http://127.0.0.1:8080/v1), None for
        a provider's default.
    api_key_env: the NAME of the environment variable that holds the key (the
        key itself never goes into configs or the archive); None: no key for a
        server at `api_base`, the provider's usual variable otherwise.
    extra_body: extra JSON fields sent as they are ({"cache_prompt": False}
        makes llama.cpp repeat exactly for a fixed seed).
    label: the short model name the ledger records; defaults to `model`.
    grammar_field: the request field that carries a GBNF grammar for constrained
        decoding: "grammar" for llama.cpp, "guided_grammar" for vLLM; None when
        the server takes none (hosted APIs).
    """

    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""
    grammar_field: str | None = None

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.model)
        # Frozen means frozen: a caller's dict must not change the endpoint later.
        object.__setattr__(self, "extra_body", MappingProxyType(dict(self.extra_body)))

    def where(self) -> str:
        """The endpoint in words, for error messages."""
        return f"{self.model} at {self.api_base}" if self.api_base else self.model


@dataclass
class Completion:
    """One FM answer and what it cost.

    cost_usd: 0.0 for local models, unknown prices and cache hits.
    latency_s: wall seconds of the call that produced this object.
    """

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_s: float
    cache_hit: bool
    request_hash: str
    seed: int | None


class Ledger(Protocol):
    """Where responses are cached and every FM call is recorded (the archive implements it)."""

    def cached(self, request_hash: str) -> Completion | None:
        """The stored response for this request, or None."""
        ...

    def cached_greedy(self, answer_key: str, max_tokens: int | None) -> Completion | None:
        """The stored reply to the greedy question `answer_key` (see `answer_key`) that stopped by itself
        within `max_tokens` (None: no limit), or None."""
        ...

    def store(self, completion: Completion, answer_key: str | None = None) -> None:
        """Cache a response under its request hash; with `answer_key` (a greedy reply that stopped by
        itself), under that key too, unless the key has an answer already."""
        ...

    def record(self, call: CallRecord) -> None:
        """Record one call: a completion (fresh or cache hit), or a failed attempt with its error."""
        ...


@dataclass(frozen=True)
class CallRecord:
    """One FM call as a ledger records it.

    completion: what came back (fresh or a cache hit); None for a failed or refused attempt, whose `error`
    says why. model: the endpoint's label, so an attempt without a completion still names its model.
    messages, params: what was sent (the request hash covers both). latency_s: the wall seconds of a failed
    attempt (a completion carries its own).
    """

    completion: Completion | None
    request_hash: str
    seed: int | None
    purpose: str
    agent_id: int | None
    iteration: int | None
    error: str | None = None
    model: str | None = None
    messages: Messages = ()
    params: Mapping[str, Any] | None = None
    latency_s: float = 0.0


@dataclass(frozen=True)
class LedgerEntry:
    """One row of a MemoryLedger: what the archive's LLMCall table holds."""

    model: str | None
    request_hash: str
    seed: int | None
    purpose: str
    agent_id: int | None
    iteration: int | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_s: float
    cache_hit: bool
    error: str | None


class MemoryLedger:
    """A Ledger in memory, for tests and one-off CLI tools. Not shared between processes."""

    def __init__(self) -> None:
        self.responses: dict[str, Completion] = {}
        self.greedy: dict[str, Completion] = {}  # answer key -> the first reply that stopped by itself
        self.entries: list[LedgerEntry] = []

    def cached(self, request_hash: str) -> Completion | None:
        return self.responses.get(request_hash)

    def cached_greedy(self, answer_key: str, max_tokens: int | None) -> Completion | None:
        answer = self.greedy.get(answer_key)
        if answer is None or (max_tokens is not None and answer.completion_tokens > max_tokens):
            return None
        return answer

    def store(self, completion: Completion, answer_key: str | None = None) -> None:
        self.responses.setdefault(completion.request_hash, completion)
        if answer_key is not None:
            self.greedy.setdefault(answer_key, completion)

    def record(self, call: CallRecord) -> None:
        completion = call.completion
        self.entries.append(
            LedgerEntry(
                model=completion.model if completion else call.model,
                request_hash=call.request_hash,
                seed=call.seed,
                purpose=call.purpose,
                agent_id=call.agent_id,
                iteration=call.iteration,
                prompt_tokens=completion.prompt_tokens if completion else 0,
                completion_tokens=completion.completion_tokens if completion else 0,
                cost_usd=completion.cost_usd if completion else 0.0,
                latency_s=completion.latency_s if completion else call.latency_s,
                cache_hit=completion.cache_hit if completion else False,
                error=call.error,
            )
        )

    @property
    def total_cost_usd(self) -> float:
        """Sum of the recorded costs (cache hits and failures add 0)."""
        return sum(entry.cost_usd for entry in self.entries)


class LLMClient:
    """Calls one FM endpoint with bounded concurrency, retries, a response cache and a ledger.

    concurrency: calls in flight at once (>= 1). timeout_s: per attempt, seconds.
    retries: extra attempts after a transient failure (0 = try once).
    backoff_s: the first retry's wait, doubled each time, with jitter in
    [0.5x, 1.5x). temperature (0..2) and max_tokens are the defaults of
    `complete`. constrained: send the grammars callers pass to `complete` in the
    endpoint's `grammar_field` (ignored when it has none); a request whose
    grammar the server refuses is asked again without it (that request only:
    the others keep theirs), and `on_warning` is told the first time.
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
        self.grammar_field = endpoint.grammar_field if constrained else None
        self.on_warning = on_warning or (lambda message: None)
        self._warned = False  # a refused grammar is told once; each refused request falls back on its own
        # A semaphore belongs to the event loop it first waits on; complete_sync makes a new loop per call.
        self._semaphore: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    @property
    def constrained(self) -> bool:
        """Whether grammars are sent (a request whose grammar is refused is asked again without it)."""
        return self.grammar_field is not None

    def params(
        self,
        *,
        seed: int,
        temperature: float | None = None,
        max_tokens: int | None = None,
        grammar: str | None = None,
    ) -> dict[str, Any]:
        """The sampling parameters of one request: what the request hash covers besides the messages."""
        extra_body = dict(self.endpoint.extra_body)
        if grammar is not None and self.grammar_field is not None:
            extra_body[self.grammar_field] = grammar
        return {
            "temperature": self.temperature if temperature is None else temperature,
            "max_tokens": self.max_tokens if max_tokens is None else max_tokens,
            "seed": seed,
            "extra_body": extra_body,
        }

    async def complete(
        self,
        messages: Messages,
        *,
        seed: int,
        purpose: str = "mutate",
        agent_id: int | None = None,
        iteration: int | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        grammar: str | None = None,
    ) -> Completion:
        """One chat completion: from the cache when this exact request was answered before.

        seed: the per-call seed (see `derive_seed`). purpose: mutate | diagnose
        | repair | agent | judge, recorded in the ledger. grammar: GBNF the reply
        must follow, sent only when the client is constrained (see the class).
        Raises FMUnavailable (no answer after every retry), FMAuthError or
        FMBadRequest (never retried).
        """
        call = functools.partial(
            self._complete,
            messages,
            seed=seed,
            purpose=purpose,
            agent_id=agent_id,
            iteration=iteration,
            temperature=temperature,
            max_tokens=max_tokens,
        )
        try:
            return await call(grammar=grammar)
        except FMBadRequest as exc:
            if grammar is None or self.grammar_field is None:
                raise
            self._warn_once(
                f"{self.endpoint.where()} refused a grammar in {self.grammar_field!r} ({exc}); such a request is "
                "asked again without it (set fm.constrained=off to skip the attempt)"
            )
        return await call(grammar=None)  # this request only: the others, concurrent or later, keep theirs

    def _warn_once(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            self.on_warning(message)

    async def _complete(
        self,
        messages: Messages,
        *,
        seed: int,
        purpose: str,
        agent_id: int | None,
        iteration: int | None,
        temperature: float | None,
        max_tokens: int | None,
        grammar: str | None,
    ) -> Completion:
        params = self.params(seed=seed, temperature=temperature, max_tokens=max_tokens, grammar=grammar)
        key = request_hash(self.endpoint.model, messages, params)

        def note(completion: Completion | None, error: str | None, latency_s: float = 0.0) -> None:
            self.ledger.record(
                CallRecord(
                    completion,
                    request_hash=key,
                    seed=seed,
                    purpose=purpose,
                    agent_id=agent_id,
                    iteration=iteration,
                    error=error,
                    model=self.endpoint.label,
                    messages=messages,
                    params=params,
                    latency_s=latency_s,
                )
            )

        started = time.monotonic()
        cached = self.ledger.cached(key)
        # The second key only where the first missed: it is what a miss asks and what a fresh reply is kept under.
        greedy_key = answer_key(self.endpoint.model, messages, params) if cached is None else None
        if greedy_key is not None:
            cached = self.ledger.cached_greedy(greedy_key, params["max_tokens"])
            if cached is not None:  # the same greedy question, asked with another limit it fits in
                self.ledger.store(dataclasses.replace(cached, request_hash=key, cost_usd=0.0))
        if cached is not None:
            hit = dataclasses.replace(
                cached,
                cost_usd=0.0,
                cache_hit=True,
                latency_s=time.monotonic() - started,
                seed=seed,
                request_hash=key,
            )
            note(hit, None)
            return hit

        api_key = self._api_key()  # a missing key is a config error, not an attempt
        last_error: BaseException | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self._backoff(attempt))
            try:
                async with self._limit():
                    started = time.monotonic()  # latency excludes the wait for a free slot
                    response = await asyncio.wait_for(
                        self._call(messages, params, api_key=api_key), timeout=self.timeout_s + 5.0
                    )
                    latency_s = time.monotonic() - started
            except Exception as exc:  # classified below; anything unknown is re-raised
                note(None, _describe(exc), time.monotonic() - started)
                failure = _classify(exc)
                if failure is None:
                    raise
                if failure == "auth":
                    raise self._auth_error(exc) from exc
                if failure == "bad_request":
                    raise self._bad_request(exc) from exc
                last_error = exc
                continue
            completion = self._completion(response, key=key, seed=seed, latency_s=latency_s)
            stopped = _finish_reason(response) == "stop" and completion.completion_tokens > 0
            self.ledger.store(completion, answer_key=greedy_key if stopped else None)
            note(completion, None)
            return completion

        raise FMUnavailable(
            f"FM endpoint {self.endpoint.where()} did not answer after {self.retries + 1} attempts; "
            f"last error: {_describe(last_error)}",
            fix=unavailable_fix(self.endpoint, last_error),
        ) from last_error

    def complete_sync(
        self,
        messages: Messages,
        *,
        seed: int,
        purpose: str = "mutate",
        agent_id: int | None = None,
        iteration: int | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        grammar: str | None = None,
    ) -> Completion:
        """`complete` for code without an event loop (CLI tools); not callable from inside one."""

        async def complete_then_close() -> Completion:
            try:
                return await self.complete(
                    messages,
                    seed=seed,
                    purpose=purpose,
                    agent_id=agent_id,
                    iteration=iteration,
                    temperature=temperature,
                    max_tokens=max_tokens,
                    grammar=grammar,
                )
            finally:
                await close_http_sessions()

        return asyncio.run(complete_then_close())

    def _limit(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._semaphore[0] is not loop:
            self._semaphore = (loop, asyncio.Semaphore(self.concurrency))
        return self._semaphore[1]

    def _backoff(self, attempt: int) -> float:
        """Seconds to wait before retry `attempt` (1-based): exponential with jitter."""
        return float(self.backoff_s * 2 ** (attempt - 1) * self._jitter.uniform(0.5, 1.5))

    async def _call(self, messages: Messages, params: Mapping[str, Any], *, api_key: str | None) -> Any:
        litellm = _litellm()
        kwargs: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": [dict(m) for m in messages],
            "temperature": params["temperature"],
            "max_tokens": params["max_tokens"],
            "seed": params["seed"],
            "timeout": self.timeout_s,
            "max_retries": 0,  # the SDK's own retries would hide attempts from the ledger
            "num_retries": 0,
        }
        if params["extra_body"]:
            kwargs["extra_body"] = dict(params["extra_body"])
        if self.endpoint.api_base:
            kwargs["api_base"] = self.endpoint.api_base
        if api_key is not None:
            kwargs["api_key"] = api_key
        return await litellm.acompletion(**kwargs)

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

    def _completion(self, response: Any, *, key: str, seed: int, latency_s: float) -> Completion:
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
            request_hash=key,
            seed=seed,
        )

    def _auth_error(self, exc: BaseException) -> LLMError:
        where = self.endpoint.where()
        if self.endpoint.api_key_env:
            fix = f"check the key in ${self.endpoint.api_key_env} is valid for {where}"
        else:
            fix = f"set api_key_env in the model config to the variable that holds the key for {where}"
        return FMAuthError(f"FM endpoint {where} refused the credentials: {_describe(exc)}", fix=fix)

    def _bad_request(self, exc: BaseException) -> LLMError:
        where = self.endpoint.where()
        return FMBadRequest(
            f"FM endpoint {where} rejected the request: {_describe(exc)}",
            fix=f"check that the model name {self.endpoint.model!r} exists at that endpoint "
            "(for a local server: openai/<alias>) and that the prompt plus max_tokens fits its context",
        )


def unavailable_fix(endpoint: Endpoint, last_error: BaseException | None) -> str:
    """What to do about an FM that did not answer, by what it did: nothing there, a failing server, limits, time."""
    where = endpoint.api_base or endpoint.model
    code = None if last_error is None or _connection_failed(last_error) else _status_code(last_error)
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


def _status_code(exc: BaseException) -> int | None:
    for holder in (exc, getattr(exc, "response", None)):
        code = getattr(holder, "status_code", None)
        if isinstance(code, int):
            return code
    return None


def _classify(exc: BaseException) -> _Failure | None:
    """transient (retry), auth or bad_request (do not retry); None for errors that are not the FM's."""
    import openai  # litellm's exceptions subclass openai's

    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return "transient"
    if isinstance(exc, openai.APIConnectionError):
        return "transient"  # refused, reset, DNS, timeouts (APITimeoutError is a subclass)
    code = _status_code(exc)
    if code is None:
        return "transient" if isinstance(exc, openai.APIError) else None
    if code in (401, 403):
        return "auth"
    if code in (408, 409, 425, 429) or code >= 500:
        return "transient"
    if 400 <= code < 500:
        return "bad_request"
    return "transient"


def _connection_failed(exc: BaseException | None) -> bool:
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


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "none"
    if _connection_failed(exc):
        return "no server answered (connection refused, reset or unreachable)"
    code = _status_code(exc)
    text = " ".join(str(exc).split())[:500]
    prefix = f"{type(exc).__name__}" + (f" (HTTP {code})" if code is not None else "")
    return f"{prefix}: {text}" if text else prefix


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
