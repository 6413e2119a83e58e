"""What the two ARC benchmarks share: the seed from package data and the task lists."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from typing import ClassVar

from cambrian.evaluators.base import BenchmarkError, FeedbackPolicy, Genome, Task
from cambrian.evaluators.harness import HarnessBenchmark


class ArcBenchmarkBase(HarnessBenchmark):
    """Subclasses set SEED_ENTRY (a file in evaluators/arc/seed/) and fill `_tasks` per split."""

    SEED_ENTRY: ClassVar[str]
    feedback_policy: FeedbackPolicy
    _tasks: dict[str, list[Task]]

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
