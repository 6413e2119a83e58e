"""The library API (`import cambrian`): a real search from Python, read back, exported, scored and cancelled.

Real parts: the local sandbox, a SQLite archive, the symbolic-regression benchmark; `ast_mutate` makes the
children, so no model is needed.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import cambrian

NO_FM = {"search": {"operators": {"ast_mutate": 1.0}}}


def _search(runs: Path, name: str, iterations: int, **kw: Any) -> cambrian.Run:
    return cambrian.search(
        "symbolic_regression", iterations=iterations, sandbox="local", runs_dir=runs, name=name, config=NO_FM, **kw
    )


def test_a_search_from_python_is_read_exported_scored_and_reported(tmp_path: Path) -> None:
    events: list[str] = []
    run = _search(tmp_path / "runs", "api", 4, on_event=lambda event: events.append(event.kind))
    assert run.status == "finished" and run.seed_score is not None
    lineage = run.lineage()
    assert len(lineage) == 5 and lineage[0]["operator"] == "seed" and lineage[0]["parent"] is None
    assert {row["parent"] for row in lineage[1:]} <= {row["id"] for row in lineage}
    assert "evaluated" in events
    (best,) = run.best(1)
    assert best.score is not None and best.score >= run.seed_score and best.files[best.entry]
    assert best.holdout_score is None  # nothing measured it yet: never taken from the search
    assert run.config["benchmark"] == "symbolic_regression"

    (folder,) = run.export(tmp_path / "out", best=1)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["agent_id"] == best.id
    outcome = run.evaluate(best, split="holdout")
    again = cambrian.open_run(tmp_path / "runs" / "api")  # by its folder
    assert again.best(1)[0].holdout_score == outcome.score  # stored apart from the search score
    assert again.best(1)[0].score == best.score
    assert cambrian.open_run("api", runs_dir=tmp_path / "runs").agent(best.id) == again.agent(best.id)
    report = run.report(tmp_path / "report.html")
    assert report.is_file() and "<html" in report.read_text()[:500].lower()


def test_bad_calls_are_cambrian_errors_with_a_fix(tmp_path: Path) -> None:
    with pytest.raises(cambrian.CambrianError) as missing:
        cambrian.open_run("nothing-here", runs_dir=tmp_path)
    assert "nothing-here" in str(missing.value) and missing.value.fix
    with pytest.raises(cambrian.CambrianError) as unknown:
        cambrian.search("no-such-benchmark", runs_dir=tmp_path, iterations=1)
    assert "no-such-benchmark" in str(unknown.value) and unknown.value.fix
    with pytest.raises(cambrian.CambrianError, match="search.bogus"):
        cambrian.search("deceptive", runs_dir=tmp_path, iterations=1, config={"search": {"bogus": 1}})
    # A store that is a path, not a URL: once sqlalchemy's ArgumentError from deep inside.
    for call in (
        lambda: cambrian.search("deceptive", runs_dir=tmp_path, iterations=1, store="runs.db"),
        lambda: cambrian.open_run("r", runs_dir=tmp_path, store="runs.db"),
    ):
        with pytest.raises(cambrian.CambrianError, match=r"'runs.db' \(store=\) is not a database URL") as bad:
            call()
        assert "sqlite:///" in bad.value.fix
    assert not list(tmp_path.iterdir())  # refused before anything was made


def test_the_runs_folder_defaults_to_the_environment_as_in_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CAMBRIAN_RUNS_DIR", str(tmp_path / "elsewhere"))
    run = cambrian.search("symbolic_regression", iterations=1, sandbox="local", name="env", config=NO_FM)
    assert run.runs_dir == tmp_path / "elsewhere" and (tmp_path / "elsewhere" / "env" / "archive.db").is_file()
    assert not (tmp_path / "runs").exists()
    assert cambrian.open_run("env").agent(run.best(1)[0].id) == run.best(1)[0]


def test_search_inside_a_running_event_loop_blocks_in_a_worker_thread(tmp_path: Path) -> None:
    async def notebook_cell() -> cambrian.Run:
        return _search(tmp_path, "in-loop", 2)  # a notebook calls it from inside its loop

    run = asyncio.run(notebook_cell())
    assert len(run.lineage()) == 3


def test_cancelling_search_async_stops_the_search_and_keeps_what_it_did(tmp_path: Path) -> None:
    child_evaluated = threading.Event()

    def on_event(event: Any) -> None:
        if event.kind == "evaluated" and event.iteration >= 1:
            child_evaluated.set()

    async def scenario() -> None:
        task = asyncio.ensure_future(
            cambrian.search_async(
                "symbolic_regression",
                iterations=2000,
                sandbox="local",
                runs_dir=tmp_path,
                name="cancelled",
                config=NO_FM,
                on_event=on_event,
            )
        )
        assert await asyncio.to_thread(child_evaluated.wait, 1200), "no child was evaluated"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    run = cambrian.open_run("cancelled", runs_dir=tmp_path)
    lineage = run.lineage()
    assert run.status == "stopped" and 2 <= len(lineage) < 2001
    # Nothing is left half-done: a child proposed and not yet evaluated stays queued for `cambrian resume`.
    assert all(row["status"] in ("evaluated", "invalid", "proposed") for row in lineage)
