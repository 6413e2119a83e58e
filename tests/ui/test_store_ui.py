"""The browser UI over runs kept in a PostgreSQL store answers exactly what it answers over SQLite files.

The same runs (the hostile one and the 1,200-agent one of tests/ui/conftest.py, written through the real
`Archive` API into one SQLite store file) are copied row for row into a PostgreSQL database, their ids
kept (so the id sequences are moved past them, as any bulk load with explicit ids must); then every page
and JSON route is fetched from both UIs and the answers compared: every query the UI makes (times as
POSIX seconds, budget bins, tree, analytics, compare) gives the same result on both stores.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, insert, select, text
from sqlmodel import SQLModel

from cambrian.archive.store import Archive
from cambrian.ui import create_app
from cambrian.ui._data import _STORES
from tests.postgres import PostgresServer, start_private_server
from tests.ui.conftest import write_big_run, write_hostile_run

#: Tables whose rows are copied (the schema's own bookkeeping is made by the target's creation).
_BOOKKEEPING = {"schemaversion"}


def stretch_times(sqlite_url: str, factor: float = 1000.0) -> None:
    """Spread every stored time `factor` times further from the earliest, cut to whole milliseconds.

    The conftest writes a run in some 40 ms, so its budget bins would be a fraction of a millisecond wide:
    stretched to ~40 s, they are wide enough for the comparison below to be exact but for float rounding."""
    with Archive(sqlite_url) as archive, archive.engine.begin() as connection:
        tables = [t for t in SQLModel.metadata.sorted_tables if "created_at" in t.c]
        firsts = [connection.execute(select(func.min(t.c.created_at))).scalar() for t in tables]
        t0 = min(first for first in firsts if first is not None)  # some tables are empty (commitmark on SQLite)
        for table in tables:
            columns = [c for c in ("created_at", "updated_at") if c in table.c]
            key = list(table.primary_key.columns)
            for row in connection.execute(select(*key, *(table.c[c] for c in columns))).all():
                values = {}
                for name, when in zip(columns, row[len(key) :]):
                    stretched = t0 + (when - t0) * factor
                    values[name] = stretched.replace(microsecond=stretched.microsecond // 1000 * 1000)
                where = [column == value for column, value in zip(key, row[: len(key)])]
                connection.execute(table.update().where(*where).values(**values))


def copy_archive(source_url: str, store: str) -> None:
    """Copy the archive at `source_url` into `store` row for row, ids kept; sequences moved past them."""
    with Archive(store) as target, Archive(source_url, readonly=True) as source:
        with source.engine.connect() as read, target.engine.begin() as write:
            for table in SQLModel.metadata.sorted_tables:
                if table.name in _BOOKKEEPING:
                    continue
                rows = [dict(row._mapping) for row in read.execute(select(table))]
                if rows:
                    write.execute(insert(table), rows)
        with target.engine.begin() as write:
            for table in ("run", "agent", "evaluation", "llmcall"):
                write.execute(
                    text(
                        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                        f"(SELECT coalesce(max(id), 0) + 1 FROM {table}), false)"
                    )
                )


def same(a: Any, b: Any) -> bool:
    """Equal, but for float rounding (the stores' SQL sums and divides in its own order). Times are exact to
    the microsecond on both (ui._columns.posix_seconds_sql): with SQLite's julianday() (whole milliseconds as
    a float of days), a budget bin's evaluations per minute once differed in the sixth digit (a CI run)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-3)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def first_difference(a: Any, b: Any, where: str = "") -> str:
    """Where `same` first fails, for the assertion message."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where}: keys {sorted(a)} != {sorted(b)}"
        return next((first_difference(a[k], b[k], f"{where}.{k}") for k in a if not same(a[k], b[k])), "")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next(
            (first_difference(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b)) if not same(x, y)), ""
        )
    return f"{where}: {a!r} != {b!r}"


def test_every_route_answers_the_same_from_postgresql_as_from_sqlite(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs_dir, sqlite_url = tmp_path / "runs", f"sqlite:///{tmp_path / 'store.db'}"
    # The conftest writers open RUNS_DIR/<name>/archive.db: here both runs go into one SQLite store instead.
    monkeypatch.setattr(
        Archive, "at", classmethod(lambda cls, path, readonly=False: cls(sqlite_url, readonly=readonly))
    )
    hostile = write_hostile_run(runs_dir, "xss")
    big = write_big_run(runs_dir)
    monkeypatch.undo()
    stretch_times(sqlite_url)
    copy_archive(sqlite_url, postgres_url)
    from_sqlite = TestClient(create_app(runs_dir, store=sqlite_url), base_url="http://localhost")
    from_store = TestClient(create_app(runs_dir, store=postgres_url), base_url="http://localhost")
    agents = sorted({*hostile.values(), *big.values()})
    routes = [
        "/api/runs",
        "/compare?runs=xss,big",
        *(f"/api/runs/{run}/{what}" for run in ("xss", "big") for what in ("points", "panels", "tree", "changes")),
        f"/api/runs/big/tree?root={big['wide_head']}&depth=3",
        f"/runs/xss/compare?a={hostile['seed']}&b={hostile['child']}",
        *(f"/api/runs/{'xss' if a in hostile.values() else 'big'}/agents/{a}" for a in agents),
        *(f"/runs/{'xss' if a in hostile.values() else 'big'}/agents/{a}" for a in agents),
        "/runs/xss",
        "/runs/big",
    ]
    for route in routes:
        expected, got = from_sqlite.get(route), from_store.get(route)
        assert (got.status_code, expected.status_code) == (200, 200), (route, got.text[:500])
        if route.startswith("/api/"):
            got_json = json.loads(got.text.replace(postgres_url, "STORE"))  # agents' export commands name the store
            expected_json = json.loads(expected.text.replace(sqlite_url, "STORE"))
            assert same(got_json, expected_json), (route, first_difference(got_json, expected_json))
        else:  # pages also name where the runs are (in the header, in each agent's export command)
            assert got.text.replace(postgres_url, "STORE") == expected.text.replace(sqlite_url, "STORE"), route
    # The store's runs page lists both runs; a run it does not hold is a 404 with the fix.
    page = from_store.get("/")
    assert page.status_code == 200 and "xss" in page.text and "big" in page.text
    missing = from_store.get("/runs/nope")
    assert missing.status_code == 404 and "cambrian runs --store" in missing.text


@pytest.fixture
def private_server() -> Iterator[PostgresServer]:
    yield from start_private_server()


def test_the_store_stays_open_between_requests_and_answers_after_a_server_restart(
    tmp_path: Path, private_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = private_server.create_database()
    with Archive(url) as archive:
        run = archive.create_run(name="kept", benchmark="deceptive", seed=0, config_json="{}")
        archive.add_agent(int(run.id), files={"main.py": "x = 1\n"}, entry="main.py")
    opened: list[str] = []
    real_init = Archive.__init__

    def counting_init(self: Archive, url: str, **options: Any) -> None:
        opened.append(url)
        real_init(self, url, **options)

    monkeypatch.setattr(Archive, "__init__", counting_init)
    with TestClient(create_app(tmp_path, store=url), base_url="http://localhost") as client:
        for route in ("/", "/api/runs", "/runs/kept", "/api/runs/kept/points", "/api/runs"):
            assert client.get(route).status_code == 200, route
        assert opened == [url]  # one open for every request, not one each
        private_server.restart()
        answer = client.get("/api/runs")
        assert answer.status_code == 200 and "kept" in answer.text
    assert not _STORES._open  # the UI's end closed it


def test_sqlite_times_read_as_posix_seconds_exact_to_the_microsecond(tmp_path: Path) -> None:
    """What every time the UI bins goes through: the julianday() form missed all 200, by up to 0.51 ms."""
    from datetime import datetime, timedelta, timezone

    from cambrian.archive.models import Run
    from cambrian.ui._columns import posix_seconds_sql

    runs = Run.__table__  # type: ignore[attr-defined]  # SQLModel sets __table__ at runtime
    moments = [
        datetime(2026, 11, 26, 3, 2, 31, 45805, tzinfo=timezone.utc) + timedelta(microseconds=977 * i)
        for i in range(200)
    ]
    with Archive.at(tmp_path / "archive.db") as archive:
        for i, moment in enumerate(moments):
            run = archive.create_run(name=f"r{i}", benchmark="b", seed=0, config_json="{}")
            with archive.engine.begin() as connection:
                connection.execute(runs.update().where(runs.c.id == run.id).values(created_at=moment))
        with archive.engine.connect() as connection:
            query = select(posix_seconds_sql(runs.c.created_at, "sqlite")).order_by(runs.c.created_at)
            assert list(connection.execute(query).scalars()) == [moment.timestamp() for moment in moments]
