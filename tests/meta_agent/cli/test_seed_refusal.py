"""A run whose seed no operator of the config can edit is refused before it exists, naming each operator's need."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_a_seed_no_operator_can_edit_is_refused_with_what_each_needs(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cambrian",
            "run",
            "knapsack",
            "--name",
            "k",
            "--runs-dir",
            str(runs),
            "--set",
            "search.operators={ast_mutate = 1}",
            "--sandbox",
            "local",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Traceback" not in out
    assert "no operator of search.operators can edit the seed priority.py" in out
    assert "ast_mutate needs a number or an operator" in out and "rewrite" in out  # the cause and the fix
    assert not (runs / "k").exists()  # nothing left behind
