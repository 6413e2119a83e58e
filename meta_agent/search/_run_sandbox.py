"""The sandbox a run evaluates in: the backend the config asks for (`auto`: Docker when its image is current,
else the local sandbox, with a warning that says what it does not hold), the record of it a resume checks
(RUNS_DIR/<run>/sandbox.json), and the host folder for the agents' FM gateway sockets."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.errors import ConfigError
from cambrian.meta_agent.search._reporter import Reporter
from cambrian.sandbox.base import Sandbox, socket_folder_mode
from cambrian.sandbox.docker import DockerSandbox
from cambrian.sandbox.image import ImageStatus, engine_available, image_status
from cambrian.sandbox.local import LocalSandbox, isolation_summary


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
def no_sandbox(reporter: Reporter) -> Iterator[tuple[None, Path]]:
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
