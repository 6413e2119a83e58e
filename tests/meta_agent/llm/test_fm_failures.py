"""Every FM failure speaks: a dead, failing or misconfigured endpoint is named with its cause and fix, in about a
second, before any work; a run that ends because the FM failed says why and exits non-zero.

Real endpoints: a closed port, and tiny real HTTP servers that answer 500 or 401.
"""

from __future__ import annotations

import asyncio
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cambrian.archive.models import RunStatus
from cambrian.meta_agent.llm import (
    Completion,
    Endpoint,
    FMAuthError,
    FMUnavailable,
    LLMClient,
    MemoryLedger,
    Request,
    probe_endpoint,
)
from cambrian.meta_agent.llm.serve import free_port
from tests.meta_agent.search.test_loop_fake_fm import make_loop


def answering(status: int) -> Iterator[str]:
    """A real HTTP server that answers every request with `status`; yields its /v1 base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            body = b'{"error": {"message": "nope"}}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def failing_server() -> Iterator[str]:
    yield from answering(500)


@pytest.fixture()
def refusing_server() -> Iterator[str]:
    yield from answering(401)


def test_a_dead_endpoint_is_named_as_such_not_as_http_500() -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(FMUnavailable) as probed:
        probe_endpoint(Endpoint(model="openai/x", api_base=dead))
    assert "no FM server answers" in str(probed.value) and "start the server" in probed.value.fix
    client = LLMClient(Endpoint(model="openai/x", api_base=dead), ledger=MemoryLedger(), retries=0)
    with pytest.raises(FMUnavailable) as called:
        client.complete_sync(Request([{"role": "user", "content": "hi"}], seed=1))
    assert "HTTP 500" not in str(called.value) and "no server answered" in str(called.value)
    assert "start the server" in called.value.fix


def test_a_failing_server_is_not_told_to_start(failing_server: str) -> None:
    with pytest.raises(FMUnavailable) as probed:
        probe_endpoint(Endpoint(model="openai/x", api_base=failing_server))
    assert "HTTP 500" in str(probed.value) and "running but failing" in probed.value.fix
    client = LLMClient(Endpoint(model="openai/x", api_base=failing_server), ledger=MemoryLedger(), retries=0)
    with pytest.raises(FMUnavailable) as called:
        client.complete_sync(Request([{"role": "user", "content": "hi"}], seed=1))
    assert "running but failing" in called.value.fix and "start the server" not in called.value.fix


def test_refused_or_missing_credentials_fail_at_once_with_the_flag_to_use(
    refusing_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(FMAuthError) as refused:
        probe_endpoint(Endpoint(model="openai/x", api_base=refusing_server))
    assert "--api-key-env" in refused.value.fix
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(FMAuthError) as missing:
        probe_endpoint(Endpoint(model="openai/gpt-4o-mini"))
    assert "OPENAI_API_KEY" in str(missing.value)
    assert "--api-key-env" in missing.value.fix and "--api-base" in missing.value.fix
    monkeypatch.delenv("CAMBRIAN_NO_SUCH_KEY", raising=False)
    with pytest.raises(FMAuthError, match="CAMBRIAN_NO_SUCH_KEY"):
        probe_endpoint(Endpoint(model="openai/gpt-4o-mini", api_key_env="CAMBRIAN_NO_SUCH_KEY"))


def test_cli_run_on_a_dead_endpoint_fails_before_the_seed_with_cause_and_fix(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cambrian",
            "run",
            "circle_packing",
            "--model",
            "openai/x",
            "--api-base",
            dead,
            "--iterations",
            "2",
            "--sandbox",
            "local",
            "--runs-dir",
            str(tmp_path),
            "--name",
            "dead",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no FM server answers" in done.stderr and "fix:" in done.stderr
    assert "seed program" not in done.stdout  # nothing was evaluated
    assert "removed the run dead: it failed before its seed was evaluated" in done.stdout
    assert not (tmp_path / "dead" / "archive.db").exists()  # no empty run is left to list or resume


class DeadFM:
    """Stands in for an FM that died after the run started: every call fails as a dead server's would."""

    async def complete(self, request: Request) -> Completion:
        raise FMUnavailable(
            "FM endpoint http://127.0.0.1:9/v1 did not answer after 1 attempts; last error: no server answered",
            fix="nothing answers at http://127.0.0.1:9/v1: start the server",
        )


def test_a_run_whose_fm_dies_ends_failed_with_the_cause_and_fix_fake_fm(tmp_path: Path) -> None:
    loop, archive = make_loop(tmp_path, DeadFM(), budget={"iterations": 2})  # type: ignore[arg-type]
    outcome = asyncio.run(loop.run_until_done())
    assert outcome.status == RunStatus.failed
    assert outcome.reason.startswith("the FM failed: ") and "did not answer" in outcome.reason
    assert "start the server" in outcome.fix
    run = archive.get_run("t")
    assert run.status == RunStatus.failed and "did not answer" in (run.error or "")


# ----- other bad input: names, keys, commands ---------------------------------------------------------


def cambrian(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cambrian", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"},
    )


def test_misspelt_names_get_a_did_you_mean_and_config_keys_are_listed() -> None:
    done = cambrian("run", "circle_packin", "--iterations", "1")
    assert done.returncode == 2 and "did you mean 'circle_packing'?" in done.stderr
    done = cambrian("config", "--set", "search.stratgy=greedy")
    assert done.returncode == 2 and "did you mean 'search.strategy'?" in done.stderr
    assert "cambrian config --show-defaults" in done.stderr
    shown = cambrian("config", "--show-defaults")
    assert shown.returncode == 0
    for line in ("[search]", "strategy = ", "[fm]", "repair_rounds = 0", "[evaluation]"):  # the default model is small
        assert line in shown.stdout, shown.stdout
    resolved = cambrian("config", "--set", "search.strategy=greedy")
    assert 'strategy = "greedy"' in resolved.stdout


def test_an_unknown_command_is_a_usage_error_not_a_traceback() -> None:
    done = cambrian("nosuch")
    assert done.returncode == 2 and "No such command 'nosuch'" in done.stderr and "Traceback" not in done.stderr


def test_a_seed_without_evolve_markers_is_said_to_be_editable_as_a_whole() -> None:
    from cambrian.evaluators.base import Genome
    from cambrian.evaluators.circle_packing import CirclePacking
    from cambrian.meta_agent.search import Reporter
    from cambrian.meta_agent.search.session import say_what_is_editable

    said: list[str] = []
    reporter = Reporter(info=said.append, warn=said.append, event=lambda e: None, progress=lambda d, t: None)  # type: ignore[arg-type]

    class Unmarked(CirclePacking):
        def seed(self) -> Genome:
            genome = super().seed()
            text = "\n".join(line for line in genome.files[genome.entry].splitlines() if "EVOLVE-BLOCK" not in line)
            return Genome(files={genome.entry: text}, entry=genome.entry)

    say_what_is_editable(CirclePacking(), reporter)
    assert said == []
    say_what_is_editable(Unmarked(), reporter)
    assert said and "no EVOLVE-BLOCK-START/END markers: the whole file is editable" in said[0]
