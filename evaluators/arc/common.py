"""What the two ARC benchmarks share: the seed from package data, the task lists, the feedback policy."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from importlib import resources
from typing import ClassVar, TypeVar

from cambrian.evaluators.base import BenchmarkError, FeedbackPolicy, Genome, Task
from cambrian.evaluators.harness import HarnessBenchmark

Self = TypeVar("Self", bound="ArcBenchmarkBase")


class ArcBenchmarkBase(HarnessBenchmark):
    """Subclasses set SEED_ENTRY (a file in evaluators/arc/seed/) and fill `_tasks` per split."""

    SEED_ENTRY: ClassVar[str]
    feedback_policy: FeedbackPolicy
    _tasks: dict[str, list[Task]]

    def with_feedback(self: Self, policy: FeedbackPolicy) -> Self:
        """A copy that writes feedback under `policy` (tasks and answers shared, read-only)."""
        clone = copy.copy(self)
        clone.feedback_policy = policy
        return clone

    def seed(self) -> Genome:
        text = (
            resources.files("cambrian.evaluators.arc")
            .joinpath("seed")
            .joinpath(self.SEED_ENTRY)
            .read_text(encoding="utf-8")
        )
        return Genome(files={self.SEED_ENTRY: text}, entry=self.SEED_ENTRY)

    def tasks(self, split: str) -> Sequence[Task]:
        if split not in self._tasks:
            raise BenchmarkError(f"unknown split {split!r}", fix="use 'search' or 'holdout'")
        return list(self._tasks[split])
