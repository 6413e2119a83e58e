"""A synthetic run archive for the UI benchmark: N agents of one circle-packing-like run, written in seconds.

The run looks like a long real search: a lineage grown by preferential attachment (popular parents
get more children) plus a few "hot" clades that extend one chain at a time (so the tree has deep
branches, depth capped at `max_depth`), evaluated and invalid agents (with the kinds of reasons a
real run stores), a few hundred distinct multi-line Python genomes, search-task evaluations per
evaluated agent (a crashed or timed-out candidate has one unexecuted row), FM calls for every
proposal (mutate, some repairs and diagnoses, two models, some calls unattributed) with the request
messages and the reply of a fraction of them, MAP-Elites descriptors, and holdout scores for the best.
Timestamps follow a schedule of `eval_slots` sandboxes and `fm_slots` concurrent FM calls.

The schema comes from `Archive.at(path)`; the rows go in through SQLAlchemy Core bulk inserts on
`archive.engine` in a few transactions (100k agents: about half a minute on 2 cores).

Usage: .venv/bin/python bench/synthetic_archive.py --agents 10000 [--to DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Connection, Table, insert, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._synthetic_rows import SyntheticSpec, genome_texts, grow_lineage, messages, reply
from cambrian.archive.genomes import genome_hash
from cambrian.archive.models import (
    Agent,
    AgentDescriptor,
    AgentStatus,
    Evaluation,
    Genome,
    GenomeFile,
    LLMCall,
    LLMRequest,
    LLMResponse,
    RunStatus,
)
from cambrian.archive.store import Archive

#: Bump when the generated archive changes: the cache folder name carries it, so stale files are not reused.
GENERATOR_VERSION = 1
_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
_CHUNK_ROWS = 20_000  # rows per executemany: bounded memory in the driver

_OPERATORS = ("lines", "diff", "rewrite", "crossover")
_OPERATOR_WEIGHTS = (0.45, 0.3, 0.15, 0.1)
_MODELS = ("qwen2.5-coder-1.5b", "gpt-4o-mini")
_MODEL_WEIGHTS = (0.7, 0.3)
#: USD per prompt token and per completion token (gpt-4o-mini's list price; the local model is free).
_PRICES = {"qwen2.5-coder-1.5b": (0.0, 0.0), "gpt-4o-mini": (0.15e-6, 0.6e-6)}
_TASKS = ("n26", "n28", "n32")
_EDIT_FAILURES = (
    "the SEARCH text of block 1 is not in packing.py (closest: line {line}, 87% similar)",
    "static check of packing.py: undefined name 'radii' at line {line}: 'radii.append(radius)'",
    "the reply has no SEARCH/REPLACE block (still failing after 1 repair round(s))",
    "the new lines write an EVOLVE-BLOCK marker; markers may not be added or moved",
    "SyntaxError in packing.py at line {line}: invalid syntax",
)
_RUN_FAILURES = (
    "timed out after 30 s on task n26",
    "crashed on task n28: ZeroDivisionError: float division by zero (line {line})",
    "invalid packing on task n32: circles 3 and 17 overlap by 0.0041",
    "near-duplicate of agent {other} (cosine similarity 0.998)",
)
_TRACEBACK = "Traceback (most recent call last):\n  ...\nZeroDivisionError: float division by zero"
_DESCRIPTOR_NAMES = ("radius_spread", "border_fraction", "code_size", "pass_fraction")


@dataclass(frozen=True)
class SyntheticArchive:
    """What `write_synthetic_archive` stored, and how long it took (seconds)."""

    path: Path
    run_name: str
    n_agents: int
    n_evaluated: int
    n_evaluations: int
    n_llm_calls: int
    n_requests: int
    max_depth: int
    best_agent_id: int
    seconds: float


def run_name_for(n_agents: int) -> str:
    """The synthetic run's name for `n_agents`."""
    return f"synthetic-{n_agents}"


