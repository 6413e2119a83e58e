"""Operators and selection strategies from entry point groups: found, built, checked, refused with a fix.

The entry points are real `importlib.metadata.EntryPoint` objects naming classes in this module; only the
listing of installed ones is replaced (tests/evaluators/test_third_party_benchmark.py installs a real package).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint

import numpy as np
import pytest

import cambrian.plugins as plugins
from cambrian.archive.errors import SelectorConfigError
from cambrian.archive.selection import SELECTORS, make_selector
from cambrian.archive.view import ArchiveView
from cambrian.evaluators.base import Genome
from cambrian.evaluators.runner import Limits
from cambrian.meta_agent.config import load_config
from cambrian.meta_agent.errors import ConfigError
from cambrian.meta_agent.operators import (
    OPERATOR_REGISTRY,
    Operator,
    OperatorEnv,
    ParentInfo,
    PromptContext,
    Proposal,
    UnknownOperatorError,
    make_operator,
    operator_names,
)
from cambrian.meta_agent.search import Proposer
from cambrian.meta_agent.search.evaluation import AgentFMBudget, EvaluationContext


class Reverse(Operator):
    """An operator without an FM: the entry file's lines in reverse order."""

    name = "reverse"

    async def propose(self, context: PromptContext, env: OperatorEnv) -> Proposal:
        parent = context.parent.genome
        text = "".join(reversed(parent.files[parent.entry].splitlines(keepends=True)))
        return env.check(Genome(files={**parent.files, parent.entry: text}, entry=parent.entry), parent)


class NotAnOperator:
    """Has a name and a method, but is no `Operator`."""

    name = "broken"

    async def propose(self, context: PromptContext, env: OperatorEnv) -> Proposal:
        raise AssertionError("never called")


def _proposal(operator: Operator, genome: Genome) -> Proposal:
    """What the search's Proposer makes of one `operator` proposal on `genome` (no FM, no sandbox)."""
    budget = AgentFMBudget(max_calls=0, max_tokens=0, run_seed=0)
    proposer = Proposer(
        context=EvaluationContext(object(), Limits(), budget),  # type: ignore[arg-type]  # no benchmark is asked
        operators={operator.name: operator},
        llms={},
        executor=None,  # no agent run
        run_seed=0,
    )
    context = PromptContext(contract="", benchmark="test", parent=ParentInfo(1, genome, 0.5, None))
    return asyncio.run(proposer.propose(operator.name, context, model="", iteration=1, attempt=0))


@dataclass(frozen=True, kw_only=True)
class Last:
    """Always the most recently added agent."""

    weight: float = 1.0
    name: str = field(default="last", init=False)

    def probabilities(self, view: ArchiveView) -> np.ndarray:
        probs = np.zeros(len(view))
        probs[-1] = 1.0
        return probs

    def select(self, view: ArchiveView, k: int, rng: np.random.Generator) -> np.ndarray:
        return np.repeat(view.ids[-1:], k)


def _entry(name: str, value: str, group: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=group)


@pytest.fixture()
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    listing = [
        _entry("reverse", f"{__name__}:Reverse", plugins.OPERATOR_GROUP),
        _entry("broken", f"{__name__}:NotAnOperator", plugins.OPERATOR_GROUP),
        _entry("missing", "no_such_module_here:Thing", plugins.OPERATOR_GROUP),
        _entry("rewrite", f"{__name__}:Reverse", plugins.OPERATOR_GROUP),  # a built-in name: the built-in wins
        _entry("last", f"{__name__}:Last", plugins.SELECTOR_GROUP),
    ]
    monkeypatch.setattr(plugins, "entry_points", lambda group: [ep for ep in listing if ep.group == group])
    for registry in (OPERATOR_REGISTRY, SELECTORS):
        registry.refresh()
    yield
    for registry in (OPERATOR_REGISTRY, SELECTORS):
        registry.refresh()


def test_plugin_operator_and_selector_are_listed_built_and_used(installed: None) -> None:
    builtins = ("rewrite", "diff", "lines", "crossover", "diagnose", "self_modify", "ast_mutate", "knob")
    assert operator_names()[:8] == builtins
    assert set(operator_names()[8:]) == {"broken", "missing", "reverse"}
    operator = make_operator("reverse")
    proposal = _proposal(operator, Genome(files={"a.py": "x = 1\ny = 2\n"}, entry="a.py"))
    assert proposal.genome is not None and proposal.genome.files["a.py"] == "y = 2\nx = 1\n"
    assert proposal.reason is None and proposal.prompt_tokens == 0
    # The child passes the static check like any other: an edit it refuses comes back as the reason.
    refused = _proposal(operator, Genome(files={"a.py": "def f():\n    return 1\n"}, entry="a.py"))
    assert refused.genome is None and refused.reason
    assert type(make_operator("rewrite")).__name__ == "RewriteOperator"

    selector = make_selector("last", weight=2.0)
    view = ArchiveView.from_arrays(np.array([4, 7, 9]), np.array([0.1, 0.9, 0.2]), parent_ids=np.array([-1, 4, 4]))
    assert selector.select(view, 3, np.random.default_rng(0)).tolist() == [9, 9, 9]

    config = load_config(None, sets=["search.strategy=last", "search.operators={reverse = 1.0}"])
    assert config.search.strategy == "last" and dict(config.search.operators) == {"reverse": 1.0}


def test_broken_plugins_and_unknown_names_are_refused_with_the_cause(installed: None) -> None:
    with pytest.raises(UnknownOperatorError, match="not an operator") as not_one:
        make_operator("broken")
    assert "subclass meta_agent.operators.Operator" in str(not_one.value) and not_one.value.fix
    with pytest.raises(
        UnknownOperatorError,
        match="cannot be loaded from its entry point line `missing = no_such_module_here:Thing`.*ModuleNotFoundError",
    ) as missing:
        make_operator("missing")
    assert "remove 'missing'" in missing.value.fix
    with pytest.raises(UnknownOperatorError, match=r"did you mean 'reverse'") as typo:
        make_operator("revers")
    assert "cambrian.operators" in typo.value.fix
    with pytest.raises(SelectorConfigError, match=r"last: unknown parameter\(s\) size; last accepts: weight"):
        make_selector("last", size=3)
    with pytest.raises(ConfigError, match="unknown strategy 'lastt'") as strategy:
        load_config(None, sets=["search.strategy=lastt"])
    assert "cambrian.selectors" in strategy.value.fix
    with pytest.raises(ConfigError, match="unknown operator"):
        load_config(None, sets=["search.operators={reverse = 1.0, nope = 1.0}"])
