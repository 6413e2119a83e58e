"""Cambrian's own cost per candidate, with the FM and the sandbox taken out.

Two measurements, at archives of 1k, 10k and 100k evaluated agents:

1. select+insert: one parent selection (`dgm`, numpy over the in-memory view)
   plus the archive writes one candidate costs (insert `proposed`, mark
   `evaluating`, store its evaluation and `evaluated`), plus the view update; and the same writes
   committed 8 candidates at a time (`Archive.write_batch`, what the loop's group commit does).
2. loop: the whole SearchLoop per candidate — prompt building, edit parsing,
   duplicate gate, archive writes, host-side scoring — with an instant scripted
   FM and a sandbox that replays one real result of the seed program.

3. with --breakdown: where the loop's driver time goes, the event loop thread's CPU per candidate inside
   its main synchronous steps (archive writes, the parent's context read, selection, the prompt, the
   view update, behaviour columns) and the rest (asyncio's hand-offs, the proposal and evaluation
   pipelines' own code, bookkeeping).

Usage: .venv/bin/python bench/loop_overhead.py [--sizes 1000 10000 100000] [--candidates 200]
                                              [--store sqlite|postgresql] [--breakdown]
--store postgresql starts a throwaway PostgreSQL server (Debian's binaries, as the tests do) and gives
each size a fresh database. Prints one table; never asserts on time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from sqlalchemy import insert, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cambrian.archive.commands import AddAgent, FinishEvaluation, MarkEvaluating
from cambrian.archive.models import Agent, AgentStatus, Evaluation
from cambrian.archive.selection import DGM, make_selector
from cambrian.archive.store import Archive
from cambrian.archive.view import ArchiveView
from cambrian.evaluators.registry import get_benchmark
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.llm import Completion
from cambrian.meta_agent.operators import RewriteOperator
from cambrian.meta_agent.search import loop_from_config
from cambrian.meta_agent.search._behaviour import BehaviourSpace
from cambrian.sandbox.base import RunResult, RunSpec
from cambrian.sandbox.local import LocalSandbox


class ReplaySandbox:
    """Returns one recorded RunResult instantly: the sandbox's time taken out of the measurement."""

    name = "replay"
    isolated = False
    shares_host_paths = False

    def __init__(self, result: RunResult) -> None:
        self.result = result

    def run(self, spec: RunSpec) -> RunResult:
        return self.result

    def session(self) -> ReplaySandbox:
        return self

    def close(self) -> None:
        pass

    def __enter__(self) -> ReplaySandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class ScriptedFM:
    """A fake FM (scripted, instant): returns the seed with one new statement inside the evolve block, one that
    runs code (a comment, or a constant nothing reads, would be refused by the static check as changing
    nothing the program does)."""

    def __init__(self, code: str) -> None:
        self.code = code

    async def complete(self, request=None, *, seed=None, iteration=None, **_):
        # The client takes a Request since the FM client became a pipeline, keywords before: this bench measures
        # both sides of that change.
        if request is not None and hasattr(request, "seed"):
            seed, iteration = request.seed, request.iteration
        marker = "# EVOLVE-BLOCK-START\n"
        code = self.code.replace(marker, f"{marker}VARIANT = hash('{iteration}-{seed}')\n", 1)
        text = f"```python\n{code}```"
        digest = hashlib.sha256(text.encode()).hexdigest()
        return Completion(text, "scripted", 100, 100, 0.0, 0.0, False, digest, seed)


def populate(archive: Archive, run_id: int, n: int, files: dict[str, str], entry: str) -> None:
    """Bulk-insert n evaluated agents (a random tree) sharing the seed's genome, into a fresh archive.

    The ids are given (1..n), so on PostgreSQL the id sequence is moved past them afterwards."""
    h = archive.put_genome(files, entry)
    rng = np.random.default_rng(0)
    scores = rng.uniform(0.5, 2.5, size=n)
    rows = []
    for i in range(n):
        parent = None if i == 0 else int(rng.integers(1, i + 1))
        rows.append(
            dict(
                id=i + 1,
                run_id=run_id,
                genome_hash=h,
                parent_id=parent,
                iteration=i,
                operator="diff",
                status=AgentStatus.evaluated,
                score=float(scores[i]),
                n_tasks=1,
            )
        )
    with archive.engine.begin() as conn:
        conn.execute(insert(Agent), rows)
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT setval(pg_get_serial_sequence('agent', 'id'), (SELECT max(id) FROM agent))"))


