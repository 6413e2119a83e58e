"""What the search loop reads of a run's settings, as one value: `LoopSettings`.

The loop is built from objects (a selector, an operator mix, a proposer, an executor, an archive, a budget); the
few numbers it reads itself, how it paces proposals, how often it evaluates a child and how many islands it
keeps apart, are these.
`LoopSettings.of_run` takes them from a `RunConfig`; a loop built by hand gives them directly, or keeps the
defaults (those of a default config).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cambrian.meta_agent.config import RunConfig


@dataclass(frozen=True)
class LoopSettings:
    """seed: the run's seed (parent and operator draws per iteration). proposers: FM proposals made at once
    (`fm.concurrency`). max_pending: children stored and waiting for evaluation before proposing pauses (None:
    the executor's slots plus the proposers; `search.max_pending`). max_reproposals: proposals again in one
    iteration after a near-duplicate or a program the run has (`search.novelty.max_reproposals`). repeats:
    evaluations per agent, or "auto": one until the seed's score is found to vary (`evaluation.repeats`).
    max_attempts: evaluations of one agent lost to sandbox faults before it is given up
    (`evaluation.max_attempts`). islands: populations searched apart (`search.islands`; 1: one); migration_every:
    finished proposals between migrations (`search.migration_every`); migrants: members of each island that join
    the next at a migration (`search.migrants`)."""

    seed: int = 0
    proposers: int = 1
    max_pending: int | None = None
    max_reproposals: int = 2
    repeats: int | Literal["auto"] = "auto"
    max_attempts: int = 3
    islands: int = 1
    migration_every: int = 10
    migrants: int = 1

    def __post_init__(self) -> None:
        if self.proposers < 1:
            raise ValueError(f"LoopSettings.proposers must be at least 1, not {self.proposers}")
        if self.max_pending is not None and self.max_pending < 1:
            raise ValueError(f"LoopSettings.max_pending must be at least 1 (or None), not {self.max_pending}")
        if self.repeats != "auto" and (not isinstance(self.repeats, int) or self.repeats < 1):
            raise ValueError(f"LoopSettings.repeats must be 'auto' or at least 1, not {self.repeats!r}")
        if self.islands < 1 or self.migration_every < 1 or self.migrants < 0:
            raise ValueError(
                "LoopSettings: islands and migration_every must be at least 1 and migrants at least 0, not "
                f"{self.islands}, {self.migration_every} and {self.migrants}"
            )

    @classmethod
    def of_run(cls, config: RunConfig) -> LoopSettings:
        """The settings a run's config gives the loop."""
        return cls(
            seed=config.seed,
            proposers=config.fm.concurrency,
            max_pending=config.search.max_pending,
            max_reproposals=config.search.novelty.max_reproposals,
            repeats=config.evaluation.repeats,
            max_attempts=config.evaluation.max_attempts,
            islands=config.search.islands,
            migration_every=config.search.migration_every,
            migrants=config.search.migrants,
        )
