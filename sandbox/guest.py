"""The run protocol on the guest side: what both sandboxes do around one untrusted program (stdlib only).

One run: the program starts in a session (process group) of its own, under rlimits (`rlimits`,
`apply_rlimits`), with a scrubbed environment (`scrubbed_env`); `watch` reads its stdout and stderr up to
their caps until it exits, runs out of time or writes too much, and kills its whole group (`kill_group`)
in each case; `collect` reads back the files the spec names, from inside the work dir and under their
cap; `result` turns what happened into the run's result fields (exit code, capped output, timed out, out
of memory, truncated, files), the fields of `RunResult`.

Who runs it where:

- the local backend (`local.py`) imports this module into Cambrian's own process, which watches and
  collects; in the child, before the program, its launcher (`launcher_source`: `launch` and what it
  calls) applies the rlimits and, as root, drops to the run's own uid (`drop_privileges`);
- the Docker backend's runner (`container_runner.py`, PID 1 of the container) runs all of it inside the
  container. The container's command carries this module's source, registered under its own name before
  the runner starts (`docker_container.runner_command`): nothing is copied into the read-only image.

Hence the standard library only, and Python 3.10+ (a local run may use any such interpreter). Where the
two backends must differ, the difference is a parameter, said where it is taken.
"""

from __future__ import annotations

import math
import os
import re
import resource
import selectors
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

READ_CHUNK = 65536  # bytes per os.read of a program's pipe; bounds the memory one read can take
POLL_S = 0.05  # how often the watch checks the deadline and the leader
DRAIN_GRACE_S = 0.5  # after the group is killed: how long to read what is still buffered in the pipes
TASK_NOFILE = 256  # open files per process of a run: a run cannot flood the FM socket with connections
NOTE = "[cambrian sandbox]"  # how a note of the sandbox's own starts, appended to a run's stderr
MEMORY_ERROR_LINE = re.compile(r"^(\w+\.)*MemoryError\b", re.MULTILINE)
#: How a program the watch did not kill ends when it runs out of memory: killed by the OOM killer (the
#: kernel's or the container's cgroup's), or a segfault on a failed allocation.
OOM_SIGNALS = (-signal.SIGKILL, -signal.SIGSEGV)
PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3


