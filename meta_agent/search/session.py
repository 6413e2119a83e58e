"""Wiring for `cambrian run` and `resume`: open the archive, start the FM and sandbox, run the loop.

The CLI stays thin; this module owns the lifetimes (local inference server,
sandbox, archive) and stops them in order whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cambrian.archive.errors import RunExists
from cambrian.archive.models import AgentStatus, Run, RunStatus
from cambrian.archive.store import Archive
from cambrian.evaluators.base import Benchmark, FeedbackPolicy
from cambrian.evaluators.registry import get_benchmark
from cambrian.meta_agent import __version__
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.edits import EditError, evolve_regions
from cambrian.meta_agent.errors import CambrianError, ConfigError
from cambrian.meta_agent.llm import ArchiveLedger, Endpoint, Ledger, LLMClient, close_http_sessions, probe_endpoint
from cambrian.meta_agent.llm.gateway import FMGateway
from cambrian.meta_agent.llm.models import is_local_model, model_label, resolve
from cambrian.meta_agent.llm.serve import (
    GRAMMAR_FIELDS,
    LocalServer,
    choose_backend,
    default_threads,
    server_grammar_field,
)
from cambrian.meta_agent.operators import make_operator
from cambrian.meta_agent.search._compose import check_models, check_seed_editable, fm_needed, prompt_limits
from cambrian.meta_agent.search._executor import make_executor
from cambrian.meta_agent.search._loop import LoopEvent, LoopOutcome, SearchLoop
from cambrian.meta_agent.search.stores import archive_path, delete_run, open_run, run_lock, shown_store, store_in_use
from cambrian.sandbox.base import Sandbox, socket_folder_mode
from cambrian.sandbox.docker import DockerSandbox
from cambrian.sandbox.image import ImageStatus, engine_available, image_status
from cambrian.sandbox.local import LocalSandbox, isolation_summary

__all__ = [
    "BACKEND_FILE",
    "INTERRUPTED",
    "Reporter",
    "backend_record",
    "build_benchmark",
    "check_backend",
    "choose_sandbox",
    "embedding_endpoint",
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


@dataclass
class Reporter:
    """Callbacks the CLI gives a session: messages for the user and loop events."""

    info: Callable[[str], None]
    warn: Callable[[str], None]
    event: Callable[[LoopEvent], None]
    progress: Callable[[int, int], contextlib.AbstractContextManager]  # (completed, total) -> context
    #: Given, once the search starts, a function any thread may call to stop it as a first Ctrl-C does (no
    #: more proposals; running evaluations finish and are stored): how the library API cancels a search.
    started: Callable[[Callable[[str], None]], None] | None = None


def choose_sandbox(config: RunConfig, warn: Callable[[str], None], *, fm_dir: Path | None = None) -> Sandbox:
    """The sandbox backend the config asks for; `auto` takes Docker when the engine answers and the image is current.

    A stale image (made by an older recipe, see sandbox.image) counts as missing for `auto`;
    `docker` refuses it (SandboxError naming `cambrian sandbox build`).
    fm_dir: host folder for the per-container FM gateway socket folders (Docker only).
    """
    choice = config.evaluation.sandbox
    image = config.evaluation.image
    if choice == "auto":
        status = _auto_status(config)
        if status is not None and status.current:
            choice = "docker"
        else:
            if status is None:
                reason = "no Docker engine answers"
            elif status.stale:
                reason = f"the image {image} is stale ({status.stale_reason()})"
            else:
                reason = f"the image {image} is missing"
            warn(
                f"{reason}, so agents run in the LOCAL sandbox, weaker than a container: {isolation_summary()}. "
                "For Docker: start the engine and run `cambrian sandbox build`."
            )
            return LocalSandbox()
    if choice == "local":
        warn(
            f"agents run in the local sandbox (evaluation.sandbox = local), weaker than a container: "
            f"{isolation_summary()}"
        )
        return LocalSandbox()
    return DockerSandbox(
        image=image,
        pool_size=config.evaluation.concurrency,
        run_label=config.name or "",
        memory_mb=config.evaluation.memory_mb or 1024,
        fm_dir_root=fm_dir,
    )


@contextlib.contextmanager
def fm_endpoint(config: RunConfig, reporter: Reporter, *, model: str | None = None) -> Iterator[tuple[Endpoint, str]]:
    """An endpoint for `model` (default: fm.model), starting (and finally stopping) a local server if needed."""
    spec = model or config.fm.model
    if is_local_model(spec):
        path = resolve(spec, progress=reporter.info)
        label = model_label(spec)
        reporter.info(f"starting a local inference server for {label} ({path})")
        server = LocalServer(
            path,
            alias=label,
            n_ctx=config.fm.n_ctx,
            n_parallel=config.fm.concurrency,
            threads=server_threads(config),
            log_path=config.run_dir() / ("server.log" if spec == config.fm.model else f"server-{label}.log"),
        )
        with server:
            reporter.info(f"model server ready at {server.base_url}")
            yield server.endpoint(), label
        return
    if "/" not in spec and config.fm.api_base is None:
        raise ConfigError(
            f"model {spec!r} is neither a local model nor a litellm model string",
            fix="use a name from `cambrian models list`, a .gguf path, or a provider/model string such as "
            "openai/gpt-4o-mini (with --api-base for an OpenAI-compatible server)",
        )
    # A dead or misconfigured endpoint fails now, in about a second, before the seed is evaluated.
    probe_endpoint(Endpoint(model=spec, api_base=config.fm.api_base, api_key_env=config.fm.api_key_env))
    # An OpenAI-compatible server may be a llama.cpp or vLLM server that takes grammars: ask it which.
    grammar_field = (
        server_grammar_field(config.fm.api_base)
        if config.fm.api_base is not None and config.fm.constrained != "off"
        else None
    )
    endpoint = Endpoint(
        model=spec,
        api_base=config.fm.api_base,
        api_key_env=config.fm.api_key_env,
        label=spec,
        grammar_field=grammar_field,
    )
    yield endpoint, spec


def server_threads(config: RunConfig) -> int | None:
    """llama.cpp threads of each local model server: fm.threads if set; else, when the run serves several
    local models at once (fm.models, evaluation.agent_model), the cores split between them, since threads
    past the cores spin against each other (two servers of one thread per core each on 2 cores: a 0.5B
    agent call of 203 tokens took 24 s and another ran past the 300 s FM timeout); None: one per core."""
    if config.fm.threads is not None:
        return config.fm.threads
    specs = [config.fm.model, *config.fm.models, *filter(None, [config.evaluation.agent_model])]
    local = {model_label(spec) for spec in specs if is_local_model(spec)}
    return max(1, default_threads() // len(local)) if len(local) > 1 else None


def start_run(config: RunConfig, reporter: Reporter) -> tuple[str, LoopOutcome]:
    """Create a new run from `config` and search until its budget is spent."""
    config = resolve_fm_concurrency(config.with_default_name())
    assert config.name is not None
    benchmark = build_benchmark(config)
    say_what_is_editable(benchmark, reporter)
    # Before the run exists: a seed no operator can edit would only make invalid children.
    operators = {name: make_operator(name, limits=prompt_limits(config)) for name in config.search.operators}
    check_seed_editable(config, benchmark.seed(), operators)
    if fm_needed(config, benchmark, operators):
        check_models(config)
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


def resolve_fm_concurrency(config: RunConfig) -> RunConfig:
    """fm.concurrency, unless set, is 1 for models that llama.cpp serves on the CPU: a second request at
    once halves the speed of both (1.5B on 2 cores: 4 calls of 1,113 prompt + 200 reply tokens took 70 s
    either way, 17 s each alone and 29-44 s each in pairs), and each slot keeps its own prompt cache."""
    if "concurrency" in config.fm.model_fields_set:
        return config
    models = [config.fm.model, *config.fm.models, *filter(None, [config.evaluation.agent_model])]
    if not all(is_local_model(spec) for spec in models) or choose_backend() != "llamacpp":
        return config
    return config.model_copy(update={"fm": config.fm.model_copy(update={"concurrency": 1})})


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
        if fm_needed(config, benchmark, {name: make_operator(name) for name in config.search.operators}):
            check_models(config)  # before the run is touched: a missing model file is a config error
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
    here = sandbox_with_socket_dir(config, reporter) if local else _no_sandbox(reporter)
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
            agent_llm = _agent_llm(config, reporter, models, llm, {label: llm, **more_llms}, ledger)
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
        loop = SearchLoop.from_config(
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
            embed_endpoint=embedding_endpoint(config),
        )
        done = archive.iterations_done(run.key)
        with reporter.progress(done, config.budget.iterations):
            return asyncio.run(_run_with_signals(loop, reporter.started))


def _agent_llm(
    config: RunConfig,
    reporter: Reporter,
    models: contextlib.ExitStack,
    llm: LLMClient,
    clients: dict[str, LLMClient],
    ledger: Ledger,
) -> LLMClient:
    """The client the gateway serves agents (`evaluation.agent_model`, default fm.model): one of the run's
    proposal models' clients when it names one of them, else a client (and a local server) of its own."""
    spec = config.evaluation.agent_model
    if spec is None:
        return llm
    reporter.info(f"agents call {model_label(spec)} (evaluation.agent_model)")
    if model_label(spec) in clients:
        return clients[model_label(spec)]
    endpoint, _label = models.enter_context(fm_endpoint(config, reporter, model=spec))
    return make_llm_client(endpoint, config, ledger=ledger, warn=reporter.warn)


