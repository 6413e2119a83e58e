"""Run OpenEvolve on one seed program with the settings of a config file, and write what every proposal did.

Runs in the peers' virtual environment (`openevolve` from PyPI), never in Cambrian's: bench/peer_efficacy.py
starts it as a subprocess. On circle packing the settings are OpenEvolve's own
`examples/circle_packing/config_phase_1.yaml` (full rewrites, its system message, 4 islands, cascade
evaluation, 60 s evaluation timeout, temperature 0.7, top_p 0.95, max_tokens 8192); on a suite task,
OpenEvolve's defaults with the task's description as the system message (bench/_peer_tasks.py). Either way
with these changes only: one model at the shared server instead of the hosted ones, the iteration budget, the
run seed, a per-request seed (OpenEvolve itself sends one seed, derived from the run seed, with every request,
so a prompt it sends again, as it does while no proposal has entered its database, gets the same reply; here
request k gets sha256 of the run seed and k, as ShinkaEvolve's driver gives it, bench/peers/request_seeds.py),
the LLM timeout (600 s and less is short for a CPU model), the worker processes, and max_tokens where
`--max-tokens` asks.

    /work/peers-venv/bin/python bench/peers/openevolve_driver.py --program SEED.py --evaluator EVAL.py \\
        --config bench/peers/circle_packing/config_phase_1.yaml --api-base http://127.0.0.1:PORT/v1 \\
        --model qwen2.5-coder-1.5b --iterations 20 --seed 0 --workdir DIR --out DIR/openevolve.json

The output JSON: the seed's and every proposal's score (`--score-key` of the evaluator's metrics: the sum of
radii by OpenEvolve's own circle-packing evaluator, or a suite task's combined_score), the time it was
known (Unix seconds), and the code of every valid proposal; proposals that failed before evaluation (no code
in the reply, an LLM error) are listed with their error and no score.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from request_seeds import request_seed  # next to this file, found through the path above

_ITERATION_ERROR = re.compile(r"^Iteration (\d+) error: (.*?)(?: \| tokens: .*)?$", re.DOTALL)


class ErrorLog(logging.Handler):
    """Keeps OpenEvolve's 'Iteration N error: ...' lines (the proposals that never reached its evaluator)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.errors: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        match = _ITERATION_ERROR.match(record.getMessage())
        if match:
            self.errors.append({"iteration": int(match[1]), "t": record.created, "note": match[2][:300]})


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The example's config with only the endpoint, budget, seed, LLM timeout and workers changed."""
    config = yaml.safe_load(Path(args.config).read_text())
    llm = {k: v for k, v in config["llm"].items() if not k.startswith("secondary_model")}
    llm.update(
        primary_model=args.model,
        primary_model_weight=1.0,
        api_base=args.api_base,
        api_key="none",
        timeout=args.llm_timeout,
    )
    if args.max_tokens is not None:
        llm["max_tokens"] = args.max_tokens
    config["llm"] = llm
    config["max_iterations"] = args.iterations
    config["random_seed"] = args.seed
    config["log_dir"] = str(Path(args.workdir) / "logs")
    config["evaluator"] = {**config["evaluator"], "parallel_evaluations": args.workers}
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", required=True, help="the seed program")
    parser.add_argument("--evaluator", required=True, help="OpenEvolve's evaluator.py")
    parser.add_argument("--score-key", default="sum_radii", help="the evaluator's metric that is the score")
    parser.add_argument("--config", required=True, help="OpenEvolve's example config (YAML)")
    parser.add_argument("--api-base", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--iterations", type=int, required=True, help="proposals")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--llm-timeout", type=int, default=1800, help="seconds per LLM request")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (LLM call + evaluation each)")
    parser.add_argument("--wall-seconds", type=float, default=None, help="ask OpenEvolve to stop after this long")
    parser.add_argument("--max-tokens", type=int, default=None, help="replace the example's max_tokens")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import openevolve
    from openevolve.config import Config
    from openevolve.controller import OpenEvolve

    errors = ErrorLog()
    logging.getLogger("openevolve").addHandler(errors)
    config_dict = settings(args)
    seed_each_request(args.seed)
    config = Config.from_dict(json.loads(json.dumps(config_dict)))
    # What openevolve.config.load_config does after reading a YAML file.
    config.llm.update_model_params({"system_message": config.prompt.system_message})

    started = time.time()
    controller = OpenEvolve(args.program, args.evaluator, config, output_dir=str(Path(args.workdir) / "output"))
    added: list[dict[str, Any]] = []
    add = controller.database.add

    def recording_add(program: Any, *rest: Any, **options: Any) -> Any:
        if not program.metadata.get("migrant"):  # a migrant is a copy of a program already recorded
            metrics = program.metrics or {}
            added.append(
                {
                    "iteration": program.iteration_found,
                    "t": program.timestamp,
                    "code": program.code,
                    # No score: the evaluator failed (an error, a timeout) and scored the program 0.
                    "score": float(metrics.get(args.score_key, 0.0)),
                    "note": str(metrics.get("error", ""))[:300],
                    "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))},
                }
            )
        return add(program, *rest, **options)

    controller.database.add = recording_add  # every program, before the database may evict it
    timer = threading.Timer(args.wall_seconds or 0.0, lambda: _stop(controller))
    timer.daemon = True
    if args.wall_seconds is not None:
        timer.start()
    asyncio.run(controller.run(iterations=args.iterations))
    finished = time.time()
    timer.cancel()

    seed = next((a for a in added if a["iteration"] == 0), None)
    proposals = [
        {"t": a["t"], "score": a["score"], "note": a["note"], "code": a["code"], "metrics": a["metrics"]}
        for a in added
        if a["iteration"] > 0
    ]
    proposals += [{"t": e["t"], "score": None, "note": e["note"], "code": None} for e in errors.errors]
    payload = {
        "system": "openevolve",
        "version": openevolve.__version__,
        "started": started,
        "finished": finished,
        "seed": {"score": seed["score"] if seed else None, "metrics": seed["metrics"] if seed else {}},
        "proposals": sorted(proposals, key=lambda p: p["t"]),
        "settings": {k: v for k, v in config_dict.items() if k != "prompt"}
        | {"prompt": "the config file's", "request_seeds": f"sha256(run seed {args.seed}, request number)"},
    }
    Path(args.out).write_text(json.dumps(payload, indent=1))


