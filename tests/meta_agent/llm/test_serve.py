"""The local inference server: a real llama.cpp child process of SmolLM2-135M."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from cambrian.meta_agent.llm import ServerStartError
from cambrian.meta_agent.llm.serve import LocalServer, choose_backend, gpu_available


def _get_json(url: str) -> tuple[int, dict]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, json.loads(response.read())


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _wait_until(predicate: object, timeout_s: float) -> bool:
    """Poll `predicate()` until true or `timeout_s` passes (a generous bound, not a speed check)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


def test_start_answers_health_and_models_then_stop_leaves_nothing(smollm2_path: Path, tmp_path: Path) -> None:
    server = LocalServer(
        smollm2_path, alias="smol-test", n_ctx=2048, n_parallel=1, backend="llamacpp", log_path=tmp_path / "server.log"
    )
    server.start(timeout_s=180)
    pid = server.pid
    assert pid is not None and server.running
    try:
        root = server.base_url.removesuffix("/v1")
        assert _get_json(f"{root}/health") == (200, {"status": "ok"})
        status, listing = _get_json(f"{server.base_url}/models")
        assert status == 200 and [m["id"] for m in listing["data"]] == ["smol-test"]
    finally:
        server.stop()

    assert not server.running and server.pid is None
    assert _group_gone(pid)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=2)
    assert (tmp_path / "server.log").exists()  # a log the caller asked for is kept


def test_context_manager_and_endpoint(smollm2_path: Path) -> None:
    with LocalServer(smollm2_path, alias="smol-ctx", n_ctx=1024, n_parallel=1, backend="llamacpp") as server:
        endpoint = server.endpoint()
        pid = server.pid
        log = server.log_path
        assert endpoint.model == "openai/smol-ctx" and endpoint.label == "smol-ctx"
        assert endpoint.api_base == server.base_url == f"http://127.0.0.1:{server.port}/v1"
        assert dict(endpoint.extra_body) == {"cache_prompt": True} and endpoint.api_key_env is None
    assert pid is not None and _group_gone(pid)
    assert log is not None and not log.exists()  # its own temp log is removed


def test_local_fm_fixture_serves_smollm2(local_fm: LocalServer) -> None:
    status, listing = _get_json(f"{local_fm.base_url}/models")
    assert status == 200 and listing["data"][0]["id"] == "smollm2-135m"
    assert local_fm.endpoint().model == "openai/smollm2-135m"


def test_missing_model_path_raises_server_start_error(tmp_path: Path) -> None:
    missing = tmp_path / "absent.gguf"
    with pytest.raises(ServerStartError) as info:
        LocalServer(missing, alias="x", backend="llamacpp").start()
    assert str(missing) in str(info.value) and info.value.fix


def test_file_that_is_not_a_gguf_raises_server_start_error(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"this is not a GGUF model" * 100)
    server = LocalServer(bogus, alias="bogus", backend="llamacpp", log_path=tmp_path / "bogus.log")

    with pytest.raises(ServerStartError) as info:
        server.start(timeout_s=60)

    assert str(bogus) in str(info.value) and "could not load" in str(info.value)
    assert "GGUF" in info.value.fix
    assert not server.running


def test_server_exits_when_its_parent_dies(smollm2_path: Path, tmp_path: Path) -> None:
    # A parent killed with SIGKILL cannot stop() its server; the server must notice and exit.
    pid_file = tmp_path / "server.pid"
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from cambrian.meta_agent.llm.serve import LocalServer
        server = LocalServer(Path({str(smollm2_path)!r}), alias="orphan", n_ctx=1024, n_parallel=1,
                             backend="llamacpp", log_path=Path({str(tmp_path / "orphan.log")!r}))
        server.start(timeout_s=180)
        Path({str(pid_file)!r}).write_text(str(server.pid))
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        assert _wait_until(lambda: pid_file.exists() and pid_file.read_text(), 180), "server never started"
        server_pid = int(pid_file.read_text())
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _wait_until(lambda: _group_gone(server_pid), 60), "orphaned server kept running"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if pid_file.exists() and pid_file.read_text() and not _group_gone(int(pid_file.read_text())):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)


def test_backend_choice() -> None:
    assert choose_backend("llamacpp") == "llamacpp"
    import importlib.util

    expected = "vllm" if importlib.util.find_spec("vllm") and gpu_available() else "llamacpp"
    assert choose_backend("auto") == expected
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ServerStartError) as info:
            choose_backend("vllm")
        assert "vllm" in info.value.fix


def test_fm_concurrency_is_one_for_models_llama_cpp_serves_on_the_cpu_unless_set() -> None:
    from cambrian.meta_agent.config import load_config
    from cambrian.meta_agent.search.session import resolve_fm_concurrency

    if choose_backend() != "llamacpp":
        pytest.skip("vLLM and a GPU are present: local models are not served on the CPU here")
    assert resolve_fm_concurrency(load_config(overrides={"fm.model": "smollm2-135m"})).fm.concurrency == 1
    chosen = load_config(overrides={"fm.model": "smollm2-135m", "fm.concurrency": 2})
    assert resolve_fm_concurrency(chosen).fm.concurrency == 2
    hosted = load_config(overrides={"fm.model": "openai/gpt-4o-mini"})
    assert resolve_fm_concurrency(hosted).fm.concurrency == 2
    mixed = load_config(overrides={"fm.model": "smollm2-135m", "fm.models": ["openai/gpt-4o-mini"]})
    assert resolve_fm_concurrency(mixed).fm.concurrency == 2


def test_several_local_model_servers_share_the_cores_instead_of_each_taking_them_all() -> None:
    from cambrian.meta_agent.config import load_config
    from cambrian.meta_agent.llm.serve import default_threads
    from cambrian.meta_agent.search.session import server_threads

    assert server_threads(load_config(overrides={"fm.model": "smollm2-135m"})) is None  # one server: one per core
    two = {"fm.model": "qwen2.5-coder-1.5b", "evaluation.agent_model": "qwen2.5-coder-0.5b"}
    assert server_threads(load_config(overrides=two)) == max(1, default_threads() // 2)
    same = {"fm.model": "smollm2-135m", "evaluation.agent_model": "smollm2-135m"}
    assert server_threads(load_config(overrides=same)) is None  # one model, one server
    hosted = {"fm.model": "smollm2-135m", "fm.models": ["openai/gpt-4o-mini"]}
    assert server_threads(load_config(overrides=hosted)) is None
    assert server_threads(load_config(overrides={**two, "fm.threads": 3})) == 3
