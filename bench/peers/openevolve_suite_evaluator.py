"""OpenEvolve's evaluator for a generality-suite task: the program scored by the Cambrian benchmark itself.

OpenEvolve loads this file and calls `evaluate(program_path)` (bench/peers/openevolve_driver.py names it with
`--evaluator`); the metrics: combined_score (the benchmark's score, 0 for a program without a usable result),
valid (1 or 0) and, for an invalid program, error (the benchmark's reason, which OpenEvolve shows in its next
prompts as it shows its own evaluators' errors).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from suite_scoring import score  # next to this file, found through the path above


def evaluate(program_path: str) -> dict[str, Any]:
    found = score(program_path)
    metrics: dict[str, Any] = {"combined_score": float(found["score"]), "valid": 1.0 if found["valid"] else 0.0}
    if not found["valid"]:
        metrics["error"] = str(found.get("reason", ""))[:1500]
    return metrics
