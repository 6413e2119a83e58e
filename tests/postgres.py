"""A real PostgreSQL server for the tests, from Debian's server binaries, and the `store_url` fixtures.

The server refuses to run as root, so as root every server command runs as the `postgres` user
(`runuser`), in a data folder that user owns; as anyone else it runs as that user. It listens on
127.0.0.1 on a free port and on a Unix socket in its own folder, trusts local connections (a test
server: no password), and runs with fsync off (a crashed *process* loses nothing committed; only an
OS crash would). pytest-postgresql's `postgresql_proc` would run initdb as the current user, which
as root fails, hence this small manager.

Fixtures (imported by tests/conftest.py):
- `postgres_server`: one server for the session; each test asks it for a fresh database.
- `postgres_url`: a fresh, empty database of that server for this test.
- `store_url`: parametrised over "sqlite" (a file in tmp_path) and "postgresql" (a fresh database),
  so a test taking it runs on both stores.

Without the binaries the PostgreSQL cases skip with the reason; with CAMBRIAN_REQUIRE_POSTGRES=1 (CI)
they fail instead.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

#: The user the server runs as when the tests run as root (Debian's `postgresql` package creates it).
SERVER_USER = "postgres"


def postgres_bindir() -> Path | None:
    """The folder holding initdb and pg_ctl: Debian's newest /usr/lib/postgresql/N/bin, else PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def postgres_unavailable_reason() -> str | None:
    """Why no test server can start here, or None."""
    if postgres_bindir() is None:
        return "PostgreSQL's server binaries (initdb, pg_ctl) are missing: `apt-get install postgresql` (.ci/run does)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running as root, the server needs the `{SERVER_USER}` user (Debian's postgresql package adds it)"
    return None


def skip_without_postgres() -> None:
    """Skip when no server can start; FAIL instead where CI demands it (CAMBRIAN_REQUIRE_POSTGRES=1)."""
    reason = postgres_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CAMBRIAN_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL is required here (CAMBRIAN_REQUIRE_POSTGRES=1) but {reason}", pytrace=False)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """One throwaway PostgreSQL server: start, stop, restart (to test a database that goes away), databases."""

    def __init__(self, root: Path) -> None:
        bindir = postgres_bindir()
        assert bindir is not None, postgres_unavailable_reason()
        self.bindir = bindir
        self.root = Path(root)
        self.data = self.root / "data"
        self.sockets = self.root / "sockets"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self.user = SERVER_USER if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        self._names = itertools.count(1)

    # ----- lifetime -----

    def _as_server_user(self, *command: str, timeout: float = 120) -> subprocess.CompletedProcess:
        argv = [str(self.bindir / command[0]), *command[1:]]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", SERVER_USER, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            log = self.log.read_text()[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(command[:2])} failed ({done.returncode}):\n{done.stdout}{done.stderr}{log}")
        return done

    def start(self) -> PostgresServer:
        """initdb (first time) and start; returns when the server accepts connections."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.sockets.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            uid, gid = pwd.getpwnam(SERVER_USER).pw_uid, pwd.getpwnam(SERVER_USER).pw_gid
            for path in (self.root, self.sockets):
                os.chown(path, uid, gid)
            self.root.chmod(0o755)  # the server user reaches its folders inside; pytest's tmp dirs are 0700
            for parent in self.root.parents:
                if parent.stat().st_mode & 0o001 == 0:
                    raise RuntimeError(f"{parent} is not passable by the {SERVER_USER} user (chmod o+x it)")
        if not (self.data / "PG_VERSION").exists():
            self._as_server_user(
                "initdb",
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                self.user,
                "--no-sync",
                "-E",
                "UTF8",
                "--locale",
                "C",
            )
        self._pg_ctl("start")
        return self

    def _pg_ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        self._as_server_user(
            "pg_ctl", action, "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o", options, *extra
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (fast: disconnects every client; immediate: like a crash)."""
        self._pg_ctl("stop", "-m", mode)

    def restart(self, mode: str = "fast") -> None:
        """Stop and start again: every open connection breaks, committed data stays."""
        self._pg_ctl("restart", "-m", mode)

    def destroy(self) -> None:
        """Stop (if running) and remove the server's folder."""
        if (self.data / "postmaster.pid").exists():
            try:
                self.stop("immediate")
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    # ----- databases -----

    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL of `database` over TCP."""
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{database}"

    def _admin(self) -> psycopg.Connection:
        return psycopg.connect(host="127.0.0.1", port=self.port, user=self.user, dbname="postgres", autocommit=True)

    def create_database(self, prefix: str = "test") -> str:
        """A fresh empty database; returns its SQLAlchemy URL."""
        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        with self._admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database of `url`, closing whatever connections are left on it."""
        name = url.rsplit("/", 1)[1]
        with self._admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._admin().close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def start_private_server() -> Iterator[PostgresServer]:
    """A server of its own (for tests that stop or restart it), removed afterwards."""
    skip_without_postgres()
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="cambrian-pg-")))
    try:
        yield server.start()
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole session (skips without the binaries, see skip_without_postgres)."""
    yield from start_private_server()


@pytest.fixture()
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test (its SQLAlchemy URL); dropped afterwards."""
    url = postgres_server.create_database()
    try:
        yield url
    finally:
        postgres_server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The archive's SQLAlchemy URL on each store: an SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'archive.db'}"
    return str(request.getfixturevalue("postgres_url"))
