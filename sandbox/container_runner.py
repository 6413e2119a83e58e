"""The long-lived task runner that runs INSIDE a sandbox container (stdlib only).

The container's command is `python3 -I -S -c <loader> <guest.py's source> <this file's source>`
(`docker_container.runner_command`): the loader registers the run protocol (`guest.py`) under its
own name, `cambrian.sandbox.guest`, and runs this file, so it imports it as on the host. Nothing is
copied in and the root fs stays read-only. The runner is PID 1 of the
container's PID namespace, runs as the sandbox user, and talks to the host over
the container's attached stdin/stdout with length-prefixed JSON frames
(4-byte big-endian length, then UTF-8 JSON). Its first frame is
{"ready": true, ...}; then, for each request frame, one reply frame.

The runner cannot be reached from a task: it makes itself non-dumpable first
(prctl PR_SET_DUMPABLE 0), so /proc/1/fd, /proc/1/mem and ptrace need
CAP_SYS_PTRACE, which the sandbox user lacks: a task cannot write a frame on
the runner's stdout. It ignores SIGINT and SIGTERM (a task may signal it:
same uid). Every request carries an "id" (random, from the host); the reply
echoes it, so the host accepts one reply per request and only the runner's.

A request {"op": "run", id, files, command, timeout_s, memory_mb, max_output_bytes,
max_file_bytes, collect, max_collect_bytes, env} is served by:
wipe the scratch dirs (/work, /tmp, /dev/shm) -> write the files into /work ->
fork the command into its own session with rlimits (address space, CPU
seconds, file size, open files, no core) and a scrubbed env -> read its stdout/stderr up
to the caps (past a cap the group is killed) until it exits or the timeout
(the group is killed) -> collect files -> SIGKILL every other process of the
sandbox user (kill(-1) spares only the caller, and PID 1 of a namespace
cannot be killed from inside it) and reap them all -> wipe again -> reply
{id, exit_code, stdout, stderr, duration_s, timed_out, oom_killed,
output_truncated, files}. A request {"op": "ping", id} gets {"id", "pong": true}.
A request the runner cannot serve gets {"error": "..."}. Rlimits, watch, kill,
collect and the result's fields are the run protocol's, shared with the local
backend (`guest.py`).

"{python}" as a whole argument becomes `<this interpreter> -S`; inside a
longer argument, the bare interpreter path (the same rule as the local backend).
"""

import json
import os
import shutil
import signal
import stat
import struct
import sys
import time

from cambrian.sandbox.guest import (
    apply_rlimits,
    collect,
    exec_program,
    expand_command,
    kill_group,
    make_undumpable,
    plain_relative,
    result,
    rlimits,
    scrubbed_env,
    watch,
)

WORK_DIR = "/work"
SCRATCH_DIRS = ("/work", "/tmp", "/dev/shm")  # the only writable places in the container
#: PATH inside the container: the image's python3 lives in /usr/local/bin (the python:*-slim recipe) or /usr/bin.
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
HEADER = struct.Struct(">I")  # frame length prefix
REAP_GRACE_S = 5.0  # how long the cleanup may wait for killed processes to be reaped
IGNORED_BY_RUNNER = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def read_exact(count):
    """`count` bytes from stdin, or None at end of stream."""
    data = bytearray()
    while len(data) < count:
        chunk = os.read(0, count - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def receive():
    """The next request frame as a dict, or None when the host closed the stream."""
    header = read_exact(HEADER.size)
    if header is None:
        return None
    body = read_exact(HEADER.unpack(header)[0])
    return None if body is None else json.loads(body.decode("utf-8"))


def send(message):
    body = json.dumps(message, ensure_ascii=False).encode("utf-8", errors="replace")
    view = memoryview(HEADER.pack(len(body)) + body)
    while view:
        view = view[os.write(1, view) :]


def wipe_scratch():
    """Empty every scratch dir, even where a task made parts of it read-only (same owner)."""

    def make_writable_and_retry(func, failed, _exc):
        try:
            os.chmod(os.path.dirname(failed), stat.S_IRWXU)
            if not os.path.islink(failed):
                os.chmod(failed, stat.S_IRWXU)
            func(failed)
        except OSError:
            pass  # not ours (another owner): the container is removed at session end anyway

    for root in SCRATCH_DIRS:
        try:
            entries = list(os.scandir(root))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, onerror=make_writable_and_retry)
                else:
                    os.unlink(entry.path)
            except OSError:
                make_writable_and_retry(os.unlink, entry.path, None)


