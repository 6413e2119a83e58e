"""The long-lived task runner that runs INSIDE a sandbox container (stdlib only).

The container's command is `python3 -I -S -c <this file's source>`: nothing is
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
A request the runner cannot serve gets {"error": "..."}.

"{python}" as a whole argument becomes `<this interpreter> -S`; inside a
longer argument, the bare interpreter path (the same rule as the local backend).
"""

import json
import math
import os
import re
import resource
import selectors
import shutil
import signal
import stat
import struct
import sys
import time

WORK_DIR = "/work"
SCRATCH_DIRS = ("/work", "/tmp", "/dev/shm")  # the only writable places in the container
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
HEADER = struct.Struct(">I")  # frame length prefix
READ_CHUNK = 65536  # bytes per os.read of a task's pipe
POLL_S = 0.05  # how often the wait loop checks the leader and the deadline
DRAIN_GRACE_S = 0.5  # after killing the group: how long to read what is still buffered
REAP_GRACE_S = 5.0  # how long the cleanup may wait for killed processes to be reaped
TASK_NOFILE = 256  # open files per task process: a task cannot flood the FM socket with connections
PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3
IGNORED_BY_RUNNER = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
MEMORY_ERROR_LINE = re.compile(r"^(\w+\.)*MemoryError\b", re.MULTILINE)


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


def inside_work(rel):
    """The absolute path of `rel` in the work dir; ValueError for absolute paths or '..'."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or "\x00" in rel or ".." in parts:
        raise ValueError("path %r is not a plain relative path" % rel)
    return os.path.join(WORK_DIR, rel)


def write_files(files):
    for rel, text in files.items():
        path = inside_work(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)


def expand_command(command):
    argv = []
    for arg in command:
        if arg == "{python}":
            argv += [sys.executable, "-S"]
        else:
            argv.append(arg.replace("{python}", sys.executable))
    return argv


def rlimits(request):
    """(resource, value) pairs: bytes for AS/FSIZE, seconds for CPU (just past the wall limit)."""
    return [
        (resource.RLIMIT_AS, int(request["memory_mb"]) * 1024 * 1024),
        (resource.RLIMIT_CPU, math.ceil(float(request["timeout_s"])) + 1),
        (resource.RLIMIT_FSIZE, int(request["max_file_bytes"])),
        (resource.RLIMIT_NOFILE, TASK_NOFILE),
        (resource.RLIMIT_CORE, 0),
    ]


def exec_child(argv, env, limits, out_w, err_w):
    """In the forked child: own session, limits, pipes as stdout/stderr, then exec. Never returns."""
    try:
        os.setsid()
        for kind, value in limits:
            hard = resource.getrlimit(kind)[1]
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(kind, (value, value))
        # Python (and serve(), for the runner) ignores these; an exec'd program expects the defaults.
        for signum in IGNORED_BY_RUNNER + (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 65536)
        os.chdir(WORK_DIR)
        os.execvpe(argv[0], argv, env)
    except BaseException as exc:  # noqa: BLE001 - exec failed: say why on the task's stderr
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


def kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


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


def collect(request):
    """Read back the requested files; notes say which were skipped and why."""
    files, notes = {}, []
    root = os.path.realpath(WORK_DIR)
    for rel in request.get("collect", []):
        try:
            real = os.path.realpath(inside_work(rel))
        except ValueError:
            notes.append("[cambrian sandbox] %s skipped: not a plain relative path" % rel)
            continue
        if real != root and not real.startswith(root + "/"):
            notes.append("[cambrian sandbox] %s skipped: it points outside the work dir" % rel)
            continue
        try:
            info = os.stat(real)
        except OSError:
            continue  # missing files are skipped
        limit = int(request["max_collect_bytes"])
        if not stat.S_ISREG(info.st_mode):
            notes.append("[cambrian sandbox] %s skipped: not a regular file" % rel)
        elif info.st_size > limit:
            notes.append(
                "[cambrian sandbox] %s skipped: %d bytes is over the %d-byte limit" % (rel, info.st_size, limit)
            )
        else:
            try:
                with open(real, "rb") as handle:
                    files[rel] = handle.read(limit).decode("utf-8", errors="replace")
            except OSError as exc:
                notes.append("[cambrian sandbox] %s skipped: %s" % (rel, exc))
    return files, notes


class Streams:
    """The task's two capped output streams."""

    def __init__(self, cap):
        self.cap = cap
        self.data = {1: bytearray(), 2: bytearray()}
        self.total = {1: 0, 2: 0}

    def add(self, which, chunk):
        room = self.cap - len(self.data[which])
        if room > 0:
            self.data[which] += chunk[:room]
        self.total[which] += len(chunk)

    def overflowed(self):
        return self.total[1] > self.cap or self.total[2] > self.cap

    def text(self, which):
        return self.data[which].decode("utf-8", errors="replace")


