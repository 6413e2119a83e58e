"""A search loop built by hand from its parts, with no RunConfig: the archive and run, a selector, an operator
mix, a proposer, an executor with its evaluation context, a budget and a reporter (`loop_from_config` is only
one way to build them)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cambrian.archive.models import AgentStatus, RunStatus
from cambrian.archive.selection import Greedy
from cambrian.archive.store import Archive
from cambrian.evaluators.deceptive.benchmark import DeceptiveTrap
from cambrian.evaluators.runner import Limits
from cambrian.meta_agent.config import BudgetConfig
from cambrian.meta_agent.errors import ConfigError, RunAborted
from cambrian.meta_agent.operators import make_operator
from cambrian.meta_agent.search import LocalExecutor, LoopEvent, LoopSettings, OperatorMix, Proposer, SearchLoop
from cambrian.meta_agent.search.evaluation import AgentFMBudget, EvaluationContext
from cambrian.sandbox.local import LocalSandbox


def parts(tmp_path: Path, operator: str = "ast_mutate") -> dict:
    archive = Archive.at(tmp_path / "archive.db")
    run = archive.create_run(name="by-hand", benchmark="deceptive", seed=3, config_json="{}")
    context = EvaluationContext(
        DeceptiveTrap(blocks=2), Limits(timeout_s=20, seed=3), AgentFMBudget(max_calls=0, max_tokens=0, run_seed=3)
    )
    operators = {operator: make_operator(operator)}
    return {
        "archive": archive,
        "run": run,
        "selector": Greedy(),
        "operators": OperatorMix(operators, weights={operator: 1.0}),
        "proposer": Proposer(context=context, operators=operators, llms={}, executor=None, run_seed=3),
        "executor": LocalExecutor(LocalSandbox(), slots=1),
        "context": context,
        "budget": BudgetConfig(iterations=4),
        "settings": LoopSettings(seed=3, max_pending=1),
    }


def test_a_loop_built_by_hand_without_a_config_searches_and_stores_everything(tmp_path: Path) -> None:
    events: list[LoopEvent] = []
    built = parts(tmp_path)
    loop = SearchLoop(**built, on_event=events.append)
    outcome = asyncio.run(loop.run_until_done())
    archive: Archive = built["archive"]
    agents = archive.agents(built["run"].key)
    assert outcome.status == RunStatus.finished, outcome.reason
    assert outcome.seed_score is not None and outcome.best_score is not None
    assert outcome.best_score >= outcome.seed_score
    assert [a.operator for a in agents].count("seed") == 1
    children = [a for a in agents if a.operator == "ast_mutate"]
    assert sorted({a.iteration for a in children}) == [1, 2, 3, 4]
    assert all(a.status in (AgentStatus.evaluated, AgentStatus.invalid) for a in agents)
    assert {event.kind for event in events} >= {"seed", "evaluated"}  # the reporter was told
    assert archive.get_run("by-hand").status == RunStatus.finished
    archive.close()


def test_a_hand_built_loop_refuses_parts_that_do_not_fit(tmp_path: Path) -> None:
    built = parts(tmp_path)
    rewrite = {"rewrite": make_operator("rewrite")}
    # An FM operator on a model the proposer holds no client for.
    built["operators"] = OperatorMix(rewrite, weights={"rewrite": 1.0}, models=["qwen"])
    with pytest.raises(ConfigError, match="FM operators but the run has no FM"):
        SearchLoop(**built)
    built["archive"].close()
    with pytest.raises(ConfigError, match="no such operator was given") as info:
        OperatorMix({}, weights={"diff": 1.0})
    assert "loop_from_config" in info.value.fix
    with pytest.raises(ConfigError, match="no model was given for it to run on") as info:
        OperatorMix(rewrite, weights={"rewrite": 1.0})  # an FM operator, and no model label
    assert "models=" in info.value.fix


def test_a_bug_while_proposing_fails_the_run_and_names_it(tmp_path: Path) -> None:
    """An unexpected exception in a proposal (a bug, not an FM or edit failure) stops the run as RunAborted with
    the exception named, and the run is not reported finished; what was stored stays stored."""
    built = parts(tmp_path)
    proposer: Proposer = built["proposer"]
    propose = proposer.propose
    calls = 0

    async def buggy(*args, **kwargs):  # the second proposal hits a bug
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyError("a bug in proposing")
        return await propose(*args, **kwargs)

    proposer.propose = buggy  # type: ignore[method-assign]
    loop = SearchLoop(**built)
    with pytest.raises(RunAborted, match="KeyError"):
        asyncio.run(loop.run_until_done())
    archive: Archive = built["archive"]
    agents = archive.agents(built["run"].key)
    assert any(a.operator == "seed" and a.status == AgentStatus.evaluated for a in agents)
