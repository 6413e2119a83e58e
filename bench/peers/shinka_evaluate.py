"""ShinkaEvolve's evaluation script for the peer comparison: OpenEvolve's circle-packing evaluator, in Shinka's
results format.

Shinka runs it once per program as `python shinka_evaluate.py --program_path P --results_dir D` (in the peers'
virtual environment). It calls `evaluate(P)` of bench/peers/circle_packing/evaluator.py (OpenEvolve's, which
runs the program in a subprocess of its own with a 600 s limit) and writes D/metrics.json (combined_score: the
sum of radii, as Shinka's own circle-packing example scores) and D/correct.json (correct: a valid packing; for
an invalid one the evaluator's last printed lines, which say why).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
from pathlib import Path

EVALUATOR = Path(__file__).resolve().parent / "circle_packing" / "evaluator.py"
_ERROR_CHARS = 1500  # of the evaluator's output kept as the error of an invalid program


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program_path", required=True)
    parser.add_argument("--results_dir", required=True)
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("openevolve_circle_packing_evaluator", EVALUATOR)
    assert spec is not None and spec.loader is not None
    evaluator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(evaluator)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        metrics = evaluator.evaluate(args.program_path)
    correct = metrics.get("validity") == 1.0
    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    public = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    (results / "metrics.json").write_text(
        json.dumps({"combined_score": float(metrics.get("sum_radii", 0.0)), "public": public, "private": {}})
    )
    error = None if correct else printed.getvalue()[-_ERROR_CHARS:]
    (results / "correct.json").write_text(json.dumps({"correct": correct, "error": error}))
    print(printed.getvalue()[-_ERROR_CHARS:])


if __name__ == "__main__":
    main()
