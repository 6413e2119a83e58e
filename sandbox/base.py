"""The sandbox protocol: where untrusted code (anything an FM wrote) runs.

A backend takes a `RunSpec` (files to place, a command, limits) and returns a
`RunResult`. Nothing here imports another Cambrian package (only the error root, `cambrian.errors`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cambrian.errors import CambrianError

#: The Docker sandbox's image (sandbox/image.py builds it); here so that naming it imports no Docker client.
DEFAULT_IMAGE = "cambrian-sandbox:bookworm"


class SandboxError(CambrianError):
    """An infrastructure fault of a sandbox (not the candidate's fault).

    `fix` tells the user what to do about it.
    """


@dataclass(frozen=True)
class Mount:
    """A host path made visible inside the sandbox (e.g. the FM gateway socket)."""

    host_path: str
    sandbox_path: str
    read_only: bool = True


@dataclass(frozen=True)
class RunSpec:
    """What to run in a sandbox and under which limits.

    files: relative path -> text, written into a fresh work dir before the run.
    command: argv, run with the work dir as current directory. The string
        "{python}" in an argument is replaced by the backend's Python interpreter.
    collect: relative paths read back after the run (missing ones are skipped).
    """

    files: Mapping[str, str]
    command: tuple[str, ...]
    timeout_s: float = 60.0  # wall clock; the process group is killed after it
    memory_mb: int = 1024  # address space / container memory
    cpus: float = 1.0
    pids: int = 64  # process/thread limit
    max_output_bytes: int = 1_000_000  # per stream; past it the run is killed
    max_file_bytes: int = 50_000_000  # largest file the run may write
    collect: tuple[str, ...] = ()
    max_collect_bytes: int = 5_000_000  # per collected file
    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict)  # added to a scrubbed env
    mounts: tuple[Mount, ...] = ()


@dataclass
class RunResult:
    exit_code: int | None  # None when killed before it exited
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    oom_killed: bool = False
    output_truncated: bool = False  # wrote more than max_output_bytes; run killed
    files: dict[str, str] = field(default_factory=dict)  # the collected files

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed and not self.output_truncated

    def failure_reason(self) -> str | None:
        """A short, public sentence saying why the run did not finish cleanly."""
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f} s"
        if self.oom_killed:
            return "ran out of memory (killed)"
        if self.output_truncated:
            return "wrote more output than allowed (killed)"
        if self.exit_code != 0:
            return f"exited with code {self.exit_code}"
        return None


#: Where an isolated sandbox sees its agent's FM gateway socket.
FM_SOCKET_INSIDE = "/run/cambrian/fm.sock"


@runtime_checkable
class SandboxSession(Protocol):
    """The runs of ONE agent. A backend may keep state between them (a container), never across agents;
    between two runs the work dir is wiped and every process the previous run left is killed."""

    def run(self, spec: RunSpec) -> RunResult: ...

    def fm_socket_host_path(self) -> str | None:
        """The host path where this agent's FM socket must be created so that runs see it at
        FM_SOCKET_INSIDE; None when the sandbox shares the host filesystem (use the host path itself)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> SandboxSession: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class Sandbox(Protocol):
    """A place to run untrusted code. Backends: `local` (subprocess), `docker`."""

    name: str
    #: True when the backend isolates the filesystem, network and processes.
    isolated: bool
    #: True when programs reach a mounted host path (an FM socket) by that path, as other uids of this host (the
    #: local sandbox as root without namespaces), so its folders must let them pass; False when the backend
    #: binds the path into the sandbox (Docker, bubblewrap) and no other host user need pass (`socket_folder_mode`).
    shares_host_paths: bool

    def session(self) -> SandboxSession:
        """A session for the runs of one agent (use as a context manager)."""
        ...

    def run(self, spec: RunSpec) -> RunResult:
        """Run `spec` to completion (or its limits) in a one-run session; raise SandboxError on infra faults."""
        ...

    def close(self) -> None:
        """Release everything the backend holds (containers, temp dirs)."""
        ...


def socket_folder_mode(sandbox: Sandbox | None) -> int:
    """The mode of a host folder holding the FM sockets of `sandbox`'s programs: 0o711 where they pass through
    it as other uids of this host, else 0o700, so no other host user reaches a socket it finds listed in
    /proc/net/unix (every request carries its agent's token besides)."""
    return 0o711 if sandbox is not None and sandbox.shares_host_paths else 0o700


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (one of another user counts): the owner check of what a
    process leaves behind (containers, node folders) before a later start sweeps it away."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
