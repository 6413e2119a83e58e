"""Wiring for `cambrian run` and `resume`: open the archive, start the FM and sandbox, run the loop.

The CLI stays thin; this module owns the lifetimes (local inference server,
sandbox, archive) and stops them in order whatever happens. The pieces it starts
come from beside it, and are re-exported here: the sandbox a run evaluates in
(_run_sandbox.py) and the FM it calls (_run_models.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Callable
from pathlib import Path

from cambrian.archive.errors import RunExists
from cambrian.archive.models import AgentStatus, Run, RunStatus
from cambrian.archive.store import Archive
from cambrian.evaluators.base import Benchmark, FeedbackPolicy
from cambrian.evaluators.registry import get_benchmark
from cambrian.meta_agent import __version__
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.edits import EditError, evolve_regions
from cambrian.meta_agent.errors import CambrianError, ConfigError
from cambrian.meta_agent.llm import ArchiveLedger, LLMClient, close_http_sessions
from cambrian.meta_agent.llm.gateway import FMGateway
from cambrian.meta_agent.llm.models import model_label
from cambrian.meta_agent.operators import make_operator
from cambrian.meta_agent.search._compose import check_models, check_seed_editable, fm_needed, prompt_limits
from cambrian.meta_agent.search._executor import make_executor
from cambrian.meta_agent.search._from_config import loop_from_config
from cambrian.meta_agent.search._loop import LoopOutcome, SearchLoop
from cambrian.meta_agent.search._reporter import Reporter
from cambrian.meta_agent.search._run_models import (
    client_for_agents,
    code_embedder,
    fm_endpoint,
    make_llm_client,
    resolve_fm_concurrency,
    server_threads,
)
from cambrian.meta_agent.search._run_sandbox import (
    BACKEND_FILE,
    backend_record,
    check_backend,
    choose_sandbox,
    no_sandbox,
    planned_backend,
    record_backend,
    sandbox_with_socket_dir,
)
from cambrian.meta_agent.search.stores import archive_path, delete_run, open_run, run_lock, shown_store, store_in_use
from cambrian.sandbox.base import socket_folder_mode

__all__ = [
    "BACKEND_FILE",
    "INTERRUPTED",
    "Reporter",
    "backend_record",
    "build_benchmark",
    "check_backend",
    "choose_sandbox",
    "code_embedder",
    "fm_endpoint",
    "make_llm_client",
    "planned_backend",
    "record_backend",
    "resolve_fm_concurrency",
    "resume_run",
    "sandbox_with_socket_dir",
    "say_what_is_editable",
    "server_threads",
    "start_run",
]


def start_run(config: RunConfig, reporter: Reporter) -> tuple[str, LoopOutcome]:
    """Create a new run from `config` and search until its budget is spent."""
    config = resolve_fm_concurrency(config.with_default_name())
    assert config.name is not None
    benchmark = build_benchmark(config)
    say_what_is_editable(benchmark, reporter)
    # Before the run exists: a seed no operator can edit would only make invalid children.
    operators = {name: make_operator(name, limits=prompt_limits(config)) for name in config.search.operators}
    check_seed_editable(config, benchmark.seed(), operators)
    check_models(config, fm=fm_needed(config, benchmark, operators))
    path = archive_path(config.runs_dir, config.name)
    if path.exists():
        with run_lock(path.parent, config.name):  # RunBusy, naming its process, while it is being searched
            pass
        raise ConfigError(
            f"a run named {config.name!r} already exists in {config.runs_dir}",
            fix=f"continue it with `cambrian resume {config.name}`, or choose another --name",
        )
    with run_lock(path.parent, config.name):
        try:
            return config.name, _start(config, benchmark, reporter)
        except Exception:
            _forget_if_unstarted(config, reporter)
            raise


def _forget_if_unstarted(config: RunConfig, reporter: Reporter) -> None:
    """After a new run failed: delete it when its seed was never evaluated (a dead FM endpoint, a model that would
    not load, a sandbox that would not start), so no empty run is left to list and resume. The model server logs
    stay, for the diagnosis. A run whose seed was evaluated keeps its record (why the seed failed, its logs)."""
    assert config.name is not None
    try:
        archive, run = open_run(config.runs_dir, config.name, store=config.store)
    except CambrianError:
        return  # it was never created
    with archive:
        started = any(agent.status in (AgentStatus.evaluated, AgentStatus.invalid) for agent in archive.agents(run.key))
    if started:
        return
    try:
        delete_run(config.runs_dir, config.name, store=config.store, keep_logs=True)
    except (CambrianError, OSError) as exc:  # the failure itself is what the user must see
        reporter.warn(f"the failed run {config.name} could not be removed: {exc}")
        return
    reporter.info(f"removed the run {config.name}: it failed before its seed was evaluated")


def _start(config: RunConfig, benchmark: Benchmark, reporter: Reporter) -> LoopOutcome:
    """Store the new run (config, Run row) and search it; its lock is held."""
    assert config.name is not None
    path = archive_path(config.runs_dir, config.name)
    # The frozen config never holds the store's password: keep it in the URL given, PGPASSWORD or ~/.pgpass.
    frozen = config if config.store is None else config.model_copy(update={"store": shown_store(config.store)})
    archive = Archive.at(path) if config.store is None else Archive(config.store)
    with archive:
        path.parent.mkdir(parents=True, exist_ok=True)  # the run's folder: its config, model server logs
        (path.parent / "config.json").write_text(frozen.to_json())
        try:
            run = archive.create_run(
                name=config.name,
                benchmark=config.benchmark,
                seed=config.seed,
                config_json=frozen.to_json(),
                cambrian_version=__version__,
            )
        except RunExists as exists:
            if frozen.store is not None:
                exists.fix = (
                    f"continue it with `cambrian resume {config.name} --store {frozen.store}`, or choose another --name"
                )
            raise
        return _search(archive, run, config, benchmark, reporter)


def say_what_is_editable(benchmark: Benchmark, reporter: Reporter) -> None:
    """At the start of a run: a seed whose entry file has no EVOLVE-BLOCK markers is editable as a whole."""
    try:
        genome = benchmark.seed()
        regions = evolve_regions(genome.files.get(genome.entry, ""), path=genome.entry)
    except EditError:
        return  # unbalanced markers: the first edit's refusal names the line
    except Exception:  # noqa: BLE001 - the loop reports a broken seed with its cause
        return
    if not regions:
        reporter.info(
            f"the seed's entry file {genome.entry} has no EVOLVE-BLOCK-START/END markers: the whole "
            "file is editable (mark the editable part to keep the rest fixed)"
        )


def resume_run(
    runs_dir: Path,
    name: str,
    budget: dict[str, float | int | None],
    reporter: Reporter,
    *,
    sandbox: str | None = None,
    store: str | None = None,
) -> LoopOutcome:
    """Continue a stopped, failed or finished run, optionally with a larger budget or another sandbox backend.

    Changed settings are validated like a new config and stored in the run, so the record stays true.
    store: the database URL holding the run (default: RUNS_DIR/<name>/archive.db, or the store its
    config.json names).
    """
    folder = Path(runs_dir) / name
    if not folder.is_dir():  # a run kept in a store, or no such run: RunNotFound before any folder is made
        open_run(runs_dir, name, readonly=True, store=store)[0].close()
    with run_lock(folder, name):
        return _resume(runs_dir, name, budget, reporter, sandbox=sandbox, store=store)


def _resume(
    runs_dir: Path,
    name: str,
    budget: dict[str, float | int | None],
    reporter: Reporter,
    *,
    sandbox: str | None,
    store: str | None,
) -> LoopOutcome:
    """`resume_run` once the run's lock is held."""
    archive, run = open_run(runs_dir, name, store=store)
    with archive:
        stored = json.loads(run.config_json)
        for key, value in budget.items():
            if value is not None:
                stored["budget"][key] = value
        if sandbox is not None:
            stored["evaluation"]["sandbox"] = sandbox
        config = RunConfig.from_json(json.dumps(stored))
        if config.to_json() != run.config_json:
            archive.update_run_config(run.key, config.to_json())
        # The loop's config names the store as given, password included (the stored one never does).
        config = config.model_copy(update={"runs_dir": Path(runs_dir), "store": store_in_use(archive, runs_dir, name)})
        benchmark = build_benchmark(config)
        # Before the run is touched: a missing model file is a config error.
        check_models(
            config, fm=fm_needed(config, benchmark, {name: make_operator(name) for name in config.search.operators})
        )
        check_backend(config, confirmed=sandbox is not None)
        return _search(archive, run, config, benchmark, reporter)


