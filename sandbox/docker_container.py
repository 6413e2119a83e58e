"""One sandbox container: its hardened settings, the channel to its runner, its removal, leftovers.

The container runs without a TTY, so its attached stdout and stderr arrive
multiplexed on one socket: each Docker frame is an 8-byte header (stream id,
three zero bytes, 4-byte big-endian payload length) and the payload. Inside
the stdout payloads flow the runner's own frames (see container_runner.py): a
4-byte big-endian length and UTF-8 JSON. What the runner writes to stderr is
kept (capped) only to explain a failure.

Nothing the container sends is trusted further than it must be: a runner frame
longer than the caller's cap (`max_frame_bytes`, worked out from the request's
output and file caps) breaks the channel at once instead of being buffered, and
the caller matches each reply's "id" to its request (see docker.py).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import requests.exceptions

from cambrian.sandbox import guest
from cambrian.sandbox.base import Mount, pid_alive
from cambrian.sandbox.image import SANDBOX_UID

#: The container's program (`python3 -I -S -c`): it registers the run protocol, argv[1], under its own name and
#: runs the runner, argv[2], which then imports it as on the host (see `runner_command`).
_RUNNER_LOADER = f"""\
import sys, types
guest = types.ModuleType({guest.__name__!r})
exec(compile(sys.argv[1], "guest.py", "exec"), guest.__dict__)
sys.modules[guest.__name__] = guest
exec(compile(sys.argv[2], "container_runner.py", "exec"), {{"__name__": "__main__"}})
"""
_RUNNER_SOURCES = tuple(
    Path(__file__).with_name(name).read_text(encoding="utf-8") for name in ("guest.py", "container_runner.py")
)
DOCKER_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)
_DOCKER_HEADER = struct.Struct(">BxxxI")
_FRAME_HEADER = struct.Struct(">I")
_RECV_BYTES = 1 << 20
_STDERR_KEEP = 4000  # characters of the runner's stderr kept for error messages
READY_FRAME_BYTES = 64 * 1024  # the runner's first frame is a few hundred bytes
_DOCKER_FRAME_BYTES = 16 * 1024 * 1024  # the engine splits output into small frames; a larger one is not its


class NoReply(Exception):
    """No complete reply arrived before the deadline."""


class ChannelClosed(Exception):
    """The container closed its end (the runner or the whole container died)."""


class RunnerChannel:
    """Length-prefixed JSON frames over a container's attached stdin/stdout socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._raw = bytearray()  # multiplexed bytes not yet split into Docker frames
        self._stdout = bytearray()  # the runner's stdout bytes not yet parsed into frames
        self._stderr = bytearray()
        self._closed = False

    @classmethod
    def attach(cls, client: docker.DockerClient, container_id: str) -> RunnerChannel:
        """Attach to a created (not yet started) container, so no early output is missed."""
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        wrapper = client.api.attach_socket(container_id, params=params)
        # The SDK hands back a SocketIO wrapper around the hijacked connection; frames need the socket.
        raw = getattr(wrapper, "_sock", wrapper)
        return cls(raw)

    def send(self, message: dict[str, Any]) -> None:
        """Write one frame to the runner's stdin; ChannelClosed if the container is gone."""
        body = json.dumps(message, ensure_ascii=False).encode("utf-8", errors="replace")
        try:
            self._sock.settimeout(None)
            self._sock.sendall(_FRAME_HEADER.pack(len(body)) + body)
        except OSError as exc:
            raise ChannelClosed(f"cannot write to the container: {exc}") from exc

    def receive(self, *, deadline: float, max_frame_bytes: int = READY_FRAME_BYTES) -> dict[str, Any]:
        """The runner's next frame; NoReply past `deadline` (time.monotonic seconds), ChannelClosed at EOF
        or as soon as a frame announces more than `max_frame_bytes` bytes (nothing of it is buffered)."""
        while True:
            frame = self._next_frame(max_frame_bytes)
            if frame is not None:
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NoReply("no reply from the sandbox runner before the deadline")
            try:
                self._sock.settimeout(remaining)
                chunk = self._sock.recv(_RECV_BYTES)
            except TimeoutError:
                continue
            except OSError as exc:
                raise ChannelClosed(f"the container's stream broke: {exc}") from exc
            if not chunk:
                raise ChannelClosed("the container closed its output (the runner exited or was killed)")
            self._raw += chunk
            self._demultiplex()

    def diagnostics(self) -> str:
        """What the runner wrote to stderr (its last few thousand characters), if anything."""
        text = self._stderr.decode("utf-8", errors="replace").strip()
        return f"(runner stderr: {text[-_STDERR_KEEP:]})" if text else ""

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._sock.close()
            except OSError:
                pass  # already closed by the engine

    def _demultiplex(self) -> None:
        while len(self._raw) >= _DOCKER_HEADER.size:
            stream, size = _DOCKER_HEADER.unpack_from(self._raw)
            if size > _DOCKER_FRAME_BYTES:
                raise ChannelClosed(f"the container's stream announced a {size}-byte chunk; the stream is broken")
            end = _DOCKER_HEADER.size + size
            if len(self._raw) < end:
                return
            payload = bytes(self._raw[_DOCKER_HEADER.size : end])
            del self._raw[:end]
            if stream == 1:
                self._stdout += payload
            else:
                self._stderr += payload
                del self._stderr[: max(0, len(self._stderr) - _STDERR_KEEP)]

    def _next_frame(self, max_frame_bytes: int) -> dict[str, Any] | None:
        if len(self._stdout) < _FRAME_HEADER.size:
            return None
        (size,) = _FRAME_HEADER.unpack_from(self._stdout)
        if size > max_frame_bytes:
            raise ChannelClosed(
                f"the sandbox runner's channel announced a {size}-byte frame, over the {max_frame_bytes}-byte cap "
                "of this request"
            )
        end = _FRAME_HEADER.size + size
        if len(self._stdout) < end:
            return None
        body = bytes(self._stdout[_FRAME_HEADER.size : end])
        del self._stdout[:end]
        try:
            message = json.loads(body.decode("utf-8"))
        except ValueError as exc:
            raise ChannelClosed(f"the sandbox runner sent a malformed frame: {exc}") from exc
        if not isinstance(message, dict):
            raise ChannelClosed("the sandbox runner sent a frame that is not a JSON object")
        return message


