"""bench/search_efficacy.py: its statistics against known values, and one tiny real run through it."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "search_efficacy.py"


@pytest.fixture(scope="module")
def efficacy():
    spec = importlib.util.spec_from_file_location("search_efficacy", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["search_efficacy"] = module  # the process pool pickles run_one by module name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("search_efficacy", None)


def test_wilson_interval_matches_the_textbook_values(efficacy) -> None:
    p, low, high = efficacy.wilson(10, 20)
    assert p == 0.5 and math.isclose(low, 0.2993, abs_tol=1e-4) and math.isclose(high, 0.7007, abs_tol=1e-4)
    assert efficacy.wilson(0, 20)[1] == 0.0 and math.isclose(efficacy.wilson(0, 20)[2], 0.1611, abs_tol=1e-4)


def test_t_interval_and_bootstrap(efficacy) -> None:
    mean, low, high = efficacy.mean_ci([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and math.isclose(high - mean, 3.182 * np.std([1, 2, 3, 4], ddof=1) / 2, rel_tol=1e-9)
    rng = np.random.default_rng(0)
    diff, low, high = efficacy.bootstrap_diff_ci([1.0] * 10, [0.0] * 10, rng=rng)
    assert diff == low == high == 1.0


def test_evaluations_to_target_counts_from_one(efficacy) -> None:
    assert efficacy.evaluations_to([0.25, 0.5, 0.75, 1.0], 0.75) == 3
    assert efficacy.evaluations_to([0.25, 0.5], 0.75) is None


def test_a_tiny_benchmark_run_prints_the_table(efficacy, capsys) -> None:
    efficacy.main(
        [
            "--seeds",
            "1",
            "--budget",
            "4",
            "--strategies",
            "greedy,map_elites",
            "--benchmarks",
            "deceptive",
            "--jobs",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert "### deceptive: 1 seeds per strategy, budget 4 proposals" in out
    assert "| greedy |" in out and "| map_elites |" in out
