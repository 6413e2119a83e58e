"""The archive tests' shared fixtures: an archive on each store (`store_url`: an SQLite file, a fresh PostgreSQL
database) with one run, and an SQLite file's path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cambrian.archive.models import Run
from cambrian.archive.store import Archive


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "runs" / "demo" / "archive.db"


@pytest.fixture
def url(store_url: str) -> str:
    """The archive's URL: an SQLite file or a fresh PostgreSQL database."""
    return store_url


@pytest.fixture
def archive(url: str) -> Iterator[Archive]:
    with Archive(url) as store:
        yield store


@pytest.fixture
def run(archive: Archive) -> Run:
    return archive.create_run(name="demo", benchmark="circle_packing", seed=7, config_json='{"iterations": 3}')
