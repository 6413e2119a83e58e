"""The run page's data in one piece: used by the live page and by the self-contained report alike."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from sqlalchemy.exc import DBAPIError

from cambrian.archive.models import Run
from cambrian.archive.store import Archive
from cambrian.ui._columns import agent_columns
from cambrian.ui._data import RunSummary, summarize_run
from cambrian.ui._live import last_update
from cambrian.ui._run_stats import (
    MAX_PLOT_POINTS,
    EliteGrid,
    OutcomeRow,
    best_so_far,
    elite_grid,
    outcome_table,
    score_points,
)
from cambrian.ui._tree import DEFAULT_DEPTH, DEFAULT_MAX_NODES, lineage, tree_view


@dataclass(frozen=True)
class RunPage:
    """What the run page shows. points / tree / grid / best go to the browser as JSON."""

    summary: RunSummary
    points: dict[str, Any]
    best: dict[str, list[Any]]
    tree: dict[str, Any]
    grid: EliteGrid | None
    by_operator: list[OutcomeRow]
    by_model: list[OutcomeRow]
    arms: list[OutcomeRow]
    bandit: str
    config_text: str
    last_update: str
    analytics: dict[str, Any] = field(default_factory=dict)

    @property
    def grid_data(self) -> dict[str, Any] | None:
        """The grid as a dict for the page's JSON, None without descriptors."""
        return None if self.grid is None else asdict(self.grid)


#: The analytics panels' modules: budget and runs compared, the search-space map.
ANALYTICS_MODULES = ("cambrian.ui._analytics", "cambrian.ui._search_space")


def analytics_available() -> bool:
    """Whether the analytics modules (budget, search space, compare runs) are installed beside this one."""
    return all(importlib.util.find_spec(module) is not None for module in ANALYTICS_MODULES)


#: Score-plot points and tree nodes the live page draws first (more on request): SVG markers cost the
#: browser ~60 us each, so this keeps the first paint of a 100k-agent run well under a second.
FIRST_PAINT_POINTS = 2500
FIRST_PAINT_TREE_NODES = 800


def run_page(
    archive: Archive,
    run: Run,
    *,
    tree_nodes: int = DEFAULT_MAX_NODES,
    tree_depth: int = DEFAULT_DEPTH,
    max_points: int = MAX_PLOT_POINTS,
    panels: bool = True,
) -> RunPage:
    """Everything the run page needs, read from the archive once.

    panels=False leaves out the MAP-Elites grid and the analytics panels (budget, search space), the
    slow reads at 100k agents: the live page draws its plot and tree first and fetches them after
    (`run_panels`); the self-contained report takes everything at once.
    """
    columns = agent_columns(archive, run.key)
    summary = summarize_run(archive, run)
    iterations, scores, ids = best_so_far(columns)
    evaluated_scores = {
        int(i): float(s)
        for i, s, st in zip(columns.ids.tolist(), columns.scores.tolist(), columns.statuses)
        if st == "evaluated" and s == s  # s == s: not NaN
    }
    search = summary.config.get("search") or {}
    return RunPage(
        summary=summary,
        points=score_points(columns, max_points=max_points),
        best={"iteration": iterations, "score": scores, "id": ids},
        tree=tree_view(columns, lineage(columns), depth=tree_depth, max_nodes=tree_nodes),
        grid=elite_grid(archive.descriptors(run.key), evaluated_scores) if panels else None,
        by_operator=outcome_table(columns, ("operator",)),
        by_model=outcome_table(columns, ("model",)),
        arms=outcome_table(columns, ("operator", "model")),
        bandit=str((search.get("bandit") or {}).get("algorithm", "off")),
        config_text=json.dumps(summary.config, indent=2, sort_keys=False),
        last_update=last_update(archive, run),
        analytics=_analytics(archive, run) if panels else {},
    )


def run_panels(archive: Archive, run: Run) -> dict[str, Any]:
    """The panels the live run page loads after its first paint: the MAP-Elites grid (None without
    descriptors) and the analytics (budget, search space; {} without their modules)."""
    columns = agent_columns(archive, run.key)
    evaluated = (np.array(columns.statuses, dtype=object) == "evaluated") & ~np.isnan(columns.scores)
    scores = dict(zip(columns.ids[evaluated].tolist(), columns.scores[evaluated].tolist()))
    grid = elite_grid(archive.descriptors(run.key), scores)
    return {"grid": None if grid is None else asdict(grid), "analytics": _analytics(archive, run)}


def _analytics(archive: Archive, run: Run) -> dict[str, Any]:
    """The budget and search-space panels' data when the analytics modules are there ({} otherwise)."""
    if not analytics_available():
        return {}
    analytics, space = (importlib.import_module(module) for module in ANALYTICS_MODULES)
    try:
        return {
            "budget": analytics.budget(archive, run.key),
            "search_space": space.search_space(archive, run.key),
        }
    except (DBAPIError, sqlite3.DatabaseError):
        raise  # an unreadable archive: the page says so
    except Exception as error:  # noqa: BLE001 - the rest of the run page stays usable; the panel says what failed
        return {"error": f"the analytics panels failed: {type(error).__name__}: {error}"}
