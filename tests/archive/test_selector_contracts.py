"""The `SelectorContract` (meta_agent.testing) for every built-in selection strategy and the example plugin's.

Each built-in runs it with its defaults, and again with each parameter that takes another path through its
code (`VARIANTS`): HGM's two signals, DGM's median and fixed anchors, MAP-Elites on one axis, novelty mixed
with fitness, a steeper power law, a tournament of one."""

from __future__ import annotations

import pytest

from cambrian.archive.selection import STRATEGY_NAMES, ParentSelector, make_selector
from cambrian.meta_agent.testing import SelectorContract

#: Built-in strategies with parameters that take another path than their defaults: (name, params, label).
VARIANTS: tuple[tuple[str, dict[str, object], str], ...] = (
    ("hgm", {"signal": "tasks"}, "Tasks"),
    ("hgm", {"signal": "improvement"}, "Improvement"),
    ("dgm", {"alpha0": "median"}, "Median"),
    ("dgm", {"alpha0": 0.5, "lambda_": 4.0}, "FixedAnchor"),
    ("map_elites", {"dims": ["x"], "bins": 4}, "OneAxis"),
    ("novelty", {"fitness_weight": 0.5, "k": 3}, "WithFitness"),
    ("power_law", {"alpha": 2.5}, "Steep"),
    ("tournament", {"size": 1}, "SizeOne"),
)


def _contract(name: str, params: dict[str, object], label: str = "") -> type[SelectorContract]:
    class Contract(SelectorContract):
        def make_selector(self) -> ParentSelector:
            return make_selector(name, **params)

    Contract.params = params
    title = "".join(part.title() for part in name.split("_"))
    Contract.__name__ = Contract.__qualname__ = f"Test{title}{label}"
    return Contract


for _name, _params, _label in (*((name, {}, "") for name in STRATEGY_NAMES), *VARIANTS):
    _class = _contract(_name, _params, _label)
    globals()[_class.__name__] = _class
del _name, _params, _label, _class


@pytest.mark.usefixtures("example_plugin")
class TestExamplePluginSelector(SelectorContract):
    params = {"fraction": 0.3}

    def make_selector(self) -> ParentSelector:
        from cambrian_example_benchmark.search import TopFraction

        return TopFraction(fraction=0.3)


class _Contrary:
    """Says uniform, draws the best agent only."""

    name = "contrary"

    def probabilities(self, view):  # type: ignore[no-untyped-def]
        return make_selector("uniform").probabilities(view)

    def select(self, view, k, rng):  # type: ignore[no-untyped-def]
        return make_selector("greedy").select(view, k, rng)


def test_the_selector_contract_fails_draws_that_do_not_follow_the_probabilities() -> None:
    class Contract(SelectorContract):
        registered = False

        def make_selector(self) -> ParentSelector:
            return _Contrary()  # type: ignore[return-value]

    with pytest.raises(AssertionError, match="select must draw by probabilities"):
        Contract().test_draws_follow_the_probabilities()
