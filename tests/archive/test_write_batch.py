"""`Archive.write_batch` (archive/commands.py): lifecycle commands of several candidates in one transaction, each
caller getting exactly what its command gives alone, on a real SQLite file and a real PostgreSQL database
(`store_url`, tests/postgres.py)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy import Connection, event
from sqlalchemy.exc import OperationalError

from cambrian.archive._engine import CommitCheck
from cambrian.archive.commands import AddAgent, FinishEvaluation, MarkEvaluating, MarkFailed, SetHoldoutScore
from cambrian.archive.errors import AgentNotFound, ArchiveReadOnly, InvalidGenome, InvalidTransition
from cambrian.archive.models import Agent, AgentStatus, Evaluation
from cambrian.archive.store import Archive

SEED = {"main.py": "def solve():\n    return 1\n"}


@pytest.fixture
def archive(store_url: str) -> Iterator[Archive]:
    with Archive(store_url) as store:
        yield store


def count_commits(archive: Archive) -> list[int]:
    """A list that grows by one per COMMIT the archive's engine sends."""
    commits: list[int] = []
    event.listen(archive.engine, "commit", lambda connection: commits.append(1))
    return commits


def seeded_run(archive: Archive) -> tuple[int, Agent]:
    run = archive.create_run(name="batch", benchmark="toy", seed=0, config_json="{}")
    seed = archive.add_agent(run.key, files=SEED, entry="main.py", status=AgentStatus.evaluating)
    archive.finish_evaluation(seed.key, status=AgentStatus.evaluated, score=1.0)
    return run.key, seed


def _child(run_id: int, parent: Agent, i: int) -> AddAgent:
    files = {"main.py": f"def solve():\n    return {i + 2}\n"}
    return AddAgent(run_id, files=files, entry="main.py", parent_id=parent.key, operator="diff", iteration=i)


def test_several_candidates_writes_commit_as_one_transaction_with_each_result(archive: Archive) -> None:
    run_id, seed = seeded_run(archive)
    first = archive.add_agent(run_id, files={"main.py": "x = 1\n"}, entry="main.py", parent_id=seed.key, iteration=1)
    second = archive.add_agent(run_id, files={"main.py": "x = 2\n"}, entry="main.py", parent_id=seed.key, iteration=2)
    archive.mark_evaluating(second.key)
    commits = count_commits(archive)
    rows = [Evaluation(task_id="t0", score=0.5, passed=True), Evaluation(task_id="t1", score=0.0)]
    outcomes = archive.write_batch(
        [
            _child(run_id, seed, 3),
            MarkEvaluating(first.key),
            FinishEvaluation(
                second.key, status=AgentStatus.evaluated, score=0.25, evaluations=rows, descriptor={"size": 3.0}
            ),
            MarkFailed(first.key, "sandbox fault: gone"),
        ]
    )
    assert len(commits) == 1
    added, marked, finished, failed = outcomes
    assert added.status is AgentStatus.proposed and added.iteration == 3 and added.genome_hash is not None
    assert marked.status is AgentStatus.evaluating and marked.eval_attempts == 1
    assert finished.status is AgentStatus.evaluated and finished.score == 0.25 and finished.n_tasks == 2
    assert failed.status is AgentStatus.failed and failed.invalid_reason == "sandbox fault: gone"
    # What the callers got is what the archive holds (`marked` was the first agent's state before it failed).
    for outcome in (added, finished, failed):
        stored = archive.get_agent(outcome.key)
        assert (stored.status, stored.score, stored.eval_attempts) == (
            outcome.status,
            outcome.score,
            outcome.eval_attempts,
        )
    assert [e.task_id for e in archive.evaluations(second.key)] == ["t0", "t1"]
    assert archive.get_genome(str(added.genome_hash)) == ({"main.py": "def solve():\n    return 5\n"}, "main.py")


