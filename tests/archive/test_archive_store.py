"""The lineage store on a real SQLite file and a real PostgreSQL database: transactions, transitions,
lineage queries, ledger.

The `archive` fixture is parametrised over both stores (`store_url`, tests/postgres.py): every test
that takes it runs on each; the SQLite-only ones (WAL, pragmas, file bytes) open their own file."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.exc import IntegrityError

from cambrian.archive.errors import (
    AgentNotFound,
    ArchiveError,
    GenomeNotFound,
    InvalidGenome,
    InvalidTransition,
    RunExists,
    RunNotFound,
)
from cambrian.archive.models import AgentStatus, Evaluation, LLMCall, LLMResponse, Run, RunStatus
from cambrian.archive.store import Archive, genome_hash
from cambrian.archive.view import ArchiveView
from tests.archive.helpers import SEED_FILES, count_rows, evaluate, files_with


def test_sqlite_file_created_with_wal_and_connection_pragmas(db_path: Path) -> None:
    with Archive.at(db_path) as archive:
        assert db_path.is_file()
        with sqlite3.connect(db_path) as raw:
            assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        with archive.engine.connect() as connection:
            pragma = lambda name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()  # noqa: E731 - a one-line helper reads best beside its use
            assert pragma("foreign_keys") == 1
            assert pragma("busy_timeout") == 10000
            assert pragma("synchronous") == 1  # NORMAL


def test_in_memory_url_keeps_one_database(tmp_path: Path) -> None:
    with Archive("sqlite://") as store:
        created = store.create_run(name="mem", benchmark="b", seed=0, config_json="{}")
        assert store.get_run("mem").id == created.id


def test_runs_create_get_list_and_status(archive: Archive, run: Run) -> None:
    assert archive.get_run("demo").id == run.id
    assert archive.get_run(run.id).name == "demo"
    assert archive.get_run(str(run.id)).name == "demo"
    with pytest.raises(RunExists) as exists:
        archive.create_run(name="demo", benchmark="x", seed=0, config_json="{}")
    assert "cambrian resume demo" in exists.value.fix
    with pytest.raises(RunNotFound) as missing:
        archive.get_run("nope")
    assert "cambrian runs" in missing.value.fix and isinstance(missing.value, ArchiveError)
    other = archive.create_run(name="second", benchmark="humaneval", seed=1, config_json="{}")
    assert [r.name for r in archive.list_runs()] == ["demo", "second"]
    assert archive.update_run_config(other.id, '{"iterations": 9}').config_json == '{"iterations": 9}'
    assert archive.get_run("second").config_json == '{"iterations": 9}'
    stopped = archive.set_run_status(other.id, RunStatus.failed, error="seed crashed")
    assert (stopped.status, stopped.error) == (RunStatus.failed, "seed crashed")
    assert archive.get_run("second").error == "seed crashed"


def test_genome_hash_is_order_independent_and_unambiguous() -> None:
    assert genome_hash({"a.py": "x", "b.py": "y"}) == genome_hash({"b.py": "y", "a.py": "x"})
    assert genome_hash({"a": "bc"}) != genome_hash({"ab": "c"})
    assert genome_hash({"a": "b", "c": "d"}) != genome_hash({"a": "b\nc", "": "d"})
    assert len(genome_hash(SEED_FILES)) == 64


def test_genome_dedup_across_agents(archive: Archive, run: Run) -> None:
    files = {"main.py": "import util\n", "lib/util.py": "X = 1\n"}
    first = archive.add_agent(run.id, files=files, entry="main.py")
    second = archive.add_agent(run.id, files=dict(reversed(files.items())), entry="main.py", parent_id=first.id)
    assert first.genome_hash == second.genome_hash == archive.put_genome(files, "main.py") == genome_hash(files)
    assert (count_rows(archive, "genome"), count_rows(archive, "genomefile")) == (1, 2)
    stored, entry = archive.get_genome(first.genome_hash)
    assert (stored, entry) == (files, "main.py")
    assert archive.find_genome(run.id, first.genome_hash).id == first.id
    assert archive.find_genome(run.id, genome_hash(SEED_FILES)) is None
    with pytest.raises(GenomeNotFound):
        archive.get_genome("0" * 64)


@pytest.mark.parametrize(
    ("files", "entry"),
    [({"../escape.py": "x"}, "../escape.py"), ({"/abs.py": "x"}, "/abs.py"), ({"main.py": "x"}, "other.py"), ({}, "")],
)
def test_unsafe_or_inconsistent_genomes_are_refused(archive: Archive, run: Run, files: dict, entry: str) -> None:
    with pytest.raises(InvalidGenome) as error:
        archive.add_agent(run.id, files=files, entry=entry)
    assert error.value.fix
    assert archive.agents(run.id) == []


def test_invalid_proposal_stored_without_files(archive: Archive, run: Run) -> None:
    seed = archive.add_agent(run.id, files=SEED_FILES, entry="main.py")
    bad = archive.add_agent(
        run.id,
        parent_id=seed.id,
        iteration=1,
        operator="diff",
        model="qwen",
        status=AgentStatus.invalid,
        invalid_reason="SEARCH block not found",
        prompt_tokens=120,
        completion_tokens=40,
    )
    stored = archive.get_agent(bad.id)
    assert (stored.status, stored.genome_hash, stored.invalid_reason) == (
        AgentStatus.invalid,
        None,
        "SEARCH block not found",
    )
    assert stored.prompt_tokens == 120
    with pytest.raises(InvalidTransition):
        archive.add_agent(run.id, files=SEED_FILES, entry="main.py", status=AgentStatus.evaluated)


def test_full_lifecycle_with_retry_and_resume(archive: Archive, run: Run) -> None:
    agent = archive.add_agent(run.id, files=SEED_FILES, entry="main.py")
    assert archive.mark_evaluating(agent.id).eval_attempts == 1
    resumed = archive.mark_evaluating(agent.id)  # a killed run starts the evaluation again
    assert (resumed.status, resumed.eval_attempts) == (AgentStatus.evaluating, 2)
    failed = archive.finish_evaluation(
        agent.id,
        status=AgentStatus.failed,
        invalid_reason="sandbox died",
        evaluations=[Evaluation(task_id="t0", executed=False)],
    )
    assert failed.status is AgentStatus.failed
    archive.set_holdout_score(agent.id, 0.1, evaluations=[Evaluation(task_id="h0", score=0.1)])
    archive.mark_evaluating(agent.id)  # retry after the infrastructure fault
    done = archive.finish_evaluation(
        agent.id,
        status=AgentStatus.evaluated,
        score=0.75,
        stage_reached=2,
        feedback="2/3 tasks",
        eval_seconds=1.5,
        evaluations=[Evaluation(task_id="t0", score=1.0), Evaluation(task_id="t1", score=0.5)],
    )
    assert (done.status, done.score, done.n_tasks, done.eval_attempts) == (AgentStatus.evaluated, 0.75, 2, 3)
    assert done.invalid_reason is None
    rows = archive.evaluations(agent.id)
    # The failed attempt's rows are replaced; holdout rows stay.
    assert sorted((r.split, r.task_id) for r in rows) == [("holdout", "h0"), ("search", "t0"), ("search", "t1")]
    assert {r.agent_id for r in rows} == {agent.id}
    assert archive.get_agent(agent.id).holdout_score == 0.1


def test_a_child_evaluated_at_once_starts_as_evaluating_with_one_attempt(archive: Archive, run: Run) -> None:
    agent = archive.add_agent(run.id, files=SEED_FILES, entry="main.py", status=AgentStatus.evaluating)
    assert (agent.status, agent.eval_attempts) == (AgentStatus.evaluating, 1)
    stored = archive.get_agent(agent.id)
    assert (stored.status, stored.eval_attempts, stored.genome_hash) == (AgentStatus.evaluating, 1, agent.genome_hash)
    assert [a.id for a in archive.pending(run.id, max_attempts=3)] == [agent.id]  # a killed run evaluates it again
    done = archive.finish_evaluation(agent.id, status=AgentStatus.evaluated, score=0.5)
    assert (done.status, done.eval_attempts) == (AgentStatus.evaluated, 1)
    with pytest.raises(InvalidTransition, match="only with its program"):
        archive.add_agent(run.id, status=AgentStatus.evaluating, invalid_reason="nothing to run")


@pytest.mark.parametrize(
    ("setup", "step"),
    [
        ([], "finish"),  # proposed -> evaluated
        ([], "fail"),  # proposed -> failed
        (["start", "finish"], "start"),  # evaluated -> evaluating
        (["start", "finish"], "fail"),  # evaluated -> failed
        (["start", "invalid"], "start"),  # invalid -> evaluating
        (["start", "fail"], "finish"),  # failed -> evaluated
        (["start", "fail"], "fail"),  # failed -> failed
    ],
)
def test_transitions_outside_the_lifecycle_raise(archive: Archive, run: Run, setup: list[str], step: str) -> None:
    agent = archive.add_agent(run.id, files=SEED_FILES, entry="main.py")
    steps = {
        "start": lambda: archive.mark_evaluating(agent.id),
        "finish": lambda: archive.finish_evaluation(agent.id, status=AgentStatus.evaluated, score=1.0),
        "invalid": lambda: archive.finish_evaluation(agent.id, status=AgentStatus.invalid, invalid_reason="crash"),
        "fail": lambda: archive.mark_failed(agent.id, "docker gone"),
    }
    for name in setup:
        steps[name]()
    before = archive.get_agent(agent.id)
    with pytest.raises(InvalidTransition) as error:
        steps[step]()
    assert error.value.fix
    after = archive.get_agent(agent.id)
    assert (after.status, after.eval_attempts, after.score) == (before.status, before.eval_attempts, before.score)


def test_proposed_can_become_invalid_directly(archive: Archive, run: Run) -> None:
    agent = archive.add_agent(run.id, files=SEED_FILES, entry="main.py")
    archive.mark_evaluating(agent.id)
    dup = archive.add_agent(run.id, files=SEED_FILES, entry="main.py", parent_id=agent.id, iteration=1)
    archive.mark_evaluating(dup.id)
    finished = archive.finish_evaluation(dup.id, status=AgentStatus.invalid, invalid_reason="duplicate")
    assert finished.status is AgentStatus.invalid


def test_evaluated_needs_a_finite_score(archive: Archive, run: Run) -> None:
    agent = archive.add_agent(run.id, files=SEED_FILES, entry="main.py")
    archive.mark_evaluating(agent.id)
    for score in (None, float("nan"), float("inf")):
        with pytest.raises(InvalidTransition):
            archive.finish_evaluation(agent.id, status=AgentStatus.evaluated, score=score)
    with pytest.raises(InvalidTransition):
        archive.finish_evaluation(agent.id, status=AgentStatus.proposed)
    assert archive.get_agent(agent.id).status is AgentStatus.evaluating


def test_failed_finish_leaves_nothing_half_written(archive: Archive, run: Run) -> None:
    agent = archive.add_agent(run.id, files=SEED_FILES, entry="main.py")
    archive.mark_evaluating(agent.id)
    good = Evaluation(task_id="t0", score=1.0)
    broken = Evaluation(task_id=None, score=0.0)  # NOT NULL violation inside the transaction
    with pytest.raises(IntegrityError):
        archive.finish_evaluation(agent.id, status=AgentStatus.evaluated, score=1.0, evaluations=[good, broken])
    after = archive.get_agent(agent.id)
    assert (after.status, after.score, after.n_tasks) == (AgentStatus.evaluating, None, 0)
    assert archive.evaluations(agent.id) == []
    assert good.agent_id is None and good.id is None  # the caller's rows are copied, never mutated


def test_add_agent_rolls_back_its_genome_when_the_agent_is_refused(archive: Archive, run: Run) -> None:
    files = files_with(99)
    with pytest.raises(AgentNotFound):
        archive.add_agent(run.id, files=files, entry="main.py", parent_id=12345)
    with pytest.raises(GenomeNotFound):
        archive.get_genome(genome_hash(files))
    with pytest.raises(RunNotFound):
        archive.add_agent(run.id + 1, files=files, entry="main.py")
    with pytest.raises(GenomeNotFound):
        archive.get_genome(genome_hash(files))


def test_parent_must_belong_to_the_same_run(archive: Archive, run: Run) -> None:
    other = archive.create_run(name="other", benchmark="b", seed=0, config_json="{}")
    foreign = archive.add_agent(other.id, files=SEED_FILES, entry="main.py")
    with pytest.raises(AgentNotFound):
        archive.add_agent(run.id, files=files_with(2), entry="main.py", parent_id=foreign.id)


@pytest.fixture
def tree(archive: Archive, run: Run) -> dict[str, int]:
    """seed(0.2) -> a(0.5) -> c(0.9) -> e(invalid); seed -> b(0.4) -> d(0.9); f proposed; g failed."""
    ids: dict[str, int] = {}

    def grow(name: str, value: int, parent: str | None, iteration: int) -> int:
        agent = archive.add_agent(
            run.id,
            files=files_with(value),
            entry="main.py",
            parent_id=ids.get(parent) if parent else None,
            iteration=iteration,
            operator="seed" if parent is None else "diff",
            model=None if parent is None else "m",
        )
        ids[name] = agent.id
        return agent.id

    evaluate(archive, grow("seed", 0, None, 0), 0.2)
    evaluate(archive, grow("a", 1, "seed", 1), 0.5)
    evaluate(archive, grow("b", 2, "seed", 2), 0.4)
    evaluate(archive, grow("c", 3, "a", 3), 0.9)
    evaluate(archive, grow("d", 4, "b", 4), 0.9)  # ties c; c has the lower id
    ids["e"] = archive.add_agent(
        run.id, parent_id=ids["c"], iteration=5, operator="diff", status=AgentStatus.invalid, invalid_reason="bad edit"
    ).id
    grow("f", 6, "d", 6)
    archive.mark_evaluating(grow("g", 7, "a", 7))
    archive.mark_failed(ids["g"], "sandbox died")
    return ids


def test_lineage_queries_on_a_hand_built_tree(archive: Archive, run: Run, tree: dict[str, int]) -> None:
    name_of = {agent_id: name for name, agent_id in tree.items()}
    names = lambda agents: [name_of[a.id] for a in agents]  # noqa: E731 - a one-line helper reads best beside its use
    assert names(archive.children(tree["seed"])) == ["a", "b"]
    assert names(archive.children(tree["a"])) == ["c", "g"]
    assert names(archive.ancestors(tree["e"])) == ["c", "a", "seed"]
    assert archive.ancestors(tree["seed"]) == []
    assert names(archive.subtree(tree["a"])) == ["a", "c", "e", "g"]
    assert names(archive.subtree(tree["seed"])) == ["seed", "a", "b", "c", "d", "e", "f", "g"]
    assert names(archive.subtree(tree["e"])) == ["e"]
    assert names(archive.best(run.id, n=3)) == ["c", "d", "a"]
    assert names(archive.best_path(run.id)) == ["seed", "a", "c"]
    assert names(archive.recent_invalid_children(tree["c"], 5)) == ["e"]
    assert names(archive.agents(run.id, status=AgentStatus.evaluated)) == ["seed", "a", "b", "c", "d"]
    assert names(archive.agents(run.id, status=[AgentStatus.invalid, AgentStatus.failed])) == ["e", "g"]
    assert names(archive.pending(run.id, max_attempts=2)) == ["f", "g"]
    assert names(archive.pending(run.id, max_attempts=1)) == ["f"]
    assert archive.iterations_done(run.id) == 7
    assert archive.max_iteration(run.id) == 7
    with pytest.raises(AgentNotFound):
        archive.ancestors(10_000)


def test_agent_context_reads_agent_genome_and_invalid_children_together(
    archive: Archive, run: Run, tree: dict[str, int]
) -> None:
    c = archive.agent_context(tree["c"], invalid_children=5)
    assert c.agent.id == tree["c"] and c.agent.score == 0.9
    assert c.genome == (files_with(3), "main.py")
    assert [child.id for child in c.invalid_children] == [tree["e"]]
    assert [child.invalid_reason for child in c.invalid_children] == ["bad edit"]
    # A genome the caller holds is not read again; no invalid children are read unless asked for.
    known = archive.agent_context(tree["c"], known_genomes={c.agent.genome_hash})
    assert known.genome is None and known.invalid_children == []
    assert archive.agent_context(tree["e"]).genome is None  # an invalid agent without files has no genome
    with pytest.raises(AgentNotFound):
        archive.agent_context(10_000)


def test_queries_on_an_empty_run(archive: Archive, run: Run) -> None:
    assert archive.best(run.id) == [] and archive.best_path(run.id) == []
    assert archive.iterations_done(run.id) == 0 and archive.max_iteration(run.id) == 0
    assert len(archive.view(run.id)) == 0


def test_view_has_evaluated_agents_and_children_counts(archive: Archive, run: Run, tree: dict[str, int]) -> None:
    view = archive.view(run.id)
    assert view.ids.tolist() == [tree[name] for name in ("seed", "a", "b", "c", "d")]
    assert view.scores.tolist() == [0.2, 0.5, 0.4, 0.9, 0.9]
    assert view.parent_ids.tolist() == [-1, tree["seed"], tree["seed"], tree["a"], tree["b"]]
    # Only evaluated children count: e (invalid), f (proposed) and g (failed) do not.
    assert view.n_children.tolist() == [2, 1, 1, 0, 0]
    incremental = ArchiveView()
    for agent in archive.agents(run.id, status=AgentStatus.evaluated):
        incremental.add(agent.id, agent.score, agent.parent_id)
    for column in ("ids", "scores", "parent_ids", "n_children"):
        assert np.array_equal(getattr(view, column), getattr(incremental, column))


def test_llm_ledger_and_cost_summary(archive: Archive, run: Run) -> None:
    calls = [
        LLMCall(run_id=run.id, model="gpt", prompt_tokens=100, completion_tokens=20, cost_usd=0.01, request_hash="r1"),
        LLMCall(run_id=run.id, model="gpt", prompt_tokens=50, completion_tokens=10, cost_usd=0.005, request_hash="r2"),
        LLMCall(run_id=run.id, model="qwen", prompt_tokens=70, completion_tokens=30, request_hash="r3"),
        LLMCall(run_id=run.id, model="qwen", prompt_tokens=70, completion_tokens=30, request_hash="r3", cache_hit=True),
    ]
    stored = [archive.record_llm_call(call) for call in calls]
    assert [c.id for c in stored] == sorted(c.id for c in stored) and calls[0].id is None
    other = archive.create_run(name="other", benchmark="b", seed=0, config_json="{}")
    archive.record_llm_call(LLMCall(run_id=other.id, model="gpt", cost_usd=9.0, request_hash="x"))
    assert [c.request_hash for c in archive.llm_calls(run.id)] == ["r1", "r2", "r3", "r3"]
    summary = archive.cost_summary(run.id)
    assert (summary.calls, summary.cache_hits, summary.prompt_tokens, summary.completion_tokens) == (4, 1, 290, 90)
    assert summary.cost_usd == pytest.approx(0.015)
    assert set(summary.by_model) == {"gpt", "qwen"}
    assert (summary.by_model["gpt"].calls, summary.by_model["gpt"].cost_usd) == (2, pytest.approx(0.015))
    assert (summary.by_model["qwen"].cache_hits, summary.by_model["qwen"].prompt_tokens) == (1, 140)
    for call in (
        LLMCall(run_id=run.id, model="qwen", request_hash="r4", iteration=2, proposal_id="p2"),
        LLMCall(run_id=run.id, model="qwen", request_hash="r5", iteration=2, agent_id=77, proposal_id="p2"),
        LLMCall(run_id=run.id, model="qwen", request_hash="r6", iteration=2, proposal_id="p3"),  # another proposal
    ):
        archive.record_llm_call(call)
    assert archive.link_llm_calls(run.id, proposal_id="p2", agent_id=5) == 1
    linked = [(c.request_hash, c.agent_id) for c in archive.llm_calls(run.id)][-3:]
    assert linked == [("r4", 5), ("r5", 77), ("r6", None)]  # by proposal id, not by iteration
    empty = archive.cost_summary(other.id + 1)
    assert (empty.calls, empty.cost_usd, empty.by_model) == (0, 0.0, {})


def test_response_cache_is_idempotent(archive: Archive) -> None:
    assert archive.cached_response("h1") is None
    archive.store_response(LLMResponse(request_hash="h1", model="qwen", text="first", prompt_tokens=5))
    archive.store_response(LLMResponse(request_hash="h1", model="qwen", text="second"))
    cached = archive.cached_response("h1")
    assert (cached.text, cached.prompt_tokens) == ("first", 5)


def test_status_changes_on_a_missing_agent_raise_agent_not_found(archive: Archive, run: Run) -> None:
    missing = 10_000
    for change in (
        lambda: archive.mark_evaluating(missing),
        lambda: archive.finish_evaluation(missing, status=AgentStatus.evaluated, score=1.0),
        lambda: archive.mark_failed(missing, "docker gone"),
        lambda: archive.set_holdout_score(missing, 0.5),
        lambda: archive.get_agent(missing),
    ):
        with pytest.raises(AgentNotFound) as error:
            change()
        assert str(missing) in str(error.value) and error.value.fix
    agent = archive.add_agent(run.id, files=SEED_FILES, entry="main.py")
    evaluate(archive, agent.id, 0.5)
    with pytest.raises(InvalidTransition, match="cannot go from evaluated to evaluating"):
        archive.mark_evaluating(agent.id)


def test_returned_agents_are_detached_typed_copies(archive: Archive, run: Run) -> None:
    added = archive.add_agent(run.id, files=SEED_FILES, entry="main.py", feedback="seed notes")
    started = archive.mark_evaluating(added.id)
    done = archive.finish_evaluation(added.id, status=AgentStatus.evaluated, score=0.5, eval_seconds=2.0)
    fetched = archive.get_agent(added.id)
    for agent in (added, started, done, fetched, archive.find_genome(run.id, added.genome_hash)):
        assert sa_inspect(agent).detached
        assert isinstance(agent.status, AgentStatus)
        assert isinstance(agent.created_at, datetime) and agent.created_at.tzinfo is not None
        assert agent.id == added.id and agent.run_id == run.id
    assert (added.status, started.status, done.status) == (
        AgentStatus.proposed,
        AgentStatus.evaluating,
        AgentStatus.evaluated,
    )
    assert (done.score, done.eval_seconds, done.eval_attempts, done.feedback) == (0.5, 2.0, 1, "seed notes")
    assert fetched.model_dump() == done.model_dump()
    fetched.score = 99.0  # a detached copy: changing it writes nothing
    assert archive.get_agent(added.id).score == 0.5


def test_record_llm_exchange_stores_call_and_response_together(archive: Archive, run: Run) -> None:
    response = LLMResponse(request_hash="h1", model="qwen", text="answer", prompt_tokens=3, completion_tokens=4)
    call = LLMCall(run_id=run.id, model="qwen", prompt_tokens=3, completion_tokens=4, request_hash="h1", iteration=1)
    stored = archive.record_llm_exchange(call, response)
    assert stored.id is not None and call.id is None
    assert archive.cached_response("h1").text == "answer"
    assert [(c.id, c.request_hash) for c in archive.llm_calls(run.id)] == [(stored.id, "h1")]
    archive.record_llm_exchange(LLMCall(run_id=run.id, model="qwen", request_hash="h1", cache_hit=True), None)
    assert archive.cost_summary(run.id).cache_hits == 1
    # The call row fails (model is NOT NULL): the response in the same transaction is rolled back too.
    broken = LLMCall(run_id=run.id, model=None, request_hash="h2")
    with pytest.raises(IntegrityError):
        archive.record_llm_exchange(broken, LLMResponse(request_hash="h2", model="qwen", text="lost"))
    assert archive.cached_response("h2") is None
    assert len(archive.llm_calls(run.id)) == 2


def test_a_second_holdout_evaluation_replaces_the_first_rows(tmp_path: Path) -> None:
    with Archive.at(tmp_path / "a.db") as archive:
        run = archive.create_run(name="h", benchmark="b", seed=0, config_json="{}")
        agent = archive.add_agent(int(run.id), files={"a.py": "x = 1\n"}, entry="a.py")
        archive.mark_evaluating(int(agent.id))
        archive.finish_evaluation(
            int(agent.id),
            status=AgentStatus.evaluated,
            score=0.5,
            evaluations=[Evaluation(agent_id=0, task_id="s1", score=0.5)],
        )
        for score in (0.2, 0.4):
            archive.set_holdout_score(
                int(agent.id),
                score,
                evaluations=[Evaluation(agent_id=0, task_id="h1", score=score), Evaluation(agent_id=0, task_id="h2")],
            )
        rows = archive.evaluations(int(agent.id))
        assert sorted((r.split, r.task_id) for r in rows) == [("holdout", "h1"), ("holdout", "h2"), ("search", "s1")]
        assert archive.get_agent(int(agent.id)).holdout_score == 0.4


def test_repair_note_is_stored_with_the_agent(archive: Archive, run: Run) -> None:
    repaired = archive.add_agent(run.id, files=SEED_FILES, entry="main.py", repair_note="added `import math`")
    plain = archive.add_agent(run.id, files=files_with(2), entry="main.py", parent_id=repaired.id, iteration=1)
    assert (repaired.repair_note, plain.repair_note) == ("added `import math`", None)
    assert archive.get_agent(repaired.id).repair_note == "added `import math`"
    assert [a.repair_note for a in archive.agents(run.id)] == ["added `import math`", None]
    evaluate(archive, repaired.id, 0.6)  # the lifecycle keeps it
    assert archive.get_agent(repaired.id).repair_note == "added `import math`"
