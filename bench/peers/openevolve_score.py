"""Score one program with OpenEvolve's circle-packing evaluator (the re-scoring of bench/peer_efficacy.py).

Runs in the peers' virtual environment; the evaluator itself runs the program in a subprocess of its own (600 s
limit). Writes {"metrics": ..., "printed": the evaluator's last printed lines} to --out.

    /work/peers-venv/bin/python bench/peers/openevolve_score.py --program PROGRAM.py --out SCORE.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
from pathlib import Path

EVALUATOR = Path(__file__).resolve().parent / "circle_packing" / "evaluator.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("openevolve_circle_packing_evaluator", EVALUATOR)
    assert spec is not None and spec.loader is not None
    evaluator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(evaluator)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        metrics = evaluator.evaluate(args.program)
    Path(args.out).write_text(json.dumps({"metrics": metrics, "printed": printed.getvalue()[-1500:]}))


if __name__ == "__main__":
    main()