def bench_select_insert(store: Store, size: int, repeats: int, files: dict[str, str], entry: str) -> dict[str, float]:
    with store.archive() as archive:
        run = archive.create_run(name="bench", benchmark="circle_packing", seed=0, config_json="{}")
        populate(archive, int(run.id), size, files, entry)
        t0 = time.perf_counter()
        view = archive.view(int(run.id))
        view_s = time.perf_counter() - t0
        selector = make_selector("dgm", alpha0=1.5)
        rng = np.random.default_rng(0)
        select_ms, insert_ms = [], []
        for i in range(repeats):
            t0 = time.perf_counter()
            parent = int(selector.select(view, 1, rng)[0])
            t1 = time.perf_counter()
            text = dict(files)
            text[entry] += f"\n# {i}\n"
            agent = archive.add_agent(
                int(run.id), files=text, entry=entry, parent_id=parent, operator="diff", iteration=size + i
            )
            archive.mark_evaluating(int(agent.id))
            archive.finish_evaluation(
                int(agent.id),
                status=AgentStatus.evaluated,
                score=1.0,
                feedback="ok",
                eval_seconds=0.0,
                evaluations=[Evaluation(agent_id=0, task_id="n26", score=1.0, passed=True)],
            )
            view.add(int(agent.id), 1.0, parent)
            t2 = time.perf_counter()
            select_ms.append((t1 - t0) * 1e3)
            insert_ms.append((t2 - t1) * 1e3)
        return {
            "view_build_s": view_s,
            "select_ms": statistics.median(select_ms),
            "insert_ms": statistics.median(insert_ms),
            "batched_ms": bench_batched_writes(archive, int(run.id), size + repeats, repeats, files, entry),
        }


def bench_batched_writes(
    archive: Archive, run_id: int, first_iteration: int, repeats: int, files: dict[str, str], entry: str, k: int = 8
) -> float:
    """Median ms per candidate of the same three writes committed k candidates at a time (`write_batch`, as the
    loop's group commit does when k candidates' writes are ready together): k stores in one transaction, then
    their k starts and k results in another."""
    parent = 1
    per_candidate = []
    for first in range(0, repeats - repeats % k, k):
        t0 = time.perf_counter()
        adds = []
        for i in range(first, first + k):
            text = dict(files)
            text[entry] += f"\n# batched {i}\n"
            adds.append(
                AddAgent(
                    run_id, files=text, entry=entry, parent_id=parent, operator="diff", iteration=first_iteration + i
                )
            )
        agents = archive.write_batch(adds)
        lifecycle = []
        for agent in agents:
            lifecycle.append(MarkEvaluating(agent.key))
            lifecycle.append(
                FinishEvaluation(
                    agent.key,
                    status=AgentStatus.evaluated,
                    score=1.0,
                    feedback="ok",
                    eval_seconds=0.0,
                    evaluations=[Evaluation(agent_id=0, task_id="n26", score=1.0, passed=True)],
                )
            )
        outcomes = archive.write_batch(lifecycle)
        assert not any(isinstance(outcome, Exception) for outcome in (*agents, *outcomes)), outcomes
        per_candidate.append((time.perf_counter() - t0) * 1e3 / k)
    return statistics.median(per_candidate)


# The driver's main synchronous steps, for --breakdown: (label, class, method). The loop's config below uses
# dgm selection and the rewrite operator.
DRIVER_STEPS = (
    ("archive writes", Archive, "write_batch"),
    ("parent context read", Archive, "agent_context"),
    ("selection", DGM, "select"),
    ("prompt", RewriteOperator, "messages"),
    ("view update", ArchiveView, "add"),
    ("behaviour columns", BehaviourSpace, "columns"),
)


