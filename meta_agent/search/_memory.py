"""What a prompt shows of the archive: parents, inspirations, and why a parent's recent children failed.

Genomes are immutable, and an evaluated agent never changes what a prompt shows of it, so
`PromptMemory` reads each from the archive once and serves it from bounded memory after that:
the proposal hot path does no query for a parent it has seen.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Generic, TypeVar

import numpy as np

from cambrian.archive.models import Agent
from cambrian.archive.store import AgentContext, Archive
from cambrian.archive.view import ArchiveView
from cambrian.evaluators.base import Genome
from cambrian.meta_agent.operators import ParentInfo

K = TypeVar("K")
V = TypeVar("V")


class PromptMemory:
    """Reads agents, genomes and invalid children for prompts, caching what never changes. failed_attempts_shown:
    reasons a parent's children failed shown with it; inspirations: other good agents shown (the defaults are
    those of `search.failed_attempts_shown` and `search.inspirations`)."""

    def __init__(
        self, archive: Archive, *, failed_attempts_shown: int = 3, inspirations: int = 2, capacity: int = 4096
    ):
        self.archive = archive
        self.failed_attempts_shown = failed_attempts_shown
        self.inspirations_shown = inspirations
        self._genomes = _LRU[str, Genome](capacity=capacity)
        self._parents = _LRU[int, ParentInfo](capacity=capacity)
        self._failures = _LRU[int, deque[str]](capacity=capacity)  # parent -> reasons its children were invalid

    def genome(self, hash_: str) -> Genome:
        genome = self._genomes.get(hash_)
        if genome is None:
            files, entry = self.archive.get_genome(hash_)
            genome = Genome(files=files, entry=entry)
            self._genomes.put(hash_, genome)
        return genome

    def remember_genome(self, hash_: str, genome: Genome) -> None:
        """A genome just stored (a new child's): its evaluation reads it from here, not from the archive."""
        self._genomes.put(hash_, genome)

    def parent_info(self, agent_id: int) -> ParentInfo:
        """What prompts show of an evaluated agent (at most one archive read)."""
        info = self._parents.get(agent_id)
        if info is None:
            info = self._remember(self.archive.agent_context(agent_id, known_genomes=self._genomes))
        return info

    def parent(self, agent_id: int) -> tuple[ParentInfo, list[str]]:
        """What a prompt shows of its parent, and why the parent's recent children were invalid (oldest
        first): both from memory, or from one archive read for what memory lacks."""
        info = self._parents.get(agent_id)
        reasons = self._failures.get(agent_id)
        if info is None or reasons is None:
            n = self.failed_attempts_shown if reasons is None else 0
            context = self.archive.agent_context(agent_id, invalid_children=n, known_genomes=self._genomes)
            if info is None:
                info = self._remember(context)
            if reasons is None:
                reasons = self._remember_failures(agent_id, context.invalid_children)
        return info, list(reasons)

    def _remember(self, context: AgentContext) -> ParentInfo:
        agent = context.agent
        assert agent.genome_hash is not None, "only evaluated agents are selected"
        if context.genome is not None:
            files, entry = context.genome
            self._genomes.put(agent.genome_hash, Genome(files=files, entry=entry))
        return self.remember_parent(agent, self.genome(agent.genome_hash))

    def remember_parent(self, agent: Agent, genome: Genome) -> ParentInfo:
        """An agent just evaluated (or read): a prompt that picks it as a parent finds it here."""
        info = ParentInfo(agent_id=agent.key, genome=genome, score=agent.score, feedback=agent.feedback)
        self._parents.put(agent.key, info)
        return info

    def _remember_failures(self, parent_id: int, recent: list[Agent]) -> deque[str]:
        """`recent`: the parent's newest invalid children, newest first."""
        n = self.failed_attempts_shown
        reasons = deque((f"{a.operator}: {a.invalid_reason}" for a in reversed(recent) if a.invalid_reason), maxlen=n)
        self._failures.put(parent_id, reasons)
        return reasons

    def remember_failure(self, parent_id: int | None, reason: str) -> None:
        """A child of `parent_id` was just stored invalid for `reason` (refused before evaluation, or its
        evaluation made it invalid). Called after the archive has it: a parent whose history is not in
        memory yet reads it, this child included, on its next prompt."""
        if parent_id is None:
            return
        reasons = self._failures.get(parent_id)
        if reasons is not None:
            reasons.append(reason)

    def inspirations(self, view: ArchiveView, *, exclude: int) -> list[ParentInfo]:
        """The best evaluated agents other than `exclude`, best first, the earlier of equal scores first
        (`search.inspirations` of them)."""
        k = self.inspirations_shown
        if k == 0 or len(view) < 2:
            return []
        # The view's k + 1 best rows, kept with it and brought up to date with the rows added since: an
        # O(n) pass over every score on each proposal cost 0.6 ms at 100k agents.
        kept = view.cache(("best rows", k + 1))
        seen = kept.get("rows", 0)
        if len(view) > seen:
            rows = np.concatenate([kept.get("top", np.empty(0, np.int64)), np.arange(seen, len(view))])
            kept["top"] = rows[np.lexsort((rows, -view.scores[rows]))[: k + 1]]
            kept["rows"] = len(view)
        chosen = [agent_id for agent_id in view.ids[kept["top"]].tolist() if agent_id != exclude][:k]
        return [self.parent_info(agent_id) for agent_id in chosen]


class _LRU(Generic[K, V]):
    """A bounded mapping that forgets the least recently used entry."""

    def __init__(self, *, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def __contains__(self, key: object) -> bool:
        """Whether `key` is held (without counting as a use)."""
        return key in self._items

    def pop(self, key: K) -> V | None:
        """Remove and return the entry (None when absent)."""
        return self._items.pop(key, None)

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self.capacity:
            self._items.popitem(last=False)
