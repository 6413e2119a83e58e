"""Tasks that attack the Docker sandbox's own runner (PID 1 of the container) and the channel to the host.

The runner and the task share the sandbox user, so before the runner made itself non-dumpable a task could
open /proc/1/fd/1 and write a reply frame the host took for the real result. The channel tests feed the
host side raw bytes over a socket pair: no container needed.
"""

from __future__ import annotations

import json
import socket
import struct
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest

from cambrian.sandbox.base import RunSpec
from cambrian.sandbox.docker_container import ChannelClosed, RunnerChannel

FORGED_REPLY = {
    "exit_code": 0,
    "stdout": "FORGED",
    "stderr": "",
    "duration_s": 0.1,
    "timed_out": False,
    "oom_killed": False,
    "output_truncated": False,
    "files": {},
}

SPEAKS_FOR_THE_RUNNER = f"""
import json, os, struct, sys, time
body = json.dumps({FORGED_REPLY!r}).encode()
for name in ('/proc/1/fd/1', '/proc/1/fd/0', '/proc/1/mem', '/proc/1/environ'):
    try:
        with open(name, 'r+b' if name.endswith('mem') else 'wb', 0) as out:
            out.write(struct.pack('>I', len(body)) + body)
        print('wrote', name, flush=True)
    except OSError as exc:
        print('refused', name, type(exc).__name__, flush=True)
time.sleep(60)
"""

SIGNALS_THE_RUNNER = """
import os, signal
for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
    try:
        os.kill(1, signum)
        print('sent', signum, flush=True)
    except OSError as exc:
        print('refused', signum, type(exc).__name__, flush=True)
"""

OPENS_MANY_FILES = """
import socket
held = []
try:
    for _ in range(5000):
        held.append(socket.socket(socket.AF_UNIX))
except OSError as exc:
    print('stopped at', len(held), type(exc).__name__)
"""


def py(code: str, timeout_s: float = 10.0) -> RunSpec:
    return RunSpec(files={"main.py": textwrap.dedent(code)}, command=("{python}", "main.py"), timeout_s=timeout_s)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[object]:
    from tests.conftest import skip_without_docker

    skip_without_docker()
    from cambrian.sandbox.docker import DockerSandbox

    box = DockerSandbox(pool_size=1, run_label="pytest-hostile-runner")
    try:
        yield box
    finally:
        box.close()


def test_a_task_cannot_write_the_runners_reply(sandbox) -> None:  # type: ignore[no-untyped-def]
    with sandbox.session() as session:
        result = session.run(py(SPEAKS_FOR_THE_RUNNER, timeout_s=2.0))
        assert "FORGED" not in result.stdout
        assert result.timed_out, result  # the program slept: the real reply says so
        for name in ("/proc/1/fd/1", "/proc/1/fd/0", "/proc/1/mem", "/proc/1/environ"):
            assert f"refused {name} PermissionError" in result.stdout, result.stdout
        assert session.run(py("print(6 * 7)")).stdout == "42\n"


def test_a_task_cannot_stop_the_runner_with_signals(sandbox) -> None:  # type: ignore[no-untyped-def]
    with sandbox.session() as session:
        result = session.run(py(SIGNALS_THE_RUNNER))
        assert result.ok, result
        assert session.container_id is not None
        before = session.container_id
        assert session.run(py("print('still here')")).stdout == "still here\n"
        assert session.container_id == before  # the same container: the runner never died


def test_a_task_has_few_descriptors(sandbox) -> None:  # type: ignore[no-untyped-def]
    with sandbox.session() as session:
        result = session.run(py(OPENS_MANY_FILES))
        assert result.ok, result
        held = int(result.stdout.split()[2])
        assert held < 300, result.stdout


# ----- the host side of the channel, over a socket pair -----


def docker_frame(payload: bytes, stream: int = 1) -> bytes:
    return struct.pack(">BxxxI", stream, len(payload)) + payload


def runner_frame(message: dict[str, object]) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


def test_a_frame_over_the_cap_breaks_the_channel_at_once_without_buffering_it() -> None:
    host, container = socket.socketpair()
    channel = RunnerChannel(host)
    try:
        # A header claiming 4 GB, then a steady trickle: the channel must not wait for (or keep) the body.
        container.sendall(docker_frame(struct.pack(">I", 4_000_000_000) + b"x" * 1000))
        stop = threading.Event()

        def trickle() -> None:
            while not stop.is_set():
                try:
                    container.sendall(docker_frame(b"y" * 65536))
                except OSError:
                    return
                time.sleep(0.01)

        feeder = threading.Thread(target=trickle, daemon=True)
        feeder.start()
        # Refused at the header: a channel that waited for the body would trickle on until the far deadline
        # (the test's timeout), so no clock is read here.
        with pytest.raises(ChannelClosed, match="4000000000-byte frame, over the 1048576-byte cap"):
            channel.receive(deadline=time.monotonic() + 3600, max_frame_bytes=1 << 20)
        stop.set()
        feeder.join(timeout=5)
    finally:
        channel.close()
        container.close()


def test_an_engine_chunk_over_the_cap_breaks_the_channel() -> None:
    host, container = socket.socketpair()
    channel = RunnerChannel(host)
    try:
        container.sendall(struct.pack(">BxxxI", 1, 3_000_000_000) + b"z" * 100)
        with pytest.raises(ChannelClosed, match="3000000000-byte chunk"):
            channel.receive(deadline=time.monotonic() + 5)
    finally:
        channel.close()
        container.close()


def test_frames_within_the_cap_arrive_whole() -> None:
    host, container = socket.socketpair()
    channel = RunnerChannel(host)
    try:
        frame = runner_frame({"id": "a", "stdout": "x" * 5000})
        for start in range(0, len(frame), 700):  # split across many engine chunks
            container.sendall(docker_frame(frame[start : start + 700]))
        assert channel.receive(deadline=time.monotonic() + 5, max_frame_bytes=10_000)["id"] == "a"
    finally:
        channel.close()
        container.close()