@contextlib.contextmanager
def timed_steps(totals: dict[str, float]) -> Iterator[None]:
    """While open, each method of DRIVER_STEPS adds the thread CPU it takes to totals[label] when called on the
    thread that opened this (the event loop's: asyncio.run runs there); the classes are restored afterwards.
    The timing wrapper costs a few microseconds a call itself."""
    thread = threading.get_ident()
    saved = []
    for label, owner, name in DRIVER_STEPS:
        saved.append((owner, name, owner.__dict__.get(name)))

        def timed(*args, method=getattr(owner, name), label=label, **kwargs):
            if threading.get_ident() != thread:
                return method(*args, **kwargs)
            start = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                totals[label] += time.thread_time() - start

        setattr(owner, name, timed)
    try:
        yield
    finally:
        for owner, name, original in saved:
            if original is None:  # inherited: the class's own attribute goes again
                delattr(owner, name)
            else:
                setattr(owner, name, original)


def bench_loop(
    store: Store,
    size: int,
    candidates: int,
    files: dict[str, str],
    entry: str,
    seed_result: RunResult,
    edit_processes: int = 0,
    steps: dict[str, float] | None = None,
) -> tuple[float, float, float, float]:
    """Steady-state SearchLoop milliseconds per candidate (proposal + evaluation), start-up excluded:
    (wall, CPU, driver CPU, lifecycle writes per transaction). CPU time (all threads of this process) is what
    Cambrian itself spends; wall time also counts waiting for the other processes of a busy machine. Driver
    CPU is the event loop's thread alone: selection, prompts, parsing, applying and checking edits, archive
    writes, novelty and bookkeeping; the rest of the CPU is the evaluation threads (sandbox calls and the
    benchmark's host-side scoring), which an executor runs elsewhere.
    steps: when given, filled with the driver's ms per candidate in each of DRIVER_STEPS (start-up included)."""
    with tempfile.TemporaryDirectory() as tmp, store.archive() as archive:
        config = RunConfig.model_validate(
            {
                "name": "bench",
                "runs_dir": tmp,
                "budget": {"iterations": size - 1 + candidates},  # populate used iterations 1..size-1
                "search": {
                    "strategy": "dgm",
                    "params": {"alpha0": 1.5},
                    "operators": {"rewrite": 1.0},
                    "edit_processes": edit_processes,
                },
                "fm": {"concurrency": 4},
                "evaluation": {"concurrency": 4},
            }
        )
        run = archive.create_run(name="bench", benchmark="circle_packing", seed=0, config_json=config.to_json())
        populate(archive, int(run.id), size, files, entry)
        loop = loop_from_config(
            archive=archive,
            run=run,
            config=config,
            benchmark=get_benchmark("circle_packing"),
            sandbox=ReplaySandbox(seed_result),
            llm=ScriptedFM(files[entry]),
            model_label="scripted",
            on_event=lambda event: stamps.append((time.perf_counter(), time.process_time(), time.thread_time())),
        )
        stamps: list[tuple[float, float, float]] = []
        totals: dict[str, float] = defaultdict(float)
        with timed_steps(totals) if steps is not None else contextlib.nullcontext():
            outcome = asyncio.run(loop.run_until_done())
        if steps is not None:
            steps.update({label: totals[label] * 1e3 / candidates for label, _, _ in DRIVER_STEPS})
        assert outcome.proposals == candidates, outcome
        # From the first event to the last: excludes start-up (loading the archive once).
        # Every event is emitted on the event loop's thread, so thread_time() there is the driver's own CPU.
        (wall0, cpu0, own0), (wall1, cpu1, own1) = stamps[0], stamps[-1]
        per = 1e3 / (candidates - 1)
        batching = loop.writes.writes / max(loop.writes.transactions, 1)
        return (wall1 - wall0) * per, (cpu1 - cpu0) * per, (own1 - own0) * per, batching