def write_files(files):
    for rel, text in files.items():
        if not plain_relative(rel):
            raise ValueError("path %r is not a plain relative path" % rel)
        path = os.path.join(WORK_DIR, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)


def exec_child(argv, env, limits, out_w, err_w):
    """In the forked child: own session, limits, pipes as stdout/stderr, then exec. Never returns."""
    try:
        os.setsid()
        apply_rlimits(limits)
        # Python (and serve(), for the runner) ignores these; an exec'd program expects the defaults.
        for signum in IGNORED_BY_RUNNER + (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 65536)
        os.chdir(WORK_DIR)
        exec_program(argv, env)
    except BaseException as exc:  # noqa: BLE001 - the child could not be set up: say why on the task's stderr
        try:
            os.write(2, ("cambrian sandbox: cannot run %r: %s\n" % (argv[0], exc)).encode())
        finally:
            os._exit(127)


class Reaper:
    """Reaps every child (the runner is PID 1: orphans are ours) and keeps the leader's status."""

    def __init__(self, leader):
        self.leader = leader
        self.status = None

    def reap(self):
        """Reap what has exited; True when no child is left at all."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid == 0:
                return False
            if pid == self.leader:
                self.status = status

    def leader_exited(self):
        """Reap what has exited; True once the leader has (`guest.watch` asks)."""
        self.reap()
        return self.status is not None


def kill_everything(reaper):
    """SIGKILL every process this user may signal (all but the runner) and reap them."""
    deadline = time.monotonic() + REAP_GRACE_S
    while time.monotonic() < deadline:
        try:
            os.kill(-1, signal.SIGKILL)
            signalled = True
        except ProcessLookupError:
            signalled = False
        if reaper.reap() and not signalled:
            return
        time.sleep(0.001)


def run_task(request):
    wipe_scratch()
    write_files(request.get("files", {}))
    argv = expand_command(request["command"], sys.executable)
    env = scrubbed_env(path=SANDBOX_PATH, home=WORK_DIR, extra=request.get("env", {}))
    limits = rlimits(
        memory_mb=request["memory_mb"],
        timeout_s=request["timeout_s"],
        max_file_bytes=request["max_file_bytes"],
        max_processes=None,  # the container's pids limit binds; RLIMIT_NPROC would count the runner too
    )
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        exec_child(argv, env, limits, out_w, err_w)
    os.close(out_w)
    os.close(err_w)
    reaper = Reaper(pid)
    try:
        seen = watch(
            out_r,
            err_r,
            group=pid,
            leader_exited=reaper.leader_exited,
            deadline=started + float(request["timeout_s"]),
            max_output_bytes=int(request["max_output_bytes"]),
        )
    finally:
        os.close(out_r)
        os.close(err_r)
        kill_group(pid)
        kill_everything(reaper)
    duration = time.monotonic() - started
    exit_code = None if reaper.status is None else os.waitstatus_to_exitcode(reaper.status)
    files, notes = collect(
        WORK_DIR,
        request.get("collect", []),
        max_bytes=int(request["max_collect_bytes"]),
        refuse_hard_links=False,  # the runner has the task's uid: a link reaches nothing the task could not read
    )
    wipe_scratch()
    return result(seen, exit_code=exit_code, duration_s=duration, files=files, notes=notes)


def serve():
    undumpable = make_undumpable()
    for signum in IGNORED_BY_RUNNER:
        signal.signal(signum, signal.SIG_IGN)
    os.chdir(WORK_DIR)
    send({"ready": True, "pid": os.getpid(), "uid": os.getuid(), "python": sys.executable, "undumpable": undumpable})
    while True:
        request = receive()
        if request is None:
            return
        try:
            if request.get("op") == "ping":
                reply = {"pong": True}
            elif request.get("op") == "run":
                reply = run_task(request)
            else:
                reply = {"error": "unknown request op %r" % request.get("op")}
        except Exception as exc:  # noqa: BLE001 - reported to the host, which raises SandboxError
            reply = {"error": "%s: %s" % (type(exc).__name__, exc)}
        reply["id"] = request.get("id")
        send(reply)


if __name__ == "__main__":
    serve()
