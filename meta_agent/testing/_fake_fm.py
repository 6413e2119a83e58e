"""`ScriptedFM`: a fake foundation model for tests that need exact, scripted replies."""

from __future__ import annotations

import asyncio
import hashlib

from cambrian.meta_agent.llm import Completion, Request


class ScriptedFM:
    """Stands in for `LLMClient.complete` (pass it as a loop's `llm`, or assign its `complete` to a client's).

    replies: the texts it answers with, in turn, cycling. cost_usd: the cost of each call. delay_s: seconds each
    reply takes. prompt_tokens / completion_tokens: the usage each call reports (prompt_tokens=None: a quarter
    of the prompt's characters, as a bound a gateway can check).

    It records what it was asked: `requests` ((purpose, messages) per call), `log` ((purpose, iteration) per
    call), `seeds` (each call's sampling seed), `calls`, `prompt_bytes`, and `in_flight` / `most_in_flight`
    (overlapping calls). Tests that use it say so in their name (`..._fake_fm`); every other test talks to a
    real local model.
    """

    def __init__(
        self,
        replies: list[str] | None = None,
        *,
        cost_usd: float = 0.0,
        delay_s: float = 0.0,
        prompt_tokens: int | None = 10,
        completion_tokens: int = 10,
    ) -> None:
        self.replies = list(replies or ["ok"])
        self.cost_usd = cost_usd
        self.delay_s = delay_s
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.calls = 0
        self.requests: list[tuple[str, list[dict[str, str]]]] = []
        self.log: list[tuple[str, int | None]] = []
        self.seeds: list[int] = []
        self.prompt_bytes = 0
        self.in_flight = 0
        self.most_in_flight = 0

    async def complete(self, request: Request) -> Completion:
        messages, purpose = request.messages, request.purpose
        text = self.replies[self.calls % len(self.replies)]
        self.calls += 1
        self.requests.append((purpose, [dict(m) for m in messages]))
        self.log.append((purpose, request.iteration))
        self.seeds.append(request.seed)
        size = sum(len(m.get("content", "")) for m in messages)
        self.prompt_bytes += size
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        return Completion(
            text=text,
            model="scripted",
            prompt_tokens=size // 4 if self.prompt_tokens is None else self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cost_usd=self.cost_usd,
            latency_s=self.delay_s,
            cache_hit=False,
            request_hash=hashlib.sha256(f"{self.calls}{text}".encode()).hexdigest(),
            seed=request.seed,
        )
