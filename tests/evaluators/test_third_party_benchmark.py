"""A third-party benchmark package, installed with pip, found through `cambrian.benchmarks`, searched via the CLI.

Installs examples/cambrian-example-benchmark into this test environment (editable, no dependencies) and
uninstalls it at the end, whatever happens. The search uses the real SmolLM2-135M and the local sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cambrian.archive.models import AgentStatus, RunStatus
from cambrian.archive.store import Archive
from tests.conftest import SHORT_REPLIES

pytestmark = pytest.mark.slow

EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "examples" / "cambrian-example-benchmark"
DIST_NAME = "cambrian-example-benchmark"
CAMBRIAN = [sys.executable, "-m", "cambrian"]


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=600)


def _install_example() -> None:
    """Offline first (`--no-build-isolation`, needs setuptools with bdist_wheel); else pip's isolated build,
    which fetches setuptools and wheel from the package index."""
    offline = _pip("install", "--no-build-isolation", "--no-deps", "-e", str(EXAMPLE_DIR))
    if offline.returncode == 0:
        return
    isolated = _pip("install", "--no-deps", "-e", str(EXAMPLE_DIR))
    assert isolated.returncode == 0, f"pip install failed:\n{offline.stderr[-2000:]}\n{isolated.stderr[-2000:]}"


@pytest.fixture()
def example_installed() -> object:
    egg_info = EXAMPLE_DIR / "cambrian_example_benchmark.egg-info"
    had_egg_info = egg_info.exists()
    try:
        _install_example()
        yield None
    finally:
        _pip("uninstall", "-y", DIST_NAME)
        if not had_egg_info:
            shutil.rmtree(egg_info, ignore_errors=True)  # build output of the install above


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.run([*CAMBRIAN, *args], capture_output=True, text=True, timeout=900, env=env)
    if check:
        assert proc.returncode == 0, f"cambrian {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_installed_package_is_listed_and_searched_through_the_cli(
    example_installed: object, smollm2_path: Path, tmp_path: Path
) -> None:
    listing = _cli("benchmarks").stdout
    assert "example" in listing and "Fit def f(x) to points" in listing

    runs = tmp_path / "runs"
    out = _cli(
        "run",
        "example",
        "--name",
        "ex",
        "--iterations",
        "2",
        "--model",
        "smollm2-135m",
        "--runs-dir",
        str(runs),
        "--sandbox",
        "local",
        "--seed",
        "1",
        *SHORT_REPLIES,
        "--set",
        "benchmark_options.threshold=0.2",
    ).stdout
    assert "run ex finished" in out

    with Archive.at(runs / "ex" / "archive.db") as archive:
        run = archive.get_run("ex")
        assert run.status == RunStatus.finished and run.benchmark == "example"
        assert json.loads(run.config_json)["benchmark_options"] == {"threshold": 0.2}
        agents = archive.agents(int(run.id))
        seed = agents[0]
        assert seed.operator == "seed" and seed.status == AgentStatus.evaluated and 0 < seed.score < 1
        assert {e.task_id for e in archive.evaluations(int(seed.id))} == {"search-0", "search-1", "search-2"}
        assert {a.iteration for a in agents if a.iteration > 0} == {1, 2}  # and the repairs of failed runs

    held = _cli("eval", "ex:1", "--split", "holdout", "--no-agent-fm", "--runs-dir", str(runs)).stdout
    assert "holdout-1" in held and "stored in archive" in held

    # The same package adds an operator and a selection strategy through their entry point groups.
    assert "top_fraction" in _cli("config", "--set", "search.strategy=top_fraction").stdout
    out = _cli(
        "run",
        "example",
        "--name",
        "plug",
        "--iterations",
        "4",
        "--model",
        "smollm2-135m",
        "--runs-dir",
        str(runs),
        "--sandbox",
        "local",
        "--seed",
        "1",
        "--strategy",
        "top_fraction",
        "--set",
        "search.params.fraction=0.5",
        "--set",
        "search.operators={scale_constant = 1.0}",
    ).stdout
    assert "run plug finished" in out
    with Archive.at(runs / "plug" / "archive.db") as archive:
        children = [a for a in archive.agents(int(archive.get_run("plug").id)) if a.iteration > 0]
        assert len(children) == 4 and {a.operator for a in children} == {"scale_constant"}
        assert any(a.status == AgentStatus.evaluated for a in children)
        assert json.loads(archive.get_run("plug").config_json)["search"]["strategy"] == "top_fraction"
    refused = _cli(
        "run",
        "example",
        "--name",
        "bad",
        "--runs-dir",
        str(runs),
        "--strategy",
        "top_fraction",
        "--set",
        "search.params.fraction=2",
        check=False,
    )
    assert refused.returncode != 0 and "fraction must be a number in (0, 1]" in refused.stdout + refused.stderr
