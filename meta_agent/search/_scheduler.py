"""When children start evaluating, and when proposing stops: the scheduler of one search invocation.

`Scheduler` owns the queue of stored children waiting for an evaluation slot, the count of children queued
or under evaluation (proposals wait while `max_pending` are), the stop, and the invocation's `Counters`.
The loop (`_loop.py`) asks it and tells it; `RunBook` (`_book.py`) records what happened and returns it, and
never calls back into either.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from cambrian.archive.models import Agent


@dataclass
class Counters:
    """What one invocation of a search did, and why it stops."""

    proposals: int = 0
    evaluated: int = 0
    invalid: int = 0
    consecutive_faults: int = 0
    spent_usd: float = 0.0
    stop_reason: str = ""
    budget_stop: bool = False
    abort: Exception | None = None
    fm_failure: Exception | None = None  # the last FM error that cost an iteration its proposal
    in_flight: set[int] = field(default_factory=set)


class Scheduler:
    """The evaluation queue, the room proposals wait for, the stop, and the counters.

    max_pending: children queued or under evaluation at most before a proposal waits (`search.max_pending`).
    asyncio objects bind to the event loop that first waits on them: build it before `asyncio.run`, use it in one.
    """

    def __init__(self, *, max_pending: int) -> None:
        self.max_pending = max_pending
        self.counters = Counters()
        self.stop = asyncio.Event()
        self.has_parent = asyncio.Event()  # an evaluated agent exists: proposals may draw a parent
        self._queue: asyncio.Queue[int] = asyncio.Queue()
        self._started: dict[int, Agent] = {}  # queued children stored as evaluating already
        self._idle_slots = 0  # evaluation workers waiting for a child
        self._outstanding = 0  # children queued or under evaluation
        self._room = asyncio.Condition()

    @property
    def stopping(self) -> bool:
        return self.stop.is_set()

    def request_stop(self, reason: str) -> bool:
        """Stop proposing; the first reason given is the run's. True the first time."""
        if self.stop.is_set():
            return False
        self.counters.stop_reason = reason
        self.stop.set()
        return True

    def spent_all(self, usd: float | None) -> str | None:
        """Why proposing must stop for the run's USD budget `usd` (None: no budget), marked a budget stop; None
        while money is left."""
        if usd is None or self.counters.spent_usd < usd:
            return None
        self.counters.budget_stop = True
        return f"USD budget of {usd:g} reached (spent {self.counters.spent_usd:.4f})"

    def abort(self, exc: Exception) -> bool:
        """Stop because of `exc`, which the run then raises; the first abort wins. True when the stop is new."""
        if self.counters.abort is None:
            self.counters.abort = exc
        return self.request_stop(str(exc))

    # ----- the evaluation queue ----------------------------------------------------------------

    def idle_slot(self) -> bool:
        """Whether an evaluation worker waits with nothing queued for it: a child queued now starts at once."""
        return self._idle_slots > self._queue.qsize() and not self.stop.is_set()

    def enqueue(self, agent_id: int, started: Agent | None = None) -> None:
        """Queue a child for evaluation; `started`: the child as stored already evaluating (no mark to write)."""
        self._outstanding += 1
        if started is not None:
            self._started[agent_id] = started
        self._queue.put_nowait(agent_id)

    async def next_child(self) -> tuple[int, Agent | None]:
        """The next queued child (waiting for one), with its row when it was stored as evaluating. Call `done`
        after its evaluation, whatever became of it."""
        self._idle_slots += 1
        try:
            agent_id = await self._queue.get()
        finally:
            self._idle_slots -= 1
        return agent_id, self._started.pop(agent_id, None)

    async def done(self, agent_id: int) -> None:
        """A child taken with `next_child` is off the queue: evaluated, failed, or left for `resume`."""
        self._started.pop(agent_id, None)
        self.counters.in_flight.discard(agent_id)
        async with self._room:
            self._outstanding -= 1
            self._room.notify_all()
        self._queue.task_done()

    async def wait_for_room(self) -> None:
        """Wait while `max_pending` children are queued or under evaluation, so parents are chosen from an
        archive that knows how recent children did (and fast local operators cannot run the whole budget off
        the seed before its first child is scored)."""
        async with self._room:
            await self._room.wait_for(lambda: self._outstanding < self.max_pending)

    async def drain(self, proposers: list[asyncio.Task[None]]) -> None:
        """Return when the proposers are done and every queued child has been evaluated."""
        await asyncio.gather(*proposers)
        await self._queue.join()

    async def wait_in_flight(self) -> None:
        """Return when no evaluation is running."""
        while self.counters.in_flight:
            await asyncio.sleep(0.05)
