"""Evaluation throughput on a Ray cluster: evaluated tasks per second against the ideal (slots / task time).

The benchmark's tasks each sleep a fixed time in the sandbox (`SleepBenchmark`, 200 ms by default), so
the figure measures the executor (dispatch, sandbox session, relay, scoring, Ray round trips), not the
CPU: on 2 cores, 8 slots of sleeping tasks are not capped by the cores. For 1 and 2 Ray nodes (real
`ray start` processes on this machine, each with its own local sandbox pool) and 1, 2, 4, 8 slots in all
(evaluation.concurrency = slots / nodes per node), it evaluates agents whose tasks all go out at once,
after an untimed warm-up round, and reports tasks/s, the ideal and the fraction of it.
Target: >= 90% of ideal at 8 slots.

Usage: .venv/bin/python bench/scale_out.py [--task-seconds 0.2] [--rounds 6] [--out bench/results/scale_out.json]
Never asserts on time; stops every Ray process it started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray

from evaluators.runner import Limits, TaskJob, run_task
from meta_agent.config import RunConfig
from meta_agent.search import AgentFMBudget
from meta_agent.search._ray_executor import RayExecutor
from meta_agent.testing import SleepBenchmark
from sandbox.local import LocalSandbox
from tests.ray_cluster import LocalRayCluster

SLOTS = (1, 2, 4, 8)
AGENTS = 2  # evaluated at once, each with half the tasks


def sandbox_task_seconds(task_s: float, runs: int = 5) -> float:
    """Median wall clock of one task run straight in a local sandbox session, here (no Ray): what a slot
    cannot beat whatever the executor does (the local sandbox starts three interpreters per run)."""
    benchmark = SleepBenchmark(tasks=1, seconds=task_s)
    job = TaskJob(benchmark.tasks("search")[0], 0)
    sandbox = LocalSandbox()
    times = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        with sandbox.session() as session:
            run_task(benchmark, benchmark.seed(), session, job, limits=Limits(), env={}, checker=sandbox)
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def measure(address: str, *, nodes: int, slots: int, task_s: float, rounds: int) -> dict[str, float]:
    """Tasks/s of `rounds` x `slots` tasks spread over `nodes` nodes with `slots // nodes` slots each."""
    config = RunConfig.model_validate(
        {"name": "scale-out", "evaluation": {"executor": "ray", "ray_address": address, "sandbox": "local",
                                             "concurrency": slots // nodes}}
    )  # fmt: skip
    executor = RayExecutor.connect(config, warn=lambda message: None)
    try:
        assert len(executor.nodes) == nodes and executor.slots == slots, (len(executor.nodes), executor.slots)
        per_agent = max(1, slots * rounds // AGENTS)
        benchmark = SleepBenchmark(tasks=per_agent, seconds=task_s)
        warmup = SleepBenchmark(tasks=slots, seconds=task_s)

        async def evaluate_all(bench: SleepBenchmark, agents: int) -> tuple[float, float]:
            started, cpu = time.perf_counter(), time.process_time()
            results = await asyncio.gather(
                *(
                    executor.evaluate(
                        bench,
                        bench.seed(),
                        agent_id=agent,
                        iteration=0,
                        split="search",
                        limits=Limits(),
                        gateway=None,
                        fm_budget=AgentFMBudget(0, 0, 0),
                    )  # fmt: skip
                    for agent in range(agents)
                )
            )
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
            assert all(r.valid and r.score == 1.0 for r in results), [r.invalid_reason for r in results]
            return elapsed, cpu

        async def run() -> tuple[float, float]:
            try:
                await evaluate_all(warmup, 1)  # worker processes, the benchmark's first fetch on each node
                return await evaluate_all(benchmark, AGENTS)
            finally:
                await executor.finish()

        elapsed, driver_cpu = asyncio.run(run())
    finally:
        executor.close()
    tasks = per_agent * AGENTS
    throughput = tasks / elapsed
    ideal = slots / task_s
    return {"nodes": nodes, "slots": slots, "tasks": tasks, "seconds": round(elapsed, 3),
            "tasks_per_s": round(throughput, 2), "ideal_per_s": round(ideal, 2),
            "fraction_of_ideal": round(throughput / ideal, 3),
            "driver_cpu_ms_per_task": round(1000 * driver_cpu / tasks, 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task-seconds", type=float, default=0.2, help="each task's sleep, seconds")
    parser.add_argument("--rounds", type=int, default=6, help="timed tasks per slot")
    parser.add_argument("--out", type=Path, default=Path("bench/results/scale_out.json"))
    args = parser.parse_args()
    rows: list[dict[str, float]] = []
    sandbox_s = sandbox_task_seconds(args.task_seconds)
    print(
        f"one task straight in the local sandbox: {sandbox_s * 1000:.0f} ms "
        f"(its sleep: {args.task_seconds * 1000:.0f} ms)"
    )
    with tempfile.TemporaryDirectory(prefix="cambrian-scale-out-") as logs:
        for nodes in (1, 2):
            with LocalRayCluster(Path(logs) / f"{nodes}-nodes", cpus=2) as cluster:
                cluster.start_head("head")
                if nodes == 2:
                    cluster.add_node("second")
                for slots in SLOTS:
                    if slots % nodes:
                        continue  # 1 slot cannot be spread over 2 nodes
                    row = measure(cluster.address, nodes=nodes, slots=slots, task_s=args.task_seconds,
                                  rounds=args.rounds)  # fmt: skip
                    row["sandbox_bound_per_s"] = round(slots / sandbox_s, 2)
                    rows.append(row)
                    print(f"{nodes} node(s) {slots} slots: {row['tasks_per_s']:.2f} tasks/s of "
                          f"{row['ideal_per_s']:.2f} ideal ({row['fraction_of_ideal']:.0%})", flush=True)  # fmt: skip
                if ray.is_initialized():
                    ray.shutdown()
    print()
    print(f"| nodes | slots | tasks/s | ideal (slots / {args.task_seconds:g} s) | of ideal "
          f"| slots / {sandbox_s:.2f} s (one sandbox run) | driver CPU per task |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['nodes']} | {row['slots']} | {row['tasks_per_s']:.2f} | {row['ideal_per_s']:.2f} | "
              f"{row['fraction_of_ideal']:.0%} | {row['sandbox_bound_per_s']:.2f} | "
              f"{row.get('driver_cpu_ms_per_task', float('nan')):.1f} ms |")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "task_seconds": args.task_seconds,
        "sandbox_task_seconds": round(sandbox_s, 3),
        "rounds": args.rounds,
        "machine": platform.node(),
        "cpus": os.cpu_count(),
        "ray": ray.__version__,
        "rows": rows,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nsaved {args.out}")


if __name__ == "__main__":
    main()
