"""The lineage tree's and the live changes' JSON over real archives (FastAPI's TestClient, real SQLite): the
tree's level of detail (depth-limited, collapsed clades summarised, expanded on request) and the changes a
live page polls for (new and changed agents)."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from cambrian.archive.models import AgentStatus
from cambrian.archive.store import Archive
from tests.ui.test_app import Runs, client


def tree_of(c: TestClient, **params: object) -> dict:
    query = "&".join(f"{key}={value}" for key, value in params.items())
    response = c.get(f"/api/runs/big/tree?{query}")
    assert response.status_code == 200, response.text
    return response.json()


def test_tree_is_depth_limited_with_collapsed_clades_summarised(runs_dir: Runs) -> None:
    folder, _, big = runs_dir
    with client(folder) as c:
        tree = tree_of(c, depth=1, max_children=40)
        nodes = tree["nodes"]
    # The seed (depth 0), its best 40 children (depth 1: the limit) and one node for the other 260; below
    # the limit only the best path stays open: the 899 agents under the first child.
    assert tree["total"] == 1200 and tree["shown"] == 1 + 40 + 1 + 899
    kinds = {i: k for i, k in zip(nodes["id"], nodes["kind"]) if k != "more"}  # a "more" node carries its parent's id
    assert nodes["id"][0] == big["seed"] and kinds[big["seed"]] == "agent"
    children = [i for i, p in enumerate(nodes["parent"]) if p == 0]
    more = [i for i in children if nodes["kind"][i] == "more"]
    assert len(children) == 41 and len(more) == 1
    shown_children = [nodes["id"][i] for i in children if nodes["kind"][i] != "more"]
    assert big["wide_head"] in shown_children  # it heads the best path
    assert nodes["hidden"][more[0]] == 260 and nodes["hidden_best"][more[0]] == pytest.approx(0.260)
    # The other children are leaves; with depth 0 the seed itself is a collapsed clade of all the rest.
    assert tree_of(c, depth=0, collapse=big["seed"])["nodes"]["hidden"] == [1199]
    # The best path stays open down to the best agent, below the depth limit.
    assert kinds[big["deepest"]] == "agent" and nodes["best_path"][nodes["id"].index(big["deepest"])]
    assert sum(nodes["best_path"]) == 1 + 1 + 899
    # Layout: y is the depth; a parent sits between its first and last child.
    for i, parent in enumerate(nodes["parent"]):
        if parent >= 0:
            assert nodes["y"][i] == nodes["y"][parent] + 1
    kids = [i for i, p in enumerate(nodes["parent"]) if p == 0]
    assert nodes["x"][0] == (nodes["x"][kids[0]] + nodes["x"][kids[-1]]) / 2


def test_tree_collapses_and_expands_on_request(runs_dir: Runs) -> None:
    folder, _, big = runs_dir
    with client(folder) as c:
        shut = tree_of(c, depth=1, collapse=big["wide_head"])
        row = shut["nodes"]["id"].index(big["wide_head"])
        assert shut["nodes"]["kind"][row] == "clade"
        assert shut["nodes"]["hidden"][row] == 899 and shut["nodes"]["hidden_best"][row] == pytest.approx(1.898)
        assert big["deepest"] not in shut["nodes"]["id"]
        wide = tree_of(c, depth=1, wide=big["seed"], collapse=big["wide_head"])
        assert sum(1 for p in wide["nodes"]["parent"] if p == 0) == 300 and "more" not in wide["nodes"]["kind"]
        capped = tree_of(c, depth=50, max_nodes=100)
        assert capped["shown"] <= 100 and "clade" in capped["nodes"]["kind"]
        rooted = tree_of(c, root=big["deepest"] - 5, depth=2)
        assert rooted["nodes"]["id"][0] == big["deepest"] - 5 and rooted["shown"] == 6


def test_changes_endpoint_reports_new_and_changed_agents(runs_dir: Runs, tmp_path: Path) -> None:
    folder, hostile, _ = runs_dir
    copy = tmp_path / "runs"
    shutil.copytree(folder / "xss", copy / "xss")
    with client(copy) as c:
        first = c.get("/api/runs/xss/changes?after_agent=0").json()
        assert first["last_agent"] == hostile["invalid"] and len(first["points"]["id"]) == 3
        tokens = {"after_agent": first["last_agent"], "after_update": first["last_update"]}
        query = "&".join(f"{k}={quote(str(v))}" for k, v in tokens.items())
        assert c.get(f"/api/runs/xss/changes?{query}").json()["points"]["id"] == []
        with Archive.at(copy / "xss" / "archive.db") as archive:  # another writer adds an agent
            run = archive.get_run("xss")
            new = archive.add_agent(
                run.key,
                files={"main.py": "z = 1\n"},
                entry="main.py",
                parent_id=hostile["seed"],
                operator="diff",
                iteration=3,
            )
        answer = c.get(f"/api/runs/xss/changes?{query}").json()
        assert answer["points"]["id"] == [new.key] and answer["points"]["status"] == ["proposed"]
        assert answer["summary"]["agents"] == 4 and answer["last_agent"] == new.key
        with Archive.at(copy / "xss" / "archive.db") as archive:  # ... and evaluates it
            archive.mark_evaluating(new.key)
            archive.finish_evaluation(new.key, status=AgentStatus.evaluated, score=5.0)
        query = f"after_agent={answer['last_agent']}&after_update={quote(answer['last_update'])}"
        evaluated = c.get(f"/api/runs/xss/changes?{query}").json()
        assert evaluated["points"]["id"] == [new.key] and evaluated["points"]["score"] == [5.0]
        assert evaluated["summary"]["best_id"] == new.key