def test_a_refused_command_gets_its_error_and_the_others_their_results(archive: Archive) -> None:
    run_id, seed = seeded_run(archive)
    commits = count_commits(archive)
    outcomes = archive.write_batch(
        [
            _child(run_id, seed, 1),
            MarkEvaluating(seed.key),  # evaluated: not a transition the lifecycle has
            MarkEvaluating(999_999),
            _child(run_id, seed, 2),
        ]
    )
    assert len(commits) == 2  # the two children, each alone; the refusals committed nothing
    added, refused, missing, later = outcomes
    assert isinstance(refused, InvalidTransition) and "evaluated" in str(refused)
    assert isinstance(missing, AgentNotFound)
    assert isinstance(added, Agent) and isinstance(later, Agent)
    # The batch rolled back and each command ran alone: the two children stored once each, the seed untouched.
    assert [a.iteration for a in archive.agents(run_id)] == [0, 1, 2]
    assert archive.get_agent(seed.key).eval_attempts == 1


def test_a_batch_of_two_agents_commands_commits_once_with_each_agents_result(archive: Archive) -> None:
    run_id, seed = seeded_run(archive)
    first = archive.add_agent(run_id, files={"main.py": "x = 1\n"}, entry="main.py", parent_id=seed.key, iteration=1)
    second = archive.add_agent(run_id, files={"main.py": "x = 2\n"}, entry="main.py", parent_id=seed.key, iteration=2)
    commits = count_commits(archive)
    started = archive.write_batch([MarkEvaluating(first.key), MarkEvaluating(second.key)])
    finished = archive.write_batch(
        [
            FinishEvaluation(first.key, status=AgentStatus.evaluated, score=0.5),
            FinishEvaluation(second.key, status=AgentStatus.invalid, invalid_reason="crashed"),
            SetHoldoutScore(first.key, 0.25, evaluations=[Evaluation(task_id="h0", score=0.25)]),
        ]
    )
    assert len(commits) == 2
    assert [(a.key, a.status) for a in started] == [
        (first.key, AgentStatus.evaluating),
        (second.key, AgentStatus.evaluating),
    ]
    done, refused, held_out = finished
    assert (done.key, done.status, done.score) == (first.key, AgentStatus.evaluated, 0.5)
    assert (refused.key, refused.status, refused.invalid_reason) == (second.key, AgentStatus.invalid, "crashed")
    assert held_out.key == first.key and held_out.holdout_score == 0.25 and held_out.score == 0.5
    assert [(e.task_id, e.split) for e in archive.evaluations(first.key)] == [("h0", "holdout")]


def test_a_batch_takes_lifecycle_commands_only(archive: Archive) -> None:
    run_id, seed = seeded_run(archive)
    names = "AddAgent, MarkEvaluating, FinishEvaluation, MarkFailed, SetHoldoutScore"
    takes = rf"write_batch takes lifecycle commands \({names}, from cambrian.archive.commands\); got "
    for not_a_command in (
        functools.partial(archive.mark_evaluating, seed.key),  # what batches took before commands
        lambda: archive.mark_evaluating(seed.key),
        ("mark_evaluating", seed.key),
    ):
        with pytest.raises(TypeError, match=takes):
            archive.write_batch([MarkEvaluating(seed.key), not_a_command])  # type: ignore[list-item]
    assert archive.get_agent(seed.key).status is AgentStatus.evaluated  # nothing ran
    assert len(archive.agents(run_id)) == 1


def test_a_command_is_checked_when_it_is_built(archive: Archive) -> None:
    """What can be refused without the database is refused before a batch: the others are not rolled back."""
    run_id, seed = seeded_run(archive)
    with pytest.raises(InvalidTransition, match="evaluated needs a finite score"):
        FinishEvaluation(seed.key, status=AgentStatus.evaluated, score=float("nan"))
    with pytest.raises(InvalidTransition, match="ends in evaluated, invalid or failed"):
        FinishEvaluation(seed.key, status=AgentStatus.evaluating)
    with pytest.raises(InvalidTransition, match="starts as proposed, evaluating or invalid"):
        AddAgent(run_id, status=AgentStatus.evaluated)
    with pytest.raises(InvalidGenome, match="without an entry file"):
        AddAgent(run_id, files=SEED)
    assert AddAgent(run_id, status="invalid").status is AgentStatus.invalid  # type: ignore[arg-type]  # a str status