#: Where a run records the sandbox backend its agents were evaluated in (RUNS_DIR/<run>/).
BACKEND_FILE = "sandbox.json"


def backend_record(config: RunConfig, backend: str) -> dict[str, Any]:
    """What a run records of the sandbox its agents are evaluated in: the backend, and for Docker the image."""
    return {"backend": backend, **({"image": config.evaluation.image} if backend == "docker" else {})}


def planned_backend(config: RunConfig) -> str:
    """The backend `choose_sandbox` would pick now (without starting it)."""
    choice = config.evaluation.sandbox
    if choice != "auto":
        return choice
    status = _auto_status(config)
    return "docker" if status is not None and status.current else "local"


def _auto_status(config: RunConfig) -> ImageStatus | None:
    """What `auto` decides by: the image's status where a Docker engine answers, else None."""
    return image_status(config.evaluation.image) if engine_available() else None


def check_backend(config: RunConfig, *, confirmed: bool) -> None:
    """ConfigError, before a resume touches the run, when it would evaluate in another sandbox backend (or
    image) than the run's earlier sessions, unless `confirmed` (the user named --sandbox). Scores from a
    container and from this machine's Python (other numpy and scipy versions, other limits) are not alike,
    and `auto` once switched a resumed run between them without a word."""
    if confirmed or config.evaluation.executor != "local":
        return
    try:
        earlier = json.loads((config.run_dir() / BACKEND_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # a run from before this record: nothing to compare with
    now = backend_record(config, planned_backend(config))
    if isinstance(earlier, dict) and earlier != now:
        was, will = _backend_words(earlier), _backend_words(now)
        raise ConfigError(
            f"run {config.name!r} was evaluated in {was}; resumed now, it would be evaluated in {will}, and its "
            "scores would not compare with the earlier ones (other Python packages and limits)",
            fix=f"resume with --sandbox {now['backend']} to accept the change, or bring {was} back (for Docker: "
            "start the engine, `cambrian sandbox build`)",
        )


def record_backend(config: RunConfig, sandbox: Sandbox) -> None:
    """Write RUNS_DIR/<run>/sandbox.json: the backend this session evaluates in (`check_backend` reads it)."""
    path = config.run_dir() / BACKEND_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(backend_record(config, sandbox.name)) + "\n", encoding="utf-8")


def _backend_words(record: dict[str, Any]) -> str:
    backend = str(record.get("backend"))
    return f"the Docker sandbox (image {record.get('image')})" if backend == "docker" else f"the {backend} sandbox"


@contextlib.contextmanager
def sandbox_with_socket_dir(config: RunConfig, reporter: Reporter) -> Iterator[tuple[Sandbox, Path]]:
    """The configured sandbox and a fresh host folder for the agents' FM gateway sockets; both removed after."""
    with _socket_dir() as socket_dir:
        sandbox = choose_sandbox(config, reporter.warn, fm_dir=socket_dir)
        os.chmod(socket_dir, socket_folder_mode(sandbox))
        reporter.info(f"sandbox: {sandbox.name}")
        try:
            yield sandbox, socket_dir
        finally:
            sandbox.close()


@contextlib.contextmanager
def _no_sandbox(reporter: Reporter) -> Iterator[tuple[None, Path]]:
    """For a search on Ray, whose agents (and parents writing their children) all run on the nodes: no sandbox
    here, so this machine needs no Docker engine and starts no containers; the gateway's socket folder all
    the same."""
    reporter.info("sandbox: none on this machine (agents run in the Ray nodes' sandboxes)")
    with _socket_dir() as socket_dir:
        yield None, socket_dir


@contextlib.contextmanager
def _socket_dir() -> Iterator[Path]:
    """A fresh host folder for the agents' FM gateway sockets, removed after: mode 0o700 (mkdtemp's) until the
    sandbox is known, then `socket_folder_mode(sandbox)`."""
    # Unix socket paths are limited to 107 bytes: keep the gateway's folder short.
    socket_dir = Path(tempfile.mkdtemp(prefix="cambrian-fm-", dir="/tmp"))
    try:
        yield socket_dir
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


def make_llm_client(
    endpoint: Endpoint, config: RunConfig, *, ledger: Ledger, warn: Callable[[str], None] | None = None
) -> LLMClient:
    """The FM client a run's settings (`fm.*`) describe, recording every call in `ledger`.

    fm.constrained: "auto" sends reply grammars where the endpoint takes them (local llama.cpp and vLLM
    servers, and OpenAI-compatible servers that say they are one); "on" sends them to any endpoint (in
    llama.cpp's `grammar` field where the server's kind is unknown); "off" never. A server that refuses
    a grammar gets the call again without it, and `warn` is told once.
    """
    if config.fm.constrained == "on" and endpoint.grammar_field is None:
        endpoint = dataclasses.replace(endpoint, grammar_field=GRAMMAR_FIELDS["llamacpp"])
    return LLMClient(
        endpoint,
        ledger=ledger,
        concurrency=config.fm.concurrency,
        timeout_s=config.fm.timeout_s,
        retries=config.fm.retries,
        temperature=config.fm.temperature,
        max_tokens=config.fm.max_tokens,
        constrained=config.fm.constrained != "off",
        on_warning=warn,
    )


def embedding_endpoint(config: RunConfig) -> Callable[[list[str]], list[list[float]]] | None:
    """texts -> vectors through litellm for `search.novelty.embedding_model`; None: the local vectorizer."""
    model = config.search.novelty.embedding_model
    if model is None:
        return None
    api_key = os.environ.get(config.fm.api_key_env) if config.fm.api_key_env else None

    def embed(texts: list[str]) -> list[list[float]]:
        import litellm  # imported on first use: it is slow to import and most runs never need it

        try:
            response = litellm.embedding(model=model, input=texts, api_base=config.fm.api_base, api_key=api_key)
        except Exception as exc:  # noqa: BLE001 - litellm raises provider-specific classes
            raise ConfigError(
                f"the embedding model {model!r} failed: {type(exc).__name__}: {exc}",
                fix="check search.novelty.embedding_model (a litellm embedding model), or remove it to use "
                "the local hashing vectorizer",
            ) from None
        return [list(item["embedding"]) for item in response.data]

    return embed


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
