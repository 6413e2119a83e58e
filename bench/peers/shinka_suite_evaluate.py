"""ShinkaEvolve's evaluation script for a generality-suite task: the program scored by the Cambrian benchmark.

Shinka runs it once per program as `python shinka_suite_evaluate.py --program_path P --results_dir D` (in the
peers' virtual environment, bench/peers/shinka_driver.py names it with `--evaluate`). It writes D/metrics.json
(combined_score: the benchmark's score) and D/correct.json (correct: a usable result; for an invalid program
the benchmark's reason, which Shinka shows in later prompts).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from suite_scoring import score  # next to this file, found through the path above


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program_path", required=True)
    parser.add_argument("--results_dir", required=True)
    args = parser.parse_args()
    found = score(args.program_path)
    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    public = {"score": float(found["score"]), "seconds": float(found.get("seconds", 0.0))}
    (results / "metrics.json").write_text(
        json.dumps({"combined_score": float(found["score"]), "public": public, "private": {}})
    )
    error = None if found["valid"] else str(found.get("reason", ""))[:1500]
    (results / "correct.json").write_text(json.dumps({"correct": bool(found["valid"]), "error": error}))
    print(error or f"score {found['score']}")


if __name__ == "__main__":
    main()
