"""What the driver's per-candidate work costs at the least on this machine, next to what Cambrian pays for it.

`bench/loop_overhead.py --breakdown` says where the driver's time per candidate goes. This script measures
two floors under it, as thread CPU of the calling thread (the event loop's, for the driver):

1. asyncio hand-offs: one `await asyncio.to_thread(f)` of a function that does nothing (the loop hands each
   sandbox call, and each evaluation's session opening and closing, to a thread this way), one round trip to
   a worker process (`run_in_executor` on a process pool: how replies reach the edit processes), one task
   created and awaited, one future resolved by a callback.
2. the archive writes of a candidate (stored proposed, marked evaluating, finished evaluated with one task
   row and two descriptor values), eight candidates' writes a transaction as the loop's group commit
   batches them at best: through `Archive.write_batch`, and the same statements on Python's `sqlite3`
   module straight (no SQLAlchemy, no ORM objects, values given as the driver stores them): the least any
   Python code storing these rows pays.

Usage: .venv/bin/python bench/driver_floor.py [--candidates 3000] [--repeats 3]
Prints one table (medians of the repeats); never asserts on time. SQLite only.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import hashlib
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cambrian.archive.commands import AddAgent, FinishEvaluation, MarkEvaluating
from cambrian.archive.models import AgentStatus, Evaluation
from cambrian.archive.store import Archive
from cambrian.evaluators.registry import get_benchmark

BATCH = 8  # candidates' writes per transaction


def nothing() -> None:
    return None


async def handoff_us(n: int) -> dict[str, float]:
    """Microseconds of this thread's CPU per hand-off, each awaited n times."""
    loop = asyncio.get_running_loop()

    def resolved_future() -> asyncio.Future[None]:
        future = loop.create_future()
        loop.call_soon(future.set_result, None)
        return future

    with concurrent.futures.ProcessPoolExecutor(1) as processes:
        await loop.run_in_executor(processes, nothing)  # the worker started, untimed
        kinds: dict[str, Callable[[], object]] = {
            "to_thread(nothing)": lambda: asyncio.to_thread(nothing),
            "process pool round trip": lambda: loop.run_in_executor(processes, nothing),
            "task created and awaited": lambda: asyncio.ensure_future(asyncio.sleep(0)),
            "future resolved by call_soon": resolved_future,
        }
        result = {}
        for label, make in kinds.items():
            start = time.thread_time()
            for _ in range(n):
                await make()  # type: ignore[misc]  # each makes an awaitable
            result[label] = (time.thread_time() - start) / n * 1e6
    return result


class Candidates:
    """n children of one seed in a fresh archive, each with its own genome (one line more than the seed)."""

    def __init__(self, path: Path, n: int) -> None:
        seed = get_benchmark("circle_packing").seed()
        self.entry = seed.entry
        self.texts = [seed.files[seed.entry] + f"\n# candidate {i}\n" for i in range(n)]
        self.evaluations = [Evaluation(agent_id=0, task_id="n26", score=1.0, passed=True)]
        with Archive.at(path) as archive:
            self.run_id = int(archive.create_run(name="floor", benchmark="circle_packing", seed=0, config_json="{}").id)
            root = archive.add_agent(self.run_id, files=dict(seed.files), entry=seed.entry, operator="seed")
            self.root_id = root.key

    def batches(self) -> list[range]:
        """The loop's pipeline at best: batch s holds the stores of candidates s, the starts of s-1, the results
        of s-2 (each a range of BATCH candidates)."""
        n = len(self.texts)
        return [range(first, min(first + BATCH, n)) for first in range(0, n, BATCH)]


def archive_ms(path: Path, c: Candidates) -> float:
    """Thread CPU ms per candidate of its three lifecycle writes through Archive.write_batch."""
    ids: dict[int, int] = {}
    batches = c.batches()
    with Archive.at(path) as archive:
        start = time.thread_time()
        for step in range(len(batches) + 2):
            calls, kinds = [], []
            for i in batches[step] if step < len(batches) else ():
                calls.append(
                    AddAgent(
                        c.run_id,
                        files={c.entry: c.texts[i]},
                        entry=c.entry,
                        parent_id=c.root_id,
                        operator="diff",
                        iteration=i + 1,
                        proposal_id=f"proposal-{i + 1}",
                    )
                )
                kinds.append(i)
            for i in batches[step - 1] if 0 <= step - 1 < len(batches) else ():
                calls.append(MarkEvaluating(ids[i]))
                kinds.append(-1)
            for i in batches[step - 2] if 0 <= step - 2 < len(batches) else ():
                calls.append(
                    FinishEvaluation(
                        ids[i],
                        status=AgentStatus.evaluated,
                        score=1.0,
                        feedback="ok",
                        eval_seconds=0.1,
                        evaluations=c.evaluations,
                        descriptor={"a": 1.0, "b": 2.0},
                    )
                )
                kinds.append(-1)
            for i, outcome in zip(kinds, archive.write_batch(calls), strict=True):
                assert not isinstance(outcome, Exception), outcome
                if i >= 0:
                    ids[i] = outcome.key
        return (time.thread_time() - start) * 1e3 / len(c.texts)


