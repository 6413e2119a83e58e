"""Run ShinkaEvolve on one seed program with its shipped default settings, and write what every proposal did.

Runs in the peers' virtual environment (`shinka-evolve` from PyPI), never in Cambrian's: bench/peer_efficacy.py
starts it as a subprocess. The settings are the ones Shinka's own Hydra config composes by default
(shinka/configs: evolution/medium_budget, database/island_medium, task/circle_packing's system message,
cluster/local), with these changes only (on a suite task also the task message, `--task-message`, and the
evaluation script, `--evaluate`):
- one model, the shared server (`local/<model>@<api_base>`), instead of the four hosted ones;
- no code embeddings (`embedding_model` None: the default is OpenAI's hosted text-embedding-3-small, which
  cannot be reached here; without embeddings Shinka accepts every patch without its novelty check);
- the budget: `num_generations` = proposals + 1 (generation 0 is the seed);
- a per-request seed: Shinka sends none, so each request gets one derived from the run seed and the request's
  number (sha256, as Cambrian derives its own); Python's and numpy's global generators, which Shinka samples
  parents, patch types and temperatures from, are seeded with the run seed;
- the LLM timeout (`shinka.llm.client.TIMEOUT`, 1200 s by default), the concurrent proposals, and max_tokens
  where `--max-tokens` asks.
Evaluation: bench/peers/shinka_evaluate.py (OpenEvolve's evaluator in Shinka's results format), or for a suite
task bench/peers/shinka_suite_evaluate.py (the Cambrian benchmark's score).

    /work/peers-venv/bin/python bench/peers/shinka_driver.py --program SEED.py --api-base http://127.0.0.1:PORT/v1 \\
        --model qwen2.5-coder-1.5b --proposals 20 --seed 0 --workdir DIR --out DIR/shinka.json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sqlite3
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from request_seeds import request_seed  # next to this file, found through the path above

EVALUATE = Path(__file__).resolve().parent / "shinka_evaluate.py"


def shipped(path: str) -> dict[str, Any]:
    """One of Shinka's shipped Hydra config files, without its `_target_` keys."""
    text = resources.files("shinka").joinpath("configs", path).read_text()
    data = yaml.safe_load(text)
    for section in data.values():
        if isinstance(section, dict):
            section.pop("_target_", None)
    return data


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """Shinka's default composition (config.yaml's defaults list) with the changes the module doc lists."""
    budget, database = shipped("evolution/medium_budget.yaml"), shipped("database/island_medium.yaml")
    message = (
        Path(args.task_message).read_text()
        if args.task_message
        else shipped("task/circle_packing.yaml")["evo_config"]["task_sys_msg"]
    )
    evo = {**budget["evo_config"], "task_sys_msg": message, "language": "python"}
    evo.update(
        llm_models=[f"local/{args.model}@{args.api_base}"],
        embedding_model=None,
        num_generations=args.proposals + 1,
        results_dir=str(Path(args.workdir) / "results"),
        job_type="local",
    )
    if args.max_tokens is not None:
        evo["llm_kwargs"] = {**evo["llm_kwargs"], "max_tokens": args.max_tokens}
    return {
        "evo_config": evo,
        "db_config": database["db_config"],
        "job_config": {"eval_program_path": str(args.evaluate), "python_executable": sys.executable},
        "max_evaluation_jobs": budget["max_evaluation_jobs"],
        "max_proposal_jobs": args.workers,
        "max_db_workers": budget["max_db_workers"],
        "llm_timeout_s": args.llm_timeout,
        "request_seeds": f"sha256(run seed {args.seed}, request number)",
    }


async def run_with_cap(runner: Any, wall_seconds: float | None) -> None:
    """runner.run_async(), asked to stop (no new proposals, running ones dropped) after `wall_seconds`."""

    async def cap() -> None:
        assert wall_seconds is not None
        await asyncio.sleep(wall_seconds)
        runner.should_stop.set()
        runner.finalization_complete.set()

    watchdog = asyncio.create_task(cap()) if wall_seconds is not None else None
    try:
        await runner.run_async()
    finally:
        if watchdog is not None:
            watchdog.cancel()