class Store:
    """Where the bench's archives live: a fresh SQLite file, or a fresh database of a throwaway
    PostgreSQL server, for each measurement."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.server = None
        if kind == "postgresql":
            from tests.postgres import PostgresServer, postgres_unavailable_reason

            reason = postgres_unavailable_reason()
            if reason is not None:
                raise SystemExit(f"--store postgresql: {reason}")
            self.server = PostgresServer(Path(tempfile.mkdtemp(prefix="cambrian-bench-pg-"))).start()

    @contextlib.contextmanager
    def archive(self) -> Iterator[Archive]:
        if self.server is None:
            with tempfile.TemporaryDirectory() as tmp, Archive.at(Path(tmp) / "archive.db") as archive:
                yield archive
            return
        url = self.server.create_database("bench")
        try:
            with Archive(url) as archive:
                yield archive
        finally:
            self.server.drop_database(url)

    def close(self) -> None:
        if self.server is not None:
            self.server.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--candidates", type=int, default=200)
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument(
        "--edit-processes",
        type=int,
        default=0,
        help="search.edit_processes: replies parsed, applied and checked in this many worker processes",
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="also print where the driver's time per candidate goes"
    )
    args = parser.parse_args()
    store = Store(args.store)
    try:
        run(store, args)
    finally:
        store.close()


def run(store: Store, args: argparse.Namespace) -> None:
    benchmark = get_benchmark("circle_packing")
    seed = benchmark.seed()
    files, entry = dict(seed.files), seed.entry
    # One real sandbox run of the seed, replayed afterwards so only Cambrian's own time is measured.
    sandbox = LocalSandbox()
    seed_result = sandbox.run(benchmark.run_spec(seed, benchmark.tasks("search")[0]))
    sandbox.close()
    assert seed_result.ok, seed_result.stderr

    print(f"store: {store.kind}; edit processes: {args.edit_processes}")
    print(
        f"{'agents':>8} | {'view build':>10} | {'select':>9} | {'insert+eval':>11} | {'batched 8':>9} | "
        f"{'select+insert':>13} | "
        f"{'loop wall/cand.':>15} | {'loop CPU/cand.':>14} | {'driver CPU/cand.':>16} | {'writes/commit':>13}"
    )
    print("-" * 148)
    breakdowns = []
    for size in args.sizes:
        r = bench_select_insert(store, size, args.candidates, files, entry)
        steps: dict[str, float] | None = {} if args.breakdown else None
        wall_ms, cpu_ms, driver_ms, batching = bench_loop(
            store, size, args.candidates, files, entry, seed_result, edit_processes=args.edit_processes, steps=steps
        )
        if steps is not None:
            breakdowns.append((size, driver_ms, steps))
        print(
            f"{size:>8} | {r['view_build_s'] * 1e3:>8.0f}ms | {r['select_ms']:>7.3f}ms | {r['insert_ms']:>9.3f}ms"
            f" | {r['batched_ms']:>7.3f}ms"
            f" | {r['select_ms'] + r['insert_ms']:>11.3f}ms | {wall_ms:>13.3f}ms | {cpu_ms:>12.3f}ms"
            f" | {driver_ms:>14.3f}ms | {batching:>13.2f}"
        )
    print("\nselect: median of one dgm selection over the in-memory view; insert+eval: median of the three")
    print("archive transactions one candidate costs (proposed, evaluating, evaluated with its evaluation row);")
    print("batched 8: the same writes of 8 candidates in two transactions (write_batch), per candidate;")
    print("loop: SearchLoop time per candidate (wall, and CPU of this process) with an instant scripted FM and a")
    print("sandbox that replays a recorded result: prompt building, edit parsing, duplicate gate, archive writes,")
    print("host-side scoring, thread hand-offs. driver: the event loop's thread alone (everything but the")
    print("evaluation threads, i.e. the sandbox calls and the benchmark's host-side scoring). writes/commit: the")
    print("loop's lifecycle writes per archive transaction (several when they were ready at once: group commit).")
    for size, driver_ms, steps in breakdowns:
        parts = " + ".join(f"{label} {ms:.3f}" for label, ms in steps.items())
        print(
            f"\ndriver at {size} agents, ms per candidate: {driver_ms:.3f} = {parts} + the rest "
            f"{driver_ms - sum(steps.values()):.3f} (asyncio's hand-offs, the pipelines' own code, bookkeeping)"
        )


if __name__ == "__main__":
    main()
