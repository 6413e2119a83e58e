"""`cambrian doctor`: is this machine ready to search? One line per fact, each failing one with its fix.

Checks, in the order a new user needs them: the Docker engine, the sandbox image (present, of this
recipe), its live self-test (`cambrian sandbox check`: hardening, numpy and scipy), the local sandbox
(as root: can its unprivileged run uids start the interpreter?), the default model in the cache, the
FM endpoint (probed when one is configured), free disk, and who runs Cambrian (root changes what the
local sandbox protects). Nothing is changed or downloaded.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cambrian.meta_agent.config import RunConfig

Verdict = Literal["ok", "warn", "fail"]
MIN_FREE_GB = 3.0  # the sandbox image, a model and a run's archive fit comfortably


@dataclass(frozen=True)
class Finding:
    name: str
    verdict: Verdict
    detail: str
    fix: str = ""


def diagnose(
    config: RunConfig, *, self_test: bool = True, say: Callable[[Finding], None] | None = None
) -> list[Finding]:
    """Every check's finding, in order (each is passed to `say` as soon as it is known)."""
    findings: list[Finding] = []

    def add(finding: Finding) -> None:
        findings.append(finding)
        if say is not None:
            say(finding)

    engine_ok = _engine(add)
    image_ok = _image(add, config.evaluation.image) if engine_ok else False
    if engine_ok and image_ok and self_test:
        _self_test(add, config.evaluation.image)
    _local_sandbox(add, self_test=self_test)
    why_not = "no Docker engine answers" if not engine_ok else "" if image_ok else "its image is not current"
    add(Finding("sandbox of runs (--sandbox auto)", "ok", "docker" if not why_not else f"local: {why_not}"))
    _model(add, config)
    _endpoint(add, config)
    _disk(add, config.runs_dir)
    _user(add)
    return findings


def _engine(add: Callable[[Finding], None]) -> bool:
    from cambrian.sandbox.image import connect_engine, engine_url

    try:
        client = connect_engine(timeout_s=5)
        version = client.version().get("Version", "?")
        client.close()
    except Exception as exc:  # noqa: BLE001 - any engine trouble is this finding
        add(
            Finding(
                "docker engine",
                "fail",
                f"no engine answers at {engine_url()}: {exc}"[:300],
                "start it (`sudo dockerd &` or `sudo systemctl start docker`); without it runs use the weaker "
                "local sandbox",
            )
        )
        return False
    add(Finding("docker engine", "ok", f"version {version} at {engine_url()}"))
    return True


def _image(add: Callable[[Finding], None], image: str) -> bool:
    from cambrian.sandbox.image import image_status

    status = image_status(image)
    if not status.present:
        add(Finding("sandbox image", "fail", f"{image} is missing", "cambrian sandbox build"))
        return False
    if not status.current:
        add(Finding("sandbox image", "fail", f"{image} is stale: {status.stale_reason()}", "cambrian sandbox build"))
        return False
    add(Finding("sandbox image", "ok", f"{image} (recipe {status.recipe})"))
    return True


def _self_test(add: Callable[[Finding], None], image: str) -> None:
    from cambrian.sandbox.docker import DockerSandbox
    from cambrian.sandbox.docker_check import run_check

    try:
        with DockerSandbox(image=image, pool_size=0, run_label="doctor") as sandbox:
            report = run_check(sandbox)
    except Exception as exc:  # noqa: BLE001 - a sandbox that cannot even start is this finding
        add(
            Finding(
                "sandbox self-test",
                "fail",
                f"{type(exc).__name__}: {exc}"[:300],
                "cambrian sandbox build --force, then cambrian sandbox check",
            )
        )
        return
    failed = [item for item in report.items if not item.passed]
    detail = f"{len(report.items) - len(failed)}/{len(report.items)} hardening checks pass"
    if failed:
        add(
            Finding(
                "sandbox self-test",
                "fail",
                detail + ": failing " + ", ".join(i.name for i in failed),
                "cambrian sandbox check (details), then cambrian sandbox build --force",
            )
        )
    else:
        add(Finding("sandbox self-test", "ok", detail))
    if report.packages.get("numpy") and report.packages.get("scipy"):
        add(
            Finding(
                "numpy and scipy in the image",
                "ok",
                f"numpy {report.packages['numpy']}, scipy {report.packages['scipy']}",
            )
        )
    else:
        add(
            Finding(
                "numpy and scipy in the image",
                "fail",
                "a sandbox program cannot import them",
                "cambrian sandbox build --force",
            )
        )


