"""One process searches a run at a time: the run's lock, `RUNS_DIR/<run>/run.lock`.

Two `cambrian resume`s of one run (or a `run --name` of a run being searched) once both went on, crashed on
the agents they both claimed (`InvalidTransition`) and left the run marked failed. Now the second is refused,
naming the process that holds the run. The lock is an advisory `flock` on the file, so the kernel releases it
when its holder ends however it ends (killed included): a stale lock cannot outlive its process. It guards
the runs of one machine's runs folder; runs kept in a shared store are searched from one machine at a time.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from cambrian.meta_agent.errors import RunBusy

LOCK_FILE = "run.lock"


@contextlib.contextmanager
def run_lock(folder: Path, name: str) -> Iterator[None]:
    """Hold the lock of the run kept in `folder` (created if needed) while the block runs; RunBusy, naming the
    holder's pid and host, when another process holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunBusy(
                f"run {name!r} is being searched now, by {holder}",
                fix=f"let it finish, or stop it (Ctrl-C in its terminal, or `kill -INT PID`), then `cambrian resume "
                f"{name}`; `cambrian status {name}` shows its progress meanwhile",
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            handle.flush()