def proposals_made(database: Path) -> list[dict[str, Any]]:
    """Every program Shinka stored but the island copies of the seed, and every generation that failed before
    evaluation (Shinka logs those in `attempt_log`, with no program), oldest first."""
    connection = sqlite3.connect(database)
    try:
        rows = connection.execute(
            "SELECT generation, timestamp, combined_score, correct, code, metadata, text_feedback, public_metrics "
            "FROM programs"
        ).fetchall()
        failures = connection.execute(
            "SELECT generation, created_at, details FROM attempt_log WHERE status = 'failed'"
        ).fetchall()
    finally:
        connection.close()
    found = []
    for generation, stamp, score, correct, code, metadata, feedback, public in rows:
        meta = json.loads(metadata or "{}")
        if meta.get("_is_island_copy"):
            continue
        failed = meta.get("node_kind") == "failed_proposal"  # never reached the evaluator
        found.append(
            {
                "generation": generation,
                "t": stamp,
                "code": None if failed else code,
                "score": None if failed else float(score or 0.0) if correct else 0.0,
                "note": str(meta.get("failure_reason") or ("" if correct else _why_incorrect(meta, feedback)))[:300],
                "metrics": json.loads(public or "{}"),
            }
        )
    for generation, stamp, details in failures:
        reason = json.loads(details or "{}").get("failure_reason") or "failed before evaluation"
        found.append({"generation": generation, "t": stamp, "code": None, "score": None, "note": str(reason)[:300]})
    return sorted(found, key=lambda p: p["t"])


def _why_incorrect(meta: dict[str, Any], feedback: str | None) -> str:
    """The evaluator's own words for an incorrect program: its first printed line that names an error."""
    for line in str(meta.get("stdout_log") or "").splitlines():
        if "Error" in line or "error" in line or "invalid" in line.lower():
            return line.strip()
    return feedback or "incorrect"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", required=True, help="the seed program")
    parser.add_argument("--api-base", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--proposals", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--llm-timeout", type=int, default=1800, help="seconds per LLM request")
    parser.add_argument("--workers", type=int, default=1, help="proposals generated at once")
    parser.add_argument("--wall-seconds", type=float, default=None, help="stop Shinka after this long")
    parser.add_argument("--max-tokens", type=int, default=None, help="replace the default max_tokens (16384)")
    parser.add_argument("--evaluate", default=str(EVALUATE), help="Shinka's evaluation script for the task")
    parser.add_argument("--task-message", default=None, help="a file with the task's system message")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import shinka
    import shinka.llm.client
    import shinka.llm.query
    from shinka.core import EvolutionConfig, ShinkaEvolveRunner
    from shinka.database import DatabaseConfig
    from shinka.launch import LocalJobConfig

    random.seed(args.seed)
    np.random.seed(args.seed)
    shinka.llm.client.TIMEOUT = args.llm_timeout  # read when each request's client is made
    query = shinka.llm.query.query_local_openai_async
    numbers = itertools.count()

    async def seeded_query(*positional: Any, **options: Any) -> Any:
        options.setdefault("seed", request_seed(args.seed, next(numbers)))
        return await query(*positional, **options)

    shinka.llm.query.query_local_openai_async = seeded_query
    chosen = settings(args)
    started = time.time()
    runner = ShinkaEvolveRunner(
        evo_config=EvolutionConfig(**chosen["evo_config"]),
        job_config=LocalJobConfig(**chosen["job_config"]),
        db_config=DatabaseConfig(**chosen["db_config"]),
        max_evaluation_jobs=chosen["max_evaluation_jobs"],
        max_proposal_jobs=chosen["max_proposal_jobs"],
        max_db_workers=chosen["max_db_workers"],
        init_program_str=Path(args.program).read_text(),
    )
    asyncio.run(run_with_cap(runner, args.wall_seconds))
    finished = time.time()

    found = proposals_made(Path(chosen["evo_config"]["results_dir"]) / "programs.sqlite")
    seed = next((p for p in found if p["generation"] == 0), None)
    payload = {
        "system": "shinka",
        "version": shinka.__version__,
        "started": started,
        "finished": finished,
        "seed": {"score": seed["score"] if seed else None, "metrics": seed["metrics"] if seed else {}},
        "proposals": [p for p in found if p["generation"] > 0],
        "settings": {**chosen, "evo_config": {k: v for k, v in chosen["evo_config"].items() if k != "task_sys_msg"}},
        "concurrency_used": [runner.max_evaluation_jobs, runner.max_proposal_jobs, runner.max_db_workers],
    }
    Path(args.out).write_text(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
