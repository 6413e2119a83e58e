"""`cambrian ui` and `cambrian report` through the real CLI, in subprocesses (a real server on a real port)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from cambrian.ui import is_loopback
from tests.ui.conftest import ROOT

Runs = tuple[Path, dict[str, int], dict[str, int]]


def cambrian(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "cambrian", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_ui_serves_the_run_on_loopback_and_stops_on_ctrl_c(runs_dir: Runs) -> None:
    folder, _, _ = runs_dir
    port = free_port()
    command = [sys.executable, "-m", "cambrian", "ui", "big", "--runs-dir", str(folder), "--port", str(port)]
    server = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert f"http://127.0.0.1:{port}/runs/big" in line
        deadline = time.monotonic() + 60
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/", follow_redirects=True, timeout=120)
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the UI never answered"
                time.sleep(0.2)
        assert response.status_code == 200 and "Lineage tree" in response.text
        assert str(response.url).endswith("/runs/big")
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=20)
        finally:
            if server.poll() is None:
                server.kill()
    assert server.returncode in (0, 130)


def test_ui_on_a_busy_port_says_so_with_a_fix(runs_dir: Runs) -> None:
    folder, _, _ = runs_dir
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = cambrian("ui", "--runs-dir", str(folder), "--port", str(port))
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}: the port is in use" in done.stderr
    assert f"--port {port + 1}" in done.stderr and "Traceback" not in done.stderr


def test_ui_warns_before_listening_beyond_loopback(runs_dir: Runs) -> None:
    folder, _, _ = runs_dir
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the warning comes, then a clear bind error.
    done = cambrian("ui", "--runs-dir", str(folder), "--host", "192.0.2.1", "--port", str(free_port()))
    assert "becomes readable by anyone who can reach this address on the network" in done.stderr
    assert done.returncode == 2 and "cannot listen on 192.0.2.1" in done.stderr and "--host" in done.stderr


def test_ui_and_report_refuse_a_missing_or_corrupt_run_with_the_fix(runs_dir: Runs, tmp_path: Path) -> None:
    folder, _, _ = runs_dir
    missing = cambrian("ui", "no-such-run", "--runs-dir", str(folder), "--port", str(free_port()))
    assert missing.returncode == 2 and "no run named 'no-such-run'" in missing.stderr and "fix:" in missing.stderr
    corrupt = cambrian("report", "corrupt", "--runs-dir", str(folder), "--to", str(tmp_path / "r.html"))
    assert corrupt.returncode == 2 and "cannot be read" in corrupt.stderr and "fix:" in corrupt.stderr
    assert not (tmp_path / "r.html").exists()


def test_report_writes_one_file_that_needs_nothing_else(runs_dir: Runs, tmp_path: Path) -> None:
    folder, hostile, _ = runs_dir
    to = tmp_path / "out" / "xss.html"
    done = cambrian("report", "xss", "--runs-dir", str(folder), "--to", str(to), "--best", "2")
    assert done.returncode == 0, done.stderr
    assert f"wrote {to}" in done.stdout.replace("\n", "")
    html = to.read_text()
    assert 'src="/' not in html and 'href="/static' not in html and f'id="agent-{hostile["child"]}"' in html


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("192.0.2.1", False),
        ("::", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