def test_a_read_only_archive_refuses_every_command_of_a_batch(archive: Archive, store_url: str) -> None:
    run_id, seed = seeded_run(archive)
    with Archive(store_url, readonly=True) as reader:
        outcomes = reader.write_batch([MarkEvaluating(seed.key), _child(run_id, seed, 1)])
    assert all(isinstance(outcome, ArchiveReadOnly) for outcome in outcomes)
    assert len(archive.agents(run_id)) == 1


def test_another_thread_does_not_join_an_open_batch(archive: Archive, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write from another thread while a batch is open waits for the batch's transaction to end, and commits
    on its own: it neither joins the batch nor is rolled back with it."""
    run_id, seed = seeded_run(archive)
    started, outside = threading.Event(), []
    batch_thread = threading.get_ident()
    apply = AddAgent.apply

    def first_then_wait(command: AddAgent, connection: Connection) -> Agent:
        agent = apply(command, connection)
        if threading.get_ident() == batch_thread and not started.is_set():
            started.set()
            thread.join(timeout=0.5)  # the other thread blocks on the connection meanwhile
        return agent

    def other_thread() -> None:
        started.wait(timeout=30)
        outside.append(archive.add_agent(run_id, files={"main.py": "y = 1\n"}, entry="main.py", parent_id=seed.key))

    thread = threading.Thread(target=other_thread)
    monkeypatch.setattr(AddAgent, "apply", first_then_wait)
    thread.start()
    outcomes = archive.write_batch([_child(run_id, seed, 1), MarkEvaluating(999_999)])
    thread.join(timeout=30)
    assert isinstance(outcomes[1], AgentNotFound)  # the batch rolled back; its commands ran again alone
    assert sorted(a.iteration for a in archive.agents(run_id)) == [0, 0, 1]  # the seed, the other thread's, the batch's
    assert len(outside) == 1 and archive.get_agent(outside[0].key).genome_hash is not None


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "rolled-back"])
def test_a_batch_whose_commit_answer_is_lost_commits_once(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, committed: bool
) -> None:
    """PostgreSQL: the answer to the batch's COMMIT was lost. The archive asks the server (the batch's commit
    mark): committed, the first attempt's results stand; rolled back, the whole batch runs again. Either way
    each command's write is stored exactly once."""
    with Archive(postgres_url) as archive:
        run_id, seed = seeded_run(archive)
        original = archive._db._commit
        lost: list[CommitCheck] = []

        def lossy(commit: Callable[[], None], check: CommitCheck | None) -> None:
            if lost:
                return original(commit, check)
            assert check is not None, "a batch's transaction carries a commit mark like any write"
            lost.append(check)

            def answer_lost() -> None:
                if committed:
                    commit()
                else:
                    archive._db._connection.rollback()  # type: ignore[union-attr]  # what a server that aborted did
                cause = psycopg.OperationalError("server closed the connection unexpectedly")
                raise OperationalError("COMMIT", None, cause, connection_invalidated=True)

            return original(answer_lost, check)

        monkeypatch.setattr(archive._db, "_commit", lossy)
        outcomes = archive.write_batch([_child(run_id, seed, i) for i in (1, 2, 3)])
        assert lost and all(isinstance(outcome, Agent) for outcome in outcomes)
        agents = archive.agents(run_id)
        assert [a.iteration for a in agents] == [0, 1, 2, 3], "a child of the batch was stored twice or lost"
        assert [a.key for a in agents[1:]] == [outcome.key for outcome in outcomes]