def cached_runs_dir(cache_root: Path, n_agents: int) -> Path:
    """The runs folder that holds the cached synthetic run of `n_agents` (runs_dir/<run name>/archive.db)."""
    return cache_root / f"n{n_agents}-v{GENERATOR_VERSION}"


def ensure_synthetic_archive(cache_root: Path, n_agents: int, *, seed: int = 0) -> tuple[Path, str, float | None]:
    """(runs folder, run name, seconds spent generating or None when cached) for a synthetic run of `n_agents`.

    Generated once into `cache_root` and reused: the file is written under a temporary name and
    renamed into place, so an interrupted generation never leaves a half-written cache.
    """
    runs_dir = cached_runs_dir(cache_root, n_agents)
    name = run_name_for(n_agents)
    final = runs_dir / name / "archive.db"
    if final.exists():
        return runs_dir, name, None
    building = runs_dir / f".{name}.building"
    shutil.rmtree(building, ignore_errors=True)
    result = write_synthetic_archive(building / "archive.db", SyntheticSpec(n_agents=n_agents, seed=seed), name=name)
    shutil.rmtree(runs_dir / name, ignore_errors=True)
    building.rename(runs_dir / name)
    return runs_dir, name, result.seconds


def _chunks(rows: Sequence[dict[str, Any]]) -> Iterator[Sequence[dict[str, Any]]]:
    for start in range(0, len(rows), _CHUNK_ROWS):
        yield rows[start : start + _CHUNK_ROWS]


