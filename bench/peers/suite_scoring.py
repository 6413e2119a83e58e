"""The peers' side of scoring a suite task's program: ask Cambrian's scorer (bench/peers/cambrian_score.py, in
Cambrian's virtual environment) and read its answer. Standard library only: it runs in the peers' venv.

bench/peer_efficacy.py sets three environment variables when it starts a peer on a suite task, which the peers
pass on to their evaluators: CAMBRIAN_PEERS_PYTHON (Cambrian's interpreter), CAMBRIAN_PEERS_TASK (the task)
and CAMBRIAN_PEERS_SEED (the run seed).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

SCORER = Path(__file__).resolve().parent / "cambrian_score.py"
_TIMEOUT_S = 900  # one scoring: the benchmark's own per-run limits are far below this
_TAIL_CHARS = 1500


def score(program_path: str) -> dict[str, Any]:
    """{"score", "valid", "reason", "seconds"} of the program at `program_path`, by Cambrian's benchmark; a scorer
    that fails itself gives score 0, valid False and its output's tail as the reason."""
    python, task = os.environ["CAMBRIAN_PEERS_PYTHON"], os.environ["CAMBRIAN_PEERS_TASK"]
    seed = os.environ.get("CAMBRIAN_PEERS_SEED", "0")
    with tempfile.TemporaryDirectory(prefix="cambrian-peer-score-") as folder:
        out = Path(folder) / "score.json"
        command = [python, str(SCORER), "--task", task, "--program", program_path, "--seed", seed, "--out", str(out)]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S, env=env)
        except subprocess.TimeoutExpired:
            return {"score": 0.0, "valid": False, "reason": f"Cambrian's scorer ran past {_TIMEOUT_S} s"}
        if done.returncode != 0 or not out.exists():
            tail = (done.stdout + done.stderr)[-_TAIL_CHARS:]
            return {"score": 0.0, "valid": False, "reason": f"Cambrian's scorer exited {done.returncode}: {tail}"}
        return dict(json.loads(out.read_text()))
