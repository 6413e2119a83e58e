"""Exporting a discovered agent: its files, manifest and diff chain, on a 3-generation lineage."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cambrian.archive.errors import ArchiveError, DestinationNotEmpty, InvalidGenome
from cambrian.archive.export import export_agent, unified_diff
from cambrian.archive.models import AgentStatus, Evaluation
from cambrian.archive.store import Archive, genome_hash

SEED = {"main.py": "def solve():\n    return 1\n", "util.py": "SCALE = 1\n"}
CHILD = {"main.py": "def solve():\n    return 2\n", "util.py": "SCALE = 1\n"}
GRANDCHILD = {
    "main.py": "from helpers import two\n\ndef solve():\n    return two()\n",
    "helpers.py": "def two():\n    return 2",  # no final newline: the diff must say so
}


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[Archive]:
    with Archive.at(tmp_path / "archive.db") as store:
        yield store


@pytest.fixture
def lineage(archive: Archive) -> list[int]:
    run = archive.create_run(
        name="pack",
        benchmark="circle_packing",
        seed=3,
        config_json='{"model": "qwen", "iterations": 2}',
        cambrian_version="0.1.0",
    )
    ids: list[int] = []
    for step, (files, model, score) in enumerate([(SEED, None, 1.0), (CHILD, "qwen", 2.0), (GRANDCHILD, "gpt", 2.5)]):
        agent = archive.add_agent(
            run.id,
            files=files,
            entry="main.py",
            parent_id=ids[-1] if ids else None,
            iteration=step,
            operator="seed" if step == 0 else "diff",
            model=model,
        )
        archive.mark_evaluating(agent.id)
        archive.finish_evaluation(
            agent.id,
            status=AgentStatus.evaluated,
            score=score,
            stage_reached=2,
            evaluations=[Evaluation(task_id="t0", score=score, passed=True), Evaluation(task_id="t1", score=0.0)],
        )
        ids.append(agent.id)
    archive.set_holdout_score(ids[-1], 2.25, evaluations=[Evaluation(task_id="h0", score=2.25, passed=True)])
    return ids


def test_export_writes_files_manifest_and_diff_chain(archive: Archive, lineage: list[int], tmp_path: Path) -> None:
    seed_id, child_id, grandchild_id = lineage
    dest = export_agent(archive, grandchild_id, tmp_path / "export" / "best")
    for path, text in GRANDCHILD.items():
        assert (dest / path).read_text(encoding="utf-8") == text
    assert not (dest / "util.py").exists()

    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["agent_id"] == grandchild_id and manifest["run_name"] == "pack"
    assert manifest["benchmark"] == "circle_packing" and manifest["entry"] == "main.py"
    assert manifest["genome_hash"] == genome_hash(GRANDCHILD)
    assert manifest["files"] == ["helpers.py", "main.py"]
    assert (manifest["score"], manifest["holdout_score"], manifest["stage_reached"]) == (2.5, 2.25, 2)
    assert manifest["status"] == "evaluated"
    assert [step["id"] for step in manifest["lineage"]] == [seed_id, child_id, grandchild_id]
    assert [step["operator"] for step in manifest["lineage"]] == ["seed", "diff", "diff"]
    assert [step["genome_hash"] for step in manifest["lineage"]] == [genome_hash(g) for g in (SEED, CHILD, GRANDCHILD)]
    assert [step["score"] for step in manifest["lineage"]] == [1.0, 2.0, 2.5]
    assert manifest["models"] == ["gpt", "qwen"]
    assert manifest["config"] == {"model": "qwen", "iterations": 2}
    assert manifest["scores"]["search"] == {"n_tasks": 2, "n_passed": 1, "mean_task_score": 1.25}
    assert manifest["scores"]["holdout"] == {"n_tasks": 1, "n_passed": 1, "mean_task_score": 2.25}
    assert manifest["cambrian_version"] == "0.1.0" and manifest["exported_at"]

    diffs = sorted(path.name for path in (dest / "diffs").iterdir())
    assert diffs == [f"001-agent{child_id}.diff", f"002-agent{grandchild_id}.diff"]
    assert manifest["diffs"] == [f"diffs/{name}" for name in diffs]
    first = (dest / "diffs" / diffs[0]).read_text()
    assert f"--- agent{seed_id}/main.py" in first and f"+++ agent{child_id}/main.py" in first
    assert "-    return 1\n+    return 2\n" in first and "util.py" not in first
    second = (dest / "diffs" / diffs[1]).read_text()
    assert f"--- /dev/null\n+++ agent{grandchild_id}/helpers.py" in second
    assert f"--- agent{child_id}/util.py\n+++ /dev/null" in second and "-SCALE = 1" in second
    assert "+    return 2\n\\ No newline at end of file\n" in second


def test_export_of_the_seed_has_an_empty_diff_chain(archive: Archive, lineage: list[int], tmp_path: Path) -> None:
    dest = export_agent(archive, lineage[0], tmp_path / "seed", config_json='{"override": true}')
    manifest = json.loads((dest / "manifest.json").read_text())
    assert [step["id"] for step in manifest["lineage"]] == [lineage[0]]
    assert manifest["config"] == {"override": True} and manifest["models"] == []
    assert list((dest / "diffs").iterdir()) == []
    assert (dest / "util.py").read_text() == SEED["util.py"]


def test_export_refuses_to_overwrite(archive: Archive, lineage: list[int], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    export_agent(archive, lineage[1], empty)  # an existing empty folder is fine
    with pytest.raises(DestinationNotEmpty) as error:
        export_agent(archive, lineage[2], empty)
    assert error.value.fix and isinstance(error.value, ArchiveError)
    assert (empty / "util.py").exists()  # the first export is untouched


def test_export_refuses_agents_without_code_or_with_clashing_files(
    archive: Archive, lineage: list[int], tmp_path: Path
) -> None:
    run_id = archive.get_agent(lineage[0]).run_id
    invalid = archive.add_agent(
        run_id, parent_id=lineage[0], iteration=3, status=AgentStatus.invalid, invalid_reason="no edit"
    )
    with pytest.raises(ArchiveError) as no_code:
        export_agent(archive, invalid.id, tmp_path / "invalid")
    assert "no code" in str(no_code.value)
    clash = archive.add_agent(run_id, files={"main.py": "x = 1\n", "manifest.json": "{}"}, entry="main.py")
    with pytest.raises(InvalidGenome):
        export_agent(archive, clash.id, tmp_path / "clash")
    assert not (tmp_path / "invalid").exists() and not (tmp_path / "clash").exists()


def test_unified_diff_of_identical_genomes_is_empty() -> None:
    assert unified_diff(SEED, dict(SEED), "a", "b") == ""
    diff = unified_diff({}, {"new.py": "x = 1\n"}, "a", "b")
    assert diff == "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+x = 1\n"