def watch(pid, reaper, out_r, err_r, request, deadline):
    """Read both pipes until the leader is done, times out or writes too much.

    Returns (timed_out, truncated, killed_by_runner). The group is killed once
    the leader exits, so background processes cannot keep the pipes open.
    """
    streams = Streams(int(request["max_output_bytes"]))
    selector = selectors.DefaultSelector()
    which = {out_r: 1, err_r: 2}
    for fd in which:
        selector.register(fd, selectors.EVENT_READ)
    timed_out = truncated = killed = False
    drain_until = None
    try:
        while selector.get_map():
            now = time.monotonic()
            if drain_until is not None:
                if now >= drain_until:
                    break  # something still holds a pipe open: stop reading
                read_ready(selector, which, streams, min(POLL_S, drain_until - now))
                continue
            reaper.reap()
            if now >= deadline:
                timed_out = killed = True
            elif reaper.status is None:
                read_ready(selector, which, streams, min(POLL_S, deadline - now))
                if not streams.overflowed():
                    continue
                truncated = killed = True
            kill_group(pid)
            drain_until = time.monotonic() + DRAIN_GRACE_S
        # Both pipes closed: the leader has exited or is about to; wait for it, up to the deadline.
        while not killed and reaper.status is None:
            reaper.reap()
            if reaper.status is not None:
                break
            if time.monotonic() >= deadline:
                timed_out = killed = True
                kill_group(pid)
                break
            time.sleep(0.0005)
    finally:
        selector.close()
        os.close(out_r)
        os.close(err_r)
    truncated = truncated or streams.overflowed()
    return streams, timed_out, truncated, killed


def read_ready(selector, which, streams, timeout):
    for key, _events in selector.select(timeout):
        chunk = os.read(key.fd, READ_CHUNK)
        if chunk:
            streams.add(which[key.fd], chunk)
        else:
            selector.unregister(key.fd)


def run_task(request):
    wipe_scratch()
    write_files(request.get("files", {}))
    argv = expand_command(request["command"])
    env = {
        "PATH": SANDBOX_PATH,
        "HOME": WORK_DIR,
        "TMPDIR": WORK_DIR,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(request.get("env", {}))
    limits = rlimits(request)
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
        streams, timed_out, truncated, killed = watch(
            pid, reaper, out_r, err_r, request, deadline=started + float(request["timeout_s"])
        )
    finally:
        kill_group(pid)
        kill_everything(reaper)
    duration = time.monotonic() - started
    exit_code = None if reaper.status is None else os.waitstatus_to_exitcode(reaper.status)
    stderr = streams.text(2)
    timed_out = timed_out or exit_code == -signal.SIGXCPU
    # A SIGKILL the runner did not send comes from the cgroup's OOM killer.
    oom = not killed and (
        exit_code in (-signal.SIGKILL, -signal.SIGSEGV) or bool(MEMORY_ERROR_LINE.search(stderr[-4000:]))
    )
    files, notes = collect(request)
    if notes:
        stderr = stderr + ("\n" if stderr and not stderr.endswith("\n") else "") + "\n".join(notes) + "\n"
    wipe_scratch()
    return {
        "exit_code": None if killed else exit_code,
        "stdout": streams.text(1),
        "stderr": stderr,
        "duration_s": duration,
        "timed_out": timed_out,
        "oom_killed": oom,
        "output_truncated": truncated,
        "files": files,
    }


def make_undumpable():
    """PR_SET_DUMPABLE 0; returns the flag read back (0 when it took), or None where prctl is missing."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        return libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        return None


def serve():
    dumpable = make_undumpable()
    for signum in IGNORED_BY_RUNNER:
        signal.signal(signum, signal.SIG_IGN)
    os.chdir(WORK_DIR)
    send({"ready": True, "pid": os.getpid(), "uid": os.getuid(), "python": sys.executable, "dumpable": dumpable})
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
