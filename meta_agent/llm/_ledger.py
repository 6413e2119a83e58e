"""The FM ledger and response cache of a run, kept in its archive, with what every call sent."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cambrian.archive.models import GreedyAnswer, LLMCall, LLMRequest, LLMResponse
from cambrian.archive.store import Archive
from cambrian.meta_agent.llm._calls import CallRecord
from cambrian.meta_agent.llm._request import Completion
from cambrian.meta_agent.llm.serve import GRAMMAR_FIELDS


class ArchiveLedger:
    """Implements `client.Ledger` over an Archive: every call a row, every response cached.

    All methods run on the event-loop thread (the archive is not shared across threads).
    """

    def __init__(self, archive: Archive, run_id: int) -> None:
        self.archive = archive
        self.run_id = run_id
        # A fresh response (and its greedy answer key) waits here for its call row, so all are written in one
        # transaction.
        self._unrecorded: dict[str, LLMResponse] = {}
        self._unrecorded_greedy: dict[str, GreedyAnswer] = {}
        # Request hashes whose messages this ledger wrote (or found written): each is stored once.
        self._requests_stored: set[str] = set()

    def cached(self, request_hash: str) -> Completion | None:
        return self._completion(self.archive.cached_response(request_hash))

    def cached_greedy(self, answer_key: str, max_tokens: int | None) -> Completion | None:
        return self._completion(self.archive.greedy_response(answer_key, max_tokens))

    @staticmethod
    def _completion(hit: LLMResponse | None) -> Completion | None:
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
            request_hash=hit.request_hash,
            seed=None,
        )

    def store(self, completion: Completion, answer_key: str | None = None) -> None:
        if answer_key is not None:
            self._unrecorded_greedy[completion.request_hash] = GreedyAnswer(
                answer_key=answer_key,
                request_hash=completion.request_hash,
                completion_tokens=completion.completion_tokens,
            )
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
                latency_s=completion.latency_s if completion else call.latency_s,
                request_hash=call.request_hash,
                seed=call.seed,
                cache_hit=bool(completion and completion.cache_hit),
                error=call.error,
                proposal_id=call.proposal_id,
            ),
            self._unrecorded.pop(call.request_hash, None),
            self._request(call),
            self._unrecorded_greedy.pop(call.request_hash, None),
        )

    def _request(self, call: CallRecord) -> LLMRequest | None:
        """The messages and parameters of the call, once per hash (None after this ledger stored it)."""
        if not call.messages or call.request_hash in self._requests_stored:
            return None
        self._requests_stored.add(call.request_hash)
        return LLMRequest(
            request_hash=call.request_hash,
            model=call.model or (call.completion.model if call.completion else "unknown"),
            messages=json.dumps([dict(message) for message in call.messages], ensure_ascii=False, default=str),
            params=json.dumps(_shown_params(call.params or {}), sort_keys=True, default=str),
        )


def _shown_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The request's parameters with any grammar replaced by its size: it is rebuilt from the parent's code."""
    shown = dict(params)
    extra_body = dict(shown.get("extra_body") or {})
    for field in set(GRAMMAR_FIELDS.values()):
        if isinstance(extra_body.get(field), str):
            extra_body[field] = {"grammar_chars": len(extra_body[field])}
    shown["extra_body"] = extra_body
    return shown
