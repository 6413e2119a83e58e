"""Where FM calls are recorded: the `Ledger` a client writes to, `CallRecord` (one call as recorded), and
`MemoryLedger` (a ledger in memory, for tests and one-off tools; a run's is `ArchiveLedger`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cambrian.meta_agent.llm._request import Completion, Messages


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
    attempt (a completion carries its own). proposal_id: the proposal the call was made for, if any.
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
    proposal_id: str | None = None


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
    proposal_id: str | None = None


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
                proposal_id=call.proposal_id,
            )
        )

    @property
    def total_cost_usd(self) -> float:
        """Sum of the recorded costs (cache hits and failures add 0)."""
        return sum(entry.cost_usd for entry in self.entries)