_AGENT_COLUMNS = (
    "run_id, genome_hash, parent_id, second_parent_id, iteration, operator, model, status, score, holdout_score, "
    "stage_reached, n_tasks, invalid_reason, feedback, eval_attempts, eval_seconds, prompt_tokens, "
    "completion_tokens, cost_usd, created_at, updated_at, repair_note"
)
_EVALUATION_COLUMNS = (
    "agent_id, task_id, split, stage, score, passed, executed, duration_s, exit_code, timed_out, oom_killed, "
    "output_truncated, feedback, stdout_tail, stderr_tail, created_at"
)


def raw_ms(path: Path, c: Candidates) -> float:
    """The same writes' statements (the same checks: guarded status updates returning the row, the genome
    skipped when stored, the ledger link) on sqlite3 straight, in the same transactions."""
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA foreign_keys=ON")
    connection.execute("PRAGMA synchronous=NORMAL")
    cursor = connection.cursor()
    ids: dict[int, int] = {}

    def now() -> str:
        return datetime.now(UTC).replace(tzinfo=None).isoformat(sep=" ")

    def store(i: int) -> None:
        text = c.texts[i]
        digest = hashlib.sha256(f"{c.entry}\0{text}".encode()).hexdigest()
        cursor.execute(
            "INSERT INTO genome (hash, entry, n_files, n_bytes, created_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (digest, c.entry, 1, len(text.encode()), now()),
        )
        if cursor.rowcount == 1:
            cursor.execute("INSERT INTO genomefile (genome_hash, path, text) VALUES (?, ?, ?)", (digest, c.entry, text))
        at = now()
        values = (
            c.run_id,
            digest,
            c.root_id,
            None,
            i + 1,
            "diff",
            None,
            "proposed",
            None,
            None,
            0,
            0,
            None,
            None,
            0,
            None,
            0,
            0,
            0.0,
            at,
            at,
            None,
        )
        cursor.execute(f"INSERT INTO agent ({_AGENT_COLUMNS}) VALUES ({', '.join('?' * 22)}) RETURNING id", values)
        ids[i] = cursor.fetchone()[0]
        cursor.execute(
            "UPDATE llmcall SET agent_id = ? WHERE run_id = ? AND iteration = ? AND agent_id IS NULL",
            (ids[i], c.run_id, i + 1),
        )

    def start(i: int) -> None:
        cursor.execute(
            "UPDATE agent SET status = 'evaluating', eval_attempts = eval_attempts + 1, updated_at = ? "
            "WHERE id = ? AND status IN ('proposed', 'failed', 'evaluating') RETURNING *",
            (now(), ids[i]),
        )
        assert cursor.fetchall()

    def finish(i: int) -> None:
        cursor.execute(
            "UPDATE agent SET status = 'evaluated', score = ?, stage_reached = 0, invalid_reason = NULL, "
            "n_tasks = 1, feedback = ?, eval_seconds = ?, updated_at = ? WHERE id = ? AND status = 'evaluating' "
            "RETURNING *",
            (1.0, "ok", 0.1, now(), ids[i]),
        )
        assert cursor.fetchall()
        cursor.execute(
            f"INSERT INTO evaluation ({_EVALUATION_COLUMNS}) VALUES ({', '.join('?' * 16)})",
            (ids[i], "n26", "search", 0, 1.0, 1, 1, 0.0, None, 0, 0, 0, "", "", "", now()),
        )
        cursor.executemany(
            "INSERT INTO agentdescriptor (agent_id, name, value) VALUES (?, ?, ?)",
            [(ids[i], "a", 1.0), (ids[i], "b", 2.0)],
        )

    batches = c.batches()
    begin = time.thread_time()
    for step in range(len(batches) + 2):
        connection.execute("BEGIN IMMEDIATE")
        for i in batches[step] if step < len(batches) else ():
            store(i)
        for i in batches[step - 1] if 0 <= step - 1 < len(batches) else ():
            start(i)
        for i in batches[step - 2] if 0 <= step - 2 < len(batches) else ():
            finish(i)
        connection.execute("COMMIT")
    elapsed = time.thread_time() - begin
    connection.close()
    return elapsed * 1e3 / len(c.texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    handoffs = [asyncio.run(handoff_us(args.candidates)) for _ in range(args.repeats)]
    print("asyncio hand-offs, us of the event loop thread's CPU each (median):")
    for label in handoffs[0]:
        print(f"  {label:<30} {statistics.median(h[label] for h in handoffs):8.1f}")

    archive, raw = [], []
    for _ in range(args.repeats):
        for measure, into in ((archive_ms, archive), (raw_ms, raw)):
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "archive.db"
                into.append(measure(path, Candidates(path, args.candidates)))
    print(f"\na candidate's three lifecycle writes, {BATCH} candidates a transaction, ms of thread CPU each:")
    for label, values in (("Archive.write_batch", archive), ("the same SQL on sqlite3", raw)):
        each = " / ".join(f"{value:.3f}" for value in values)
        print(f"  {label:<30} {statistics.median(values):8.3f}   ({each})")


if __name__ == "__main__":
    main()
