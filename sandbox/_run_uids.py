"""The local sandbox's run uids, as root: each run in flight has an unprivileged uid of its own.

Each process that runs local sandboxes takes a block of uids of its own (from its pid), one uid per run in
flight, so a run's processes, its RLIMIT_NPROC and the kill after it (`kill_uid`: every process of the uid,
what it started with setsid() included) are that run's alone. The launcher (`guest.launch`) drops to the uid
with no groups and no_new_privs; the work dir is made the uid's (`give_tree`). The interpreter must be
reachable by such a uid: `check_reachable` tries it once per interpreter and, where it fails, names the
folder to open.
"""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from pathlib import Path

from cambrian.sandbox.base import SandboxError

_RUN_UID_BASE = 200_000
_RUN_UIDS_PER_PROCESS = 64

#: Runs as the run's uid after the run: SIGKILL every process of that uid (kill(-1) reaches exactly the
#: processes the caller may signal: those of its own uid), until none is left. setsid() escapes nothing.
#: SIGKILL is 9 on every platform this runs on (as root: Linux); the signal module's import (enum) cost
#: 7.5 ms per run.
_KILL_UID = """\
import os, sys, time
uid = int(sys.argv[1])
os.setgroups([])
os.setgid(uid)
os.setuid(uid)

def alive():
    # Processes of the uid that are not zombies (a zombie is dead: its parent reaps it).
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                owner = os.stat("/proc/" + name).st_uid
                with open("/proc/%s/stat" % name) as handle:
                    state = handle.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            count += owner == uid and state != "Z"
    return count

deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    try:
        os.kill(-1, 9)
    except ProcessLookupError:
        break
    if not alive():
        break
    time.sleep(0.002)
"""


class _RunUids:
    """This process's block of run uids (shared by every LocalSandbox in it) and which interpreters they reach."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.free = [
            _RUN_UID_BASE + (os.getpid() % 10_000) * _RUN_UIDS_PER_PROCESS + k for k in range(_RUN_UIDS_PER_PROCESS)
        ]
        self.reachable: dict[str, tuple[bool, str]] = {}  # interpreter -> (a run uid can start it, why not)


_UIDS = _RunUids()


def take_uid() -> int:
    """A free run uid of this process's block; SandboxError when every one is in use."""
    with _UIDS.lock:
        if not _UIDS.free:
            raise SandboxError(
                f"more than {_RUN_UIDS_PER_PROCESS} local sandbox runs at once in one process",
                fix="lower evaluation.concurrency",
            )
        return _UIDS.free.pop(0)


def give_back_uid(uid: int) -> None:
    with _UIDS.lock:
        _UIDS.free.append(uid)


def kill_uid(python: str, uid: int) -> None:
    """SIGKILL every process of the run's uid (what it started with setsid() included), from that uid."""
    try:
        subprocess.run(
            [python, "-S", "-c", _KILL_UID, str(uid)],
            cwd="/",
            env={},
            timeout=30,
            capture_output=True,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        pass  # the interpreter was checked at the first run; the work dir goes anyway


def check_reachable(python: str, root: str | None, launcher: str) -> None:
    """Can a run uid start `python` and import from its standard library, and reach work dirs under `root`?
    SandboxError naming the folder to open where not. The interpreter is tried once per process.

    launcher: the launcher program (`guest.launcher_source()`), which drops to the uid as a run's does.
    """
    with _UIDS.lock:
        known = _UIDS.reachable.get(python)
    if known is None:
        uid = take_uid()
        try:
            done = subprocess.run(
                [python, "-S", "-c", launcher, "", str(uid), python, "-S", "-c", "import json, encodings.idna"],
                cwd="/",
                env={},
                timeout=60,
                capture_output=True,
                text=True,
            )
            reason = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
            known = (done.returncode == 0, reason)
        except (OSError, subprocess.SubprocessError) as exc:
            known = (False, str(exc))
        finally:
            kill_uid(python, uid)
            give_back_uid(uid)
        with _UIDS.lock:
            _UIDS.reachable[python] = known
    reachable, reason = known
    closed_root = _first_closed_folder(os.path.join(root, "x")) if root else None
    if reachable and closed_root:
        raise SandboxError(
            f"running as root, the local sandbox runs each program as an unprivileged uid, which cannot reach "
            f"its work dirs under {root}: {closed_root} is not searchable by other users",
            fix=f"`chmod o+x {closed_root}`, or give LocalSandbox a root folder others may pass through",
        )
    if not reachable:
        blocked = _first_closed_folder(python)
        raise SandboxError(
            f"running as root, the local sandbox runs each program as an unprivileged uid, which cannot "
            f"start {python} ({reason})" + (f": {blocked} is not searchable by other users" if blocked else ""),
            fix=(f"`chmod o+x {blocked}` (lets other users pass through it, not list it), " if blocked else "")
            + "install Cambrian with an interpreter outside root's home, run it as a non-root user, "
            "or use --sandbox docker",
        )


def give_tree(root: Path, uid: int) -> None:
    """Make the work dir and the placed files the run uid's (as root)."""
    os.chown(root, uid, uid)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), uid, uid)


def _first_closed_folder(path: str) -> str | None:
    """The outermost folder on the way to `path` (as given, then with links resolved) that other users
    cannot pass through; None when every one is open."""
    for way in (Path(os.path.abspath(path)), Path(os.path.realpath(path))):
        for folder in reversed(way.parents):
            try:
                if not folder.stat().st_mode & stat.S_IXOTH:
                    return str(folder)
            except OSError:
                return str(folder)
    return None
