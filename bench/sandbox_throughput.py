"""Per-task cost of the sandbox backends, side by side, on a one-line Python program.

(a) LocalSandbox: a subprocess per task (weak isolation); (a') the same in Linux namespaces (bubblewrap), where
    they work.
(b) DockerSandbox with its pre-started pool: one session, N tasks in one
    container, each a round trip to the runner inside.
(c) one hardened `docker run --rm` per task (the Darwin Gödel Machine's way),
    through the SDK's containers.run with the same hardening as (b).

For each: wall-clock per task (median, p90, ms), tasks/s, and the overhead
per task = wall - the program's own run time. The program's own time is the
median `duration_s` the backend reports ((a), (b)); for (c), which reports
none, (b)'s in-container figure is used (same image, same program).
Targets from the issue: (b) overhead <= 30 ms per task, (b) >= 5x the
throughput of (c).

Usage: .venv/bin/python bench/sandbox_throughput.py [--tasks 100] [--docker-run-tasks 20]
Needs a Docker engine and the sandbox image (`cambrian sandbox build`). Never asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cambrian.sandbox._namespaces import available as namespaces_available
from cambrian.sandbox.base import RunResult, RunSpec
from cambrian.sandbox.docker import ContainerLimits, DockerSandbox, hardened_settings
from cambrian.sandbox.image import DEFAULT_IMAGE, connect_engine, image_exists, image_missing
from cambrian.sandbox.local import LocalSandbox

PROGRAM = "print('hello from the sandbox')\n"
SPEC = RunSpec(files={"main.py": PROGRAM}, command=("{python}", "main.py"), timeout_s=30)
WARMUP = 3  # untimed tasks per backend (first-run caches)


class Timing:
    """Per-task wall clock and program time of one backend, in seconds."""

    def __init__(self, name: str, walls: list[float], program_s: float) -> None:
        self.name = name
        self.walls = sorted(walls)
        self.program_s = program_s

    def quantile_ms(self, q: float) -> float:
        return 1000 * self.walls[min(len(self.walls) - 1, int(q * len(self.walls)))]

    @property
    def median_ms(self) -> float:
        return 1000 * statistics.median(self.walls)

    @property
    def tasks_per_s(self) -> float:
        return len(self.walls) / sum(self.walls)

    @property
    def overhead_median_ms(self) -> float:
        return self.median_ms - 1000 * self.program_s

    @property
    def overhead_p90_ms(self) -> float:
        return self.quantile_ms(0.9) - 1000 * self.program_s


def timed(run: Callable[[], RunResult], count: int) -> tuple[list[float], list[float]]:
    """Wall clock and reported program time of `count` runs, seconds; every run must succeed."""
    walls, programs = [], []
    for _ in range(WARMUP):
        run()
    for _ in range(count):
        started = time.perf_counter()
        result = run()
        walls.append(time.perf_counter() - started)
        if not result.ok or "hello" not in result.stdout:
            raise SystemExit(f"a benchmark task failed: {result}")
        programs.append(result.duration_s)
    return walls, programs


def bench_local(count: int, *, namespaces: bool = False) -> Timing:
    sandbox = LocalSandbox(namespaces=namespaces)
    try:
        walls, programs = timed(lambda: sandbox.run(SPEC), count)
    finally:
        sandbox.close()
    name = "(a') local, in namespaces (bwrap)" if namespaces else "(a) local subprocess"
    return Timing(name, walls, statistics.median(programs))


def bench_pool(count: int) -> Timing:
    with DockerSandbox(pool_size=1, run_label="bench") as sandbox, sandbox.session() as session:
        walls, programs = timed(lambda: session.run(SPEC), count)
    return Timing("(b) docker, pre-started pool", walls, statistics.median(programs))


def bench_docker_run(count: int, *, program_s: float) -> Timing:
    client = connect_engine()
    settings = hardened_settings(DEFAULT_IMAGE, limits=ContainerLimits(), labels={"cambrian": "bench"})
    for key in ("stdin_open", "tty", "auto_remove"):
        settings.pop(key)
    settings["command"] = ["python3", "-S", "-c", PROGRAM]

    def one_run() -> RunResult:
        output = client.containers.run(detach=False, remove=True, stdout=True, stderr=True, **settings)
        return RunResult(exit_code=0, stdout=output.decode(), stderr="", duration_s=program_s)

    try:
        walls, _ = timed(one_run, count)
    finally:
        client.close()
    return Timing("(c) docker run --rm per task", walls, program_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=100, help="tasks timed for (a) and (b)")
    parser.add_argument("--docker-run-tasks", type=int, default=20, help="tasks timed for (c), ~0.5 s each")
    args = parser.parse_args()
    if not image_exists(DEFAULT_IMAGE):
        error = image_missing(DEFAULT_IMAGE)
        raise SystemExit(f"{error} (fix: {error.fix})")
    local = bench_local(args.tasks)
    spaced = [bench_local(args.tasks, namespaces=True)] if namespaces_available() else []
    pool = bench_pool(args.tasks)
    per_run = bench_docker_run(args.docker_run_tasks, program_s=pool.program_s)
    print(f"task: {PROGRAM.strip()!r}; overhead = wall - the program's own run time")
    print(f"{'backend':32} {'tasks':>5} {'wall med':>9} {'wall p90':>9} {'ovh med':>8} {'ovh p90':>8} {'tasks/s':>8}")
    for timing in (local, *spaced, pool, per_run):
        print(
            f"{timing.name:32} {len(timing.walls):5d} {timing.median_ms:8.1f}ms {timing.quantile_ms(0.9):8.1f}ms "
            f"{timing.overhead_median_ms:7.1f}ms {timing.overhead_p90_ms:7.1f}ms {timing.tasks_per_s:8.1f}"
        )
    print(f"(b)/(c) throughput ratio: {pool.tasks_per_s / per_run.tasks_per_s:.1f}x (target >= 5x)")
    print(f"(b) overhead per task: median {pool.overhead_median_ms:.1f} ms (target <= 30 ms)")
    for timing in spaced:
        print(f"(a') wall per task / (a)'s: {timing.median_ms / local.median_ms:.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
