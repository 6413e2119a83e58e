"""`cambrian sandbox build|check`: make the sandbox image; prove the sandbox (Docker or local) is hardened and has
numpy and scipy.

Errors raise SandboxError; the main CLI prints its cause and fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import typer
from rich.console import Console
from rich.table import Table

from cambrian.meta_agent.cli._app import app, one_of
from cambrian.sandbox.base import DEFAULT_IMAGE
from cambrian.sandbox.docker_check import CheckReport

sandbox_app = typer.Typer(
    help="The sandbox: build the Docker image, check the hardening of Docker or the local one.", no_args_is_help=True
)
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("build")
def build(
    method: str = typer.Option("auto", "--method", help="auto | dockerfile (needs a registry) | debootstrap (offline)"),
    rootfs: Path | None = typer.Option(
        None, "--rootfs", help="debootstrap: reuse this root fs, or debootstrap into it and keep it"
    ),
    force: bool = typer.Option(False, "--force", help="rebuild even if a current image exists"),
    tag: str = typer.Option(DEFAULT_IMAGE, "--tag", help="image name"),
) -> None:
    """Build the sandbox image once (reused afterwards while its recipe is current; a stale one is rebuilt)."""
    from cambrian.sandbox.image_build import BuildMethod, build_image  # the Docker client: imported only when building

    console = Console()
    info = build_image(
        tag=tag,
        method=one_of(method, get_args(BuildMethod), "--method"),
        rootfs_dir=rootfs,
        force=force,
        progress=lambda line: console.print(f"[dim]{line}[/dim]"),
    )
    verb = "already present" if not info.built else f"rebuilt ({info.replaced})" if info.replaced else "built"
    console.print(
        f"[green]{info.tag}[/green] {verb} ({info.method}, {info.size_bytes / 1e6:.0f} MB, "
        f"{info.image_id[:19]}, {info.duration_s:.1f} s)"
    )


@sandbox_app.command("check")
def check(
    image: str = typer.Option(DEFAULT_IMAGE, "--image", help="image to check"),
    sandbox: str = typer.Option(
        "auto", "--sandbox", help="auto (what a run would use: Docker when its image is current) | docker | local"
    ),
) -> None:
    """Show the backend, its limits and namespaces, and run a live hardening self-test (exit 1 if any item
    fails)."""
    from cambrian.sandbox.image import engine_available, image_status

    console = Console()
    choice = one_of(sandbox, ("auto", "docker", "local"), "--sandbox")
    if choice == "auto":
        status = image_status(image) if engine_available() else None
        choice = "docker" if status is not None and status.current else "local"
        why = "no Docker engine answers" if status is None else f"the image {image} is not current"
        console.print(f"auto: checking the {choice} sandbox" + ("" if choice == "docker" else f" ({why})"))
    report = _docker_report(image) if choice == "docker" else _local_report()
    limits = Table(title="Container limits" if report.backend == "docker" else "Local sandbox", show_header=False)
    for name, value in report.limits.items():
        limits.add_row(name, value)
    console.print(limits)
    table = Table(title="Hardening self-test")
    table.add_column("check")
    table.add_column("result")
    table.add_column("seen")
    for item in report.items:
        table.add_row(item.name, "[green]pass[/green]" if item.passed else "[bold red]FAIL[/bold red]", item.detail)
    console.print(table)
    if not report.ok:
        raise typer.Exit(code=1)


def _docker_report(image: str) -> CheckReport:
    from cambrian.sandbox.docker import DockerSandbox  # needs the engine: imported only when checking
    from cambrian.sandbox.docker_check import run_check

    console = Console()
    with DockerSandbox(image=image, pool_size=0, run_label="check") as sandbox:
        report = run_check(sandbox)
    console.print(f"Docker engine {report.engine_version}; image [bold]{report.image}[/bold] present")
    if report.packages:
        console.print("Python packages in the sandbox: " + ", ".join(f"{k} {v}" for k, v in report.packages.items()))
    return report


def _local_report() -> CheckReport:
    from cambrian.sandbox.local import LocalSandbox
    from cambrian.sandbox.local_check import run_local_check

    box = LocalSandbox()
    try:
        report = run_local_check(box)
    finally:
        box.close()
    Console().print(f"Local sandbox; namespaces: [bold]{report.engine_version}[/bold]")
    return report
