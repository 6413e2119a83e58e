"""`cambrian ui` (the browser UI over a runs folder) and `cambrian report` (one self-contained HTML file).

Both read archives read-only (`ui` never writes). `ui` binds 127.0.0.1 by default; another host makes
the archives readable on the network, and it says so.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from pathlib import Path
from urllib.parse import quote

import typer

from cambrian.meta_agent.cli._app import RunsDir, Store, app, console, err_console
from cambrian.meta_agent.errors import CambrianError


class PortInUse(CambrianError):
    """The address `cambrian ui` was asked to listen on is taken (or not this machine's)."""


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound and listening on (host, port); PortInUse with the fix when that fails."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as error:
        sock.close()
        busy = error.errno == errno.EADDRINUSE
        raise PortInUse(
            f"cannot listen on {host}:{port}: " + ("the port is in use" if busy else str(error.strerror or error)),
            fix=f"pick another port (`--port {port + 1}`), or stop what is listening on {port}"
            if busy
            else "pass an address of this machine with --host (127.0.0.1 by default)",
        ) from error
    return sock


#: Listen addresses that are every interface, not a name a browser sends.
WILDCARDS = ("0.0.0.0", "::", "")


def _url(host: str, port: int, path: str = "/") -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}{path}"


@app.command("ui")
def serve_ui(
    run_name: str | None = typer.Argument(None, metavar="[RUN]", help="open straight on this run"),
    runs_dir: Path = RunsDir,
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (loopback only by default)"),
    port: int = typer.Option(8765, "--port", min=1, max=65535, help="TCP port to listen on"),
    allow_host: list[str] = typer.Option(
        [], "--allow-host", help="another name the browser may reach the UI by (a proxy's); repeatable"
    ),
    store: str | None = Store,
) -> None:
    """Browse runs in the browser: lineage tree, scores, code, diffs, prompts; live while a search runs.

    It answers only requests addressed to 127.0.0.1, localhost, the --host address and the --allow-host
    names: another site's page cannot read the runs by pointing its own name at this machine."""
    import uvicorn

    from cambrian.meta_agent.search.stores import shown_store
    from cambrian.ui import check_run, create_app, is_loopback

    where = str(Path(runs_dir).resolve()) if store is None else shown_store(store)
    if run_name is not None:
        check_run(runs_dir, run_name, store)  # a missing or unreadable run fails here, with its fix
    if not is_loopback(host):
        err_console.print(
            f"[bold yellow]warning:[/bold yellow] listening on {host}: every archive in {where} (agent code, "
            "prompts, replies, scores) becomes readable by anyone who can reach this address on the network"
        )
    sock = _listen(host, port)
    path = "/" if run_name is None else f"/runs/{quote(run_name, safe='')}"
    url = _url(host, port, path)
    console.print(f"Cambrian UI for {where} at [bold]{url}[/bold]  (Ctrl-C stops)", soft_wrap=True)
    hosts = [*([] if host.strip("[]") in WILDCARDS else [host]), *allow_host]
    ui_app = create_app(Path(runs_dir), run=run_name, store=store, hosts=hosts)
    config = uvicorn.Config(ui_app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        with contextlib.suppress(OSError):
            sock.close()


@app.command("report")
def report(
    run_name: str = typer.Argument(..., metavar="RUN"),
    to: Path = typer.Option(..., "--to", help="the HTML file to write"),
    best: int = typer.Option(3, "--best", min=0, help="include the code and diffs of the N best agents"),
    runs_dir: Path = RunsDir,
    store: str | None = Store,
) -> None:
    """Write one self-contained HTML file of a run (plots, tree, best agents' code and diffs) that opens offline."""
    from cambrian.ui import write_report

    path = write_report(runs_dir, run_name, to, best=best, store=store)
    size_mb = path.stat().st_size / 1e6
    console.print(f"wrote {path} ({size_mb:.1f} MB): open it in a browser, no server or network needed")
