"""`cambrian sandbox check`: the Docker backend's facts and a live hardening self-test.

The self-test runs hostile probes in a real sandbox container and reports
pass/fail per item: the network is unreachable, nothing outside /work is
writable, the user is not root, every capability is dropped, the host's
environment and files are not visible, the PID limit holds, and nothing a run
leaves running survives into the next run; the container's runner (PID 1)
cannot be reached from a task (its stdout, stdin and memory refuse), a task
has few file descriptors, and the host refuses a reply frame over its cap.
It also checks that a program can
import numpy and scipy (and solve a small problem with scipy.optimize), and
reports their versions.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cambrian.sandbox.base import RunSpec, SandboxSession

if TYPE_CHECKING:
    from cambrian.sandbox.docker import DockerSandbox

#: The only variables a task may see (the runner's scrubbed env).
SCRUBBED_ENV = frozenset({"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"})
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CANARY")
_PROBE_TIMEOUT_S = 30.0

_PROBE = r"""
import json, os, socket, sys
report = {}
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3).close()
    report["network"] = "connected to 1.1.1.1:53"
except OSError as exc:
    report["network"] = None
    report["network_error"] = str(exc)
written = []
for path in ("/etc/cambrian-probe", "/usr/cambrian-probe", "/cambrian-probe", "/var/tmp/cambrian-probe"):
    try:
        with open(path, "w") as handle:
            handle.write("x")
        written.append(path)
    except OSError:
        pass
report["written_outside_work"] = written
with open("/work/probe-ok", "w") as handle:
    handle.write("ok")
report["uid"] = os.getuid()
report["euid"] = os.geteuid()
caps = {}
with open("/proc/self/status") as handle:
    for line in handle:
        if line.startswith(("CapEff", "CapPrm", "CapBnd", "CapAmb")):
            name, value = line.split(":")
            caps[name] = int(value.strip(), 16)
report["caps"] = caps
report["env"] = dict(os.environ)
host_file = sys.argv[1]
report["host_file_visible"] = os.path.exists(host_file)
try:
    report["hostname_file"] = open("/etc/hostname").read().strip()
except OSError:
    report["hostname_file"] = ""
print(json.dumps(report))
"""

FORK_PROBE = r"""
import os, time
children = 0
while children < 10000:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children += 1
print(children)
"""

_PROC_PROBE = r"""
import os
print(len([p for p in os.listdir("/proc") if p.isdigit()]))
"""

_RUNNER_PROBE = r"""
import json, socket
refused = []
for name in ("/proc/1/fd/1", "/proc/1/fd/0", "/proc/1/mem", "/proc/1/environ"):
    try:
        with open(name, "r+b" if name.endswith("mem") else "rb", 0) as handle:
            handle.read(1)
    except OSError as exc:
        refused.append(name if isinstance(exc, PermissionError) else name + " (" + type(exc).__name__ + ")")
held = []
try:
    for _ in range(5000):
        held.append(socket.socket(socket.AF_UNIX))
except OSError:
    pass
