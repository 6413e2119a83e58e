"""The loop's lifecycle writes through `GroupCommit` (meta_agent/search/_writes.py), on a real SQLite archive:
writes ready together share a transaction, each caller gets its own result or error, a quiet loop does not
wait, nothing submitted is dropped; and two identical children proposed at once are not both stored."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from cambrian.archive.commands import AddAgent, FinishEvaluation, MarkEvaluating, MarkFailed
from cambrian.archive.errors import InvalidTransition
from cambrian.archive.models import AgentStatus
from cambrian.archive.store import Archive
from cambrian.evaluators.base import Genome
from cambrian.meta_agent.operators import Proposal
from cambrian.meta_agent.search._book import Origin
from cambrian.meta_agent.search._writes import GroupCommit
from cambrian.meta_agent.search.bandit import Arm
from cambrian.meta_agent.testing import ScriptedFM
from tests.archive.test_write_batch import count_commits, seeded_run
from tests.meta_agent.search.test_loop_fake_fm import VALID, make_loop


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[Archive]:
    archive = Archive.at(tmp_path / "archive.db")
    yield archive
    archive.close()


def _run_with_seed(archive: Archive) -> tuple[int, int]:
    run_id, seed = seeded_run(archive)
    return run_id, seed.key


def test_writes_ready_together_share_one_transaction_and_each_caller_gets_its_own_outcome(archive: Archive) -> None:
    run_id, seed_id = _run_with_seed(archive)
    writes = GroupCommit(archive)
    commits = count_commits(archive)

    async def three_at_once():
        def add(text: str) -> AddAgent:
            return AddAgent(run_id, files={"main.py": text}, entry="main.py", parent_id=seed_id, iteration=1)

        return await asyncio.gather(
            writes(add("x = 1\n")),
            writes(MarkEvaluating(seed_id)),  # evaluated: refused, for this caller alone
            writes(add("x = 2\n")),
            return_exceptions=True,
        )

    first, refused, second = asyncio.run(three_at_once())
    assert isinstance(refused, InvalidTransition)
    assert first.status is second.status is AgentStatus.proposed and first.key != second.key
    assert (writes.writes, writes.transactions) == (3, 1)
    # One batch, rolled back for the refusal, then each write alone: two commits (the children's), not three.
    assert len(commits) == 2
    assert [a.key for a in archive.agents(run_id)] == [seed_id, first.key, second.key]


def test_a_lone_write_commits_at_once_and_a_busy_loop_batches_what_comes_within_the_window(archive: Archive) -> None:
    run_id, seed_id = _run_with_seed(archive)
    writes = GroupCommit(archive, window_s=3600.0)  # a window no test outlasts: only a flush ends it

    async def scenario() -> tuple[int, int, bool, int]:
        child = await asyncio.wait_for(
            writes(AddAgent(run_id, files={"main.py": "x = 1\n"}, entry="main.py", parent_id=seed_id)),
            timeout=60,
        )  # after a quiet spell: committed without waiting for the window
        marked = asyncio.create_task(writes(MarkEvaluating(child.key)))
        finished_later = asyncio.create_task(
            writes(FinishEvaluation(child.key, status=AgentStatus.evaluated, score=2.0))
        )
        for _ in range(20):
            await asyncio.sleep(0)
        waiting = not marked.done() and not finished_later.done()  # within the window: they wait and gather
        writes.flush()
        await asyncio.gather(marked, finished_later)
        return child.key, writes.transactions, waiting, (await finished_later).eval_attempts

    child_id, transactions, waited, attempts = asyncio.run(scenario())
    assert waited and transactions == 2 and attempts == 1
    assert archive.get_agent(child_id).status is AgentStatus.evaluated


def test_a_cancelled_callers_write_still_commits(archive: Archive) -> None:
    run_id, seed_id = _run_with_seed(archive)
    writes = GroupCommit(archive, window_s=3600.0)

    async def scenario() -> None:
        await writes(AddAgent(run_id, files={"main.py": "x = 1\n"}, entry="main.py", parent_id=seed_id))
        task = asyncio.create_task(
            writes(AddAgent(run_id, files={"main.py": "x = 2\n"}, entry="main.py", parent_id=seed_id))
        )
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        writes.flush()  # what the loop does on its way out

    asyncio.run(scenario())
    assert [a.genome_hash is not None for a in archive.agents(run_id)] == [True, True, True]


def test_when_the_archive_raises_every_caller_of_the_batch_gets_the_error(
    archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, seed_id = _run_with_seed(archive)
    writes = GroupCommit(archive)

    def gone(commands):
        raise RuntimeError("the database went away for good")

    monkeypatch.setattr(archive, "write_batch", gone)

    async def two() -> list[object]:
        return await asyncio.gather(
            writes(MarkEvaluating(seed_id)), writes(MarkFailed(seed_id, "x")), return_exceptions=True
        )

    outcomes = asyncio.run(two())
    assert [str(outcome) for outcome in outcomes] == ["the database went away for good"] * 2


def test_identical_children_proposed_at_once_are_stored_once_fake_fm(tmp_path: Path) -> None:
    """The second waits for the first's store, then is refused as its duplicate: the duplicate gate sees
    children still being written."""
    # No bandit: the proposals are stored here without the loop's pulls.
    search = {"strategy": "greedy", "operators": {"rewrite": 1.0}, "bandit": {"algorithm": "off"}}
    loop, archive = make_loop(tmp_path, ScriptedFM([]), budget={"iterations": 2}, search=search)
    seed = loop.book.store_seed(Genome(files={"main.py": VALID}, entry="main.py"))
    child = Genome(files={"main.py": VALID + "\nEXTRA = 1\n"}, entry="main.py")
    origin = Origin(1, seed.key, None, Arm("scripted", "rewrite"))

    async def both():
        proposal = Proposal(child)
        return await asyncio.gather(loop.accept(proposal, origin), loop.accept(proposal, origin))

    first, second = asyncio.run(both())
    assert first.done and second.done and first.child_id is not None and second.child_id is None
    first_id = first.child_id
    stored = archive.agents(1)
    assert [a.status for a in stored] == [AgentStatus.proposed, AgentStatus.proposed, AgentStatus.invalid]
    assert f"identical to agent {first_id}" in (stored[2].invalid_reason or "")
    archive.close()


def test_near_identical_children_proposed_at_once_are_not_both_stored_fake_fm(tmp_path: Path) -> None:
    """With the similarity gate on, a child within the threshold of one still being stored waits for it, then
    is refused as its near-duplicate (and its iteration may propose again)."""
    search = {
        "strategy": "greedy",
        "operators": {"rewrite": 1.0},
        "novelty": {"duplicate_threshold": 0.995},
        "bandit": {"algorithm": "off"},
    }
    loop, archive = make_loop(tmp_path, ScriptedFM([]), budget={"iterations": 2}, search=search)
    seed = loop.book.store_seed(Genome(files={"main.py": "def pack_circles(n):\n    return []\n"}, entry="main.py"))
    origin = Origin(1, seed.key, None, Arm("scripted", "rewrite"))
    # One constant apart: a code similarity of 0.9972; both far from the seed.
    first = Genome(files={"main.py": VALID.replace("0.999", "0.998")}, entry="main.py")
    second = Genome(files={"main.py": VALID.replace("0.999", "0.997")}, entry="main.py")

    async def both():
        return await asyncio.gather(loop.accept(Proposal(first), origin), loop.accept(Proposal(second), origin))

    first_made, second_made = asyncio.run(both())
    assert first_made.done and first_made.child_id is not None and not second_made.done
    assert second_made.child_id is None
    first_id = first_made.child_id
    stored = archive.agents(1)
    assert [a.status for a in stored] == [AgentStatus.proposed, AgentStatus.proposed, AgentStatus.invalid]
    assert f"near-duplicate of agent {first_id}" in (stored[2].invalid_reason or "")
    archive.close()
