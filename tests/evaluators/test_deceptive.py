"""The deceptive trap benchmark: programs run in the real local sandbox and are scored on the host."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from cambrian.evaluators.base import Benchmark, BenchmarkError, Genome
from cambrian.evaluators.circle_packing import CirclePacking
from cambrian.evaluators.deceptive import DeceptiveTrap, check_values, trap, value_to_bit
from cambrian.evaluators.harness.run_program import RESULT_FILE
from cambrian.evaluators.registry import benchmark_names, get_benchmark
from cambrian.evaluators.runner import AgentResult, evaluate_agent
from cambrian.sandbox.base import RunResult
from cambrian.sandbox.local import LocalSandbox


def harness_result(value: object) -> RunResult:
    """A finished run whose harness returned `value` (for scoring without a sandbox)."""
    payload = json.dumps({"ok": True, "value": value, "seconds": 0.01})
    return RunResult(exit_code=0, stdout="", stderr="", duration_s=0.1, files={RESULT_FILE: payload})


def program(values_line: str, body: str = "    return list(VALUES)") -> Genome:
    """An entry file shaped like the seed, with its own VALUES line and solution() body."""
    text = f"# EVOLVE-BLOCK-START\n{values_line}\n# EVOLVE-BLOCK-END\n\n\ndef solution():\n{body}\n"
    return Genome(files={"bits.py": text}, entry="bits.py")


def evaluate(bench: DeceptiveTrap, genome: Genome) -> AgentResult:
    return evaluate_agent(bench, genome, LocalSandbox())


def test_is_a_registered_benchmark() -> None:
    bench = get_benchmark("deceptive")
    assert isinstance(bench, DeceptiveTrap) and isinstance(bench, Benchmark)
    assert "deceptive" in benchmark_names()
    assert [t.id for t in bench.tasks("search")] == ["trap4x4"]
    assert bench.tasks("holdout") == []
    assert [s.task_ids for s in bench.stages()] == [("trap4x4",)]
    assert dict(bench.descriptor_bounds) == {f"ones_block_{i}": (0.0, 1.0) for i in range(4)}
    for phrase in ("def solution()", "exactly 16 numbers", "odd integer is bit 1", "worth 4 if u == 4", "3 - u"):
        assert phrase in bench.contract
    with pytest.raises(BenchmarkError) as info:
        bench.tasks("train")
    assert info.value.fix


def test_seed_scores_a_quarter_in_the_sandbox() -> None:
    bench = DeceptiveTrap()
    seed = bench.seed()
    text = seed.files["bits.py"]
    assert text.index("# EVOLVE-BLOCK-START") < text.index("VALUES = [") < text.index("# EVOLVE-BLOCK-END")
    result = evaluate(bench, seed)
    assert result.valid and result.score == pytest.approx(0.25)
    (task,) = result.task_results
    assert task.executed and not task.passed
    assert "bits by block: 1100 1100 1100 1100" in task.feedback
    assert "ones per block: 2 2 2 2" in task.feedback and "score 0.2500" in task.feedback


def test_optimum_and_attractor_in_the_sandbox() -> None:
    bench = DeceptiveTrap()
    best = evaluate(bench, program("VALUES = [1] * 16"))
    assert best.score == pytest.approx(1.0) and best.task_results[0].passed
    trapped = evaluate(bench, program("VALUES = [0] * 16"))
    assert trapped.score == pytest.approx(0.75) and not trapped.task_results[0].passed
    # Parity: 3, -1 and 1.2 are ones, 2, -4 and 0.4 are zeros; one block complete, one at u = 0.
    mixed = evaluate(bench, program("VALUES = [3, -1, 1.2, 1, 2, -4, 0.4, 0, 1, 0, 0, 0, 1, 1, 1, 0]"))
    assert mixed.score == pytest.approx((4 + 3 + 2 + 0) / 16)


def test_descriptor_counts_ones_per_block() -> None:
    bench = DeceptiveTrap()
    values = [1, 1, 1, 1] + [0, 0, 0, 0] + [1, 0, 0, 0] + [1, 1, 1, 0]
    score = bench.score(bench.tasks("search")[0], harness_result(values))
    assert score.executed and score.descriptor == {
        "ones_block_0": 1.0,
        "ones_block_1": 0.0,
        "ones_block_2": 0.25,
        "ones_block_3": 0.75,
    }
    assert set(score.descriptor) == set(bench.descriptor_bounds)
    assert score.score == pytest.approx((4 + 3 + 2 + 0) / 16)


@pytest.mark.parametrize(
    ("genome", "expected"),
    [
        (program("VALUES = [1] * 15"), "returned 15 numbers, expected 16 (4 blocks of 4)"),
        (program("VALUES = [1] * 16", body="    return {'bits': VALUES}"), "returned a dict"),
        (program("VALUES = [1] * 16", body="    raise ValueError('no bits today')"), "ValueError: no bits today"),
    ],
    ids=["wrong-length", "not-a-list", "crash"],
)
def test_bad_output_is_not_executed(genome: Genome, expected: str) -> None:
    result = evaluate(DeceptiveTrap(), genome)
    (task,) = result.task_results
    assert not task.executed and not task.passed and task.score == 0.0
    assert expected in task.feedback
    assert not result.valid and result.invalid_reason


@pytest.mark.parametrize("item", ["1", None, True, [1]])
def test_non_numbers_are_refused(item: object) -> None:
    bench = DeceptiveTrap()
    values = [0] * 16
    values[5] = item  # type: ignore[call-overload]
    score = bench.score(bench.tasks("search")[0], harness_result(values))
    assert not score.executed and "element 5 is" in score.feedback and "expected a number" in score.feedback


def test_other_shapes_build_their_own_seed() -> None:
    bench = DeceptiveTrap.from_options({"blocks": 3, "block_size": 5})
    assert bench.seed_values() == [1, 1, 0, 0, 0] * 3
    assert "VALUES = [1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0]" in bench.seed().files["bits.py"]
    assert bench.seed().files["bits.py"].count("VALUES = [") == 1
    # u = 2 of k = 5 is worth 5 - 1 - 2 = 2 per block.
    check = check_values(bench.seed_values(), blocks=3, block_size=5)
    assert check.score == pytest.approx(6 / 15)
    # The packaged file is the default shape exactly: seed() leaves it as it is.
    default = DeceptiveTrap().seed().files["bits.py"]
    assert "VALUES = [1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0]\n" in default


@pytest.mark.parametrize("options", [{"block_size": 2}, {"blocks": 0}, {"bits": 4}, {"timeout_s": -1}])
def test_bad_options_name_the_fix(options: dict[str, object]) -> None:
    with pytest.raises(BenchmarkError) as info:
        get_benchmark("deceptive", options)
    assert "deceptive" in str(info.value) and "block_size" in info.value.fix


def test_value_to_bit_is_parity_of_the_nearest_integer() -> None:
    assert [value_to_bit(v) for v in (0, 1, 2, 3, -1, -2, 10**30 + 1)] == [0, 1, 0, 1, 1, 0, 1]
    assert [value_to_bit(v) for v in (0.49, 0.5, 1.49, 1.5, -0.5, -0.51, 1e300)] == [0, 1, 1, 0, 0, 1, 0]


@pytest.mark.parametrize("k", [3, 4, 5, 6])
def test_trap_is_deceptive_by_brute_force(k: int) -> None:
    """The module docstring's proof, checked on every bit pattern of one block."""
    for pattern in itertools.product((0, 1), repeat=k):
        u = sum(pattern)
        if u > k - 2:
            continue
        for position in range(k):
            flipped = list(pattern)
            flipped[position] ^= 1
            new_u = sum(flipped)
            gain = trap(new_u, k) - trap(u, k)
            assert new_u != k  # one flip from u <= k - 2 never completes the block
            if gain > 0:
                assert new_u < u  # the only improving flips remove a one
            if new_u > u:
                assert gain < 0  # every step towards all ones costs score
    # All zeros is a strict local optimum for any change of fewer than k bits of a block.
    assert all(trap(u, k) < trap(0, k) for u in range(1, k))
    assert trap(0, k) == k - 1 and trap(k, k) == k


def test_circle_packing_emits_its_descriptors() -> None:
    bench = CirclePacking(n=4)
    quarter = [[0.25, 0.25, 0.25], [0.75, 0.25, 0.25], [0.25, 0.75, 0.25], [0.75, 0.75, 0.25]]
    score = bench.score(bench.tasks("search")[0], harness_result(quarter))
    assert score.descriptor == {"radius_spread": 0.0, "border_fraction": 1.0}
    # One circle in the middle, two small ones in corners, one small one off the edges.
    mixed = [[0.5, 0.5, 0.2], [0.1, 0.1, 0.1], [0.9, 0.1, 0.1], [0.15, 0.85, 0.1]]
    score = bench.score(bench.tasks("search")[0], harness_result(mixed))
    assert score.descriptor["border_fraction"] == pytest.approx(0.5)
    radii = np.array([0.2, 0.1, 0.1, 0.1])
    assert score.descriptor["radius_spread"] == pytest.approx(radii.std() / radii.mean())
    assert set(score.descriptor) == set(bench.descriptor_bounds)
    for low, high in bench.descriptor_bounds.values():  # type: ignore[misc]
        assert low == 0.0 and high == 1.0