print(json.dumps({"refused": refused, "descriptors": len(held)}))
"""

_SCIENTIFIC_PROBE = r"""
import json
import numpy, scipy, scipy.optimize
best = scipy.optimize.minimize(lambda x: float(((x - 0.5) ** 2).sum()), numpy.zeros(3))
solved = bool(abs(best.x - 0.5).max() < 1e-4)
print(json.dumps({"numpy": numpy.__version__, "scipy": scipy.__version__, "solved": solved}))
"""


@dataclass(frozen=True)
class CheckItem:
    """One hardening property: whether it held, and what was seen."""

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class CheckReport:
    """What `run_check(sandbox)` found.

    limits: name -> human-readable value. packages: importable package -> its version, as seen
    by a program in the sandbox (empty when the import failed; the item then says why).
    """

    engine_version: str
    image: str
    image_present: bool
    limits: dict[str, str] = field(default_factory=dict)
    items: tuple[CheckItem, ...] = ()
    packages: dict[str, str] = field(default_factory=dict)
    backend: str = "docker"  # or "local" (sandbox/local_check.py: engine_version names its namespaces)

    @property
    def ok(self) -> bool:
        """True when every hardening item passed."""
        return self.image_present and all(item.passed for item in self.items)


def run_check(sandbox: DockerSandbox) -> CheckReport:
    """Inspect the engine and run the hostile probes in one fresh session of `sandbox`."""
    version = str(sandbox.client.version().get("Version", "unknown"))
    limits = sandbox.limits
    described = {
        "memory (container, no swap)": f"{limits.memory_mb} MiB",
        "cpus (container)": f"{limits.cpus:g}",
        "pids (container)": str(limits.pids),
        "tmpfs /work and /tmp": f"{limits.tmpfs_mb} MiB each",
        "user": "10001:10001 (non-root)",
        "network": "none",
    }
    with tempfile.NamedTemporaryFile("w", prefix="cambrian-canary-", suffix=".txt", delete=False) as handle:
        handle.write(uuid.uuid4().hex)  # a unique host file the probe must not find
    packages: dict[str, str] = {}
    try:
        items = _probe_items(sandbox, host_file=handle.name, packages=packages)
    finally:
        os.unlink(handle.name)
    return CheckReport(
        engine_version=version,
        image=sandbox.image,
        image_present=True,
        limits=described,
        items=items,
        packages=packages,
    )


def _probe_items(sandbox: DockerSandbox, *, host_file: str, packages: dict[str, str]) -> tuple[CheckItem, ...]:
    """The hardening items; `packages` is filled with the versions the scientific probe saw."""
    items: list[CheckItem] = []
    with sandbox.session() as session:
        result = session.run(
            RunSpec(files={"probe.py": _PROBE}, command=("{python}", "probe.py", host_file), timeout_s=_PROBE_TIMEOUT_S)
        )
        try:
            report = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            detail = f"the probe failed: exit {result.exit_code}, {result.stderr.strip()[-300:]}"
            return (CheckItem("probe ran", False, detail),)
        items.append(
            CheckItem(
                "network unreachable",
                report["network"] is None,
                report.get("network_error", "") if report["network"] is None else str(report["network"]),
            )
        )
        written = report["written_outside_work"]
        items.append(
            CheckItem(
                "cannot write outside /work",
                not written,
                "read-only root fs" if not written else f"wrote {', '.join(written)}",
            )
        )
        items.append(CheckItem("runs as non-root", report["uid"] != 0 and report["euid"] != 0, f"uid {report['uid']}"))
        caps = report["caps"]
        items.append(
            CheckItem(
                "capabilities dropped",
                caps.get("CapEff", 1) == 0 and caps.get("CapPrm", 1) == 0,
                ", ".join(f"{k}={v:#x}" for k, v in sorted(caps.items())),
            )
        )
        items.append(env_item(report["env"]))
        host_name = _host_hostname()
        hidden = not report["host_file_visible"] and (not host_name or host_name != report["hostname_file"])
        items.append(
            CheckItem(
                "host files not visible",
                hidden,
                f"host temp file {'visible' if report['host_file_visible'] else 'absent'}; "
                f"/etc/hostname reads {report['hostname_file']!r}",
            )
        )
        bomb = session.run(RunSpec(files={"fork.py": FORK_PROBE}, command=("{python}", "fork.py"), timeout_s=30))
        forked = int(bomb.stdout.strip() or "0") if bomb.stdout.strip().isdigit() else -1
        items.append(
            CheckItem(
                "pids limit holds",
                0 <= forked < sandbox.limits.pids,
                f"a fork loop stopped after {forked} children (limit {sandbox.limits.pids})",
            )
        )
        after = session.run(RunSpec(files={"ps.py": _PROC_PROBE}, command=("{python}", "ps.py"), timeout_s=30))
        count = after.stdout.strip()
        items.append(
            CheckItem(
                "no process survives a run",
                count == "2",
                f"the next run sees {count or '?'} processes (the runner and itself)",
            )
        )
        items += _runner_items(session)
        items.append(scientific_item(session, packages))
    items.append(_frame_cap_item())
    return tuple(items)


def _runner_items(session: SandboxSession) -> list[CheckItem]:
    """The runner is out of a task's reach, and a task has few descriptors."""
    result = session.run(
        RunSpec(files={"runner.py": _RUNNER_PROBE}, command=("{python}", "runner.py"), timeout_s=_PROBE_TIMEOUT_S)
    )
    try:
        seen = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        detail = f"the probe failed: exit {result.exit_code}, {result.stderr.strip()[-300:]}"
        return [CheckItem("runner unreachable from the task", False, detail)]
    wanted = ["/proc/1/fd/1", "/proc/1/fd/0", "/proc/1/mem", "/proc/1/environ"]
    return [
        CheckItem(
            "runner unreachable from the task",
            seen["refused"] == wanted,
            "refused (PermissionError): " + ", ".join(seen["refused"])
            if seen["refused"] == wanted
            else f"reachable: {sorted(set(wanted) - set(seen['refused']))}; refused: {seen['refused']}",
        ),
        CheckItem(
            "descriptor limit holds",
            0 < int(seen["descriptors"]) < 1024,
            f"a task stopped after opening {seen['descriptors']} sockets",
        ),
    ]


