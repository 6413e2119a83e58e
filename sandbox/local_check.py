"""`cambrian sandbox check --sandbox local`: the local backend's facts and a live hardening self-test.

The same attacks a hostile review made on the local sandbox, run in it as probes, each reported pass/fail:
the program must not reach the network or a listener on the host's loopback, read another host process's
command line (where a store password was found), see a world-readable file of the host's /tmp, see
Cambrian's own files (its source and its environment's packages, where HumanEval's answer key lies), leave
a file in the host's /tmp, /var/tmp or /dev/shm, see the host's environment, run as root, fork past its
process limit, or leave a process running after its run. numpy and scipy must import. In Linux namespaces
(bubblewrap) every item passes; without them most fail, and the report says so rather than hiding it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cambrian.sandbox import _namespaces
from cambrian.sandbox.base import RunSpec
from cambrian.sandbox.docker_check import FORK_PROBE, SCRUBBED_ENV, CheckItem, CheckReport, env_item, scientific_item

if TYPE_CHECKING:
    from cambrian.sandbox.local import LocalSandbox

_PROBE_TIMEOUT_S = 30.0
_TEMP_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")
#: The local runner's scrubbed env (sandbox/local.py): Docker's, the package folder and the thread counts.
LOCAL_ENV = SCRUBBED_ENV | {"PYTHONPATH", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"}

_PROBE = r"""
import json, os, socket, sys
host_pid, canary, port, hidden, name = sys.argv[1:6]
report = {}
for key, address in (("network", ("1.1.1.1", 53)), ("loopback", ("127.0.0.1", int(port)))):
    try:
        socket.create_connection(address, timeout=3).close()
        report[key] = "connected to %s:%d" % address
    except OSError as exc:
        report[key] = None
        report[key + "_error"] = str(exc)
try:
    with open("/proc/%s/cmdline" % host_pid, "rb") as handle:
        report["host_cmdline"] = handle.read().replace(b"\0", b" ").decode(errors="replace")[:120]
except OSError as exc:
    report["host_cmdline"] = None
    report["host_cmdline_error"] = type(exc).__name__
report["processes"] = len([p for p in os.listdir("/proc") if p.isdigit()])
report["canary_visible"] = os.path.exists(canary)
report["cambrian_visible"] = [path for path in json.loads(hidden) if os.path.exists(path)]
written = []
for folder in ("/tmp", "/var/tmp", "/dev/shm"):
    try:
        with open(os.path.join(folder, name), "w") as handle:
            handle.write("x")
        written.append(folder)
    except OSError:
        pass
report["written"] = written
report["uid"] = os.getuid()
report["env"] = dict(os.environ)
print(json.dumps(report))
"""

# A daemon: double fork, own session, then the interpreter sleeping with a unique word in its argv (the host
# looks for it in every process's command line once the run has returned).
_DAEMON_PROBE = r"""
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]])
    os._exit(0)
os.wait()
print("started")
"""


def run_local_check(sandbox: LocalSandbox) -> CheckReport:
    """Run the hostile probes in `sandbox` and report each item (see the module doc)."""
    described = {
        "namespaces": namespaces_summary(sandbox.namespaces),
        "runs as": "an unprivileged uid of its own per run" if sandbox.drops_privileges else "your user",
        "interpreter": sandbox.python,
        "limits (per run)": "address space, CPU seconds, file size, processes and descriptors (rlimits)",
    }
    packages: dict[str, str] = {}
    with _canary() as canary, _listener() as port:
        items = _probe_items(sandbox, canary=canary, port=port)
    with sandbox.session() as session:
        items.append(scientific_item(session, packages))
    return CheckReport(
        engine_version=described["namespaces"],
        image=sandbox.python,
        image_present=True,
        limits=described,
        items=tuple(items),
        packages=packages,
        backend="local",
    )


def namespaces_summary(in_force: bool) -> str:
    """Which namespaces the local sandbox's runs get here, in one line (`cambrian doctor`, `sandbox check`)."""
    if in_force:
        kinds = "pid, network, ipc, uts, mount" + ("" if os.geteuid() == 0 else ", user")
        return f"bubblewrap {bwrap_version()}: {kinds}"
    if _namespaces.bwrap() is None:
        return "none (bubblewrap is not installed: apt-get install bubblewrap)"
    if _namespaces.available():
        return "none (turned off for this sandbox)"
    return "none (bubblewrap cannot make namespaces here: allow unprivileged user namespaces, or run as root)"


