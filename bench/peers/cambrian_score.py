"""Score one program with a Cambrian benchmark, in Cambrian's sandbox: the peers' evaluator on the suite's tasks.

Runs in Cambrian's virtual environment. bench/peer_efficacy.py's suite tasks have no evaluator of OpenEvolve's
or ShinkaEvolve's, so every system's programs are scored by the one scorer Cambrian's own search uses: the
benchmark's tasks (the search split), run in the sandbox `evaluation.sandbox = auto` picks (Docker where the
engine and image are there), with the run seed's per-task seeds. The peers call it through
bench/peers/suite_scoring.py; bench/peer_efficacy.py re-scores the bests with it too. Writes {"score": the
benchmark's score or 0, "valid": whether the program produced a usable result on every task, "reason": why
not, "seconds"} to --out.

    .venv/bin/python bench/peers/cambrian_score.py --task knapsack --program P.py --seed 0 --out SCORE.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="a Cambrian benchmark with a one-file seed, e.g. knapsack")
    parser.add_argument("--program", required=True, help="the program to score (the entry file's text)")
    parser.add_argument("--seed", type=int, default=0, help="the run seed the per-task seeds come from")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from bench._peer_tasks import peer_task
    from cambrian.evaluators.runner import evaluate_agent
    from cambrian.meta_agent.config import load_config
    from cambrian.meta_agent.search.evaluation import run_limits
    from cambrian.meta_agent.search.session import choose_sandbox

    task = peer_task(args.task)
    config = load_config(overrides={"seed": args.seed})
    sandbox = choose_sandbox(config, lambda line: None)
    started = time.monotonic()
    try:
        genome = task.genome(Path(args.program).read_text())
        result = evaluate_agent(task.benchmark(), genome, sandbox, limits=run_limits(config))
    finally:
        sandbox.close()
    Path(args.out).write_text(
        json.dumps(
            {
                "score": float(result.score) if result.valid else 0.0,
                "valid": bool(result.valid),
                "reason": result.invalid_reason or "",
                "seconds": round(time.monotonic() - started, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