def _local_sandbox(add: Callable[[Finding], None], *, self_test: bool) -> None:
    from cambrian.sandbox.base import RunSpec, SandboxError
    from cambrian.sandbox.local import LocalSandbox, isolation_summary
    from cambrian.sandbox.local_check import namespaces_summary, run_local_check

    box = LocalSandbox()
    try:
        result = box.run(RunSpec(files={"p.py": "import numpy, scipy\nprint('ok')\n"}, command=("{python}", "p.py")))
        report = run_local_check(box) if self_test and result.ok else None
    except SandboxError as exc:
        add(Finding("local sandbox", "fail", str(exc)[:300], exc.fix))
        return
    finally:
        box.close()
    if result.ok and result.stdout.strip() == "ok":
        add(
            Finding(
                "local sandbox",
                "ok",
                f"works, with numpy and scipy; namespaces: {namespaces_summary(box.namespaces)}; {isolation_summary()}",
            )
        )
        if report is None:
            return
        failed = [item.name for item in report.items if not item.passed]
        detail = f"{len(report.items) - len(failed)}/{len(report.items)} hardening checks pass"
        if failed:
            add(
                Finding(
                    "local sandbox self-test",
                    "warn",
                    f"{detail}: failing {', '.join(failed)}",
                    "install bubblewrap (apt-get install bubblewrap) for namespaces, or use Docker; "
                    "cambrian sandbox check --sandbox local shows each item",
                )
            )
        else:
            add(Finding("local sandbox self-test", "ok", detail))
    else:
        add(
            Finding(
                "local sandbox",
                "warn",
                f"a program there cannot import numpy and scipy: "
                f"{(result.stderr.strip().splitlines() or ['?'])[-1][:200]}",
                "pip install numpy scipy into Cambrian's environment",
            )
        )


def _model(add: Callable[[Finding], None], config: RunConfig) -> None:
    from cambrian.meta_agent.llm.models import is_local_model, list_models

    spec = config.fm.model
    if _names_no_model(config):
        add(
            Finding(
                "default model",
                "fail",
                f"{spec!r} is neither a local model nor a litellm model string",
                "use a name from `cambrian models list`, a .gguf path, or a provider/model string such as "
                "openai/gpt-4o-mini (with --api-base for an OpenAI-compatible server)",
            )
        )
        return
    if not is_local_model(spec):
        add(Finding("default model", "ok", f"{spec} (hosted or served elsewhere; see the endpoint line)"))
        return
    if spec.endswith(".gguf"):
        found = Path(spec).expanduser().is_file()
        add(Finding("default model", "ok" if found else "fail", spec, "" if found else "give an existing .gguf path"))
        return
    for status in list_models():
        if status.name == spec:
            if status.installed:
                add(Finding("default model", "ok", f"{spec} in {status.path}"))
            else:
                add(
                    Finding(
                        "default model",
                        "warn",
                        f"{spec} is not in the cache yet (a run fetches it first)",
                        f"cambrian models pull {spec}",
                    )
                )
            return
    add(Finding("default model", "fail", f"{spec} is not a registry model", "cambrian models list"))


def _names_no_model(config: RunConfig) -> bool:
    """fm.model is no local model, no provider/model string and has no --api-base: a run refuses it before its
    seed (`fm_endpoint` in meta_agent/search/session.py), and litellm's credential check cannot tell."""
    from cambrian.meta_agent.llm.models import is_local_model

    spec = config.fm.model
    return not is_local_model(spec) and "/" not in spec and config.fm.api_base is None


def _endpoint(add: Callable[[Finding], None], config: RunConfig) -> None:
    from cambrian.meta_agent.llm import Endpoint, LLMError, probe_endpoint
    from cambrian.meta_agent.llm.models import is_local_model

    if is_local_model(config.fm.model) and config.fm.api_base is None:
        add(Finding("FM endpoint", "ok", "a local server Cambrian starts for each run (llama.cpp)"))
        return
    if _names_no_model(config):
        add(Finding("FM endpoint", "fail", f"none: {config.fm.model!r} names no model (see the line above)"))
        return
    endpoint = Endpoint(model=config.fm.model, api_base=config.fm.api_base, api_key_env=config.fm.api_key_env)
    try:
        probe_endpoint(endpoint)
    except LLMError as exc:
        add(Finding("FM endpoint", "fail", str(exc)[:300], exc.fix))
        return
    add(Finding("FM endpoint", "ok", f"{endpoint.where()} answers"))


def _disk(add: Callable[[Finding], None], runs_dir: Path) -> None:
    from cambrian.meta_agent.llm.models import models_dir

    for label, path in (("runs folder", runs_dir), ("model cache", models_dir())):
        existing = Path(path).resolve()
        while not existing.exists():
            existing = existing.parent
        free_gb = shutil.disk_usage(existing).free / 1e9
        verdict: Verdict = "ok" if free_gb >= MIN_FREE_GB else "warn"
        add(
            Finding(
                f"free disk ({label})",
                verdict,
                f"{free_gb:.1f} GB free at {existing}",
                "" if verdict == "ok" else f"free space under {existing} (a model takes up to 2 GB)",
            )
        )


def _user(add: Callable[[Finding], None]) -> None:
    if os.geteuid() == 0:
        add(
            Finding(
                "running as root",
                "ok",
                "yes: the local sandbox runs each program as an unprivileged uid of its "
                "own; Docker is still the stronger sandbox",
            )
        )
    else:
        add(
            Finding(
                "running as root",
                "warn",
                "no: the local sandbox runs programs as you (your files are theirs to read and write)",
                "use the Docker sandbox (start the engine, cambrian sandbox build)",
            )
        )