def _probe_items(sandbox: LocalSandbox, *, canary: str, port: int) -> list[CheckItem]:
    name = f"cambrian-probe-{secrets.token_hex(6)}"
    spec = RunSpec(
        files={"probe.py": _PROBE},
        command=("{python}", "probe.py", str(os.getpid()), canary, str(port), json.dumps(_cambrian_files()), name),
        timeout_s=_PROBE_TIMEOUT_S,
    )
    result = sandbox.run(spec)
    leaked = [folder for folder in _TEMP_FOLDERS if _remove(os.path.join(folder, name))]
    try:
        seen = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        detail = f"the probe failed: exit {result.exit_code}, {result.stderr.strip()[-300:]}"
        return [CheckItem("probe ran", False, detail)]
    items = [
        _unreached("network unreachable", seen, "network"),
        _unreached("host loopback unreachable", seen, "loopback"),
        CheckItem(
            "host processes hidden",
            seen["host_cmdline"] is None,
            f"Cambrian's command line unreadable ({seen.get('host_cmdline_error')}); {seen['processes']} "
            "processes visible"
            if seen["host_cmdline"] is None
            else f"read Cambrian's command line: {seen['host_cmdline']!r}",
        ),
        CheckItem(
            "host files not visible",
            not seen["canary_visible"],
            f"a world-readable file in the host's /tmp is {'visible' if seen['canary_visible'] else 'absent'}",
        ),
        CheckItem(
            "Cambrian's files not visible",
            not seen["cambrian_visible"],
            "its source and packages are absent"
            if not seen["cambrian_visible"]
            else "visible: " + ", ".join(seen["cambrian_visible"]),
        ),
        CheckItem(
            "temp folders private",
            not leaked,
            f"wrote {', '.join(seen['written']) or 'nowhere'}; nothing reached the host's"
            if not leaked
            else f"a file it wrote appeared in the host's {', '.join(leaked)}",
        ),
        env_item(seen["env"], LOCAL_ENV),
        CheckItem("runs as non-root", seen["uid"] != 0, f"uid {seen['uid']}"),
    ]
    return [*items, _fork_item(sandbox), _survivor_item(sandbox)]


def _unreached(name: str, seen: dict[str, object], key: str) -> CheckItem:
    if seen[key] is None:
        return CheckItem(name, True, str(seen.get(f"{key}_error", "")))
    return CheckItem(name, False, str(seen[key]))


def _fork_item(sandbox: LocalSandbox) -> CheckItem:
    spec = RunSpec(files={"fork.py": FORK_PROBE}, command=("{python}", "fork.py"), timeout_s=30)
    limit = spec.pids
    bomb = sandbox.run(spec)
    forked = int(bomb.stdout.strip()) if bomb.stdout.strip().isdigit() else -1
    return CheckItem(
        "pids limit holds", 0 <= forked < limit, f"a fork loop stopped after {forked} children (limit {limit})"
    )


def _survivor_item(sandbox: LocalSandbox) -> CheckItem:
    word = f"cambrian-survivor-{secrets.token_hex(6)}"
    result = sandbox.run(
        RunSpec(files={"daemon.py": _DAEMON_PROBE}, command=("{python}", "daemon.py", word), timeout_s=30)
    )
    survivors = _processes_with(word)
    for pid in survivors:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if result.stdout.strip() != "started":
        return CheckItem("no process survives a run", False, f"the probe failed: {result.stderr.strip()[-200:]}")
    return CheckItem(
        "no process survives a run",
        not survivors,
        "a daemon it started (own session, double fork) died with the run"
        if not survivors
        else f"a daemon it started outlived the run (pid {survivors[0]}, killed now)",
    )


def _processes_with(word: str) -> list[int]:
    """The host pids whose command line holds `word`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if word.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
    return found


def _cambrian_files() -> list[str]:
    """Files a program must not see: Cambrian's own source, and a package of its environment that is not
    numpy or scipy (where a data package, like HumanEval's answer key, would lie too)."""
    files = [str(Path(__file__).resolve())]
    spec = importlib.util.find_spec("pydantic")
    if spec is not None and spec.origin:
        files.append(spec.origin)
    return files


@contextlib.contextmanager
def _canary() -> Iterator[str]:
    """A world-readable file in the host's /tmp, as any process may leave one."""
    handle, path = tempfile.mkstemp(prefix="cambrian-canary-", suffix=".txt", dir="/tmp")
    try:
        os.write(handle, secrets.token_hex(16).encode())
        os.close(handle)
        os.chmod(path, 0o644)
        yield path
    finally:
        _remove(path)


@contextlib.contextmanager
def _listener() -> Iterator[int]:
    """A listener on the host's loopback (as a local PostgreSQL would be); yields its port."""
    server = socket.socket()
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield int(server.getsockname()[1])
    finally:
        server.close()


def _remove(path: str) -> bool:
    """Remove `path`; whether it was there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # there, and not ours to remove: still a leak
    return True


def bwrap_version() -> str:
    """bubblewrap's version, or "?"."""
    binary = _namespaces.bwrap()
    if binary is None:
        return "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=False)
        return done.stdout.strip().removeprefix("bubblewrap ").strip() or "?"
    return "?"
