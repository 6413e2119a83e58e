"""What `cambrian run` and `resume` print into a log or a pipe (no terminal, so no bar): one line per
proposal, numbered by its iteration, which a resumed run continues rather than repeats."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

NO_FM = ("--sandbox", "local", "--set", "search.operators={ast_mutate = 1.0}")


def cambrian(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    env.pop("CAMBRIAN_STORE", None)
    done = subprocess.run(
        [sys.executable, "-m", "cambrian", *args], capture_output=True, text=True, timeout=300, env=env, check=True
    )
    return done.stdout


def iterations_printed(output: str) -> list[tuple[int, int]]:
    return [
        (int(m[1]), int(m[2])) for m in re.finditer(r"^iteration (\d+)/(\d+): ast_mutate on #\d+ -> #\d+", output, re.M)
    ]


def test_each_proposal_is_one_line_numbered_by_its_iteration_across_a_resume(tmp_path: Path) -> None:
    runs = ("--runs-dir", str(tmp_path / "runs"))
    first = cambrian("run", "deceptive", "--name", "lines", "--iterations", "3", *NO_FM, *runs)
    assert re.search(r"^seed #1: \d\.\d{4}$", first, re.M)
    assert sorted(iterations_printed(first)) == [(1, 3), (2, 3), (3, 3)]
    assert all(line.endswith(tuple("0123456789")) for line in first.splitlines() if line.startswith("iteration "))

    resumed = cambrian("resume", "lines", "--iterations", "5", *runs)
    assert sorted(iterations_printed(resumed)) == [(4, 5), (5, 5)]  # not 1-3 again, not "proposal 6 of 5"


def test_the_best_s_gain_over_the_seed_reads_as_the_search_counts_it() -> None:
    """Rounding above the seed is no gain (not "+0.0000"); a gain too small for four decimals still shows."""
    from cambrian.meta_agent.cli._run import _gain

    assert _gain(1.0917 + 2.2e-16, 1.0917) == "no gain"
    assert _gain(1.0917, 1.0917) == "no gain"
    assert _gain(1.1781, 1.0917) == "+0.0864"
    assert _gain(1.0 + 3e-6, 1.0) == "+3.00e-06"
