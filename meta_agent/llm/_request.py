"""What an FM call asks and what it answers: `Request`, `Completion`, `Endpoint`, and the keys of the cache.

Every call carries a seed derived from (run seed, iteration, attempt), and the
response cache is keyed by a hash of everything that determines the response,
seed included: a replayed run reproduces its FM answers exactly (and pays
nothing), while two proposals from the same parent still differ. A greedy
request (temperature 0) is keyed without its seed, which it does not depend
on: agents asking the same greedy question get the same answer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

Messages = Sequence[Mapping[str, Any]]

_SEED_RANGE = 2**31  # llama.cpp and most providers take a signed 32-bit seed


def derive_seed(run_seed: int, iteration: int, attempt: int, draw: int = 0) -> int:
    """The FM seed of one call: sha256 of (run seed, iteration, attempt), in [0, 2**31). draw: 1, 2, ... for
    a reply drawn again from the same prompt (`fm.redraws`), which must not be sampled with the same seed."""
    key = f"{run_seed}:{iteration}:{attempt}" + (f":{draw}" if draw else "")
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") % _SEED_RANGE


@dataclass(frozen=True)
class Request:
    """One chat completion to ask, as its caller decides it; the client fills in what is left None.

    seed: the per-call seed (see `derive_seed`). purpose: mutate | redraw | diagnose | repair | agent | judge |
    reflect | self_modify, recorded in the ledger. agent_id, iteration: whom the ledger charges the call to.
    proposal_id: the proposal the call is made for (`Agent.proposal_id`), which links it to the child; never
    part of the request hash.
    temperature, max_tokens: None for the client's defaults. grammar: GBNF the reply must follow, sent only
    when the client is constrained (`LLMClient`).
    """

    messages: Messages
    seed: int
    purpose: str = "mutate"
    agent_id: int | None = None
    iteration: int | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    grammar: str | None = None
    proposal_id: str | None = None


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