def _search(archive: Archive, run: Run, config: RunConfig, benchmark: Benchmark, reporter: Reporter) -> LoopOutcome:
    """Search, leaving the run marked `stopped` (interrupted) or `failed` (with the error) if it ends early."""
    try:
        return _search_with_resources(archive, run, config, benchmark, reporter)
    except KeyboardInterrupt:
        archive.set_run_status(run.key, RunStatus.stopped)
        raise
    except Exception as exc:
        archive.set_run_status(run.key, RunStatus.failed, error=f"{type(exc).__name__}: {exc}")
        raise


def _search_with_resources(
    archive: Archive, run: Run, config: RunConfig, benchmark: Benchmark, reporter: Reporter
) -> LoopOutcome:
    local = config.evaluation.executor == "local"
    here = sandbox_with_socket_dir(config, reporter) if local else no_sandbox(reporter)
    with here as (sandbox, socket_dir), contextlib.ExitStack() as models:
        if sandbox is not None:
            record_backend(config, sandbox)
        # The cluster first: an unreachable one fails before a local model server is started.
        executor = make_executor(config, sandbox, warn=reporter.warn)
        models.callback(executor.close)
        if executor.name != "local":
            reporter.info(f"evaluation: {executor.name} executor, {executor.slots} task slots")
        ledger = ArchiveLedger(archive, run.key)
        operators = {name: make_operator(name) for name, weight in config.search.operators.items() if weight > 0}
        llm: LLMClient | None = None
        agent_llm: LLMClient | None = None
        label = model_label(config.fm.model)
        more_llms: dict[str, LLMClient] = {}
        if fm_needed(config, benchmark, operators):
            endpoint, label = models.enter_context(fm_endpoint(config, reporter))
            llm = make_llm_client(endpoint, config, ledger=ledger, warn=reporter.warn)
            for spec in config.fm.models:
                extra, extra_label = models.enter_context(fm_endpoint(config, reporter, model=spec))
                if extra_label == label or extra_label in more_llms:
                    raise ConfigError(
                        f"fm.models names the model {extra_label!r} twice (with fm.model or itself)",
                        fix="list each model once: fm.model is the first, fm.models the others",
                    )
                more_llms[extra_label] = make_llm_client(extra, config, ledger=ledger, warn=reporter.warn)
            agent_llm = client_for_agents(config, reporter, models, llm, {label: llm, **more_llms}, ledger)
        else:
            reporter.info(
                "no model server: nothing in this run calls an FM (its operators write code without "
                "one, and its agents call none)"
            )
        # No FM client (nothing in the run calls one): no gateway either. The loop closes it at its end.
        gateway = (
            FMGateway(agent_llm, socket_dir=socket_dir, folder_mode=socket_folder_mode(sandbox))
            if config.evaluation.agent_fm and agent_llm
            else None
        )
        embedder = models.enter_context(code_embedder(config, reporter))  # stopped with the model servers
        loop = loop_from_config(
            archive=archive,
            run=run,
            config=config,
            benchmark=benchmark,
            sandbox=sandbox,
            executor=executor,
            llm=llm,
            model_label=label,
            more_llms=more_llms,
            gateway=gateway,
            on_event=reporter.event,
            code_embedder=embedder,
        )
        done = archive.iterations_done(run.key)
        with reporter.progress(done, config.budget.iterations):
            return asyncio.run(_run_with_signals(loop, reporter.started))


