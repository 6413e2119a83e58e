"""The driver's view of a Ray cluster's sandbox slots: which are free, and to which task each goes next.

`FreeSlots` hands a task of one agent's evaluation a free slot with session affinity: a node keeps one
sandbox session per (evaluation, slot) (`NodePool`), so a slot goes first to a task of the evaluation
it keeps a session for, else to one where it keeps none, and only else to another evaluation (whose
session there the node then closes). Slots of a dead node are dropped as they come by.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cambrian.sandbox.base import SandboxError

SLOT_POLL_S = 0.5  # how often a task waiting for a slot checks that some node is still alive


@dataclass(eq=False)  # one per node: compared and hashed by identity
class NodeHandle:
    """A node's pool as the driver sees it."""

    node_id: str
    ip: str
    host: str
    sandbox: str
    actor: Any  # the NodePool actor handle
    alive: bool = True

    def __str__(self) -> str:
        return f"{self.host} ({self.ip}, node {self.node_id[:12]})"


@dataclass(eq=False)
class Slot:
    """One task slot of a node; `holder`: the evaluation whose session the node keeps on it (None: none)."""

    node: NodeHandle
    index: int
    holder: str | None = None


class FreeSlots:
    """The cluster's free slots on one event loop, handed out with session affinity (see the module doc).

    Slots of a dead node are dropped as they come by. Waiting tasks are served in turn, except that a slot
    given back goes first to a waiting task of the evaluation it keeps a session for.
    """

    def __init__(self, slots: Iterable[Slot]) -> None:
        self.all = list(slots)
        self._free: collections.deque[Slot] = collections.deque(self.all)
        self._waiting: collections.deque[asyncio.Future[Slot]] = collections.deque()  # in turn
        self._waiting_by: dict[str, collections.deque[asyncio.Future[Slot]]] = {}  # the same, by evaluation

    async def take(self, evaluation: str) -> Slot:
        """A free slot for a task of `evaluation` (waits for one); SandboxError once no node is alive."""
        slot = self._pick(evaluation)
        if slot is None:
            waiter: asyncio.Future[Slot] = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            self._waiting_by.setdefault(evaluation, collections.deque()).append(waiter)
            try:
                while not waiter.done():
                    await asyncio.wait({waiter}, timeout=SLOT_POLL_S)
                    if not waiter.done() and not any(s.node.alive for s in self.all):
                        raise SandboxError(
                            "every node of the Ray cluster is gone: no sandbox slot is left to evaluate on",
                            fix="restart the nodes (`ray start --address=HEAD:PORT`), then `cambrian resume RUN`",
                        )
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self.give_back(waiter.result())  # handed over just as this task was cancelled
                else:
                    waiter.cancel()  # skipped by give_back from now on
                raise
            finally:  # served and cancelled waiters leave from the front (the rest when they get there)
                while self._waiting and self._waiting[0].done():
                    self._waiting.popleft()
            slot = waiter.result()
        slot.holder = evaluation
        return slot

    def add(self, slots: Iterable[Slot]) -> None:
        """New slots (a node that joined): free from now on, to waiting tasks first."""
        for slot in slots:
            self.all.append(slot)
            self.give_back(slot)

    def give_back(self, slot: Slot) -> None:
        """`slot` is free again: to a waiting task of its holder's evaluation, else the first waiting one."""
        if not slot.node.alive:
            return
        waiter = _first_waiting(self._waiting_by.get(slot.holder)) if slot.holder is not None else None
        waiter = waiter or _first_waiting(self._waiting)
        if waiter is None:
            self._free.append(slot)
        else:
            waiter.set_result(slot)

    def forget(self, evaluation: str) -> set[NodeHandle]:
        """The evaluation has ended: its slots keep no session for it; returns the nodes where they did."""
        self._waiting_by.pop(evaluation, None)  # none of its tasks waits any more
        nodes = set()
        for slot in self.all:
            if slot.holder == evaluation:
                slot.holder = None
                nodes.add(slot.node)
        return nodes

    def _pick(self, evaluation: str) -> Slot | None:
        """A free slot keeping this evaluation's session, else one keeping none, else any (oldest first)."""
        if any(not slot.node.alive for slot in self._free):
            self._free = collections.deque(slot for slot in self._free if slot.node.alive)
        for wanted in (evaluation, None):
            for slot in self._free:
                if slot.holder == wanted:
                    self._free.remove(slot)
                    return slot
        return self._free.popleft() if self._free else None


def _first_waiting(waiting: collections.deque[asyncio.Future[Slot]] | None) -> asyncio.Future[Slot] | None:
    """The first future of `waiting` still waiting, dropping those before it (served or cancelled)."""
    while waiting:
        waiter = waiting.popleft()
        if not waiter.done():
            return waiter
    return None
