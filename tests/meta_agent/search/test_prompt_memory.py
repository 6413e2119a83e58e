"""PromptMemory: what a prompt shows of a parent comes from one archive read at most, then from memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from cambrian.archive.models import AgentStatus
from cambrian.archive.store import Archive
from cambrian.evaluators.base import Genome
from cambrian.meta_agent.search import PromptMemory

SEED = {"main.py": "def solve():\n    return 0\n"}
CHILD = {"main.py": "def solve():\n    return 1\n"}


@pytest.fixture
def archive(tmp_path: Path) -> Archive:
    with Archive.at(tmp_path / "archive.db") as archive:
        yield archive


def evaluated(archive: Archive, run_id: int, files: dict[str, str], score: float, parent: int | None = None) -> int:
    agent = archive.add_agent(
        run_id, files=files, entry="main.py", parent_id=parent, iteration=0 if parent is None else 1
    )
    archive.mark_evaluating(agent.id)
    archive.finish_evaluation(agent.id, status=AgentStatus.evaluated, score=score, feedback=f"scored {score}")
    return agent.id


def counted_reads(archive: Archive, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """The keyword arguments of every `agent_context` read from now on (the real archive answers them)."""
    reads: list[dict] = []
    real = archive.agent_context
    monkeypatch.setattr(archive, "agent_context", lambda agent_id, **kw: reads.append(kw) or real(agent_id, **kw))
    return reads


def test_a_parent_and_its_failed_children_cost_one_read_then_none(archive: Archive, monkeypatch) -> None:
    run = archive.create_run(name="r", benchmark="b", seed=0, config_json="{}")
    seed = evaluated(archive, run.id, SEED, 0.5)
    archive.add_agent(
        run.id, parent_id=seed, iteration=1, operator="diff", status=AgentStatus.invalid, invalid_reason="no block"
    )
    reads = counted_reads(archive, monkeypatch)
    memory = PromptMemory(archive, failed_attempts_shown=3, inspirations=2)

    info, failed = memory.parent(seed)
    assert (info.genome.files, info.score, info.feedback, failed) == (SEED, 0.5, "scored 0.5", ["diff: no block"])
    assert len(reads) == 1 and reads[0]["invalid_children"] == 3
    memory.remember_failure(seed, "rewrite: crashed")  # a child refused later: shown without a read
    assert memory.parent(seed)[1] == ["diff: no block", "rewrite: crashed"]
    assert memory.parent_info(seed) is info
    assert len(reads) == 1


def test_an_agent_just_evaluated_is_a_parent_without_reading_it_back(archive: Archive, monkeypatch) -> None:
    run = archive.create_run(name="r", benchmark="b", seed=0, config_json="{}")
    seed = evaluated(archive, run.id, SEED, 0.5)
    child = archive.get_agent(evaluated(archive, run.id, CHILD, 0.7, parent=seed))
    reads = counted_reads(archive, monkeypatch)
    memory = PromptMemory(archive, failed_attempts_shown=3, inspirations=2)
    genome = Genome(files=CHILD, entry="main.py")
    memory.remember_genome(str(child.genome_hash), genome)
    memory.remember_parent(child, genome)

    assert memory.parent_info(child.id).genome is genome and reads == []
    info, failed = memory.parent(child.id)  # its failed children are not known yet: read, without the genome
    assert (info.score, failed) == (0.7, [])
    assert len(reads) == 1 and child.genome_hash in reads[0]["known_genomes"]


def test_inspirations_are_the_best_others_kept_up_to_date_as_agents_are_added(archive: Archive) -> None:
    run = archive.create_run(name="r", benchmark="b", seed=0, config_json="{}")
    seed = evaluated(archive, run.id, SEED, 0.5)
    ids = [seed] + [
        evaluated(archive, run.id, {"main.py": f"def solve():\n    return {i}\n"}, score, parent=seed)
        for i, score in enumerate([0.9, 0.7, 0.9, 0.1], start=2)
    ]
    view = archive.view(run.id)
    memory = PromptMemory(archive, failed_attempts_shown=0, inspirations=2)
    best = lambda exclude: [info.agent_id for info in memory.inspirations(view, exclude=exclude)]  # noqa: E731
    assert best(exclude=ids[0]) == [ids[1], ids[3]]  # equal scores: the earlier agent first
    assert best(exclude=ids[1]) == [ids[3], ids[2]]
    newest = evaluated(archive, run.id, {"main.py": "def solve():\n    return 9\n"}, 0.95, parent=seed)
    view.add(newest, 0.95, seed)
    assert best(exclude=ids[0]) == [newest, ids[1]]
    assert memory.inspirations(view, exclude=ids[0])[0].score == 0.95
