"""The `SelectorContract` (meta_agent.testing) for every built-in selection strategy and the example plugin's."""

from __future__ import annotations

import pytest

from cambrian.archive.selection import STRATEGY_NAMES, ParentSelector, make_selector
from cambrian.meta_agent.testing import SelectorContract


def _contract(name: str) -> type[SelectorContract]:
    class Contract(SelectorContract):
        def make_selector(self) -> ParentSelector:
            return make_selector(name)

    Contract.__name__ = Contract.__qualname__ = f"Test{''.join(part.title() for part in name.split('_'))}"
    return Contract


for _name in STRATEGY_NAMES:
    _class = _contract(_name)
    globals()[_class.__name__] = _class
del _name, _class


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
