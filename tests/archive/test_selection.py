"""Parent selection: each strategy against its formula (computed independently here) and by sampling."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from cambrian.archive.errors import AgentNotFound, EmptyView, SelectorConfigError
from cambrian.archive.selection import STRATEGY_NAMES, ParentSelector, make_selector
from cambrian.archive.view import ArchiveView

N_SAMPLES = 100_000


DESCRIPTOR_BOUNDS = ((0.0, 1.0), None)  # "x" numeric in [0, 1], "kind" categorical


def make_view(n: int = 40, *, seed: int = 3) -> ArchiveView:
    """A view with tied scores (one decimal) and a random tree, so n_children varies; descriptors
    (some unknown) and 3-d embeddings (some coinciding) for the open-ended strategies."""
    rng = np.random.default_rng(seed)
    # capacity small, so building it exercises growth of every column
    view = ArchiveView(capacity=4, descriptor_names=("x", "kind"), descriptor_bounds=DESCRIPTOR_BOUNDS, embedding_dim=3)
    for row in range(n):
        agent_id = 100 + 3 * row  # ids unlike row numbers, to catch row/id mix-ups
        parent = None if row == 0 else 100 + 3 * int(rng.integers(0, row))
        x = float("nan") if row % 7 == 3 else float(rng.random() * 1.2 - 0.1)  # some outside the bounds
        embedding = np.round(rng.normal(size=3), 0)  # rounded: some agents share an embedding
        view.add(
            agent_id,
            float(np.round(rng.random(), 1)),
            parent,
            successes=float(rng.integers(0, 4)),
            failures=float(rng.integers(0, 4)),
            descriptor=[x, float(rng.integers(0, 3))],
            embedding=embedding,
        )
    return view


# --- the formulas, written out plainly (loops, math) rather than reusing the library's code ---


def ordinal_ranks(scores: list[float]) -> list[int]:
    """Rank 1 = best; equal scores: lower row ranks better."""
    order = sorted(range(len(scores)), key=lambda row: (-scores[row], row))
    ranks = [0] * len(scores)
    for rank, row in enumerate(order, start=1):
        ranks[row] = rank
    return ranks


def expected_uniform(view: ArchiveView) -> list[float]:
    return [1 / len(view)] * len(view)


def expected_greedy(view: ArchiveView) -> list[float]:
    scores = view.scores.tolist()
    best = [s == max(scores) for s in scores]
    return [b / sum(best) for b in best]


def expected_tournament(view: ArchiveView, size: int) -> list[float]:
    n = len(view)
    return [((n - r + 1) ** size - (n - r) ** size) / n**size for r in ordinal_ranks(view.scores.tolist())]


def expected_power_law(view: ArchiveView, alpha: float) -> list[float]:
    scores = view.scores.tolist()
    average_rank = []
    for s in scores:
        better = sum(other > s for other in scores)
        tied = sum(other == s for other in scores)
        average_rank.append(better + (tied + 1) / 2)  # mean of ranks better+1 .. better+tied
    weights = [r**-alpha for r in average_rank]
    return [w / sum(weights) for w in weights]


def expected_dgm(view: ArchiveView, lambda_: float, alpha0: float) -> list[float]:
    weights = [
        1 / (1 + math.exp(-lambda_ * (s - alpha0))) / (1 + c)
        for s, c in zip(view.scores.tolist(), view.n_children.tolist())
    ]
    return [w / sum(weights) for w in weights]


def expected_map_elites(view: ArchiveView, bins: int = 10) -> list[float]:
    cells: dict[tuple, int] = {}  # cell -> elite row
    for row, (score, values) in enumerate(zip(view.scores.tolist(), view.descriptors.tolist())):
        cell = []
        for value, bounds in zip(values, DESCRIPTOR_BOUNDS):
            if math.isnan(value):
                cell.append("unknown")
            elif bounds is None:
                cell.append(value)
            else:
                lo, hi = bounds
                cell.append(min(max(math.floor((value - lo) / (hi - lo) * bins), 0), bins - 1))
        elite = cells.setdefault(tuple(cell), row)
        if score > view.scores[elite]:  # strictly better: ties stay with the lower row
            cells[tuple(cell)] = row
    return [1 / len(cells) if row in cells.values() else 0.0 for row in range(len(view))]


def expected_novelty(view: ArchiveView, k: int = 10, fitness_weight: float = 0.0) -> list[float]:
    points = view.embeddings.tolist()
    novelty = []
    for row, point in enumerate(points):
        distances = sorted(math.dist(point, other) for other_row, other in enumerate(points) if other_row != row)
        novelty.append(sum(distances[:k]) / len(distances[:k]))
    explore = [v / sum(novelty) for v in novelty]
    linear_rank = [len(view) + 1 - r for r in average_ranks(view.scores.tolist())]
    exploit = [w / sum(linear_rank) for w in linear_rank]
    return [(1 - fitness_weight) * e + fitness_weight * f for e, f in zip(explore, exploit)]


def average_ranks(scores: list[float]) -> list[float]:
    """Rank 1 = best; tied scores share the mean of the ranks they span."""
    return [sum(o > s for o in scores) + (sum(o == s for o in scores) + 1) / 2 for s in scores]


#: Strategies without a closed form, tested by sampling in test_selection_open_ended.py.
MONTE_CARLO_STRATEGIES = {"hgm"}

CASES: list[tuple[str, dict[str, Any], Callable[..., list[float]]]] = [
    ("uniform", {}, expected_uniform),
    ("greedy", {}, expected_greedy),
    ("tournament", {"size": 3}, expected_tournament),
    ("tournament", {"size": 1}, expected_tournament),
    ("tournament", {"size": 7}, expected_tournament),
    ("power_law", {"alpha": 1.0}, expected_power_law),
    ("power_law", {"alpha": 2.5}, expected_power_law),
    ("dgm", {"lambda_": 10.0, "alpha0": 0.5}, expected_dgm),
    ("dgm", {"lambda_": 3.0, "alpha0": 0.2}, expected_dgm),
    ("map_elites", {"bins": 10}, expected_map_elites),
    ("map_elites", {"bins": 3}, expected_map_elites),
    ("novelty", {"k": 10}, expected_novelty),
    ("novelty", {"k": 1, "fitness_weight": 0.3}, expected_novelty),
    ("novelty", {"k": 15, "fitness_weight": 1.0}, expected_novelty),
]
CASE_IDS = [f"{name}-{'-'.join(f'{k}{v}' for k, v in params.items())}" for name, params, _ in CASES]


def test_every_strategy_has_a_case() -> None:
    assert {name for name, _, _ in CASES} | MONTE_CARLO_STRATEGIES == set(STRATEGY_NAMES)


@pytest.mark.parametrize(("name", "params", "expected"), CASES, ids=CASE_IDS)
def test_probabilities_match_the_formula(name: str, params: dict, expected: Callable[..., list[float]]) -> None:
    view = make_view()
    selector = make_selector(name, **params)
    assert isinstance(selector, ParentSelector) and selector.name == name
    probs = selector.probabilities(view)
    assert probs.shape == (len(view),) and np.all(probs >= 0)
    assert probs.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(probs, expected(view, **params), rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize(("name", "params", "expected"), CASES, ids=CASE_IDS)
def test_sampled_frequencies_match_probabilities(name: str, params: dict, expected: Callable) -> None:
    view = make_view()
    selector = make_selector(name, **params)
    picks = selector.select(view, N_SAMPLES, np.random.default_rng(0))
    assert picks.shape == (N_SAMPLES,) and set(picks.tolist()) <= set(view.ids.tolist())
    rows = np.array([view.index_of(agent_id) for agent_id in picks.tolist()])
    frequencies = np.bincount(rows, minlength=len(view)) / N_SAMPLES
    probs = selector.probabilities(view)
    # Five binomial standard deviations per row, plus a floor for rows with p near 0.
    tolerance = 5 * np.sqrt(probs * (1 - probs) / N_SAMPLES) + 1e-4
    assert np.all(np.abs(frequencies - probs) <= tolerance), np.abs(frequencies - probs).max()


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_same_seed_same_parents(name: str) -> None:
    view = make_view()
    selector = make_selector(name)
    first = selector.select(view, 50, np.random.default_rng(42))
    again = selector.select(view, 50, np.random.default_rng(42))
    assert np.array_equal(first, again)
    assert first.dtype == np.int64
    assert selector.select(view, 0, np.random.default_rng(0)).shape == (0,)
    if name != "greedy":
        assert not np.array_equal(first, selector.select(view, 50, np.random.default_rng(43)))


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_empty_view_raises_a_clear_error(name: str) -> None:
    selector = make_selector(name)
    calls = (
        lambda: selector.probabilities(ArchiveView()),
        lambda: selector.select(ArchiveView(), 1, np.random.default_rng(0)),
    )
    for call in calls:
        with pytest.raises(EmptyView) as error:
            call()
        assert "no evaluated agents" in str(error.value) and error.value.fix
        assert isinstance(error.value, ValueError)


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_single_agent_is_always_chosen(name: str) -> None:
    view = ArchiveView(embedding_dim=2)
    view.add(7, 0.0, None)
    assert make_selector(name).probabilities(view).tolist() == [1.0]
    assert make_selector(name).select(view, 3, np.random.default_rng(0)).tolist() == [7, 7, 7]


def test_unknown_strategy_and_bad_params_name_the_choices() -> None:
    with pytest.raises(SelectorConfigError) as unknown:
        make_selector("simulated_annealing")
    assert all(name in str(unknown.value) for name in STRATEGY_NAMES) and isinstance(unknown.value, ValueError)
    with pytest.raises(SelectorConfigError) as bad_param:
        make_selector("tournament", k=3)
    assert "size" in str(bad_param.value)
    with pytest.raises(SelectorConfigError) as no_params:
        make_selector("uniform", alpha=1)
    assert "accepts: none" in str(no_params.value)
    for name, params in [
        ("tournament", {"size": 0}),
        ("tournament", {"size": 2.5}),
        ("power_law", {"alpha": -1.0}),
        ("power_law", {"alpha": float("nan")}),
        ("dgm", {"lambda_": 0.0}),
        ("dgm", {"alpha0": float("inf")}),
        ("dgm", {"alpha0": "mean"}),
        ("dgm", {"alpha0": True}),
    ]:
        with pytest.raises(SelectorConfigError):
            make_selector(name, **params)
    with pytest.raises(ValueError):
        make_selector("uniform").select(make_view(), -1, np.random.default_rng(0))


def test_dgm_stays_a_distribution_when_every_sigmoid_underflows() -> None:
    view = ArchiveView.from_arrays(np.array([1, 2, 3]), np.array([0.0, 0.1, 0.2]), parent_ids=np.array([-1, 1, 1]))
    probs = make_selector("dgm", lambda_=1e4, alpha0=0.9).probabilities(view)
    assert probs.sum() == pytest.approx(1.0) and probs.argmax() == 2
    mild = make_selector("dgm", lambda_=2.0, alpha0=100.0).probabilities(view)
    expected = np.array([math.exp(0.0) / 3, math.exp(0.2), math.exp(0.4)])  # sigmoid ~ exp far below alpha0
    np.testing.assert_allclose(mild, expected / expected.sum(), rtol=1e-6)


def test_dgm_median_alpha0_measures_scores_from_the_median_in_units_of_the_range() -> None:
    scores = np.array([1.09, 0.63, 1.18, 0.5, 1.62, 1.09])
    parents = np.array([-1, 1, 1, 2, 3, 1])
    view = ArchiveView.from_arrays(np.arange(1, 7), scores, parent_ids=parents)
    spread = 1.62 - 0.5
    probs = make_selector("dgm", lambda_=10.0, alpha0="median").probabilities(view)
    # The paper's formula on scores rescaled to (s - median) / range, with alpha0 = 0.
    rescaled = ArchiveView.from_arrays(np.arange(1, 7), (scores - np.median(scores)) / spread, parent_ids=parents)
    np.testing.assert_allclose(probs, expected_dgm(rescaled, 10.0, 0.0), rtol=1e-9)
    # Scale- and shift-free: the same archive in other units draws alike.
    moved = ArchiveView.from_arrays(np.arange(1, 7), scores * 100 - 7, parent_ids=parents)
    np.testing.assert_allclose(make_selector("dgm", alpha0="median").probabilities(moved), probs, rtol=1e-9)
    # "best" (the default): the same, measured from the best score.
    best = ArchiveView.from_arrays(np.arange(1, 7), (scores - 1.62) / spread, parent_ids=parents)
    np.testing.assert_allclose(make_selector("dgm").probabilities(view), expected_dgm(best, 10.0, 0.0), rtol=1e-9)
    # A lone seed (no range) sits on the median: sigmoid(0).
    lone = ArchiveView.from_arrays(np.array([1]), np.array([2.1667]), parent_ids=np.array([-1]))
    assert make_selector("dgm").centre_and_scale(lone) == (2.1667, 1.0)


def test_dgm_median_puts_weak_children_far_below_the_seed() -> None:
    # The quickstart's failure: with alpha0 = 0.5 every circle-packing score sat on the sigmoid's
    # plateau, so children scoring 0.63 and 0.5 (no children yet) outdrew the seed.
    view = ArchiveView.from_arrays(
        np.array([1, 2, 3, 4]), np.array([1.0917, 0.63, 0.5, 1.0917]), parent_ids=np.array([-1, 1, 1, 1])
    )
    paper = make_selector("dgm", alpha0=0.5).probabilities(view)
    assert paper[1] > paper[0]
    median = make_selector("dgm", alpha0="median").probabilities(view)
    assert median[0] > 10 * median[1] and median[3] > 10 * median[2]
    best = make_selector("dgm").probabilities(view)
    assert best[0] > 10 * best[1] and best[3] > 10 * best[2]


def test_dgm_best_keeps_drawing_near_the_best_when_junk_children_pile_up() -> None:
    # Quickstart seed 4 with alpha0="median": children scoring 0.0 pulled the median down to 0.5, and the
    # search spent its proposals on descendants of a 0.63 child instead of the 1.09 seed.
    scores = np.array([1.0917, 0.63, 0.0, 0.0, 0.5, 0.0, 0.5, 0.0, 0.5])
    parents = np.array([-1, 1, 1, 1, 3, 3, 5, 3, 5])
    view = ArchiveView.from_arrays(np.arange(1, 10), scores, parent_ids=parents)
    median = make_selector("dgm", alpha0="median").probabilities(view)
    best = make_selector("dgm").probabilities(view)
    assert median[0] < 0.3 and best[0] > 0.8


def test_dgm_prefers_parents_with_fewer_children() -> None:
    view = ArchiveView()
    view.add(1, 0.8, None)
    view.add(2, 0.8, None)
    before = make_selector("dgm").probabilities(view)
    view.add(3, 0.1, 1)
    view.add(4, 0.1, 1)
    after = make_selector("dgm").probabilities(view)
    assert before[0] == pytest.approx(before[1])
    assert after[0] == pytest.approx(after[1] / 3)


def test_view_add_updates_children_and_grows() -> None:
    view = ArchiveView(capacity=1)
    assert view.add(10, 0.5, None) == 0
    view.add(11, 0.7, 10)
    view.add(12, 0.6, 10)
    view.add(13, 0.9, 11)
    view.add(14, 0.1, 999)  # parent not in the view (e.g. not evaluated): nothing to count
    assert len(view) == 5 and view.index_of(13) == 3 and 13 in view and 99 not in view
    assert view.n_children.tolist() == [2, 1, 0, 0, 0]
    assert view.parent_ids.tolist() == [-1, 10, 10, 11, 999]
    with pytest.raises(ValueError):
        view.add(12, 0.3, None)
    with pytest.raises(ValueError):
        view.add(15, float("nan"), None)
    with pytest.raises(AgentNotFound):
        view.index_of(99)
    rebuilt = ArchiveView.from_arrays(view.ids, view.scores, parent_ids=view.parent_ids)
    assert rebuilt.n_children.tolist() == view.n_children.tolist()
    from_rows = ArchiveView.from_rows([(1, 0.5, None, 3), (2, 0.25, 1, 0)])
    assert from_rows.n_children.tolist() == [3, 0] and from_rows.parent_ids.tolist() == [-1, 1]


def test_ranking_stays_correct_across_adds() -> None:
    rng = np.random.default_rng(5)
    view = ArchiveView()
    for step in range(300):
        view.add(step, float(rng.integers(0, 20)), None)  # many ties
        if step % 37 == 0:
            order, ranked_scores = view.ranking()
            expected = np.argsort(-view.scores, kind="stable")
            assert np.array_equal(order, expected) and np.array_equal(ranked_scores, view.scores[expected])
    order, _ = view.ranking()
    assert np.array_equal(order, np.argsort(-view.scores, kind="stable"))
    with pytest.raises(ValueError):
        order[0] = 1  # read-only: selection must not corrupt the cache


def test_block_weights_draw_by_inverse_cdf_across_blocks_as_rows_change_and_grow() -> None:
    from cambrian.archive.selection._blocks import BLOCK, BlockWeights

    rng = np.random.default_rng(7)
    weights = rng.random(3 * BLOCK + 17)
    weights[5] = 0.0  # a row that must never be drawn
    blocks = BlockWeights(weights)
    changed = np.array([3, BLOCK + 1, 3 * BLOCK + 16])
    weights[changed] = [5.0, 0.0, 2.0]
    blocks.set(changed, weights[changed])
    weights = np.concatenate([weights, rng.random(2 * BLOCK)])  # grows past its capacity
    blocks.extend(weights[len(blocks) :])
    np.testing.assert_array_equal(blocks.weights, weights)
    u = np.concatenate([rng.random(5000), [0.0, 1.0 - 1e-16]])
    rows = blocks.draw(u)
    cdf = np.cumsum(weights)
    targets = u * cdf[-1]
    below = np.where(rows > 0, cdf[rows - 1], 0.0)
    tolerance = 1e-9 * cdf[-1]
    assert np.all(below <= targets + tolerance) and np.all(targets <= cdf[rows] + tolerance)
    assert not np.isin(rows, [5, BLOCK + 1]).any() and weights[rows].min() > 0


@pytest.mark.parametrize("alpha0", ["best", "median", 0.5])
def test_dgm_draws_from_its_formula_while_the_view_grows(alpha0: Any) -> None:
    """select keeps its weights with the view and updates the new rows and their parents: after every add the
    kept weights are the formula's (and a new best, which moves the centre, recomputes them all)."""
    selector = make_selector("dgm", alpha0=alpha0)
    rng = np.random.default_rng(11)
    view = ArchiveView()
    for agent_id in range(1, 1500):
        parent = None if agent_id == 1 else int(rng.integers(1, agent_id))
        view.add(agent_id, float(np.round(rng.random(), 2)), parent)
        if agent_id % 50 == 0 or agent_id > 1450:
            drawn = selector.select(view, 3, rng)
            assert drawn.shape == (3,) and all(int(agent) in view for agent in drawn)
            kept = view.cache(("dgm", selector.lambda_, selector.alpha0))["weights"].weights
            np.testing.assert_allclose(kept / kept.sum(), selector.probabilities(view), rtol=1e-12)
    counts = np.bincount([view.index_of(int(a)) for a in selector.select(view, 20_000, rng)], minlength=len(view))
    expected = selector.probabilities(view) * 20_000
    assert np.abs(counts - expected).max() < 6 * np.sqrt(expected.max()) + 3
