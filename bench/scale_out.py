"""Evaluation throughput on a Ray cluster: evaluated tasks per second against the ideal (slots / task time).

The benchmark's tasks each sleep a fixed time in the sandbox (`SleepBenchmark`, 200 ms by default), so
the figure measures the executor (dispatch, sandbox session, relay, scoring, Ray round trips), not the
CPU: on 2 cores, 8 slots of sleeping tasks are not capped by the cores. For 1 and 2 Ray nodes (real
`ray start` processes on this machine, each with its own sandbox pool: `--sandbox local`, or `docker`
with the engine and the sandbox image) and 1, 2, 4, 8 slots in all (evaluation.concurrency = slots /
nodes per node), it evaluates agents whose tasks all go out at once, after an untimed warm-up round, and
reports tasks/s, the ideal and the fraction of it, and the sandbox sessions the nodes opened per task
(a node keeps one per agent and slot: for Docker, a container each).
Target: >= 90% of ideal at 8 slots.

Usage: .venv/bin/python bench/scale_out.py [--task-seconds 0.2] [--rounds 6] [--sandbox local|docker]
       [--out bench/results/scale_out-0.2s-local.json]
Never asserts on time; stops every Ray process it started and checks that no container of it is left.
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

from cambrian.evaluators.runner import Limits, TaskJob, run_task
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.search._ray_executor import RayExecutor
from cambrian.meta_agent.search.evaluation import AgentFMBudget, EvaluationContext
from cambrian.meta_agent.testing import SleepBenchmark
from cambrian.sandbox.base import Sandbox
from cambrian.sandbox.local import LocalSandbox
from tests.ray_cluster import LocalRayCluster

SLOTS = (1, 2, 4, 8)
AGENTS = 2  # evaluated at once, each with half the tasks
RUN_LABEL = "scale-out"  # the containers' cambrian.run label


def make_sandbox(kind: str) -> Sandbox:
    if kind == "local":
        return LocalSandbox()
    from cambrian.sandbox.docker import DockerSandbox

    return DockerSandbox(image=RunConfig().evaluation.image, pool_size=1, run_label=RUN_LABEL)


def sandbox_task_seconds(kind: str, task_s: float, *, fresh_session: bool, runs: int = 5) -> float:
    """Median wall clock of one task run straight in the sandbox, here (no Ray): in a fresh session per run
    (what the nodes did before they kept sessions; for Docker a container each, from a pool of one) or
    all in one kept session. What a slot cannot beat whatever the executor does (the local sandbox starts
    three interpreters per run)."""
    benchmark = SleepBenchmark(tasks=1, seconds=task_s)
    job = TaskJob(benchmark.tasks("search")[0], 0)
    sandbox = make_sandbox(kind)
    times = []
    try:
        kept = sandbox.session()
        for _ in range(runs + 1):
            started = time.perf_counter()
            if fresh_session:
                with sandbox.session() as session:
                    run_task(benchmark, benchmark.seed(), session, job, limits=Limits(), env={}, checker=sandbox)
            else:
                run_task(benchmark, benchmark.seed(), kept, job, limits=Limits(), env={}, checker=sandbox)
            times.append(time.perf_counter() - started)
        kept.close()
    finally:
        sandbox.close()
    return statistics.median(times[1:])


def sessions_opened(executor: RayExecutor) -> int:
    return sum(opened for opened, _kept in ray.get([node.actor.sessions.remote() for node in executor.nodes]))


def measure(address: str, *, sandbox: str, nodes: int, slots: int, task_s: float, rounds: int) -> dict[str, float]:
    """Tasks/s of `rounds` x `slots` tasks spread over `nodes` nodes with `slots // nodes` slots each."""
    config = RunConfig.model_validate(
        {
            "name": RUN_LABEL,
            "evaluation": {
                "executor": "ray",
                "ray_address": address,
                "sandbox": sandbox,
                "concurrency": slots // nodes,
            },
        }
    )
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
                        EvaluationContext(bench, Limits(), AgentFMBudget(0, 0, 0)),
                        bench.seed(),
                        agent_id=agent,
                        iteration=0,
                        split="search",
                    )
                    for agent in range(agents)
                )
            )
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
            assert all(r.valid and r.score == 1.0 for r in results), [r.invalid_reason for r in results]
            return elapsed, cpu

        async def run() -> tuple[float, float, int]:
            try:
                await evaluate_all(warmup, 1)  # worker processes, the benchmark's first fetch on each node
                opened = sessions_opened(executor)
                elapsed, cpu = await evaluate_all(benchmark, AGENTS)
                return elapsed, cpu, sessions_opened(executor) - opened
            finally:
                await executor.finish()

        elapsed, driver_cpu, sessions = asyncio.run(run())
    finally:
        executor.close()
    tasks = per_agent * AGENTS
    throughput = tasks / elapsed
    ideal = slots / task_s
    return {
        "nodes": nodes,
        "slots": slots,
        "tasks": tasks,
        "seconds": round(elapsed, 3),
        "tasks_per_s": round(throughput, 2),
        "ideal_per_s": round(ideal, 2),
        "fraction_of_ideal": round(throughput / ideal, 3),
        "driver_cpu_ms_per_task": round(1000 * driver_cpu / tasks, 2),
        "sessions": sessions,
    }


def containers_left() -> list[str]:
    """Containers of this bench still present (there must be none once its executors are closed)."""
    from cambrian.sandbox.image import connect_engine

    client = connect_engine()
    try:
        return [
            c.short_id
            for c in client.containers.list(all=True, sparse=True, filters={"label": f"cambrian.run={RUN_LABEL}"})
        ]
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task-seconds", type=float, default=0.2, help="each task's sleep, seconds")
    parser.add_argument("--rounds", type=int, default=6, help="timed tasks per slot")
    parser.add_argument(
        "--sandbox",
        choices=("local", "docker"),
        default="local",
        help="the nodes' sandbox (docker: the engine and the sandbox image)",
    )
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/scale_out-Ns-SANDBOX.json")
    args = parser.parse_args()
    out: Path = args.out or Path(f"bench/results/scale_out-{args.task_seconds:g}s-{args.sandbox}.json")
    rows: list[dict[str, float]] = []
    fresh_s = sandbox_task_seconds(args.sandbox, args.task_seconds, fresh_session=True)
    kept_s = sandbox_task_seconds(args.sandbox, args.task_seconds, fresh_session=False)
    print(
        f"one task straight in the {args.sandbox} sandbox: {fresh_s * 1000:.0f} ms in a fresh session, "
        f"{kept_s * 1000:.0f} ms in a kept one (its sleep: {args.task_seconds * 1000:.0f} ms)"
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
                    row = measure(
                        cluster.address,
                        sandbox=args.sandbox,
                        nodes=nodes,
                        slots=slots,
                        task_s=args.task_seconds,
                        rounds=args.rounds,
                    )
                    row["fresh_session_bound_per_s"] = round(slots / fresh_s, 2)
                    row["kept_session_bound_per_s"] = round(slots / kept_s, 2)
                    rows.append(row)
                    print(
                        f"{nodes} node(s) {slots} slots: {row['tasks_per_s']:.2f} tasks/s of "
                        f"{row['ideal_per_s']:.2f} ideal ({row['fraction_of_ideal']:.0%}), "
                        f"{row['sessions']} sessions for {row['tasks']} tasks",
                        flush=True,
                    )
                if ray.is_initialized():
                    ray.shutdown()
    left = containers_left() if args.sandbox == "docker" else []
    print()
    print(f"{args.sandbox} sandbox, {args.task_seconds:g} s tasks, {args.rounds} rounds")
    print(
        f"| nodes | slots | tasks/s | ideal (slots / {args.task_seconds:g} s) | of ideal "
        f"| slots / {kept_s:.2f} s (a run in a kept session) | slots / {fresh_s:.2f} s (in a fresh one) "
        "| sessions / tasks | driver CPU per task |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['nodes']} | {row['slots']} | {row['tasks_per_s']:.2f} | {row['ideal_per_s']:.2f} | "
            f"{row['fraction_of_ideal']:.0%} | {row['kept_session_bound_per_s']:.2f} | "
            f"{row['fresh_session_bound_per_s']:.2f} | {row['sessions']} / {row['tasks']} | "
            f"{row.get('driver_cpu_ms_per_task', float('nan')):.1f} ms |"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "sandbox": args.sandbox,
        "task_seconds": args.task_seconds,
        "fresh_session_task_seconds": round(fresh_s, 3),
        "kept_session_task_seconds": round(kept_s, 3),
        "rounds": args.rounds,
        "machine": platform.node(),
        "cpus": os.cpu_count(),
        "ray": ray.__version__,
        "rows": rows,
        "containers_left": left,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nsaved {out}")
    if left:
        sys.exit(f"containers of this bench were left behind: {', '.join(left)}")


if __name__ == "__main__":
    main()
