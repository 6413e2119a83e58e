"""Comparisons: two agents of a run side by side, and two or more runs on one set of axes.

Two agents: the code diff from A to B and, per task, both scores and their difference. Runs: per run,
the best search score so far against proposals made, against FM tokens spent and against USD spent
(which strategy or model wins per unit of budget), each curve one point per improvement.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cambrian.archive.errors import RunNotFound
from cambrian.archive.models import Agent, Run
from cambrian.archive.store import Archive
from cambrian.ui._agent import agent_files, run_agent
from cambrian.ui._code import FileDiff, diff_files
from cambrian.ui._columns import agent_columns
from cambrian.ui._data import RunSummary, Unreadable, open_run, summarize_run
from cambrian.ui._run_page import analytics_available


@dataclass(frozen=True)
class TaskDelta:
    """One task's scores for A and B (None where that agent has no result), and B - A."""

    task: str
    split: str
    a: float | None
    b: float | None

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a


@dataclass(frozen=True)
class AgentComparison:
    """Agents A and B of one run: the diff from A's code to B's and the per-task scores."""

    a: Agent
    b: Agent
    diff: list[FileDiff]
    tasks: list[TaskDelta]


def agent_comparison(archive: Archive, run: Run, a_id: int, b_id: int) -> AgentComparison:
    """A against B; AgentNotFound when either is not in the run."""
    a, b = run_agent(archive, run, a_id), run_agent(archive, run, b_id)
    scores: dict[tuple[str, str], list[float | None]] = {}
    for side, agent in enumerate((a, b)):
        for evaluation in archive.evaluations(agent.key):
            scores.setdefault((evaluation.split, evaluation.task_id), [None, None])[side] = evaluation.score
    tasks = [TaskDelta(task, split, pair[0], pair[1]) for (split, task), pair in sorted(scores.items())]
    return AgentComparison(a, b, diff_files(agent_files(archive, a)[0], agent_files(archive, b)[0]), tasks)


def budget_curves(archive: Archive, run: Run) -> dict[str, list[Any]]:
    """The run's best score so far at each improvement, with the proposals, tokens and USD spent by then."""
    columns = agent_columns(archive, run.key)
    proposals = np.cumsum(columns.iterations > 0)
    tokens = np.cumsum(columns.tokens)
    cost = np.cumsum(columns.cost_usd)
    curves: dict[str, list[Any]] = {"proposals": [], "tokens": [], "usd": [], "best": [], "id": []}
    best = -math.inf
    for row in range(len(columns)):
        score = float(columns.scores[row])
        if columns.statuses[row] == "evaluated" and not math.isnan(score) and score > best:
            best = score
            for key, values in (("proposals", proposals), ("tokens", tokens), ("usd", cost)):
                curves[key].append(values[row].item())
            curves["best"].append(score)
            curves["id"].append(int(columns.ids[row]))
    if len(columns) and curves["best"]:  # carry the line to what the run has spent in all
        for key, values in (("proposals", proposals), ("tokens", tokens), ("usd", cost)):
            curves[key].append(values[-1].item())
        curves["best"].append(best)
        curves["id"].append(curves["id"][-1])
    return curves


@dataclass(frozen=True)
class RunsComparison:
    """Each named run's summary and budget curves, or why it cannot be read."""

    summaries: list[RunSummary]
    curves: dict[str, dict[str, list[Any]]]
    problems: list[Unreadable]
    analytics: dict[str, Any] | None = None  # ui._analytics.compare_runs's answer, when that module is there


def runs_comparison(runs_dir: Path, names: list[str], store: str | None = None) -> RunsComparison:
    """The runs named (in that order); a missing or unreadable run is reported, not raised."""
    analytics = importlib.import_module("cambrian.ui._analytics") if analytics_available() else None
    summaries, curves, problems, compared = [], {}, [], []
    for name in names:
        try:
            with open_run(runs_dir, name, store) as (archive, run):
                summaries.append(summarize_run(archive, run))
                curves[name] = budget_curves(archive, run)
                if analytics is not None:
                    compared.extend(analytics.compare_runs([(name, archive, run.key)])["runs"])
        except Unreadable as problem:
            problems.append(problem)
        except RunNotFound as missing:
            problems.append(Unreadable(name, str(missing), missing.fix, 404, "no run"))
    return RunsComparison(summaries, curves, problems, {"runs": compared} if analytics is not None else None)
