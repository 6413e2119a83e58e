"""Open-ended selection (hgm, map_elites, novelty) and the ArchiveView columns they read.

Expected values are computed here independently (plain loops, hand-counted trees, numerical
integration), not with the library's own vectorised code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cambrian.archive.errors import SelectorConfigError
from cambrian.archive.selection import STRATEGY_NAMES, make_selector
from cambrian.archive.view import ArchiveView

# --- a hand-counted lineage tree --------------------------------------------------------------
#
#   seed(1) 0.5 ─┬─ a(2) 0.7 ─┬─ c(4) 0.6
#                │            └─ d(5) 0.9
#                └─ b(3) 0.5 ─── e(6) 0.8          x(7) 0.1: parent 99 is not in the view
#
# (agent id, score, parent id, own successes, own failures)
TREE = [
    (1, 0.5, None, 2.0, 1.0),
    (2, 0.7, 1, 1.0, 2.0),
    (3, 0.5, 1, 1.0, 1.0),  # ties its parent: not an improvement
    (4, 0.6, 2, 3.0, 0.0),
    (5, 0.9, 2, 0.0, 3.0),
    (6, 0.8, 3, 2.0, 2.0),
    (7, 0.1, 99, 0.5, 0.0),
]
# By hand: per agent id, pooled over its subtree including itself.
CLADE_SUCCESSES = {1: 9.0, 2: 4.0, 3: 3.0, 4: 3.0, 5: 0.0, 6: 2.0, 7: 0.5}
CLADE_FAILURES = {1: 9.0, 2: 5.0, 3: 3.0, 4: 0.0, 5: 3.0, 6: 2.0, 7: 0.0}
IMPROVED = {1: 0.0, 2: 1.0, 3: 0.0, 4: 0.0, 5: 1.0, 6: 1.0, 7: 0.0}
CLADE_IMPROVED = {1: 3.0, 2: 2.0, 3: 1.0, 4: 0.0, 5: 1.0, 6: 1.0, 7: 0.0}  # a, d, e improved
CLADE_NOT_IMPROVED = {1: 2.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 0.0, 6: 0.0, 7: 0.0}  # b, c did not


def tree_view() -> ArchiveView:
    view = ArchiveView(capacity=1)
    for agent_id, score, parent, successes, failures in TREE:
        view.add(agent_id, score, parent, successes=successes, failures=failures)
    return view


def by_id(view: ArchiveView, column: np.ndarray) -> dict[int, float]:
    return dict(zip(view.ids.tolist(), column.tolist()))


def test_clade_counts_match_the_hand_count() -> None:
    view = tree_view()
    assert by_id(view, view.clade_successes) == CLADE_SUCCESSES
    assert by_id(view, view.clade_failures) == CLADE_FAILURES
    assert by_id(view, view.improved) == IMPROVED
    assert by_id(view, view.clade_improved) == CLADE_IMPROVED
    assert by_id(view, view.clade_not_improved) == CLADE_NOT_IMPROVED
    assert by_id(view, view.n_children) == {1: 2, 2: 2, 3: 1, 4: 0, 5: 0, 6: 0, 7: 0}


def test_a_child_above_its_parent_by_rounding_only_has_not_improved() -> None:
    parent = float.fromhex("0x1.177c0f6b7fe55p+0")  # a circle packing's score and the next float above it
    child = float.fromhex("0x1.177c0f6b7fe56p+0")
    view = ArchiveView(capacity=1)
    view.add(1, parent, None)
    view.add(2, child, 1)
    view.add(3, parent + 1e-3, 1)
    bulk = ArchiveView.from_arrays(
        np.array([1, 2, 3]), np.array([parent, child, parent + 1e-3]), parent_ids=np.array([-1, 1, 1])
    )
    for built in (view, bulk):
        assert by_id(built, built.improved) == {1: 0.0, 2: 0.0, 3: 1.0}


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_from_arrays_in_any_order_equals_incremental_add(seed: int) -> None:
    order = np.random.default_rng(seed).permutation(len(TREE))  # children may precede parents
    rows = [TREE[i] for i in order]
    view = ArchiveView.from_arrays(
        np.array([r[0] for r in rows]),
        np.array([r[1] for r in rows]),
        parent_ids=np.array([-1 if r[2] is None else r[2] for r in rows]),
        successes=np.array([r[3] for r in rows]),
        failures=np.array([r[4] for r in rows]),
    )
    incremental = tree_view()
    for column in ("clade_successes", "clade_failures", "improved", "clade_improved", "clade_not_improved"):
        assert by_id(view, getattr(view, column)) == by_id(incremental, getattr(incremental, column)), column
    assert by_id(view, view.n_children) == by_id(incremental, incremental.n_children)


def test_deep_random_trees_agree_between_from_arrays_and_add() -> None:
    rng = np.random.default_rng(11)
    n = 400
    parents = np.array([-1] + [int(rng.integers(max(0, i - 3), i)) for i in range(1, n)])  # deep-ish
    scores = rng.integers(0, 5, n).astype(float)
    successes, failures = rng.integers(0, 4, n).astype(float), rng.integers(0, 4, n).astype(float)
    incremental = ArchiveView()
    for i in range(n):
        incremental.add(
            i, scores[i], None if parents[i] < 0 else int(parents[i]), successes=successes[i], failures=failures[i]
        )
    shuffled = rng.permutation(n)
    view = ArchiveView.from_arrays(
        shuffled,
        scores[shuffled],
        parent_ids=parents[shuffled],
        successes=successes[shuffled],
        failures=failures[shuffled],
    )
    # Brute force: walk each agent's ancestors.
    expected = np.zeros(n)
    for i in range(n):
        node = i
        while node >= 0:
            expected[node] += successes[i]
            node = parents[node]
    np.testing.assert_array_equal(incremental.clade_successes, expected)
    np.testing.assert_array_equal(view.clade_successes, expected[shuffled])
    np.testing.assert_array_equal(view.clade_not_improved, incremental.clade_not_improved[shuffled])


def test_from_arrays_with_no_rows_is_an_empty_view() -> None:
    empty = ArchiveView.from_arrays(np.array([], dtype=np.int64), np.array([]), embeddings=np.zeros((0, 3)))
    assert len(empty) == 0 and empty.clade_successes.shape == (0,) and empty.knn_distances.shape == (0, 15)
    empty.add(1, 0.5, None, embedding=np.ones(3))
    assert empty.novelty(1).tolist() == [0.0]


def test_from_arrays_refuses_a_parent_cycle() -> None:
    with pytest.raises(ValueError, match="cycle"):
        ArchiveView.from_arrays(np.array([1, 2, 3]), np.zeros(3), parent_ids=np.array([3, 1, 2]))
    with pytest.raises(ValueError, match="cycle"):
        ArchiveView.from_arrays(np.array([1]), np.zeros(1), parent_ids=np.array([1]))


def test_view_columns_survive_growth_and_reject_bad_input() -> None:
    view = ArchiveView(
        capacity=1, descriptor_names=("x", "kind"), descriptor_bounds=((0.0, 1.0), None), embedding_dim=2
    )
    for i in range(40):
        view.add(
            i,
            float(i),
            i - 1 if i else None,
            successes=i,
            failures=1.0,
            descriptor=[i / 40, float(i % 3)],
            embedding=np.array([i, -i], dtype=float),
        )
    assert view.descriptors.shape == (40, 2) and view.descriptors[39].tolist() == [39 / 40, 0.0]
    assert view.embeddings.dtype == np.float32 and view.embeddings[39].tolist() == [39.0, -39.0]
    assert view.successes.tolist() == list(range(40)) and view.clade_successes[0] == sum(range(40))
    assert view.clade_improved[0] == 39 and view.clade_not_improved[0] == 0
    assert view.knn_distances.shape == (40, 15) and view.knn_distances[0, 0] == pytest.approx(math.sqrt(2))
    assert view.descriptor_names == ("x", "kind") and view.descriptor_bounds == ((0.0, 1.0), None)
    assert view.embedding_dim == 2 and view.knn_k == 15
    bad_adds = [
        dict(successes=-1.0),
        dict(failures=float("nan")),
        dict(descriptor=[0.5]),
        dict(descriptor=[float("inf"), 1.0]),
        dict(embedding=np.zeros(3)),
        dict(embedding=np.array([np.nan, 0.0])),
    ]
    for bad in bad_adds:
        with pytest.raises(ValueError):
            view.add(100, 0.0, None, **bad)
        assert len(view) == 40 and 100 not in view  # a failed add changes nothing
    view.add(100, 0.0, None)  # descriptor and embedding omitted: unknown and the origin
    assert np.isnan(view.descriptors[40]).all() and view.embeddings[40].tolist() == [0.0, 0.0]
    for bad_view in (dict(descriptor_bounds=[(0, 1)]), dict(embedding_dim=-1), dict(knn_k=0)):
        with pytest.raises(ValueError):
            ArchiveView(descriptor_names=("x", "y"), **bad_view)
    with pytest.raises(ValueError):
        ArchiveView(descriptor_names=("x",), descriptor_bounds=[(1.0, 1.0)])


# --- nearest neighbours ------------------------------------------------------------------------


def brute_force_knn(points: np.ndarray, k: int) -> np.ndarray:
    table = np.full((len(points), k), np.inf)
    for i, p in enumerate(points.tolist()):
        distances = sorted(math.dist(p, q) for j, q in enumerate(points.tolist()) if j != i)[:k]
        table[i, : len(distances)] = distances
    return table


def test_knn_on_a_line_by_hand_in_any_insertion_order() -> None:
    points = {10: 0.0, 11: 1.0, 12: 3.0, 13: 7.0}
    expected = {10: [1.0, 3.0], 11: [1.0, 2.0], 12: [2.0, 3.0], 13: [4.0, 6.0]}
    for order in ([10, 11, 12, 13], [13, 11, 10, 12]):
        view = ArchiveView(embedding_dim=1, knn_k=2)
        for agent_id in order:
            view.add(agent_id, 0.0, None, embedding=np.array([points[agent_id]]))
        assert {i: view.knn_distances[view.index_of(i)].tolist() for i in points} == expected
    two = ArchiveView(embedding_dim=1, knn_k=2)
    two.add(1, 0.0, None, embedding=np.array([0.0]))
    assert two.novelty(2).tolist() == [0.0]  # one agent: nothing to be far from
    two.add(2, 0.0, None, embedding=np.array([2.5]))
    assert two.knn_distances.tolist() == [[2.5, math.inf], [2.5, math.inf]]
    assert two.novelty(2).tolist() == [2.5, 2.5]  # the mean over the one neighbour that exists
    with pytest.raises(ValueError, match="knn_k=2"):
        two.novelty(3)


@pytest.mark.parametrize("duplicates", [0, 40])
def test_knn_incremental_from_arrays_and_brute_force_agree(duplicates: int) -> None:
    rng = np.random.default_rng(duplicates)
    points = rng.normal(size=(120, 5)).astype(np.float32)
    points[:duplicates] = points[0]  # many identical embeddings: ties everywhere
    incremental = ArchiveView(embedding_dim=5, knn_k=6)
    for i, point in enumerate(points):
        incremental.add(i, 0.0, None, embedding=point)
    built = ArchiveView.from_arrays(np.arange(120), np.zeros(120), embeddings=points, knn_k=6)
    expected = brute_force_knn(points.astype(np.float64), 6)
    np.testing.assert_allclose(incremental.knn_distances, expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(built.knn_distances, expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(built.novelty(4), expected[:, :4].mean(axis=1), rtol=1e-9, atol=1e-12)
    if duplicates:
        assert np.all(built.novelty(6)[:duplicates] == 0.0)  # exactly 0, not float noise


def test_knn_read_between_adds_merges_the_new_rows_and_agrees_with_brute_force() -> None:
    # The neighbour table is brought up to date when read: in one batch when most rows are new, else
    # row by row. Reading after every few adds exercises both paths.
    rng = np.random.default_rng(3)
    points = rng.normal(size=(90, 4)).astype(np.float32)
    points[10:20] = points[9]  # ties
    view = ArchiveView.from_arrays(np.arange(30), np.zeros(30), embeddings=points[:30], knn_k=5)
    added = 30
    for step in (1, 2, 7, 1, 20, 3, 26):
        for i in range(added, added + step):
            view.add(i, 0.0, None, embedding=points[i])
        added += step
        expected = brute_force_knn(points[:added].astype(np.float64), 5)
        np.testing.assert_allclose(view.knn_distances, expected, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(view.novelty(3), expected[:, :3].mean(axis=1), rtol=1e-9, atol=1e-12)


def test_no_embeddings_means_everyone_coincides() -> None:
    view = ArchiveView.from_arrays(np.arange(3), np.zeros(3), knn_k=4)
    assert view.knn_distances.tolist() == [[0.0, 0.0, math.inf, math.inf]] * 3
    view.add(3, 0.0, None)
    assert view.knn_distances.tolist() == [[0.0, 0.0, 0.0, math.inf]] * 4


def test_knn_from_arrays_at_ten_thousand_by_128() -> None:
    rng = np.random.default_rng(7)
    points = rng.normal(size=(10_000, 128)).astype(np.float32)
    view = ArchiveView.from_arrays(np.arange(10_000), rng.random(10_000), embeddings=points)
    for row in rng.choice(10_000, size=20, replace=False).tolist():
        distances = np.sqrt(((points.astype(np.float64) - points[row].astype(np.float64)) ** 2).sum(axis=1))
        distances[row] = np.inf
        np.testing.assert_allclose(view.knn_distances[row], np.sort(distances)[:15], rtol=1e-9)
    picks = make_selector("novelty").select(view, 100, np.random.default_rng(0))
    assert set(picks.tolist()) <= set(range(10_000))


# --- hgm -----------------------------------------------------------------------------------------


def beta_pdf(x: np.ndarray, a: int, b: int) -> np.ndarray:
    return np.exp((a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)))


def beta_cdf(x: np.ndarray, a: int, b: int) -> np.ndarray:
    """Integer a, b: P(Beta <= x) = P(Binomial(a + b - 1, x) >= a)."""
    m = a + b - 1
    return sum(math.comb(m, j) * x**j * (1 - x) ** (m - j) for j in range(a, m + 1))


def thompson_by_integration(counts: list[tuple[int, int]]) -> list[float]:
    """P(agent i draws the largest theta) = integral of pdf_i(x) * prod_{j != i} cdf_j(x) dx."""
    x = np.linspace(1e-9, 1 - 1e-9, 40_001)
    probs = []
    for i, (s, f) in enumerate(counts):
        integrand = beta_pdf(x, 1 + s, 1 + f)
        for j, (s2, f2) in enumerate(counts):
            if j != i:
                integrand = integrand * beta_cdf(x, 1 + s2, 1 + f2)
        probs.append(float(np.sum((integrand[1:] + integrand[:-1]) / 2 * np.diff(x))))
    return probs


def test_hgm_matches_numerical_integration_and_its_own_sampling() -> None:
    view = tree_view()
    hgm = make_selector("hgm", signal="tasks", draws=100_000)
    counts = [(int(s), int(f)) for s, f in zip(view.clade_successes, view.clade_failures)]
    counts[-1] = (0, 0)  # x has 0.5 successes: keep the integration to integer counts
    view_int = ArchiveView.from_arrays(
        view.ids,
        view.scores,
        parent_ids=view.parent_ids,
        successes=np.r_[view.successes[:-1], 0.0],
        failures=view.failures,
    )
    expected = np.array(thompson_by_integration(counts))
    estimated = hgm.probabilities(view_int)
    assert estimated.sum() == pytest.approx(1.0) and np.all(estimated >= 0)
    standard_error = np.sqrt(expected * (1 - expected) / 100_000)
    assert np.all(np.abs(estimated - expected) <= 5 * standard_error + 1e-4), np.abs(estimated - expected).max()
    picks = hgm.select(view_int, 100_000, np.random.default_rng(1))
    frequencies = np.bincount([view_int.index_of(i) for i in picks.tolist()], minlength=len(view_int)) / 100_000
    assert np.all(np.abs(frequencies - expected) <= 5 * standard_error + 1e-4)


def test_hgm_signal_auto_picks_tasks_or_improvement() -> None:
    hgm = make_selector("hgm")
    single_task = ArchiveView()  # circle packing: one task, always passed
    single_task.add(1, 0.5, None, successes=1.0)
    single_task.add(2, 0.9, 1, successes=1.0)
    single_task.add(3, 0.2, 1, successes=1.0)
    assert hgm.resolved_signal(single_task) == "improvement"
    successes, failures = hgm.counts(single_task)
    assert successes.tolist() == [1.0, 1.0, 0.0] and failures.tolist() == [1.0, 0.0, 1.0]
    assert hgm.resolved_signal(tree_view()) == "tasks"
    assert make_selector("hgm", signal="improvement").resolved_signal(tree_view()) == "improvement"
    with pytest.raises(SelectorConfigError) as bad:
        make_selector("hgm", signal="both")
    assert "tasks" in str(bad.value) and "improvement" in str(bad.value) and bad.value.fix
    with pytest.raises(SelectorConfigError):
        make_selector("hgm", draws=0)


def test_hgm_prefers_the_productive_clade_and_is_reproducible() -> None:
    view = ArchiveView()
    view.add(1, 0.0, None)
    view.add(2, 0.1, 1)  # this clade keeps improving
    view.add(3, 0.0, 1)  # this one never does
    for i in range(4, 12):
        view.add(i, 0.1 + 0.1 * i, i - 1 if i > 4 else 2)
        view.add(100 + i, -1.0, 3 if i == 4 else 100 + i - 1)
    probs = make_selector("hgm").probabilities(view)
    assert probs[view.index_of(2)] > 5 * probs[view.index_of(3)]
    assert np.array_equal(probs, make_selector("hgm").probabilities(view))  # fixed internal seed


# --- map_elites ------------------------------------------------------------------------------------


def grid_view() -> ArchiveView:
    # x in [0, 1] with 2 bins, kind categorical; rows 0-1 tie in their cell.
    rows = [
        (10, 0.5, [0.1, 1.0]),
        (11, 0.5, [0.2, 1.0]),
        (12, 0.9, [0.7, 1.0]),
        (13, 0.3, [0.8, 1.0]),
        (14, 0.2, [0.9, 7.0]),
        (15, 0.4, [float("nan"), 7.0]),
        (16, 0.8, [float("nan"), 7.0]),
        (17, 1.5, [5.0, 1.0]),  # above the bounds: clipped into the top bin, beats 12
    ]
    view = ArchiveView(descriptor_names=("x", "kind"), descriptor_bounds=((0.0, 1.0), None))
    for agent_id, score, descriptor in rows:
        view.add(agent_id, score, None, descriptor=descriptor)
    return view


def test_map_elites_picks_each_cell_elite_equally() -> None:
    view = grid_view()
    selector = make_selector("map_elites", bins=2)
    elites = {10, 14, 16, 17}  # cells (0,1), (1,7), (nan,7), (1,1)
    probs = selector.probabilities(view)
    assert {int(view.ids[r]) for r in np.flatnonzero(probs)} == elites
    assert probs[probs > 0].tolist() == [0.25] * 4
    picks = selector.select(view, 40_000, np.random.default_rng(0))
    counts = {agent_id: int(np.sum(picks == agent_id)) for agent_id in elites}
    assert set(picks.tolist()) == elites
    assert all(abs(c / 40_000 - 0.25) < 5 * math.sqrt(0.25 * 0.75 / 40_000) for c in counts.values()), counts


def test_map_elites_dims_subset_unknown_names_and_no_descriptors() -> None:
    view = grid_view()
    only_kind = make_selector("map_elites", dims=["kind"])  # a TOML list
    assert only_kind.dims == ("kind",)
    assert {int(view.ids[r]) for r in only_kind.elites(view)} == {17, 16}
    with pytest.raises(SelectorConfigError) as unknown:
        make_selector("map_elites", dims=("speed",)).select(view, 1, np.random.default_rng(0))
    assert "speed" in str(unknown.value) and "x, kind" in str(unknown.value) and unknown.value.fix
    categorical = ArchiveView(descriptor_names=("kind",))  # no bounds: every value its own cell
    for agent_id, score, kind in [(1, 0.1, np.nan), (2, 0.5, np.nan), (3, 0.2, 1.0), (4, 0.3, 1.0), (5, 0.0, 2.0)]:
        categorical.add(agent_id, score, None, descriptor=[kind])
    assert make_selector("map_elites").probabilities(categorical).tolist() == [0, 1 / 3, 0, 1 / 3, 1 / 3]
    plain = ArchiveView()
    for agent_id, score in [(1, 0.3), (2, 0.7), (3, 0.7)]:
        plain.add(agent_id, score, None)
    assert make_selector("map_elites").probabilities(plain).tolist() == [0.0, 1.0, 0.0]  # one cell: the best
    for bad in (dict(bins=0), dict(bins=2.5), dict(dims=[1, 2])):
        with pytest.raises(SelectorConfigError):
            make_selector("map_elites", **bad)


def test_map_elites_many_categorical_dims_cannot_collide() -> None:
    rng = np.random.default_rng(4)
    names = tuple(f"d{i}" for i in range(12))
    descriptors = rng.integers(0, 1000, size=(3000, 12)).astype(float)  # radix 1000^12 would overflow int64
    descriptors[1500:] = descriptors[:1500]  # every cell holds exactly two agents
    view = ArchiveView.from_arrays(np.arange(3000), rng.random(3000), descriptors=descriptors, descriptor_names=names)
    elites = make_selector("map_elites").elites(view)
    assert len(elites) == 1500


# --- novelty ---------------------------------------------------------------------------------------


def test_novelty_prefers_the_isolated_agent() -> None:
    view = ArchiveView(embedding_dim=2, knn_k=3)
    rng = np.random.default_rng(2)
    for i in range(8):
        view.add(i, 1.0, None, embedding=rng.normal(scale=0.1, size=2))
    view.add(99, 0.0, None, embedding=np.array([5.0, 5.0]))
    probs = make_selector("novelty", k=3).probabilities(view)
    assert probs.argmax() == view.index_of(99) and probs.max() > 0.5
    # Fitness weight 1: only the (linear) rank counts, and the far agent scores worst.
    by_fitness = make_selector("novelty", k=3, fitness_weight=1.0).probabilities(view)
    assert by_fitness.argmin() == view.index_of(99)


def test_novelty_identical_embeddings_is_uniform_and_needs_embeddings() -> None:
    same = ArchiveView(embedding_dim=3)
    for i in range(5):
        same.add(i, float(i), None, embedding=np.ones(3))
    assert make_selector("novelty").probabilities(same).tolist() == [0.2] * 5
    without = ArchiveView()
    without.add(1, 0.0, None)
    with pytest.raises(SelectorConfigError) as none:
        make_selector("novelty").select(without, 1, np.random.default_rng(0))
    assert "no embeddings" in str(none.value) and "search.novelty.space" in none.value.fix
    with pytest.raises(SelectorConfigError) as too_many:
        make_selector("novelty", k=20).probabilities(same)
    assert "15" in str(too_many.value)
    for bad in (dict(k=0), dict(fitness_weight=1.5), dict(fitness_weight=True)):
        with pytest.raises(SelectorConfigError):
            make_selector("novelty", **bad)


# --- every strategy ---------------------------------------------------------------------------------


def rich_view(n: int, *, seed: int = 0, embedding_dim: int = 4) -> ArchiveView:
    rng = np.random.default_rng(seed)
    parents = np.r_[-1, rng.integers(0, np.arange(1, n))]
    return ArchiveView.from_arrays(
        np.arange(n) * 2 + 1,
        np.round(rng.random(n), 2),
        parent_ids=np.where(parents >= 0, parents * 2 + 1, -1),
        successes=rng.integers(0, 5, n).astype(float),
        failures=rng.integers(0, 5, n).astype(float),
        descriptors=np.c_[rng.random(n), rng.integers(0, 4, n)],
        descriptor_names=("x", "kind"),
        descriptor_bounds=((0.0, 1.0), None),
        embeddings=rng.normal(size=(n, embedding_dim)) if embedding_dim else None,
    )


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_every_strategy_is_a_seeded_distribution_on_the_rich_view(name: str) -> None:
    view = rich_view(200)
    selector = make_selector(name)
    probs = selector.probabilities(view)
    assert probs.shape == (200,) and np.all(probs >= 0) and probs.sum() == pytest.approx(1.0)
    first = selector.select(view, 64, np.random.default_rng(5))
    assert np.array_equal(first, selector.select(view, 64, np.random.default_rng(5)))
    assert first.dtype == np.int64 and set(first.tolist()) <= set(view.ids.tolist())
    assert np.all(probs[[view.index_of(i) for i in first.tolist()]] > 0)  # never picks a p = 0 row


@pytest.fixture(scope="module")
def view_100k() -> ArchiveView:
    # Building 100k x E neighbour tables is O(n^2 E); novelty's large case is the 10k x 128 test.
    return rich_view(100_000, seed=1, embedding_dim=0)


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_every_strategy_selects_from_100k_agents(name: str, view_100k: ArchiveView) -> None:
    view = view_100k
    if name == "novelty":
        with pytest.raises(SelectorConfigError):
            make_selector(name).select(view, 1, np.random.default_rng(0))
        return
    picks = make_selector(name).select(view, 8, np.random.default_rng(0))
    assert picks.shape == (8,) and set(picks.tolist()) <= set(view.ids.tolist())


def test_make_selector_accepts_toml_typed_params() -> None:
    assert make_selector("hgm", signal="tasks", draws=128).signal == "tasks"
    assert make_selector("map_elites", bins=4, dims=["x", "kind"]).dims == ("x", "kind")
    assert make_selector("map_elites", dims="x").dims == ("x",)
    with pytest.raises(SelectorConfigError) as bad:
        make_selector("novelty", radius=2.0)
    assert "k, fitness_weight" in str(bad.value)
