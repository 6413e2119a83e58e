"""The FM ledger and response cache of a run, kept in its archive."""

from __future__ import annotations

from archive.models import LLMCall, LLMResponse
from archive.store import Archive
from meta_agent.llm._client import CallRecord, Completion


class ArchiveLedger:
    """Implements `client.Ledger` over an Archive: every call a row, every response cached.

    All methods run on the event-loop thread (the archive is not shared across threads).
    """

    def __init__(self, archive: Archive, run_id: int) -> None:
        self.archive = archive
        self.run_id = run_id
        # A fresh response waits here for its call row, so both are written in one transaction.
        self._unrecorded: dict[str, LLMResponse] = {}

    def cached(self, request_hash: str) -> Completion | None:
        hit = self.archive.cached_response(request_hash)
        if hit is None:
            return None
        return Completion(
            text=hit.text,
            model=hit.model,
            prompt_tokens=hit.prompt_tokens,
            completion_tokens=hit.completion_tokens,
            cost_usd=0.0,
            latency_s=0.0,
            cache_hit=True,
            request_hash=request_hash,
            seed=None,
        )

    def store(self, completion: Completion) -> None:
        self._unrecorded[completion.request_hash] = LLMResponse(
            request_hash=completion.request_hash,
            model=completion.model,
            text=completion.text,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            cost_usd=completion.cost_usd,
        )

    def record(self, call: CallRecord) -> None:
        completion = call.completion
        self.archive.record_llm_exchange(
            LLMCall(
                run_id=self.run_id,
                agent_id=call.agent_id,
                iteration=call.iteration,
                purpose=call.purpose,
                model=completion.model if completion else (call.model or "unknown"),
                prompt_tokens=completion.prompt_tokens if completion else 0,
                completion_tokens=completion.completion_tokens if completion else 0,
                cost_usd=0.0 if completion is None or completion.cache_hit else completion.cost_usd,
                latency_s=completion.latency_s if completion else 0.0,
                request_hash=call.request_hash,
                seed=call.seed,
                cache_hit=bool(completion and completion.cache_hit),
                error=call.error,
            ),
            self._unrecorded.pop(call.request_hash, None),
        )