def seed_each_request(run_seed: int) -> None:
    """Every LLM request gets its own seed, request_seed(run_seed, k) for the k-th request of the run.

    OpenEvolve asks its model from worker processes forked from this one (a process pool without
    max_tasks_per_child, on Linux), so the patched method and the shared request counter reach them; under
    any other start method the patch would not, and the driver stops rather than run with one seed.
    """
    from openevolve.llm.openai import OpenAILLM

    if multiprocessing.get_start_method() != "fork":
        raise SystemExit(
            f"OpenEvolve's workers would start by {multiprocessing.get_start_method()!r}, not fork: "
            "the per-request seeds would not reach them"
        )
    requests = multiprocessing.Value("q", 0)  # shared with the forked workers
    generate = OpenAILLM.generate_with_context

    async def seeded(self: Any, system_message: str, messages: list[dict[str, str]], **options: Any) -> str:
        with requests.get_lock():
            number = requests.value
            requests.value += 1
        options["seed"] = request_seed(run_seed, number)
        return await generate(self, system_message, messages, **options)

    OpenAILLM.generate_with_context = seeded


def _stop(controller: Any) -> None:
    """The wall-clock cap: what OpenEvolve's own SIGTERM handler does (finish the proposal being processed)."""
    if controller.parallel_controller is not None:
        controller.parallel_controller.request_shutdown()


if __name__ == "__main__":
    main()