def _frame_cap_item() -> CheckItem:
    """The host breaks the channel on a reply frame over its cap instead of buffering it."""
    from cambrian.sandbox.docker_container import ChannelClosed, RunnerChannel

    host, container = socket.socketpair()
    channel = RunnerChannel(host)
    try:
        claim = (4_000_000_000).to_bytes(4, "big")
        container.sendall(b"\x01\x00\x00\x00" + (len(claim) + 16).to_bytes(4, "big") + claim + b"x" * 16)
        try:
            channel.receive(deadline=time.monotonic() + 5, max_frame_bytes=1 << 20)
        except ChannelClosed as exc:
            return CheckItem("reply frames capped", True, f"a 4 GB frame header was refused: {exc}"[:200])
        return CheckItem("reply frames capped", False, "a 4 GB frame header was accepted")
    finally:
        channel.close()
        container.close()


def scientific_item(session: SandboxSession, packages: dict[str, str]) -> CheckItem:
    """numpy and scipy import in a sandbox program and scipy.optimize solves a small problem."""
    result = session.run(
        RunSpec(files={"sci.py": _SCIENTIFIC_PROBE}, command=("{python}", "sci.py"), timeout_s=_PROBE_TIMEOUT_S)
    )
    try:
        seen = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        error = (result.stderr.strip().splitlines() or [f"exit {result.exit_code}"])[-1]
        return CheckItem("numpy and scipy import", False, f"the import failed: {error[-300:]}")
    packages.update(numpy=str(seen["numpy"]), scipy=str(seen["scipy"]))
    versions = f"numpy {seen['numpy']}, scipy {seen['scipy']}"
    solved = bool(seen["solved"])
    return CheckItem(
        "numpy and scipy import",
        solved,
        f"{versions}; scipy.optimize.minimize {'solved' if solved else 'did NOT solve'} a test problem",
    )


def env_item(env: dict[str, str], allowed: frozenset[str] = SCRUBBED_ENV) -> CheckItem:
    """The environment a task saw holds only the `allowed` names, and no value of a host secret."""
    extra = sorted(set(env) - allowed)
    secret_values = {
        value
        for name, value in os.environ.items()
        if any(word in name.upper() for word in _SECRET_WORDS) and len(value) >= 6
    }
    leaked = sorted(name for name, value in env.items() if value in secret_values)
    passed = not extra and not leaked
    detail = "the task sees only " + ", ".join(sorted(env)) if passed else f"extra: {extra}, leaked: {leaked}"
    return CheckItem("host environment absent", passed, detail)


def _host_hostname() -> str:
    try:
        return Path("/etc/hostname").read_text(encoding="utf-8").strip()
    except OSError:
        return socket.gethostname()