def scrubbed_env(*, path: str, home: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of a run: nothing from the host, then `extra` (the backend's and the spec's own).

    path: PATH. The local backend's is the host's /usr/bin:/bin (what else the host installed stays out of
        reach); the image's python3 may live in /usr/local/bin.
    home: HOME and TMPDIR: the run's work dir.
    """
    return {
        "PATH": path,
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def expand_command(command: Iterable[str], python: str) -> list[str]:
    """argv with "{python}": as a whole argument `python -S` (the standard library and whatever the backend
    puts on PYTHONPATH, no site-packages), inside a longer argument the bare interpreter path."""
    argv: list[str] = []
    for arg in command:
        if arg == "{python}":
            argv += [python, "-S"]
        else:
            argv.append(arg.replace("{python}", python))
    return argv


def rlimits(
    *, memory_mb: int, timeout_s: float, max_file_bytes: int, max_processes: int | None
) -> list[tuple[str, int]]:
    """(resource name, value) pairs for `apply_rlimits`: bytes for AS and FSIZE, CPU seconds just past the wall
    limit (so a busy program that outlives the watch still ends), no core dumps.

    max_processes: RLIMIT_NPROC, which counts every process of the uid. The local backend sets it (as root each
        run has a uid of its own); the container's runner gives None: it shares the task's uid, and the
        container's pids limit binds instead.
    """
    limits = [
        ("RLIMIT_AS", int(memory_mb) * 1024 * 1024),
        ("RLIMIT_CPU", math.ceil(float(timeout_s)) + 1),
        ("RLIMIT_FSIZE", int(max_file_bytes)),
    ]
    if max_processes is not None:
        limits.append(("RLIMIT_NPROC", int(max_processes)))
    return [*limits, ("RLIMIT_NOFILE", TASK_NOFILE), ("RLIMIT_CORE", 0)]


def limits_arg(limits: list[tuple[str, int]]) -> str:
    """The limits as `launch` reads them: "RLIMIT_AS=1073741824,RLIMIT_CPU=31,..." ("" for none)."""
    return ",".join(f"{name}={int(value)}" for name, value in limits)


# `apply_rlimits`, `drop_privileges`, `exec_program` and `launch` are also the local backend's launcher
# program (`launcher_source`): they use only os, resource and sys.


def apply_rlimits(limits: list[tuple[str, int]]) -> None:
    """Lower each limit, soft and hard, to its value; never above the current hard limit, which an unprivileged
    process may not raise."""
    for name, value in limits:
        kind = getattr(resource, name)
        hard = resource.getrlimit(kind)[1]
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(kind, (value, value))


def drop_privileges(uid: int) -> None:
    """From root to `uid` (as its group too, with no other groups) for good: no_new_privs first, so no setuid
    program the run starts can climb back. Exits 126 where no_new_privs cannot be set."""
    import ctypes  # here: only runs as root pay for it

    if ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        sys.stderr.write("cambrian sandbox: cannot set no_new_privs\n")
        os._exit(126)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def exec_program(argv: list[str], env: dict[str, str]) -> NoReturn:
    """Become the program (PATH lookup in `env`); where it cannot start, say why on stderr and exit 127."""
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        os.write(2, ("cambrian sandbox: cannot run %r: %s\n" % (argv[0], exc)).encode())
        os._exit(127)


def launch(args: list[str]) -> NoReturn:
    """The local backend's launcher, in the child between Popen and the program: `args` are `limits_arg(...)`,
    the uid to run as (-1: keep this one) and the program's argv. Its environment is already the run's."""
    apply_rlimits([(name, int(value)) for name, value in (item.split("=") for item in args[0].split(",") if item)])
    if int(args[1]) >= 0:
        drop_privileges(int(args[1]))
    os.environ.pop("PWD", None)  # set by bwrap's --chdir: the run's env is the sandbox's alone
    exec_program(args[2:], dict(os.environ))


def launcher_source() -> str:
    """`launch` and what it calls, as a program for `python -S -c` (its arguments: those of `launch`).

    Their source, not this module's: the launcher starts before every local run, where compiling this whole
    module cost 10 ms and importing its re, signal and selectors 7 ms more (a one-line program's whole run
    takes about 50 ms); `import os, resource, sys` is nearly free (-S has loaded os and sys already).
    """
    import inspect  # on the host, once per process; the runner never needs it

    functions = "\n\n".join(inspect.getsource(f) for f in (apply_rlimits, drop_privileges, exec_program, launch))
    return f"from __future__ import annotations\n\nimport os, resource, sys\n\n\n{functions}\n\nlaunch(sys.argv[1:])\n"


def make_undumpable() -> bool:
    """PR_SET_DUMPABLE 0 for this process, read back: True once other processes of its user cannot read its
    memory, descriptors or environment through /proc, nor ptrace it. False where it cannot be set (not Linux,
    no ctypes)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        return bool(libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0)
    except (ImportError, OSError, AttributeError):
        return False


class CappedStream:
    """The first `cap` bytes of one output stream, and how many bytes came in all."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.total += len(chunk)

    @property
    def overflowed(self) -> bool:
        return self.total > self.cap

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class Watch:
    """What `watch` saw: the two capped streams, and whether it ran out of time or killed the program."""

    def __init__(self, cap: int) -> None:
        self.stdout = CappedStream(cap)
        self.stderr = CappedStream(cap)
        self.timed_out = False
        self.killed = False  # the watch killed the group before the leader exited: time or output ran out

    @property
    def truncated(self) -> bool:
        """More output than the cap came on a stream (the program was killed for it, or it had just exited)."""
        return self.stdout.overflowed or self.stderr.overflowed


def watch(
    stdout_fd: int,
    stderr_fd: int,
    *,
    group: int,
    leader_exited: Callable[[], bool],
    deadline: float,
    max_output_bytes: int,
) -> Watch:
    """Read the program's two pipes until its leader exits, its time is up, or it writes more than
    `max_output_bytes` on a stream; then kill its whole group, so nothing it left behind keeps writing, and
    read what is still buffered (for DRAIN_GRACE_S at most: something outside the group may hold a pipe).

    One selector loop in the calling thread, not reader threads, so that a grandchild holding a pipe open
    can never leave a reader blocked. The caller closes the pipes.

    group: the program's process group: its leader's pid.
    leader_exited: whether the leader has exited. The local backend asks without reaping it (the leader's
        pid, so the group's id, must stay the program's until the group is killed); the container's runner
        is PID 1 and reaps every process as it goes, keeping the leader's status.
    deadline: time.monotonic() seconds.
    """
    seen = Watch(max_output_bytes)
    streams = {stdout_fd: seen.stdout, stderr_fd: seen.stderr}
    selector = selectors.DefaultSelector()
    for fd in streams:
        selector.register(fd, selectors.EVENT_READ)
    try:
        drain_until: float | None = None  # set once the group is killed
        while selector.get_map():
            now = time.monotonic()
            if drain_until is not None:
                if now >= drain_until:
                    break  # something outside the group still holds a pipe: stop reading
                _read_ready(selector, streams, min(POLL_S, drain_until - now))
                continue
            if now >= deadline:
                seen.timed_out = seen.killed = True
            elif not leader_exited():
                _read_ready(selector, streams, min(POLL_S, deadline - now))
                if not seen.truncated:
                    continue
                seen.killed = True
            # Timed out, too much output, or the leader is done: whatever it left running in the group
            # goes too; then read what is buffered.
            kill_group(group)
            drain_until = time.monotonic() + DRAIN_GRACE_S
        if not seen.killed:
            _wait_for_leader(seen, group, leader_exited, deadline)
    finally:
        selector.close()
    return seen


def _read_ready(selector: selectors.BaseSelector, streams: dict[int, CappedStream], timeout: float) -> None:
    for key, _events in selector.select(timeout):
        chunk = os.read(key.fd, READ_CHUNK)
        if chunk:
            streams[key.fd].add(chunk)
        else:
            selector.unregister(key.fd)


def _wait_for_leader(seen: Watch, group: int, leader_exited: Callable[[], bool], deadline: float) -> None:
    """Both pipes closed and nothing killed: the leader has exited or is about to (or closed its pipes and runs
    on). Wait for it up to the deadline, checking often at first and every POLL_S at most."""
    pause = 0.0005
    while not leader_exited():
        if time.monotonic() >= deadline:
            seen.timed_out = seen.killed = True
            kill_group(group)
            return
        time.sleep(pause)
        pause = min(POLL_S, 2 * pause)


def kill_group(pgid: int) -> None:
    """SIGKILL every process of the group `pgid`; nothing when it is already empty."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already empty


def plain_relative(path: str) -> bool:
    """Whether `path` is relative and stays below where it starts: not empty, no leading '/', no '..', no NUL."""
    return bool(path) and not path.startswith("/") and "\x00" not in path and ".." not in path.split("/")


def collect(
    workdir: str, paths: Iterable[str], *, max_bytes: int, refuse_hard_links: bool
) -> tuple[dict[str, str], list[str]]:
    """Read back the files `paths` (relative to `workdir`) as text; notes say which were skipped and why.

    A missing file is skipped without a note; one that resolves outside the work dir, is not a regular file
    or is larger than `max_bytes` is skipped with one.
    refuse_hard_links: skip a file with other names too. The local backend's collector may be root and read
        what the run's own uid could not: a hard link to such a file must not carry it out. The container's
        runner has the task's uid: it can read nothing the task could not.
    """
    files: dict[str, str] = {}
    notes: list[str] = []
    root = os.path.realpath(workdir)
    for rel in paths:
        if not plain_relative(rel):
            notes.append(f"{NOTE} {rel} skipped: not a plain relative path")
            continue
        real = os.path.realpath(os.path.join(root, rel))
        if real != root and not real.startswith(root + os.sep):
            notes.append(f"{NOTE} {rel} skipped: it points outside the work dir")
            continue
        try:
            info = os.stat(real)
        except OSError:
            continue  # missing (or a symlink loop): the spec says missing files are skipped
        if not stat.S_ISREG(info.st_mode):
            notes.append(f"{NOTE} {rel} skipped: not a regular file")
        elif refuse_hard_links and info.st_nlink > 1:
            notes.append(f"{NOTE} {rel} skipped: it has other names (a hard link)")
        elif info.st_size > max_bytes:
            notes.append(f"{NOTE} {rel} skipped: {info.st_size} bytes is over the {max_bytes}-byte limit")
        else:
            try:
                with open(real, "rb") as handle:
                    files[rel] = handle.read(max_bytes).decode("utf-8", errors="replace")
            except OSError as exc:
                notes.append(f"{NOTE} {rel} skipped: {exc}")
    return files, notes


def result(
    seen: Watch, *, exit_code: int | None, duration_s: float, files: dict[str, str], notes: list[str]
) -> dict[str, Any]:
    """The run's result: `RunResult`'s fields by name (the runner's reply frame carries them as they are).

    exit_code: the leader's, negative for the signal that ended it; None when it is unknown. Reported as None
        when the watch killed the program. notes: lines appended to stderr (`collect`'s).
    duration_s: wall clock of the run, seconds.
    """
    stderr = seen.stderr.text()
    # SIGXCPU: RLIMIT_CPU (just above the wall limit) ran out, a timeout by another clock.
    timed_out = seen.timed_out or exit_code == -signal.SIGXCPU
    oom = not seen.killed and (exit_code in OOM_SIGNALS or bool(MEMORY_ERROR_LINE.search(stderr[-4000:])))
    if notes:
        stderr += ("\n" if stderr and not stderr.endswith("\n") else "") + "\n".join(notes) + "\n"
    return {
        "exit_code": None if seen.killed else exit_code,
        "stdout": seen.stdout.text(),
        "stderr": stderr,
        "duration_s": duration_s,
        "timed_out": timed_out,
        "oom_killed": oom,
        "output_truncated": seen.truncated,
        "files": files,
    }
