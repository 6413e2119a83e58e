"""The contract every parent-selection strategy passes, built-in or a plugin's: `SelectorContract`.

    class TestTopFraction(SelectorContract):
        def make_selector(self):
            return TopFraction(fraction=0.3)

It runs the strategy on archive views of several shapes (one agent, ties, negative scores, a random tree
with descriptors and embeddings) and checks what the search relies on: probabilities that are a
distribution, draws that follow them, the same draws from the same seed, nothing changed in the view, and a
clear error for an empty one.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from cambrian.archive.errors import EmptyView
from cambrian.archive.selection import ParentSelector, make_selector
from cambrian.archive.view import ArchiveView

#: Descriptor axes of the contract's views: "x" numeric in [0, 1], "kind" categorical.
DESCRIPTORS = ("x", "kind")
DESCRIPTOR_BOUNDS = ((0.0, 1.0), None)


def contract_view(n: int, *, seed: int = 0, ties: bool = True, shift: float = 0.0) -> ArchiveView:
    """`n` evaluated agents with ids unlike their rows, a random tree, scores rounded to one decimal when
    `ties` (plus `shift`), own task counts, descriptors (some unknown) and 3-d embeddings."""
    rng = np.random.default_rng(seed)
    view = ArchiveView(capacity=4, descriptor_names=DESCRIPTORS, descriptor_bounds=DESCRIPTOR_BOUNDS, embedding_dim=3)
    for row in range(n):
        parent = None if row == 0 else 100 + 3 * int(rng.integers(0, row))
        score = float(rng.random())
        view.add(
            100 + 3 * row,
            (round(score, 1) if ties else score) + shift,
            parent,
            successes=float(rng.integers(0, 4)),
            failures=float(rng.integers(0, 4)),
            descriptor=[float("nan") if row % 7 == 3 else float(rng.random()), float(rng.integers(0, 3))],
            embedding=rng.normal(size=3),
        )
    return view


class SelectorContract:
    """What every selection strategy does; subclass it with `make_selector()`.

    `registered`: the strategy is found by its name (`cambrian.archive.selection.make_selector`, which reads
    the `cambrian.selectors` entry points too) with `params`.
    """

    registered: bool = True
    params: dict[str, object] = {}

    def make_selector(self) -> ParentSelector:
        raise TypeError(f"{type(self).__name__} must define make_selector() to run the SelectorContract")

    def views(self) -> Iterator[ArchiveView]:
        yield contract_view(1)
        yield contract_view(2, ties=False)
        yield contract_view(40)
        yield contract_view(40, seed=1, ties=False, shift=-3.0)  # every score negative
        yield contract_view(300, seed=2)

    # ----- the contract ------------------------------------------------------------------------

    def test_it_is_a_parent_selector(self) -> None:
        selector = self.make_selector()
        assert isinstance(selector, ParentSelector) and isinstance(selector.name, str) and selector.name

    def test_probabilities_are_a_distribution_over_the_view(self) -> None:
        selector = self.make_selector()
        for view in self.views():
            probs = selector.probabilities(view)
            assert probs.dtype == np.float64 and probs.shape == (len(view),)
            assert np.all(np.isfinite(probs)) and np.all(probs >= 0.0)
            assert abs(float(probs.sum()) - 1.0) < 1e-9
            assert np.array_equal(probs, selector.probabilities(view)), "probabilities must be a pure function"

    def test_one_agent_is_always_chosen(self) -> None:
        view = contract_view(1)
        assert self.make_selector().select(view, 3, np.random.default_rng(0)).tolist() == [100, 100, 100]

    def test_draws_are_ids_of_the_view_and_k_of_them(self) -> None:
        selector = self.make_selector()
        for view in self.views():
            drawn = selector.select(view, 25, np.random.default_rng(1))
            assert drawn.shape == (25,) and np.issubdtype(drawn.dtype, np.integer)
            assert set(drawn.tolist()) <= set(view.ids.tolist())
            assert selector.select(view, 0, np.random.default_rng(1)).shape == (0,)

    def test_the_same_seed_draws_the_same_parents(self) -> None:
        selector = self.make_selector()
        view = contract_view(40)
        first = selector.select(view, 50, np.random.default_rng(42))
        assert np.array_equal(first, self.make_selector().select(view, 50, np.random.default_rng(42)))

    def test_draws_follow_the_probabilities(self) -> None:
        selector = self.make_selector()
        view = contract_view(40)
        probs = selector.probabilities(view)
        drawn = selector.select(view, 20_000, np.random.default_rng(3))
        rows = {int(agent_id): row for row, agent_id in enumerate(view.ids)}
        frequencies = np.bincount([rows[int(agent_id)] for agent_id in drawn], minlength=len(view)) / len(drawn)
        assert np.max(np.abs(frequencies - probs)) < 0.02, "select must draw by probabilities(view)"

    def test_the_view_is_left_as_it_was(self) -> None:
        selector = self.make_selector()
        view = contract_view(40)
        before = (view.ids.copy(), view.scores.copy(), view.parent_ids.copy(), view.n_children.copy())
        selector.probabilities(view)
        selector.select(view, 10, np.random.default_rng(0))
        after = (view.ids, view.scores, view.parent_ids, view.n_children)
        assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))

    def test_an_empty_view_is_a_clear_error(self) -> None:
        import pytest

        selector = self.make_selector()
        for call in (
            lambda: selector.probabilities(ArchiveView()),
            lambda: selector.select(ArchiveView(), 1, np.random.default_rng(0)),
        ):
            with pytest.raises(EmptyView) as refused:
                call()
            assert refused.value.fix

    def test_it_is_found_by_its_name(self) -> None:
        if not self.registered:
            return
        selector = self.make_selector()
        assert type(make_selector(selector.name, **self.params)) is type(selector)
