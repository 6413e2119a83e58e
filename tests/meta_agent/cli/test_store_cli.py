"""Several runs in one store (`--store URL`): run, runs, status, tree, show, diff, eval, export, resume and the UI,
through the real CLI, on a shared SQLite file and on a real PostgreSQL database.

The searches use ast_mutate on the deceptive benchmark in the local sandbox: no FM is called (the model
named is a hosted one with a placeholder key that nothing uses), so each run takes seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from cambrian.archive.models import AgentStatus, RunStatus
from cambrian.archive.store import Archive
from cambrian.ui import create_app

CAMBRIAN = [sys.executable, "-m", "cambrian"]
NO_FM = [
    "--sandbox",
    "local",
    "--set",
    "search.operators={ast_mutate = 1.0}",
    "--model",
    "openai/gpt-4o-mini",
    "--api-key-env",
    "CAMBRIAN_TEST_UNUSED_KEY",
]
PASSWORD = "s3cret-pw"


def cambrian(*args: str, runs: Path, check: bool = True) -> subprocess.CompletedProcess:
    """The CLI with `args`; a `--store URL` that carries a password goes in CAMBRIAN_STORE instead, as a user
    must pass it (typed on the command line, it is refused: see the test below)."""
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1", "CAMBRIAN_TEST_UNUSED_KEY": "never-used"}
    env.pop("CAMBRIAN_STORE", None)
    if "--store" in args:
        at = args.index("--store")
        if PASSWORD in args[at + 1]:
            env["CAMBRIAN_STORE"] = args[at + 1]
            args = args[:at] + args[at + 2 :]
    done = subprocess.run(
        [*CAMBRIAN, *args, "--runs-dir", str(runs)], capture_output=True, text=True, timeout=300, env=env
    )
    assert PASSWORD not in done.stdout + done.stderr, "a password was printed"
    if check:
        assert done.returncode == 0, f"cambrian {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def with_password(url: str) -> str:
    """The URL with a password in it (the test server trusts local users, so it is never checked, only hidden)."""
    parsed = make_url(url)
    return url if parsed.get_backend_name() == "sqlite" else parsed.set(password=PASSWORD).render_as_string(False)


def test_two_runs_share_one_store_and_every_command_finds_them(store_url: str, tmp_path: Path) -> None:
    store, runs = with_password(store_url), tmp_path / "runs"
    for name, iterations in (("first", "4"), ("second", "3")):
        out = cambrian(
            "run", "deceptive", "--name", name, "--iterations", iterations, "--store", store, *NO_FM, runs=runs
        )
        assert f"--store {make_url(store).render_as_string(hide_password=True)}" in out.stdout
    assert not list(runs.glob("*/archive.db")), "a store run wrote an SQLite archive of its own"

    listed = cambrian("runs", "--store", store, runs=runs).stdout
    assert "first" in listed and "second" in listed and "deceptive" in listed
    assert "no runs" in cambrian("runs", runs=runs).stdout  # the runs folder itself holds no archive

    status = cambrian("status", "first", "--store", store, runs=runs).stdout
    assert "first  deceptive  status finished" in status and "iterations 4/4" in status
    tree = cambrian("tree", "second", "--store", store, runs=runs).stdout
    with Archive(store, readonly=True) as archive:
        first, second = archive.get_run("first"), archive.get_run("second")
        assert first.status == second.status == RunStatus.finished
        ids = {run.name: [a.key for a in archive.agents(run.key)] for run in (first, second)}
        assert not set(ids["first"]) & set(ids["second"]) and len(ids["second"]) == 4
        assert PASSWORD not in first.config_json and PASSWORD not in (runs / "first" / "config.json").read_text()
    assert all(f"#{agent_id}" in tree for agent_id in ids["second"])
    assert f"#{ids['first'][0]} " not in tree  # only the run asked for

    shown = cambrian("show", "second", str(ids["second"][1]), "--store", store, runs=runs).stdout
    assert "lineage" in shown and "ast_mutate" in shown
    diff = cambrian("diff", "second", str(ids["second"][0]), str(ids["second"][1]), "--store", store, runs=runs)
    assert diff.stdout.strip()
    # Agent ids run across the store's runs: another run's agent is refused by name, with the fix.
    other = ids["first"][0]
    refused = cambrian("diff", "second", str(other), str(ids["second"][0]), "--store", store, runs=runs, check=False)
    assert refused.returncode == 2 and f"agent {other} is not in run second: it belongs to run first" in refused.stderr
    assert f"cambrian tree second --store {make_url(store).render_as_string(hide_password=True)}" in refused.stderr
    for command in (
        ("show", "second", str(other)),
        ("export", "second", "--agent", str(other), "--to", str(tmp_path / "x")),
    ):
        refused = cambrian(*command, "--store", store, runs=runs, check=False)
        assert refused.returncode == 2 and f"agent {other} is not in run second" in refused.stderr, refused.stderr
    evaluated = cambrian("eval", f"second:{ids['second'][0]}", "--split", "search", "--store", store, runs=runs)
    assert f"second:{ids['second'][0]}" in evaluated.stdout and "printed only" in evaluated.stdout
    cambrian("export", "first", "--best", "1", "--to", str(tmp_path / "out"), "--store", store, runs=runs)
    assert list((tmp_path / "out").glob("agent-*/manifest.json"))

    resumed = cambrian("resume", "first", "--iterations", "6", "--store", store, runs=runs).stdout
    assert "run first finished" in resumed
    with Archive(store, readonly=True) as archive:
        run = archive.get_run("first")
        assert archive.iterations_done(run.key) == 6 and json.loads(run.config_json)["budget"]["iterations"] == 6
        assert all(a.status == AgentStatus.evaluated for a in archive.agents(run.key))
        assert len(archive.agents(archive.get_run("second").key)) == 4  # the other run untouched

    # Without --store, a run started here is found through its config.json, unless its password was masked.
    plain = cambrian("status", "second", runs=runs, check=False)
    if store == store_url:  # SQLite: no password
        assert plain.returncode == 0 and "second  deceptive" in plain.stdout, plain.stderr
    else:
        assert plain.returncode == 2 and "CAMBRIAN_STORE=" in plain.stderr and "fix:" in plain.stderr, plain.stderr
    missing = cambrian("status", "third", "--store", store, runs=runs, check=False)
    assert missing.returncode == 2 and "no run named 'third'" in missing.stderr
    assert f"cambrian runs --store {make_url(store).render_as_string(hide_password=True)}" in missing.stderr

    # The browser UI over the store: both runs listed, pages and data served, the password never shown.
    client = TestClient(create_app(runs, store=store), base_url="http://localhost")
    page = client.get("/")
    assert page.status_code == 200 and "first" in page.text and "second" in page.text
    assert PASSWORD not in page.text
    run_page = client.get("/runs/second")
    assert run_page.status_code == 200 and PASSWORD not in run_page.text
    assert client.get("/api/runs/second/points").status_code == 200
    assert client.get("/runs/nope").status_code == 404


def test_a_password_typed_in_the_store_url_is_refused_before_anything_runs(tmp_path: Path) -> None:
    # Any process on the machine, an evaluated program included, reads a command line in /proc/PID/cmdline.
    url = f"postgresql+psycopg://someone:{PASSWORD}@127.0.0.1:1/db"
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    env.pop("CAMBRIAN_STORE", None)
    for args in (("runs",), ("status", "x"), ("run", "deceptive", "--name", "x", *NO_FM)):
        done = subprocess.run(
            [*CAMBRIAN, *args, "--store", url, "--runs-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "readable by every process" in done.stderr and "CAMBRIAN_STORE=" in done.stderr
        assert PASSWORD not in done.stdout + done.stderr and "PASSWORD@127.0.0.1:1/db" in done.stderr
    assert not (tmp_path / "x").exists()


def test_a_store_that_cannot_be_reached_says_so_with_the_fix(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    down = f"postgresql+psycopg://someone:{PASSWORD}@127.0.0.1:1/db"
    for args in (
        ("runs", "--store", down),
        ("status", "x", "--store", down),
        ("run", "deceptive", "--name", "x", "--iterations", "1", "--store", down, *NO_FM),
    ):
        done = cambrian(*args, runs=runs, check=False)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "cannot connect to the archive postgresql+psycopg://someone:***@127.0.0.1:1/db" in done.stderr
        assert "fix:" in done.stderr and "running" in done.stderr
    bad = cambrian("runs", "--store", "not a url", runs=runs, check=False)
    assert bad.returncode == 2 and "is not a database URL" in bad.stderr and "postgresql+psycopg://" in bad.stderr
