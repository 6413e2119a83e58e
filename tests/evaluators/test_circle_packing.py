"""Circle packing: the seed runs in the real local sandbox; packings are checked and scored on the host."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from cambrian.evaluators.base import Benchmark, BenchmarkError, FeedbackPolicy, Genome, Task
from cambrian.evaluators.circle_packing import CirclePacking, check_packing
from cambrian.evaluators.circle_packing.feedback import largest_empty_spot, room_to_grow
from cambrian.evaluators.harness.run_program import (
    HARNESS_FILE,
    RESULT_FILE,
    TASK_FILE,
    UnsafeResultError,
    to_json_safe,
)
from cambrian.evaluators.registry import BENCHMARKS, benchmark_names, describe_benchmarks, get_benchmark
from cambrian.evaluators.runner import evaluate_agent
from cambrian.sandbox.base import RunResult
from cambrian.sandbox.local import LocalSandbox

# The seed's sum of radii for n = 26: rings around the middle, radii from the centres.
SEED_SUM = 1.091736758942621


def harness_result(value: object) -> RunResult:
    """A finished run whose harness returned `value` (for scoring without a sandbox)."""
    payload = json.dumps({"ok": True, "value": value, "seconds": 0.01})
    return RunResult(exit_code=0, stdout="", stderr="", duration_s=0.1, files={RESULT_FILE: payload})


def grid(n: int) -> list[list[float]]:
    columns = math.ceil(math.sqrt(n))
    r = 0.5 / columns
    return [[(2 * (i % columns) + 1) * r, (2 * (i // columns) + 1) * r, r] for i in range(n)]


def run_program(bench: CirclePacking, code: str) -> tuple[RunResult, object]:
    genome = Genome(files={"packing.py": textwrap.dedent(code)}, entry="packing.py")
    task = bench.tasks("search")[0]
    result = LocalSandbox().run(bench.run_spec(genome, task))
    return result, bench.score(task, result)


def test_is_a_benchmark() -> None:
    bench = CirclePacking()
    assert isinstance(bench, Benchmark)
    assert bench.name == "circle_packing"
    assert [t.id for t in bench.tasks("search")] == ["n26"]
    assert bench.tasks("holdout") == []
    assert [s.task_ids for s in bench.stages()] == [("n26",)]
    assert "pack_circles(n: int)" in bench.contract and "2.635" in bench.contract
    assert "standard library plus numpy and scipy (both installed)" in bench.contract
    assert "no network; 30 s wall clock and 1024 MiB" in bench.contract
    assert "plain Python lists or tuples of floats" in bench.contract and "numpy array" in bench.contract
    assert "may be missing" not in bench.contract and "only the standard library" not in bench.contract


def test_seed_runs_valid_in_sandbox() -> None:
    bench = CirclePacking()
    seed = bench.seed()
    assert seed.entry == "packing.py"
    text = seed.files["packing.py"]
    assert text.index("# EVOLVE-BLOCK-START") < text.index("def pack_circles") < text.index("# EVOLVE-BLOCK-END")
    task = bench.tasks("search")[0]
    spec = bench.run_spec(seed, task)
    assert spec.command == ("{python}", HARNESS_FILE)
    assert spec.collect == (RESULT_FILE,)
    assert json.loads(spec.files[TASK_FILE]) == {"module": "packing", "function": "pack_circles", "kwargs": {"n": 26}}
    result = LocalSandbox().run(spec)
    score = bench.score(task, result)
    assert score.executed and score.passed
    assert score.score == pytest.approx(SEED_SUM)
    assert f"sum of radii {SEED_SUM:.6f}" in score.feedback
    assert "only the standard library" not in text.lower()
    assert bench.aggregate([score]) == pytest.approx(score.score)


def test_hand_made_valid_packing() -> None:
    bench = CirclePacking(n=4)
    packing = [[0.25, 0.25, 0.25], [0.75, 0.25, 0.25], [0.25, 0.75, 0.25], [0.75, 0.75, 0.25]]
    score = bench.score(bench.tasks("search")[0], harness_result(packing))
    assert score.passed and score.executed
    assert score.score == pytest.approx(1.0)


def test_overlap_is_named() -> None:
    bench = CirclePacking(n=4)
    packing = [[0.25, 0.25, 0.25], [0.75, 0.25, 0.25], [0.25, 0.75, 0.25], [0.75, 0.7, 0.25]]
    score = bench.score(bench.tasks("search")[0], harness_result(packing))
    assert not score.executed and not score.passed and score.score == 0.0  # a broken rule: unusable
    assert "circles 1 and 3 overlap by 0.05" in score.feedback
    assert "circles 2 and 3" not in score.feedback


def test_out_of_square_is_named() -> None:
    bench = CirclePacking(n=2)
    packing = [[0.2, 0.2, 0.1], [0.98, 0.5, 0.05]]
    score = bench.score(bench.tasks("search")[0], harness_result(packing))
    assert not score.passed and score.score == 0.0
    assert "circle 1 (x=0.98, r=0.05) extends past x=1" in score.feedback


def test_wrong_count_and_shape() -> None:
    bench = CirclePacking()
    task = bench.tasks("search")[0]
    score = bench.score(task, harness_result(grid(25)))
    assert not score.passed and not score.executed  # unusable, its fault named
    assert "returned 25 circles, expected 26" in score.feedback
    assert "expected three numbers" in bench.score(task, harness_result([[0.5, 0.5]] * 26)).feedback
    assert "negative radius" in check_packing([[0.5, 0.5, -0.1], [0.1, 0.1, 0.05]], 2).violations[0]


def test_many_overlaps_are_counted_not_listed() -> None:
    check = check_packing([[0.5, 0.5, 0.1]] * 6, 6)
    assert not check.valid
    assert sum("overlap by" in v for v in check.violations) == 3
    assert "... and 12 more overlapping pairs" in check.violations


def test_crash_feedback_names_the_error() -> None:
    result, score = run_program(CirclePacking(), "def pack_circles(n):\n    return 1 / 0\n")
    assert result.exit_code == 0  # the harness reports the agent's error; it does not crash
    assert not score.executed and score.score == 0.0
    assert score.feedback.startswith("the program crashed: ZeroDivisionError: division by zero")
    assert "return 1 / 0" in score.feedback


def test_nan_result_is_refused() -> None:
    _, score = run_program(CirclePacking(n=2), "def pack_circles(n):\n    return [(0.5, 0.5, float('nan'))] * n\n")
    assert not score.executed
    assert "result contains NaN" in score.feedback


def test_timeout_feedback() -> None:
    _, score = run_program(CirclePacking(timeout_s=1.0), "import time\ndef pack_circles(n):\n    time.sleep(60)\n")
    assert not score.executed
    assert score.feedback.startswith("the program timed out")


def test_options_are_validated() -> None:
    with pytest.raises(BenchmarkError) as info:
        CirclePacking(n=1)
    assert "n" in str(info.value) and info.value.fix
    with pytest.raises(BenchmarkError) as info:
        CirclePacking.from_options({"n": 10, "radius": 2})
    assert "radius" in str(info.value)
    assert CirclePacking.from_options({"n": 10}).tasks("search")[0] == Task(id="n10", split="search", inputs={"n": 10})
    with pytest.raises(BenchmarkError):
        CirclePacking().tasks("train")


def test_registry() -> None:
    assert "circle_packing" in benchmark_names()
    assert dict(describe_benchmarks())["circle_packing"] == CirclePacking.description
    bench = get_benchmark("circle_packing", {"n": 30, "timeout_s": 5})
    assert isinstance(bench, CirclePacking) and bench.n == 30
    assert bench.run_spec(bench.seed(), bench.tasks("search")[0]).timeout_s == 5
    with pytest.raises(BenchmarkError) as info:
        get_benchmark("circle_pack")
    assert "circle_packing" in str(info.value) and "circle_packing" in info.value.fix
    with pytest.raises(BenchmarkError) as info:
        get_benchmark("circle_packing", {"nn": 3})
    assert "nn" in str(info.value)


def test_registry_entry_point_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real installed-distribution layout on sys.path, found by importlib.metadata.
    (tmp_path / "toy_bench.py").write_text(
        textwrap.dedent(
            '''
            from cambrian.evaluators.circle_packing import CirclePacking

            def make(n=5):
                """Toy circle packing with few circles."""
                return CirclePacking(n)

            def broken():
                return object()
            '''
        )
    )
    dist = tmp_path / "toy_bench-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-bench\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[cambrian.benchmarks]\ntoy = toy_bench:make\nbroken = toy_bench:broken\nmissing = no_such_module:make\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(BENCHMARKS, "_entry_points", None)  # read once per process: read again, with the toy's
    assert {"toy", "broken", "missing"} <= set(benchmark_names())
    descriptions = dict(describe_benchmarks())
    assert descriptions["toy"] == "Toy circle packing with few circles."
    assert "cannot be loaded" in descriptions["missing"]
    toy = get_benchmark("toy", {"n": 7})
    assert isinstance(toy, CirclePacking) and toy.n == 7
    with pytest.raises(BenchmarkError) as info:
        get_benchmark("toy", {"size": 7})
    assert "size" in str(info.value)
    with pytest.raises(BenchmarkError) as info:
        get_benchmark("broken")
    assert "did not return a Benchmark" in str(info.value)
    with pytest.raises(BenchmarkError) as info:
        get_benchmark("missing")
    assert "cannot be loaded" in str(info.value) and info.value.fix
    # The error names the entry point line to fix, and where it lives.
    assert "`missing = no_such_module:make`" in str(info.value) and "toy-bench" in str(info.value)
    assert "pyproject.toml" in info.value.fix
    # A factory without a feedback_policy argument: fine while the run keeps the default policy, refused with
    # the fix when the run's evaluation.feedback would not reach it.
    assert get_benchmark("toy", {"n": 7}, feedback_policy=FeedbackPolicy()).feedback_policy == FeedbackPolicy()
    with pytest.raises(BenchmarkError, match="takes no feedback_policy") as deaf:
        get_benchmark("toy", {"n": 7}, feedback_policy=FeedbackPolicy(max_chars=123))
    assert "feedback_policy=None" in deaf.value.fix
    with pytest.raises(BenchmarkError, match="no benchmark option"):
        get_benchmark("toy", {"feedback_policy": 1})


@pytest.mark.parametrize("name", sorted(BENCHMARKS.builtins))
def test_every_built_in_benchmark_is_built_with_the_runs_feedback_policy(name: str) -> None:
    policy = FeedbackPolicy(max_chars=123, traceback=False, output=False)
    options = {"n_search": 2, "n_holdout": 1} if name in ("arc", "humaneval") else {}
    assert get_benchmark(name, options, feedback_policy=policy).feedback_policy == policy


def test_harness_value_conversion() -> None:
    assert to_json_safe((1, (2.5, "a"), {"k": (None, True)})) == [1, [2.5, "a"], {"k": [None, True]}]
    assert to_json_safe({3: np.float32(0.5)}) == {"3": 0.5}
    assert to_json_safe(np.arange(3).reshape(1, 3)) == [[0, 1, 2]]
    for bad, message in [(float("nan"), "NaN"), ([1.0, float("-inf")], "infinity"), ({1, 2}, "set object")]:
        with pytest.raises(UnsafeResultError, match=message):
            to_json_safe(bad)


# ---- feedback on a valid packing: what limits the sum


def test_grid_feedback_names_the_gap_the_equal_radii_and_the_empty_region() -> None:
    bench = CirclePacking()
    task = bench.tasks("search")[0]
    grid = CirclePacking(start="grid").seed()  # equal circles on a 6 x 5 grid, the seed of earlier versions
    score = bench.score(task, LocalSandbox().run(bench.run_spec(grid, task)))
    feedback = score.feedback
    assert score.passed and len(feedback) < 800, (len(feedback), feedback)
    lines = feedback.splitlines()
    assert lines[0].startswith("valid packing of 26 circles; sum of radii 2.166667 (0.468 below the best known 2.635")
    assert "all 26 radii equal 0.0833 (a grid of equal circles)" in feedback
    assert "every circle touches a neighbour or a wall: none can grow unless others move" in feedback
    assert f"uncovered: {1 - 26 * math.pi / 144:.1%} of the square" in feedback
    # The 6 x 5 grid leaves the top right empty: 0.333 high, room for a circle of radius about 1/6.
    spot = re.search(r"largest empty spot fits r=([0-9.]+) at \(([0-9.]+), ([0-9.]+)\)", feedback)
    assert spot is not None and float(spot[1]) == pytest.approx(1 / 6, abs=0.01) and float(spot[3]) > 0.75
    assert "equal circles on a square grid waste space" in feedback and "offset (hexagonal) rows" in feedback
    assert "scipy.optimize" in feedback and "(about 2.6)" in feedback


def test_unequal_feedback_names_the_smallest_circles_and_their_room() -> None:
    bench = CirclePacking(n=4)  # no best known sum for n=4: none is quoted
    packing = [[0.25, 0.25, 0.25], [0.75, 0.25, 0.25], [0.25, 0.75, 0.25], [0.75, 0.75, 0.1]]
    score = bench.score(bench.tasks("search")[0], harness_result(packing))
    feedback = score.feedback
    assert score.passed and score.score == pytest.approx(0.85) and len(feedback) < 800
    assert feedback.startswith("valid packing of 4 circles; sum of radii 0.850000; took 0.01 s\n")
    assert "best known" not in feedback and "2.6" not in feedback
    assert "radii from 0.1000 to 0.2500" in feedback
    # Circle 3 is 0.15 from the wall and from both neighbours' edges; the big ones touch each other.
    assert "smallest: #3 r=0.1000 can grow 0.1500, #0 r=0.2500 touching, #1 r=0.2500 touching" in feedback
    assert "1 of 4 circles can grow without moving others" in feedback
    assert f"uncovered: {1 - math.pi * (3 * 0.25**2 + 0.1**2):.1%} of the square" in feedback
    assert "equal circles" not in feedback and "small ones in the gaps" in feedback
    # The descriptors are unchanged by the richer feedback: the small circle is off the walls.
    assert score.descriptor == pytest.approx(
        {"radius_spread": np.std([0.25, 0.25, 0.25, 0.1]) / 0.2125, "border_fraction": 0.75}
    )


def test_room_and_empty_spot_geometry() -> None:
    centres = np.array([[0.25, 0.25], [0.75, 0.25], [0.25, 0.75]])
    radii = np.array([0.25, 0.25, 0.2])
    assert room_to_grow(centres, radii) == pytest.approx([0.0, 0.0, 0.05])
    x, y, r = largest_empty_spot(centres, np.full(3, 0.25))  # the empty quadrant
    assert (x, y) == pytest.approx((0.75, 0.75), abs=0.01) and r == pytest.approx(0.25, abs=0.01)


def test_empty_spot_coarse_to_fine_finds_what_probing_every_point_finds() -> None:
    from cambrian.evaluators.circle_packing.feedback import EMPTY_SPOT_GRID

    ticks = (np.arange(EMPTY_SPOT_GRID) + 0.5) / EMPTY_SPOT_GRID
    px, py = (axis.ravel() for axis in np.meshgrid(ticks, ticks))

    def every_point(centres: np.ndarray, radii: np.ndarray) -> tuple[float, float, float]:
        clearance = np.minimum.reduce([px, 1 - px, py, 1 - py])
        for (cx, cy), r in zip(centres, radii):
            clearance = np.minimum(clearance, np.hypot(px - cx, py - cy) - r)
        best = int(np.argmax(clearance))
        return float(px[best]), float(py[best]), max(float(clearance[best]), 0.0)

    rng = np.random.default_rng(0)
    cases = [(np.zeros((0, 2)), np.zeros(0))]  # an empty square: ties everywhere on the centre line
    for k in range(1, 6):  # grids of equal circles: many exact ties
        g = (np.arange(k) + 0.5) / k
        xx, yy = np.meshgrid(g, g)
        cases.append((np.c_[xx.ravel(), yy.ravel()], np.full(k * k, 0.5 / k)))
    for _ in range(60):
        n = int(rng.integers(1, 40))
        cases.append((rng.uniform(0, 1, (n, 2)), rng.uniform(0, 0.2, n)))
    for centres, radii in cases:
        assert largest_empty_spot(centres, radii) == every_point(centres, radii)


def test_numpy_values_returned_by_the_program_are_scored_in_the_real_sandbox() -> None:
    # The sandbox interpreter here is this venv's (numpy installed), given by path so site-packages stay visible.
    bench = CirclePacking(n=4)
    task = bench.tasks("search")[0]
    for body in (
        "return np.array([[0.25, 0.25, 0.25], [0.75, 0.25, 0.25], [0.25, 0.75, 0.25], [0.75, 0.75, 0.25]])",
        "return [(np.float64(x), np.float32(y), np.float64(0.25)) for x, y in ((0.25, 0.25), (0.75, 0.25), "
        "(0.25, 0.75), (0.75, 0.75))]",
        "return [[np.int64(0) + 0.25 * (1 + 2 * (i % 2)), 0.25 * (1 + 2 * (i // 2)), np.float16(0.25)] "
        "for i in range(n)]",
    ):
        code = f"import numpy as np\n\ndef pack_circles(n):\n    {body}\n"
        genome = Genome(files={"packing.py": code}, entry="packing.py")
        spec = dataclasses.replace(bench.run_spec(genome, task), command=(sys.executable, HARNESS_FILE))
        result = LocalSandbox().run(spec)
        score = bench.score(task, result)
        assert score.passed and score.score == pytest.approx(1.0), (score.feedback, result.stderr)
    nan_code = "import numpy as np\ndef pack_circles(n):\n    return np.full((n, 3), np.nan)\n"
    nan = Genome(files={"packing.py": nan_code}, entry="packing.py")
    result = LocalSandbox().run(dataclasses.replace(bench.run_spec(nan, task), command=(sys.executable, HARNESS_FILE)))
    assert "result contains NaN" in bench.score(task, result).feedback


def test_harness_converts_numpy_without_importing_it() -> None:
    # The harness is stdlib only: numpy values are converted through their own tolist(); it imports numpy
    # only to seed it, inside the one function that does, for a program that uses it.
    import ast

    from cambrian.evaluators.harness.run_program import harness_text

    tree = ast.parse(harness_text())
    top_imports = [
        alias.name for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names
    ]
    assert "numpy" not in top_imports
    (seeding,) = [
        node for node in tree.body if isinstance(node, ast.FunctionDef) and "import numpy" in ast.unparse(node)
    ]
    assert seeding.name == "seed_randomness"
    assert to_json_safe([np.float64(0.5), np.int64(3), np.bool_(True), np.array(2.5)]) == [0.5, 3, True, 2.5]
    assert all(type(v) in (float, int, bool) for v in to_json_safe([np.float32(1.5), np.int8(2), np.bool_(False)]))


def test_start_option_chooses_the_seed_program() -> None:
    rings, grid = CirclePacking.from_options({}), CirclePacking.from_options({"start": "grid"})
    assert rings.seed().entry == grid.seed().entry == "packing.py"
    assert "def ring_centres" in rings.seed().files["packing.py"]
    assert "def ring_centres" not in grid.seed().files["packing.py"]
    assert evaluate_agent(grid, grid.seed(), LocalSandbox()).score == pytest.approx(26 / 12)
    assert evaluate_agent(rings, rings.seed(), LocalSandbox()).score == pytest.approx(SEED_SUM)
    with pytest.raises(BenchmarkError, match="start"):
        CirclePacking.from_options({"start": "hexagons"})


def _exactly_valid(value: list[list[float]]) -> bool:
    from fractions import Fraction

    circles = [[Fraction(v) for v in c] for c in value]
    for x, y, r in circles:
        if r < 0 or r > x or x + r > 1 or r > y or y + r > 1:
            return False
    for i in range(len(circles)):
        for j in range(i + 1, len(circles)):
            (xi, yi, ri), (xj, yj, rj) = circles[i], circles[j]
            if (xi - xj) ** 2 + (yi - yj) ** 2 < (ri + rj) ** 2:
                return False
    return True


def test_scores_count_only_exactly_valid_packings() -> None:
    # Overlaps and edge crossings of about 1e-12 (what an optimiser returns) are within the tolerance: the
    # packing scores, with radii shrunk until the rules hold in exact rational arithmetic on the floats.
    tiny = [[0.25, 0.25, 0.25 + 1e-12], [0.75 - 1e-12, 0.25, 0.25], [0.25, 0.75, 0.25], [0.75, 0.75, 0.25]]
    assert not _exactly_valid(tiny)
    check = check_packing(tiny, 4)
    assert check.valid and 0 < check.shrunk < 1e-9
    certified = [[x, y, r] for (x, y), r in zip(check.centres, check.radii)]
    assert _exactly_valid(certified)
    assert 1.0 - 1e-9 < check.sum_of_radii < 1.0
    # An exactly valid packing is scored as it is.
    exact = [[0.25, 0.25, 0.25], [0.75, 0.25, 0.25], [0.25, 0.75, 0.25], [0.75, 0.75, 0.25]]
    assert _exactly_valid(exact) and check_packing(exact, 4).shrunk == 0 and check_packing(exact, 4).sum_of_radii == 1.0
    # Radii from a float formula (sqrt) that round up past the exact limit: certified, never over it.
    import math

    r = (math.sqrt(2) - 1) / (2 * math.sqrt(2))  # tangent arrangement whose floats sit on the boundary
    diagonal = [[r, r, r], [1 - r, 1 - r, r]]
    check = check_packing(diagonal, 2)
    assert check.valid and _exactly_valid([[x, y, rr] for (x, y), rr in zip(check.centres, check.radii)])
    # A real break (1e-6) stays invalid.
    assert not check_packing([[0.25, 0.25, 0.25 + 1e-6], [0.75, 0.25, 0.25]], 2).valid


def test_contract_says_the_check_is_exact() -> None:
    contract = CirclePacking().contract
    assert "EXACTLY" in contract and "rational arithmetic" in contract
