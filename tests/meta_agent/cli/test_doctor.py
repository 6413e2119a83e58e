"""`cambrian doctor` on this machine: one line per fact, and each problem with its fix (real engine, real
local sandbox, a real closed port as a dead FM endpoint)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cambrian.meta_agent.cli import diagnose
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.llm.serve import free_port
from tests.conftest import docker_unavailable_reason


def test_doctor_names_each_problem_with_its_fix(tmp_path: Path) -> None:
    config = RunConfig.model_validate(
        {
            "fm": {"model": "openai/x", "api_base": f"http://127.0.0.1:{free_port()}/v1"},
            "evaluation": {"image": "cambrian-sandbox:no-such-tag"},
            "runs_dir": str(tmp_path),
        }
    )
    findings = {f.name: f for f in diagnose(config, self_test=False)}
    endpoint = findings["FM endpoint"]
    assert (
        endpoint.verdict == "fail" and "no FM server answers" in endpoint.detail and "start the server" in endpoint.fix
    )
    assert findings["local sandbox"].verdict == "ok"
    assert findings["running as root"].verdict in ("ok", "warn")
    if docker_unavailable_reason() is None:
        assert findings["docker engine"].verdict == "ok"
        image = findings["sandbox image"]
        assert image.verdict == "fail" and "missing" in image.detail and image.fix == "cambrian sandbox build"


def test_cli_doctor_exits_non_zero_on_a_problem_and_zero_when_ready() -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    done = subprocess.run(
        [sys.executable, "-m", "cambrian", "doctor", "--quick", "--model", "openai/x", "--api-base", dead],
        capture_output=True,
        text=True,
        timeout=300,
        env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL  FM endpoint" in done.stdout and "fix: nothing answers at" in done.stdout
    if docker_unavailable_reason() is None:
        ready = subprocess.run(
            [sys.executable, "-m", "cambrian", "doctor", "--model", "smollm2-135m"],
            capture_output=True,
            text=True,
            timeout=300,
            env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"},
        )
        assert "ok    sandbox self-test" in ready.stdout and "ok    numpy and scipy in the image" in ready.stdout
