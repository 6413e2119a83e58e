"""`cambrian`: the typer app, the options and consoles every command group shares, and the entry point.

Every error a user can cause is a `CambrianError`, caught once, in `main`, and printed as cause + fix
without a traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from cambrian.meta_agent.errors import CambrianError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

app = typer.Typer(
    help="Cambrian: open-ended search for self-improving agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

console = Console()
err_console = Console(stderr=True)

RunsDir = typer.Option(
    Path(os.environ.get("CAMBRIAN_RUNS_DIR", "runs")), "--runs-dir", help="folder holding runs (env CAMBRIAN_RUNS_DIR)"
)


def store_url(value: str, *, given_as: str) -> URL:
    """`value` parsed as a store URL; InvalidStoreURL, naming how it was given (`given_as`: --store,
    CAMBRIAN_STORE, the config's store), for one that is no URL: refused before a command shows it in a message."""
    from cambrian.archive.store import parse_store_url

    return parse_store_url(value, given_as=given_as)


def _store_option(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """The callback of --store: refuse a value that is no URL (typed, or from CAMBRIAN_STORE), and a URL typed
    with its password: a process's arguments are readable by every process on the machine (/proc/PID/cmdline),
    agents' programs included. The environment and ~/.pgpass are not."""
    if value is None:
        return value
    source = ctx.get_parameter_source(str(param.name))  # typer's vendored click's enum: compared by name
    typed = source is not None and source.name == "COMMANDLINE"
    url = store_url(value, given_as="--store" if typed else "CAMBRIAN_STORE")
    if typed and url.password:
        shown = url.set(password="PASSWORD").render_as_string(hide_password=False)
        raise typer.BadParameter(
            "the URL carries its password, and a command line is readable by every process on this machine "
            f"(/proc/PID/cmdline), programs under evaluation included. Set CAMBRIAN_STORE='{shown}' in the "
            "environment and leave --store out, or drop the password from the URL and keep it in ~/.pgpass "
            "(or the file PGPASSFILE names)",
            param_hint="--store",
        )
    return value


Store = typer.Option(
    os.environ.get("CAMBRIAN_STORE") or None,
    "--store",
    help="database URL holding the runs' archive, shared by many runs, e.g. postgresql+psycopg://user@host/db "
    "(env CAMBRIAN_STORE, where a password belongs; one typed here is refused); default: each run's own "
    "RUNS_DIR/<run>/archive.db",
    callback=_store_option,
)


def http_url(value: str | None) -> str | None:
    """The callback of an --api-base option: a URL that names its scheme (`url_without_scheme`)."""
    from cambrian.meta_agent.config import url_without_scheme  # pydantic is imported only by commands needing it

    problem = url_without_scheme(value)
    if problem is not None:
        raise typer.BadParameter(problem, param_hint="--api-base")
    return value


def one_of(value: str, choices: Sequence[str], option: str) -> Any:
    """`value` when it is one of `choices` (typed Any: callers pass it where a Literal of them is expected);
    a usage error naming the option and its choices otherwise."""
    if value not in choices:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices)}", param_hint=option)
    return value


# ----- entry point -------------------------------------------------------------------------------


def _os_fix(error: OSError) -> str:
    """What to do about a file-system or network error a command met."""
    if isinstance(error, NotADirectoryError):
        return "a file is where a folder is needed: pass a folder path (or move the file away)"
    if isinstance(error, FileNotFoundError):
        return "a folder on the path does not exist (or cannot be created there): pass a path under a folder you own"
    if isinstance(error, PermissionError):
        return "you may not write there: pass a path you own (e.g. under your home folder)"
    if isinstance(error, IsADirectoryError):
        return "a folder is where a file is needed: pass a file path"
    return "check the path or address the command was given, and the free disk space"


def main() -> None:
    """Console-script entry: runs the app and turns user errors into cause + fix."""
    try:
        code = app(standalone_mode=False)  # a typer.Exit(n) inside a command comes back as n here, not raised
        if isinstance(code, int) and code:
            sys.exit(code)
    except CambrianError as exc:
        err_console.print(f"[bold red]error:[/bold red] {exc}")
        if exc.fix:
            err_console.print(f"[bold]fix:[/bold] {exc.fix}")
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("interrupted")
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except OSError as exc:  # a path or a port the command could not use: the cause and where, never a traceback
        where = f": {exc.filename}" if exc.filename else ""
        err_console.print(f"[bold red]error:[/bold red] {exc.strerror or exc}{where}")
        err_console.print(f"[bold]fix:[/bold] {_os_fix(exc)}")
        sys.exit(2)
    except Exception as exc:  # usage errors (an unknown command, a bad flag) come through here in standalone_mode=False
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):  # click's (or typer's vendored click's) ClickException
            show()
            sys.exit(code)
        raise