def _bulk(connection: Connection, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    for chunk in _chunks(rows):
        connection.execute(insert(table), list(chunk))


def _config_json(name: str, spec: SyntheticSpec) -> str:
    """A run config shaped like the stored RunConfig JSON (map_elites over two models)."""
    config = {
        "name": name,
        "benchmark": "circle_packing",
        "seed": spec.seed,
        "runs_dir": "runs",
        "budget": {"iterations": spec.n_agents - 1, "usd": None, "wall_seconds": None},
        "fm": {
            "model": _MODELS[0],
            "models": [_MODELS[1]],
            "concurrency": spec.fm_slots,
            "temperature": 0.8,
            "max_tokens": 1024,
            "repair_rounds": 1,
            "constrained": "auto",
        },
        "search": {
            "strategy": "map_elites",
            "params": {"bins": 10, "dims": ["radius_spread", "border_fraction"]},
            "operators": dict(zip(_OPERATORS, _OPERATOR_WEIGHTS)),
            "bandit": {"algorithm": "ucb", "cost_aware": True, "exploration": math.sqrt(2)},
        },
        "evaluation": {"sandbox": "docker", "concurrency": spec.eval_slots, "max_attempts": 3},
        "benchmark_options": {},
    }
    return json.dumps(config, indent=2)


def write_synthetic_archive(path: Path, spec: SyntheticSpec, *, name: str | None = None) -> SyntheticArchive:
    """Create the archive file at `path` (it must not exist) holding one synthetic run of `spec.n_agents` agents."""
    if spec.n_agents < 1:
        raise ValueError(f"n_agents must be >= 1, got {spec.n_agents}")
    if path.exists():
        raise FileExistsError(f"{path} exists; the generator writes a new archive only")
    started = time.perf_counter()
    rng = np.random.default_rng(spec.seed)
    name = name or run_name_for(spec.n_agents)
    lineage = grow_lineage(spec, rng)
    n = spec.n_agents

    texts = genome_texts(rng, spec.n_genomes)
    hashes = [genome_hash({"packing.py": t}) for t in texts]
    genome_rows = [
        {"hash": h, "entry": "packing.py", "n_files": 1, "n_bytes": len(t.encode()), "created_at": _EPOCH}
        for h, t in zip(hashes, texts)
    ]
    file_rows = [{"genome_hash": h, "path": "packing.py", "text": t} for h, t in zip(hashes, texts)]
    # A child keeps its parent's genome family most of the time, so clades share code.
    genome_of = np.zeros(n, dtype=np.int64)
    fresh = rng.integers(0, spec.n_genomes, n)
    inherit = rng.random(n) < 0.7
    for i in range(1, n):
        genome_of[i] = genome_of[lineage.parent[i]] if inherit[i] else fresh[i]

    operator_of = rng.choice(len(_OPERATORS), n, p=_OPERATOR_WEIGHTS)
    model_of = rng.choice(len(_MODELS), n, p=_MODEL_WEIGHTS)
    latency = rng.lognormal(math.log(5.0), 0.5, n)  # mutate call, seconds
    repaired = rng.random(n) < 0.15
    repair_latency = rng.lognormal(math.log(3.0), 0.4, n)
    diagnosed = rng.random(n) < 0.05
    prompt_tokens = rng.integers(900, 3000, n)
    completion_tokens = rng.integers(80, 700, n)
    task_seconds = rng.lognormal(math.log(3.0), 0.6, (n, len(_TASKS)))
    queue_wait = rng.exponential(1.0, n)
    with_prompt = rng.random(n) < spec.prompt_share
    with_prompt[max(1, n - spec.recent_with_prompts) :] = True
    unattributed = rng.random(n) < 0.01

    # The FM slots set the pace: proposal i is created when its FM call(s) end; the sandbox slots
    # take the proposals in order as they free up.
    fm_free = np.zeros(spec.fm_slots)
    eval_free = np.zeros(spec.eval_slots)
    created = np.zeros(n)
    agent_rows: list[dict[str, Any]] = []
    evaluation_rows: list[dict[str, Any]] = []
    call_rows: list[dict[str, Any]] = []
    request_rows: list[dict[str, Any]] = []
    response_rows: list[dict[str, Any]] = []
    descriptor_rows: list[dict[str, Any]] = []
    spreads = rng.uniform(0.0, 1.0, n)
    borders = rng.uniform(0.0, 1.0, n)
    stamp = _EPOCH

    def at(seconds: float) -> datetime:
        return stamp + timedelta(seconds=float(seconds))

    for i in range(n):
        status = int(lineage.status[i])
        model = _MODELS[int(model_of[i])]
        agent_prompt = agent_completion = 0
        agent_cost = 0.0
        if i == 0:
            created[i] = 0.0
        else:
            slot = int(np.argmin(fm_free))
            start = fm_free[slot]
            purposes = [("mutate", float(latency[i]))]
            if repaired[i]:
                purposes.append(("repair", float(repair_latency[i])))
            if diagnosed[i]:
                purposes.insert(0, ("diagnose", float(repair_latency[i])))
            for k, (purpose, seconds) in enumerate(purposes):
                start += seconds
                tokens_in, tokens_out = int(prompt_tokens[i]) + 200 * k, int(completion_tokens[i])
                price_in, price_out = _PRICES[model]
                cost = tokens_in * price_in + tokens_out * price_out
                request_hash = hashlib.sha256(f"{spec.seed}:{i}:{purpose}".encode()).hexdigest()
                call_rows.append(
                    {
                        "run_id": 1,
                        "agent_id": None if unattributed[i] else i + 1,
                        "iteration": i,
                        "purpose": purpose,
                        "model": model,
                        "prompt_tokens": tokens_in,
                        "completion_tokens": tokens_out,
                        "cost_usd": cost,
                        "latency_s": seconds,
                        "request_hash": request_hash,
                        "seed": i,
                        "cache_hit": False,
                        "error": None,
                        "created_at": at(start),
                    }
                )
                if with_prompt[i]:
                    code = texts[int(genome_of[lineage.parent[i]])]
                    request_rows.append(
                        {
                            "request_hash": request_hash,
                            "model": model,
                            "messages": messages(i, code, model, purpose),
                            "params": json.dumps({"seed": i, "temperature": 0.8, "max_tokens": 1024}),
                            "created_at": at(start - seconds),
                        }
                    )
                    response_rows.append(
                        {
                            "request_hash": request_hash,
                            "model": model,
                            "text": reply(i),
                            "prompt_tokens": tokens_in,
                            "completion_tokens": tokens_out,
                            "cost_usd": cost,
                            "created_at": at(start),
                        }
                    )
                if not unattributed[i]:
                    agent_prompt, agent_completion, agent_cost = (
                        agent_prompt + tokens_in,
                        agent_completion + tokens_out,
                        agent_cost + cost,
                    )
            fm_free[slot] = start
            created[i] = start + 0.02
        has_genome = status != 1
        score = None if status != 0 else float(lineage.score[i])
        eval_seconds = None
        finished = created[i]
        n_tasks = 0
        feedback = None
        if has_genome:
            slot = int(np.argmin(eval_free))
            begin = max(eval_free[slot], created[i] + queue_wait[i])
            runs = len(_TASKS) if status in (0, 3) else 1
            end = begin
            for k in range(runs):
                end += float(task_seconds[i, k])
                task_score = 0.0 if score is None else score * (1.0 + 0.01 * (k - 1))
                feedback = (
                    f"valid packing of {_TASKS[k][1:]} circles; sum of radii {task_score:.6f} "
                    f"({2.635 - task_score:.3f} below the best known 2.635)"
                    if status == 0
                    else "the program did not finish"
                )
                evaluation_rows.append(
                    {
                        "agent_id": i + 1,
                        "task_id": _TASKS[k],
                        "split": "search",
                        "stage": 0,
                        "score": task_score,
                        "passed": status == 0,
                        "executed": status == 0,
                        "duration_s": float(task_seconds[i, k]),
                        "exit_code": 0 if status == 0 else 1,
                        "timed_out": status == 2 and i % 4 == 0,
                        "oom_killed": False,
                        "output_truncated": False,
                        "feedback": feedback,
                        "stdout_tail": "",
                        "stderr_tail": "" if status == 0 else _TRACEBACK,
                        "created_at": at(end),
                    }
                )
            n_tasks = runs
            eval_free[slot] = end
            eval_seconds = end - begin
            finished = end
        if status == 0:
            descriptor_rows.extend(
                {"agent_id": i + 1, "name": d, "value": v}
                for d, v in zip(
                    _DESCRIPTOR_NAMES,
                    (float(spreads[i]), float(borders[i]), 3.0 + float(genome_of[i] % 17) / 10, 1.0),
                )
            )
        line = 10 + i % 80
        reason = None
        if status == 1:
            reason = _EDIT_FAILURES[i % len(_EDIT_FAILURES)].format(line=line)
        elif status == 2:
            reason = _RUN_FAILURES[i % len(_RUN_FAILURES)].format(line=line, other=max(1, i // 2))
        elif status == 3:
            reason = "the sandbox died: container exited with 137 before the result (attempt 3 of 3)"
        agent_rows.append(
            {
                "id": i + 1,
                "run_id": 1,
                "genome_hash": hashes[int(genome_of[i])] if has_genome else None,
                "parent_id": None if i == 0 else int(lineage.parent[i]) + 1,
                "second_parent_id": None,
                "iteration": i,
                "operator": "seed" if i == 0 else _OPERATORS[int(operator_of[i])],
                "model": None if i == 0 else model,
                "status": (AgentStatus.evaluated, AgentStatus.invalid, AgentStatus.invalid, AgentStatus.failed)[status],
                "score": score,
                "holdout_score": None,
                "stage_reached": 1 if status == 0 else 0,
                "n_tasks": n_tasks,
                "invalid_reason": reason,
                "feedback": feedback,
                "eval_attempts": 0 if status == 1 else 1,
                "eval_seconds": eval_seconds,
                "prompt_tokens": agent_prompt,
                "completion_tokens": agent_completion,
                "cost_usd": agent_cost,
                "created_at": at(created[i]),
                "updated_at": at(finished),
                "repair_note": None,
            }
        )

    # The best ten get holdout scores and rows, as `cambrian eval --split holdout` leaves them.
    scores = np.where(np.isnan(lineage.score), -np.inf, lineage.score)
    best = [int(i) for i in np.argsort(-scores, kind="stable")[: min(10, n)] if np.isfinite(scores[i])]
    end_of_run = float(created.max()) + 60.0
    for rank, i in enumerate(best):
        holdout = float(lineage.score[i]) * 0.97
        agent_rows[i]["holdout_score"] = holdout
        for k, task in enumerate(("n27", "n31")):
            evaluation_rows.append(
                {
                    "agent_id": i + 1,
                    "task_id": task,
                    "split": "holdout",
                    "stage": 0,
                    "score": holdout,
                    "passed": True,
                    "executed": True,
                    "duration_s": 2.0,
                    "exit_code": 0,
                    "timed_out": False,
                    "oom_killed": False,
                    "output_truncated": False,
                    "feedback": f"holdout {task}: sum of radii {holdout:.6f}",
                    "stdout_tail": "",
                    "stderr_tail": "",
                    "created_at": at(end_of_run + 10 * rank + k),
                }
            )

    path.parent.mkdir(parents=True, exist_ok=True)
    with Archive.at(path) as archive:
        run = archive.create_run(
            name=name, benchmark="circle_packing", seed=spec.seed, config_json=_config_json(name, spec)
        )
        assert run.key == 1, "the synthetic rows refer to run 1: the archive must be new"
        with archive.engine.begin() as connection:
            _bulk(connection, Genome.__table__, genome_rows)  # type: ignore[attr-defined]  # SQLModel sets __table__
            _bulk(connection, GenomeFile.__table__, file_rows)  # type: ignore[attr-defined]  # as above
            _bulk(connection, Agent.__table__, agent_rows)  # type: ignore[attr-defined]  # as above
        with archive.engine.begin() as connection:
            _bulk(connection, Evaluation.__table__, evaluation_rows)  # type: ignore[attr-defined]  # as above
            _bulk(connection, AgentDescriptor.__table__, descriptor_rows)  # type: ignore[attr-defined]  # as above
        with archive.engine.begin() as connection:
            _bulk(connection, LLMCall.__table__, call_rows)  # type: ignore[attr-defined]  # as above
            _bulk(connection, LLMRequest.__table__, request_rows)  # type: ignore[attr-defined]  # as above
            _bulk(connection, LLMResponse.__table__, response_rows)  # type: ignore[attr-defined]  # as above
        archive.set_run_status(run.key, RunStatus.finished)
        with archive.engine.connect() as connection:
            # One self-contained file in the cache: fold the WAL into the database.
            connection.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
    return SyntheticArchive(
        path=path,
        run_name=name,
        n_agents=n,
        n_evaluated=int((lineage.status == 0).sum()),
        n_evaluations=len(evaluation_rows),
        n_llm_calls=len(call_rows),
        n_requests=len(request_rows),
        max_depth=int(lineage.depth.max()),
        best_agent_id=best[0] + 1 if best else 1,
        seconds=time.perf_counter() - started,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=10_000, help="agents in the run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--to", type=Path, default=Path("bench/results/synthetic"), help="runs folder to write into")
    args = parser.parse_args(argv)
    name = run_name_for(args.agents)
    result = write_synthetic_archive(
        args.to / name / "archive.db", SyntheticSpec(n_agents=args.agents, seed=args.seed), name=name
    )
    print(
        f"{result.path}: {result.n_agents} agents ({result.n_evaluated} evaluated, depth {result.max_depth}), "
        f"{result.n_evaluations} evaluations, {result.n_llm_calls} FM calls ({result.n_requests} with prompts), "
        f"best agent {result.best_agent_id}; written in {result.seconds:.1f} s"
    )


if __name__ == "__main__":
    main()
