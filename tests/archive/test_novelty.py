"""Code embeddings, behaviour vectors, the near-duplicate test and gate (archive/novelty.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cambrian.archive.novelty import (
    CodeEmbedder,
    DuplicateGate,
    EmbeddingEndpointError,
    EndpointEmbedder,
    NearDuplicate,
    NoveltyConfigError,
    behaviour_vector,
    genome_text,
    near_duplicate,
)

SEED = Path(__file__).resolve().parents[2] / "evaluators" / "circle_packing" / "seed" / "grid.py"

LOOP = """    circles = []
    for index in range(n):
        row, column = divmod(index, columns)
        circles.append(((2 * column + 1) * radius, (2 * row + 1) * radius, radius))
    return circles"""
COMPREHENSION = """    return [
        ((2 * (i % columns) + 1) * radius, (2 * (i // columns) + 1) * radius, radius)
        for i in range(n)
    ]"""


def test_code_embedding_is_deterministic_unit_float32() -> None:
    embedder = CodeEmbedder()
    files = {"main.py": "def solve(x):\n    return x + 1\n", "util/helpers.py": "K = 3\n"}
    first = embedder.embed(files)
    assert first.dtype == np.float32 and first.shape == (256,) and embedder.dim == 256
    assert np.linalg.norm(first) == pytest.approx(1.0, abs=1e-6)
    assert np.array_equal(first, CodeEmbedder().embed(dict(reversed(list(files.items())))))  # path order irrelevant
    many = embedder.embed_many([files, {"main.py": "print('hello')\n"}, {}])
    assert many.shape == (3, 256) and np.array_equal(many[0], first)
    assert not np.any(many[2])  # no text: the zero vector
    assert embedder.embed_many([]).shape == (0, 256)
    moved = embedder.embed({"other.py": files["main.py"], "util/helpers.py": files["util/helpers.py"]})
    assert 0.9 < float(first @ moved) < 1.0  # the path is part of the text
    assert genome_text({"b.py": "B", "a.py": "A"}) == "# file: a.py\nA\n# file: b.py\nB"
    assert CodeEmbedder(n_features=64, ngram_range=(2, 3)).embed(files).shape == (64,)
    for bad in (dict(n_features=0), dict(n_features=True), dict(ngram_range=(4, 2))):
        with pytest.raises(NoveltyConfigError) as error:
            CodeEmbedder(**bad)
        assert error.value.fix


def test_circle_packing_edit_similarities() -> None:
    """Measured for choosing the gate's default threshold: printed, not asserted (run with -s)."""
    seed = SEED.read_text()
    one_constant = seed.replace("radius = 0.5 / max(", "radius = 0.49 / max(")
    loop_rewrite = seed.replace(LOOP, COMPREHENSION)
    assert one_constant != seed and loop_rewrite != seed
    for n_features in (256, 1024):
        base, constant, rewrite = CodeEmbedder(n_features=n_features).embed_many(
            [{"packing.py": seed}, {"packing.py": one_constant}, {"packing.py": loop_rewrite}]
        )
        print(
            f"n_features={n_features}: one-constant edit cosine {float(base @ constant):.5f}, "
            f"loop rewrite cosine {float(base @ rewrite):.5f}"
        )
        assert float(base @ constant) > float(base @ rewrite)  # the smaller edit is the nearer copy


def _char_count_endpoint(texts: list[str]) -> list[list[float]]:
    """A deterministic stand-in for an embedding endpoint: counts of a few characters."""
    return [[float(text.count(c)) for c in "aeiou"] for text in texts]


def test_endpoint_embedder_fake_endpoint_normalises_and_checks_the_shape() -> None:
    embedder = EndpointEmbedder(embed_fn=_char_count_endpoint, dim=5)
    vectors = embedder.embed_many([{"a.py": "aaa eee"}, {"b.py": "xyz"}])
    assert vectors.dtype == np.float32 and vectors.shape == (2, 5)
    assert np.linalg.norm(vectors[0]) == pytest.approx(1.0, abs=1e-6)
    # "# file: b.py\nxyz": one "e" and one "i", from the header
    np.testing.assert_allclose(vectors[1], [0.0, 2**-0.5, 2**-0.5, 0.0, 0.0], rtol=1e-6)
    assert np.array_equal(embedder.embed({"a.py": "aaa eee"}), vectors[0])
    with pytest.raises(EmbeddingEndpointError) as wrong:
        EndpointEmbedder(embed_fn=_char_count_endpoint, dim=8).embed({"a.py": "x"})
    assert "expected 1 x 8" in str(wrong.value) and "5" in wrong.value.fix
    with pytest.raises(EmbeddingEndpointError):
        EndpointEmbedder(embed_fn=lambda texts: [[float("nan")] * 2 for _ in texts], dim=2).embed({"a.py": "x"})
    with pytest.raises(NoveltyConfigError):
        EndpointEmbedder(embed_fn=_char_count_endpoint, dim=0)


def test_behaviour_vector_orders_tasks_and_fills_gaps() -> None:
    vector = behaviour_vector(
        {"t2": 0.5, "t1": 1.0, "extra": 9.0}, task_ids=["t1", "t2", "t3"], descriptor=[3.0, np.nan]
    )
    assert vector.dtype == np.float32 and vector.tolist() == [3.0, 0.0, 1.0, 0.5, 0.0]
    assert behaviour_vector({}, task_ids=[]).shape == (0,)


def test_near_duplicate_finds_the_most_similar_row() -> None:
    rows = np.eye(3, dtype=np.float32)
    query = np.array([0.1, 0.995, 0.0], dtype=np.float32)
    query /= np.linalg.norm(query)
    row, similarity = near_duplicate(query, rows, threshold=0.99)
    assert row == 1 and similarity == pytest.approx(0.995 / np.hypot(0.1, 0.995), abs=1e-6)
    assert near_duplicate(query, rows, threshold=0.9999) is None
    assert near_duplicate(rows[2], rows, threshold=1.0) == (2, 1.0)
    assert near_duplicate(query, rows[:0], threshold=0.5) is None
    for bad in (0.0, -0.5, 1.01, True):
        with pytest.raises(NoveltyConfigError) as error:
            near_duplicate(query, rows, threshold=bad)
        assert "(0, 1]" in str(error.value) and error.value.fix


def test_duplicate_gate_refuses_copies_of_members_and_grows() -> None:
    gate = DuplicateGate(threshold=0.995, embedder=CodeEmbedder())
    seed = {"packing.py": SEED.read_text()}
    assert gate.check(seed) is None and len(gate) == 0
    embedding = gate.add(1, seed)
    assert embedding.shape == (256,) and len(gate) == 1
    hit = gate.check(dict(seed))
    assert isinstance(hit, NearDuplicate) and hit.agent_id == 1 and hit.similarity == pytest.approx(1.0, abs=1e-6)
    assert gate.check({"packing.py": "import numpy as np\n\nprint(np.zeros(26))\n"}) is None
    vectors = np.random.default_rng(0).normal(size=(40, 256))
    for agent_id in range(2, 40):  # past the initial 16 rows: the matrix doubles
        gate.add(agent_id, vectors[agent_id])  # an embedding, normalised on the way in
    last = gate.check(vectors[39] * 3.0)
    assert last is not None and last.agent_id == 39 and len(gate) == 39
    assert gate.check(seed).agent_id == 1
    with pytest.raises(ValueError):
        gate.add(50, np.zeros(10))
    with pytest.raises(NoveltyConfigError):
        DuplicateGate(threshold=1.5, embedder=CodeEmbedder())
    assert DuplicateGate(embedder=CodeEmbedder()).threshold == 0.995