@dataclass(frozen=True)
class ContainerLimits:
    """Container-level limits. memory_mb, tmpfs_mb: MiB; cpus: cores (0.01..); pids: processes."""

    memory_mb: int = 1024
    cpus: float = 1.0
    pids: int = 64
    tmpfs_mb: int = 256


def container_labels(run_label: str) -> dict[str, str]:
    """The labels of every container this process makes; the leftover sweep reads pid and host back."""
    return {
        "cambrian": "1",
        "cambrian.run": run_label,
        "cambrian.pid": str(os.getpid()),
        "cambrian.host": socket.gethostname(),
    }


def runner_command() -> list[str]:
    """The container's command: the runner (container_runner.py) and the run protocol it imports (guest.py), as
    source: nothing is copied into the read-only image, and the runner is always this Cambrian's."""
    return ["python3", "-I", "-S", "-c", _RUNNER_LOADER, *_RUNNER_SOURCES]


def hardened_settings(
    image: str, *, limits: ContainerLimits, labels: dict[str, str], mounts: tuple[Mount, ...] = ()
) -> dict[str, Any]:
    """`containers.create` keyword arguments for one sandbox container (also used by the throughput bench)."""
    tmpfs_opts = f"rw,nosuid,nodev,size={int(limits.tmpfs_mb)}m,mode=1777"
    return {
        "image": image,
        "command": runner_command(),
        "stdin_open": True,
        "tty": False,
        "network_mode": "none",
        "user": f"{SANDBOX_UID}:{SANDBOX_UID}",
        "read_only": True,
        "tmpfs": {"/work": tmpfs_opts, "/tmp": tmpfs_opts},
        "working_dir": "/work",
        "hostname": "sandbox",
        "mem_limit": f"{int(limits.memory_mb)}m",
        "memswap_limit": f"{int(limits.memory_mb)}m",
        "nano_cpus": int(limits.cpus * 1e9),
        "pids_limit": int(limits.pids),
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "labels": labels,
        "auto_remove": False,
        "init": False,
        "mounts": [
            docker.types.Mount(m.sandbox_path, os.path.abspath(m.host_path), type="bind", read_only=m.read_only)
            for m in mounts
        ],
    }


class SandboxContainer:
    """One started sandbox container and the channel to its runner."""

    def __init__(
        self, container: Any, channel: RunnerChannel, mounts: tuple[Mount, ...], *, fm_dir: str | None = None
    ) -> None:
        self.container = container
        self.channel = channel
        self.mounts = mounts  # the spec mounts it was made for (the FM folder mount is not among them)
        self.fm_dir = fm_dir  # host folder mounted at /run/cambrian, removed with the container

    @property
    def id(self) -> str:
        return str(self.container.id)

    def died_of_oom(self) -> bool:
        """After the runner vanished: did the whole container die of memory (OOMKilled or SIGKILL, 137)?"""
        try:
            self.container.reload()
            state = self.container.attrs.get("State", {})
        except DOCKER_ERRORS:
            return False
        return bool(state.get("OOMKilled")) or state.get("ExitCode") == 137

    def remove(self) -> None:
        self.channel.close()
        try:
            self.container.remove(force=True)
        except docker.errors.NotFound:
            pass  # already gone
        except DOCKER_ERRORS:
            pass  # engine trouble: the leftover sweep of a later start removes it (its pid label is dead)
        if self.fm_dir is not None:
            shutil.rmtree(self.fm_dir, ignore_errors=True)


def remove_dead_leftovers(client: docker.DockerClient) -> int:
    """Remove containers labelled cambrian=1 from this host whose cambrian.pid process is gone; return how many."""
    here = socket.gethostname()
    try:
        found = client.containers.list(all=True, filters={"label": ["cambrian=1", f"cambrian.host={here}"]})
    except DOCKER_ERRORS:
        return 0
    removed = 0
    for container in found:
        pid_text = container.labels.get("cambrian.pid", "")
        if not pid_text.isdigit() or pid_alive(int(pid_text)):
            continue
        try:
            container.remove(force=True)
            removed += 1
        except DOCKER_ERRORS:
            pass  # another process removed it first
    return removed
