"""A run with islands through the real CLI: `cambrian run --set search.islands=3`, then what `status`, `show`,
the UI and the library API say of its islands; a bad island setting refused before anything runs.

The search uses ast_mutate on the deceptive benchmark in the local sandbox: no FM is called (the model named is a
hosted one with a placeholder key that nothing uses), so it takes seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

import cambrian as cambrian_api
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
ISLANDS = ["--set", "search.islands=3", "--set", "search.migration_every=2", "--set", "search.max_pending=1"]


def cambrian(*args: str, runs: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1", "CAMBRIAN_TEST_UNUSED_KEY": "never-used"}
    return subprocess.run(
        [*CAMBRIAN, *args, "--runs-dir", str(runs)], capture_output=True, text=True, timeout=300, env=env
    )


def test_status_show_and_the_ui_tell_a_runs_islands(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = cambrian("run", "deceptive", "--name", "isl", "--iterations", "8", *NO_FM, *ISLANDS, runs=runs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "migration after" in done.stdout  # a round that moved agents is told

    with Archive.at(runs / "isl" / "archive.db", readonly=True) as archive:
        run = archive.get_run("isl")
        agents, migrants = archive.agents(run.key), archive.island_migrants(run.key)
    assert migrants and {a.island for a in agents if a.iteration > 0} == {0, 1, 2}
    migrant = next(a for a in agents if a.id == migrants[0].agent_id)

    status = cambrian("status", "isl", runs=runs)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    at = lines.index("islands: 3; every 2 finished proposals, each island's best 1 join the next")
    assert lines[at + 1].split() == ["island", "agents", "evaluated", "migrants", "in", "best"]
    rows = [line.split() for line in lines[at + 2 : at + 5]]
    assert [row[0] for row in rows] == ["0", "1", "2"]
    assert sum(int(row[1]) for row in rows) == sum(1 for a in agents if a.iteration > 0)  # every child has a home
    assert sum(int(row[3]) for row in rows) == len(migrants)

    shown = cambrian("show", "isl", str(migrant.id), "--no-code", runs=runs)
    assert shown.returncode == 0, shown.stderr
    joined = f"island {migrant.island} (home); joined island {migrants[0].island} after {migrants[0].after_proposals}"
    assert joined in shown.stdout
    seed = cambrian("show", "isl", "1", "--no-code", runs=runs)
    assert "on every island (0-2): a seed" in seed.stdout

    with TestClient(create_app(runs), base_url="http://127.0.0.1:8765") as client:
        data = client.get(f"/api/runs/isl/agents/{migrant.id}").json()
        page = client.get(f"/runs/isl/agents/{migrant.id}").text
        seed_data = client.get("/api/runs/isl/agents/1").json()
    assert data["agent"]["island"] == migrant.island
    assert data["islands"][0] == migrant.island and migrants[0].island in data["islands"]
    assert data["joined"][0]["after_proposals"] == migrants[0].after_proposals
    assert "<dt>island</dt>" in page and f"(joined after {migrants[0].after_proposals} proposals)" in page
    assert (seed_data["agent"]["island"], seed_data["islands"]) == (None, [0, 1, 2])

    library = cambrian_api.open_run("isl", runs_dir=runs)  # the library API carries it too
    assert [row["island"] for row in library.lineage()] == [a.island for a in agents]
    assert library.agent(migrant.key).island == migrant.island

    resumed = cambrian("resume", "isl", "--iterations", "11", runs=runs)  # the stored config keeps its islands
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    with Archive.at(runs / "isl" / "archive.db", readonly=True) as archive:
        later, more = archive.agents(run.key), archive.island_migrants(run.key)
    assert [(a.id, a.island) for a in later[: len(agents)]] == [(a.id, a.island) for a in agents]
    assert {(a.iteration, a.island) for a in later if a.iteration > 8} == {(9, 2), (10, 0), (11, 1)}
    assert [m.agent_id for m in more][: len(migrants)] == [m.agent_id for m in migrants]


def test_a_run_without_islands_shows_none(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = cambrian("run", "deceptive", "--name", "one", "--iterations", "2", *NO_FM, runs=runs)
    assert done.returncode == 0, done.stdout + done.stderr
    status, shown = cambrian("status", "one", runs=runs), cambrian("show", "one", "2", "--no-code", runs=runs)
    assert "islands" not in status.stdout and "island" not in shown.stdout
    with TestClient(create_app(runs), base_url="http://127.0.0.1:8765") as client:
        data = client.get("/api/runs/one/agents/2").json()
        page = client.get("/runs/one/agents/2").text
    assert (data["agent"]["island"], data["islands"], data["joined"]) == (None, [], [])
    assert "<dt>island</dt>" not in page


def test_a_bad_island_setting_is_refused_with_the_fix_before_anything_runs(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = cambrian(
        "run", "deceptive", "--name", "bad", "--iterations", "2", *NO_FM, "--set", "search.islands=0", runs=runs
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    said = " ".join(done.stderr.split())
    assert "search.islands" in said and "use 1 island (one population, the default) up to 256 islands" in said
    assert not (runs / "bad").exists()
