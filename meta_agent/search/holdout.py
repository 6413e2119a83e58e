"""What `cambrian eval` and `Run.evaluate` do: run one agent (in a run's archive, or exported to a folder) on a
split, and store the result apart.

A holdout score is a fact about an agent that selection must never see: for
`RUN:AGENT` it goes to `Agent.holdout_score` (plus per-task rows with split
"holdout") through `Archive.set_holdout_score`, which no selection strategy,
archive view or prompt reads; for an exported folder it goes to
`DIR/holdout.json`. A `search` evaluation is printed only: it never replaces
the selection score the search computed.

The evaluation uses the same wiring as the search loop (`evaluation.evaluate_in_sandbox`):
a sandbox session of its own and, when the agents call the FM, their own
gateway socket with the run's per-agent budget. An exported folder is read as
one someone may have sent (`_export_folder`: every file checked before a byte
is read), and decides only its benchmark, options and seed (`folder_config`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cambrian.archive.export import MANIFEST_NAME
from cambrian.archive.store import genome_hash
from cambrian.evaluators.base import SPLITS, Benchmark, Genome, agents_call_fm
from cambrian.evaluators.runner import AgentResult, Limits
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.errors import CambrianError, EvalTargetError
from cambrian.meta_agent.llm import ArchiveLedger, Ledger, LLMClient, MemoryLedger, close_http_sessions
from cambrian.meta_agent.llm.gateway import FMGateway
from cambrian.meta_agent.search._export_folder import read_genome, read_manifest
from cambrian.meta_agent.search.evaluation import (
    EvaluationContext,
    agent_fm_budget,
    evaluate_in_sandbox,
    evaluation_row,
)
from cambrian.meta_agent.search.session import (
    Reporter,
    build_benchmark,
    fm_endpoint,
    make_llm_client,
    sandbox_with_socket_dir,
)
from cambrian.meta_agent.search.stores import open_run, shown_store
from cambrian.sandbox.base import socket_folder_mode

__all__ = ["HOLDOUT_FILE", "HOLDOUT_FORMAT", "EvalOutcome", "EvalTargetError", "evaluate_target", "folder_config"]

HOLDOUT_FILE = "holdout.json"
#: Bumped when holdout.json's fields change meaning.
HOLDOUT_FORMAT = 1
_RUN_AGENT_RE = re.compile(r"^(?P<run>[A-Za-z0-9][A-Za-z0-9._-]{0,99}):(?P<agent>\d+)$")


@dataclass(frozen=True)
class EvalOutcome:
    """What one `cambrian eval` did.

    score: the benchmark's aggregate on `split` (holdout: over every holdout task).
    search_score: the agent's stored selection score, shown side by side (None when unknown).
    holdout_score: the holdout score now on record (this one on the holdout split; else the stored one).
    stored_at: where the result was stored ("archive <path>" or the holdout.json path); None: printed only.
    """

    target: str
    benchmark: str
    split: str
    score: float
    search_score: float | None
    holdout_score: float | None
    result: AgentResult
    stored_at: str | None
    fm_calls: int  # FM calls the agent made through the gateway during this evaluation


@dataclass(frozen=True)
class _Subject:
    """The agent to evaluate, wherever it lives."""

    label: str
    agent_id: int  # names its FM socket and ledger rows
    iteration: int
    genome: Genome
    config: RunConfig
    search_score: float | None
    holdout_score: float | None


def evaluate_target(
    target: str,
    *,
    split: str,
    runs_dir: Path,
    reporter: Reporter,
    sandbox: str | None = None,
    model: str | None = None,
    agent_fm: bool | None = None,
    allow_modified: bool = False,
    user_config: RunConfig | None = None,
    store: str | None = None,
) -> EvalOutcome:
    """Evaluate TARGET (`RUN:AGENT` or a folder made by `cambrian export`) on `split` and store it apart.

    sandbox: auto | docker | local (default: the run's choice; for a folder, yours). model: the FM the agents
    call (default: the run's; for a folder, yours). agent_fm: serve the FM to the agent (default: the run's
    `evaluation.agent_fm`, or the folder's). A folder decides only its benchmark, options, seed and whether its
    agent calls an FM: the FM, endpoint, key, sandbox and limits come from `user_config` (default: the
    defaults) and the flags. allow_modified: evaluate a folder whose files differ from its manifest's hash.
    store: the database URL holding RUN (default: RUNS_DIR/<run>/archive.db, or the store its config.json
    names); a folder never reads it.
    Raises EvalTargetError (bad target, a benchmark without `split` tasks) and the usual user errors.
    """
    if split not in SPLITS:
        raise EvalTargetError(f"unknown split {split!r}", fix=f"use --split {' or --split '.join(SPLITS)}")
    folder = Path(target)
    if folder.is_dir():
        return _evaluate_folder(
            folder,
            split=split,
            reporter=reporter,
            overrides=_overrides(sandbox, model, agent_fm),
            allow_modified=allow_modified,
            user_config=user_config,
        )
    match = _RUN_AGENT_RE.match(target)
    if match is None:
        raise EvalTargetError(
            f"{target!r} is neither RUN:AGENT nor an existing folder",
            fix="give RUN:AGENT (e.g. my-run:7, see `cambrian tree RUN`) or a folder made by `cambrian export`",
        )
    return _evaluate_run_agent(
        runs_dir,
        match["run"],
        int(match["agent"]),
        split=split,
        reporter=reporter,
        overrides=_overrides(sandbox, model, agent_fm),
        store=store,
    )


def _overrides(sandbox: str | None, model: str | None, agent_fm: bool | None) -> dict[str, Any]:
    # --model names the FM the agent calls: it replaces the run's agent model as well as its fm.model.
    values = {
        "evaluation.sandbox": sandbox,
        "fm.model": model,
        "evaluation.agent_model": model,
        "evaluation.agent_fm": agent_fm,
    }
    return {key: value for key, value in values.items() if value is not None}


def _with_overrides(config: dict[str, Any], overrides: dict[str, Any], *, source: str) -> RunConfig:
    for dotted, value in overrides.items():
        section, key = dotted.split(".")
        config.setdefault(section, {})[key] = value
    try:
        return RunConfig.from_json(json.dumps(config))
    except CambrianError as exc:
        raise EvalTargetError(f"{source}: {exc}", fix=exc.fix) from None


# ----- RUN:AGENT --------------------------------------------------------------------------------


def _evaluate_run_agent(
    runs_dir: Path,
    run_name: str,
    agent_id: int,
    *,
    split: str,
    reporter: Reporter,
    overrides: dict[str, Any],
    store: str | None = None,
) -> EvalOutcome:
    archive, run = open_run(runs_dir, run_name, store=store)
    in_store = f" --store {shown_store(store)}" if store is not None else ""
    with archive:
        agent = archive.get_agent(agent_id)
        if agent.run_id != run.id:
            raise EvalTargetError(
                f"agent {agent_id} is not in run {run_name}",
                fix=f"see the run's agents with `cambrian tree {run_name}{in_store}`",
            )
        if agent.genome_hash is None:
            raise EvalTargetError(
                f"agent {agent_id} has no code (status {agent.status.value}: {agent.invalid_reason})",
                fix=f"evaluate an agent with code, e.g. the best: `cambrian status {run_name}{in_store}` names it",
            )
        files, entry = archive.get_genome(agent.genome_hash)
        config = _with_overrides(json.loads(run.config_json), overrides, source=f"the config of run {run_name}")
        config = config.model_copy(update={"runs_dir": Path(runs_dir), "name": run_name})
        subject = _Subject(
            label=f"{run_name}:{agent_id}",
            agent_id=agent_id,
            iteration=agent.iteration,
            genome=Genome(files=files, entry=entry),
            config=config,
            search_score=agent.score,
            holdout_score=agent.holdout_score,
        )
        ledger = ArchiveLedger(archive, run.key)
        calls_before = len(archive.llm_calls(run.key))
        result, benchmark = _evaluate(subject, split=split, reporter=reporter, ledger=ledger)
        fm_calls = len(archive.llm_calls(run.key)) - calls_before
        stored_at: str | None = None
        holdout_score = agent.holdout_score
        if split == "holdout":
            rows = [evaluation_row(task) for task in result.task_results]
            archive.set_holdout_score(agent_id, float(result.score), evaluations=rows)
            holdout_score = float(result.score)
            stored_at = f"archive {shown_store(archive.url)}"  # never its password
    return EvalOutcome(
        target=subject.label,
        benchmark=benchmark.name,
        split=split,
        score=float(result.score),
        search_score=agent.score,
        holdout_score=holdout_score,
        result=result,
        stored_at=stored_at,
        fm_calls=fm_calls,
    )


# ----- an exported folder -----------------------------------------------------------------------


#: What an exported folder may decide about its own evaluation. Everything else (the FM, its endpoint and key,
#: the sandbox, limits and budgets) comes from the user's own settings: a folder someone sent you must not
#: send your key to its endpoint or move its agent out of the container.
FROM_EXPORT = ("benchmark", "benchmark_options", "seed")


def _evaluate_folder(
    folder: Path,
    *,
    split: str,
    reporter: Reporter,
    overrides: dict[str, Any],
    allow_modified: bool = False,
    user_config: RunConfig | None = None,
) -> EvalOutcome:
    manifest = read_manifest(folder)
    genome = read_genome(folder, manifest)
    if genome_hash(genome.files) != manifest.get("genome_hash"):
        if not allow_modified:
            raise EvalTargetError(
                f"the files in {folder} are not the exported agent's (their hash differs from the manifest's "
                "genome_hash): someone changed them after the export",
                fix="evaluate them as they are with --allow-modified, or export the agent again",
            )
        reporter.warn(
            f"the files in {folder} differ from the exported agent (manifest genome_hash): "
            "evaluating them as they are now (--allow-modified)"
        )
    config = folder_config(manifest["config"], user_config, overrides, source=f"{folder / MANIFEST_NAME}")
    agent_id = int(manifest.get("agent_id") or 0)
    subject = _Subject(
        label=str(folder),
        agent_id=agent_id,
        iteration=0,
        genome=genome,
        config=config,
        search_score=manifest.get("score"),
        holdout_score=manifest.get("holdout_score"),
    )
    ledger = MemoryLedger()
    result, benchmark = _evaluate(subject, split=split, reporter=reporter, ledger=ledger, own_limits=True)
    stored_at: str | None = None
    holdout_score = subject.holdout_score
    if split == "holdout":
        path = folder / HOLDOUT_FILE
        record = _holdout_record(subject, benchmark, result, fm_calls=len(ledger.entries))
        path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        stored_at, holdout_score = str(path), float(result.score)
    return EvalOutcome(
        target=subject.label,
        benchmark=benchmark.name,
        split=split,
        score=float(result.score),
        search_score=subject.search_score,
        holdout_score=holdout_score,
        result=result,
        stored_at=stored_at,
        fm_calls=len(ledger.entries),
    )


def folder_config(exported: Any, user_config: RunConfig | None, overrides: dict[str, Any], *, source: str) -> RunConfig:
    """The settings an exported folder is evaluated with: the FROM_EXPORT keys of its frozen config and
    whether its agent calls an FM; the rest from `user_config` (default: the defaults), then `overrides`."""
    if not isinstance(exported, dict):
        raise EvalTargetError(f"{source}: 'config' is not an object", fix="export the agent again")
    own = json.loads((user_config or RunConfig()).to_json())
    for key in FROM_EXPORT:
        if key in exported:
            own[key] = exported[key]
    # Whether the agent calls an FM is the agent's nature (yours serves it, within your budget), unless you say.
    exported_agent_fm = (exported.get("evaluation") or {}).get("agent_fm")
    if isinstance(exported_agent_fm, bool):
        own.setdefault("evaluation", {})["agent_fm"] = exported_agent_fm
    return _with_overrides(own, overrides, source=f"{source} with your settings")


def _holdout_record(subject: _Subject, benchmark: Benchmark, result: AgentResult, *, fm_calls: int) -> dict[str, Any]:
    """holdout.json: the score apart from the search score, with every task's public result."""
    return {
        "format": HOLDOUT_FORMAT,
        "split": "holdout",
        "score": result.score,
        "search_score": subject.search_score,
        "valid": result.valid,
        "invalid_reason": result.invalid_reason,
        "n_tasks": len(result.task_results),
        "n_passed": sum(task.passed for task in result.task_results),
        "benchmark": benchmark.name,
        "benchmark_options": subject.config.benchmark_options,
        "model": subject.config.evaluation.agent_model or subject.config.fm.model,
        "agent_fm": subject.config.evaluation.agent_fm,
        "fm_calls": fm_calls,
        "sandbox": subject.config.evaluation.sandbox,
        "genome_hash": genome_hash(subject.genome.files),
        "evaluated_at": datetime.now(timezone.utc).isoformat(),
        "tasks": [
            {
                "task_id": task.task_id,
                "score": task.score,
                "passed": task.passed,
                "executed": task.executed,
                "feedback": task.feedback,
                "duration_s": task.duration_s,
                "exit_code": task.exit_code,
                "timed_out": task.timed_out,
                "oom_killed": task.oom_killed,
            }
            for task in result.task_results
        ],
    }


# ----- the evaluation itself ----------------------------------------------------------------------


def _evaluate(
    subject: _Subject, *, split: str, reporter: Reporter, ledger: Ledger, own_limits: bool = False
) -> tuple[AgentResult, Benchmark]:
    """Evaluate the subject; own_limits (a folder someone sent): the time and memory limits are yours
    (`evaluation.*`) or, where you set none, the benchmark's defaults: never what the folder's options ask."""
    config = subject.config
    benchmark = build_benchmark(config)
    # Checked before any sandbox or model server starts, so the mistake costs nothing.
    if not list(benchmark.tasks(split)):
        others = [other for other in SPLITS if other != split]
        raise EvalTargetError(
            f"benchmark {benchmark.name!r} has no {split} tasks",
            fix=f"evaluate on --split {others[0]}, or use a benchmark with a {split} split "
            "(`cambrian benchmarks` lists them)",
        )
    limits = Limits(
        timeout_s=config.evaluation.timeout_s,
        memory_mb=config.evaluation.memory_mb,
        max_output_bytes=config.evaluation.max_output_bytes,
    )
    if own_limits:
        limits = _without_folder_limits(limits, config, split)
    per_task = agent_fm_budget(config)  # as in a search: per task, shared by the split's tasks
    reporter.info(f"evaluating {subject.label} on the {split} split of {benchmark.name}")
    with sandbox_with_socket_dir(config, reporter) as (sandbox, socket_dir):
        with _maybe_fm(config, benchmark, reporter, ledger) as llm:

            async def run() -> AgentResult:
                mode = socket_folder_mode(sandbox)
                gateway = FMGateway(llm, socket_dir=socket_dir, folder_mode=mode) if llm is not None else None
                try:
                    context = EvaluationContext(benchmark, limits, per_task, gateway)
                    return await evaluate_in_sandbox(
                        context,
                        subject.genome,
                        sandbox,
                        agent_id=subject.agent_id,
                        iteration=subject.iteration,
                        split=split,
                    )
                finally:
                    if gateway is not None:
                        await gateway.close()
                    await close_http_sessions()

            return asyncio.run(run()), benchmark


def _without_folder_limits(limits: Limits, config: RunConfig, split: str) -> Limits:
    """`limits` with the time and memory the user left unset taken from the benchmark built with its default
    options: an export's benchmark_options once raised its own limits (3600 s, 64 GiB) under the user's 1 GiB."""
    if limits.timeout_s is not None and limits.memory_mb is not None:
        return limits
    plain = build_benchmark(config.model_copy(update={"benchmark_options": {}}))
    tasks = list(plain.tasks(split))
    spec = plain.run_spec(plain.seed(), tasks[0])
    return dataclasses.replace(
        limits,
        timeout_s=limits.timeout_s if limits.timeout_s is not None else spec.timeout_s,
        memory_mb=limits.memory_mb if limits.memory_mb is not None else spec.memory_mb,
    )


@contextlib.contextmanager
def _maybe_fm(
    config: RunConfig, benchmark: Benchmark, reporter: Reporter, ledger: Ledger
) -> Iterator[LLMClient | None]:
    """The FM client agents call through the gateway, or None when `evaluation.agent_fm` is off or the
    benchmark's agents call no FM (a program benchmark: no model server is started, nor downloaded)."""
    if not config.evaluation.agent_fm:
        yield None
        return
    if not agents_call_fm(benchmark):
        reporter.info(f"no model server: {benchmark.name}'s programs call no FM (evaluation.agent_fm is ignored)")
        yield None
        return
    # The server's log goes to a folder of its own: the search's server.log (or an export folder) stays as it was.
    with tempfile.TemporaryDirectory(prefix="cambrian-eval-") as scratch:
        server_config = config.model_copy(update={"runs_dir": Path(scratch), "name": "eval"})
        with fm_endpoint(server_config, reporter, model=config.evaluation.agent_model) as (endpoint, _label):
            yield make_llm_client(endpoint, config, ledger=ledger)