def build_benchmark(config: RunConfig) -> Benchmark:
    """The run's benchmark, built with its options and the run's feedback policy (`evaluation.feedback`)."""
    policy = FeedbackPolicy.from_options(config.evaluation.feedback.model_dump())
    return get_benchmark(config.benchmark, config.benchmark_options, feedback_policy=policy)


INTERRUPTED = "interrupted (Ctrl-C)"  # the start of a run's stop reason when the user pressed Ctrl-C


async def _run_with_signals(
    loop: SearchLoop, started: Callable[[Callable[[str], None]], None] | None = None
) -> LoopOutcome:
    """Run the loop, then close the agents' FM gateway it was given (if any). First Ctrl-C: stop proposing and
    let running evaluations finish. Second: kill those running, here or on the Ray nodes."""
    event_loop = asyncio.get_running_loop()
    presses = 0

    def on_interrupt() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            loop.request_stop(f"{INTERRUPTED}; running evaluations finish first, Ctrl-C again to kill them")
        else:
            loop.executor.kill_running()  # their agents stay queued for resume

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not in the main thread: none
            event_loop.add_signal_handler(sig, on_interrupt)
    if started is not None:

        def stop(reason: str) -> None:
            event_loop.call_soon_threadsafe(loop.request_stop, reason)

        started(stop)
    try:
        return await loop.run_until_done()
    finally:
        if loop.gateway is not None:
            await loop.gateway.close()
        await close_http_sessions()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                event_loop.remove_signal_handler(sig)
