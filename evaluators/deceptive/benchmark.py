"""A deceptive benchmark (program search): concatenated trap functions (Deb & Goldberg, 1993).

The agent is a program whose EVOLVE-BLOCK holds a list `VALUES` of numbers;
`solution() -> list[float]` returns them. On the host each number becomes a bit,
bit = (nearest integer) mod 2 (1 for odd, 0 for even; ties round up), and the
m * k bits form m blocks of k (options `blocks` = m, `block_size` = k). A block
with u ones is worth

    trap(u) = k            if u == k
    trap(u) = k - 1 - u    otherwise

and the score is sum(trap) / (m * k), in [0, 1]. All ones (the global optimum)
scores 1.0; all zeros (the deceptive attractor) scores (k - 1) / k, 0.75 for
k = 4. The seed has u = k // 2 ones in every block: 0.25 for k = 4.

Why parity: the AST baseline operator's commonest edit of an int is c -> c +- 1
(meta_agent.ast_mutation), which under parity ALWAYS flips the bit, in both
directions and however far a value has drifted; under a threshold such as
"bit = 1 if value >= 0.5" a value that drifted to 3 or -2 would need several
edits before its bit could flip again.

Proof that greedy improvement gets stuck. Blocks are separable: a change inside
one block moves the score by the change of that block's trap value / (m * k).
Take a block at u <= k - 2. A single-bit change moves u to u - 1 or u + 1:
  - u -> u - 1 raises trap by 1 (k - 1 - u -> k - u);
  - u -> u + 1 <= k - 1 < k lowers trap by 1 (k - 1 - u -> k - 2 - u).
So every single-bit change that raises the score lowers u, and every change
that raises u lowers the score. Reaching u = k one bit at a time passes through
u + 1, ..., k - 1: those k - 1 - u steps each LOWER the block's value (down to 0
at u = k - 1) and only the last one raises it (to k). Moreover trap(0) = k - 1
is the largest value of any u < k, so at all zeros every child that changes a
block without completing it scores strictly lower (no neutral moves left): the
only improving child turns a whole block to ones, k bit flips in one block at once.
Hence a strategy that only expands the best agent with small edits descends
from the seed to all zeros, 0.75 for k = 4, unless an edit flips the
k - u missing bits of a block at once (2 bits for a block at u = k - 2) before
that block loses a one; once at all zeros it needs k simultaneous flips in one
block. (An edit touching two blocks can trade -1 in one for +1 in another; a
strategy that keeps ties can drift that way, but not out of all zeros.)
For the AST operator (max_edits = 3: 1, 2, 3 edits with probability 0.70,
0.21, 0.09, sites drawn uniformly among the m * k list elements, an int edit
flipping its bit with probability about 0.95), one mutation of the k = 4, m = 4
seed flips exactly one bit about 2/3 of the time, flips >= 2 bits of one block
about 1 time in 10, and flips both zeros of a block (completing it) about 1 time
in 50; at all zeros it can never escape, since 3 edits cannot flip 4 bits of a
block. tests/evaluators/test_deceptive.py and tests/meta_agent/operators/test_ast_mutation.py measure these.

Descriptors: "ones_block_<i>" = u_i / k for every block i, bounds (0, 1); with
k + 1 bins per descriptor MAP-Elites has one cell per (u_0, ..., u_{m-1}).

Splits: one search task. Program search has no generalisation gap (the program
takes no input and the scoring rule is public and deterministic), so, like
circle packing, nothing is held out: `tasks("holdout")` is empty.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cambrian.evaluators.base import BenchmarkError, FeedbackPolicy, Genome, Stage, Task, TaskScore
from cambrian.evaluators.base import parse_options as parse_benchmark_options
from cambrian.evaluators.feedback import not_executed, opened, run_failure
from cambrian.evaluators.harness import HarnessBenchmark
from cambrian.evaluators.harness.run_program import read_outcome
from cambrian.sandbox.base import RunResult

FUNCTION = "solution"
SEED_ENTRY = "bits.py"
DESCRIPTOR_PREFIX = "ones_block_"
_VALUES_LINE = re.compile(r"^VALUES = \[[^\]\n]*\]$", re.MULTILINE)
_SHORT_CHARS = 80  # longest repr of a bad value quoted in feedback


class DeceptiveOptions(BaseModel):
    """Options of the deceptive benchmark (unknown keys are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    blocks: int = Field(4, ge=1, le=64, description="number of trap blocks m")
    block_size: int = Field(4, ge=3, le=16, description="bits per block k; >= 3 so the seed's u = k // 2 is deceptive")
    timeout_s: float = Field(30.0, gt=0, le=3600, description="wall-clock limit per run, seconds")
    memory_mb: int = Field(512, ge=64, le=65536, description="memory limit per run, MiB")


def parse_options(options: Mapping[str, Any] | None) -> DeceptiveOptions:
    """Validate `options`; BenchmarkError names the bad key or value."""
    return parse_benchmark_options(
        DeceptiveOptions,
        options,
        benchmark="deceptive",
        hint="blocks in 1..64, block_size in 3..16, timeout_s > 0, memory_mb >= 64",
    )


def trap(ones: int, block_size: int) -> int:
    """The trap value of one block with `ones` ones among `block_size` bits: k at u = k, else k - 1 - u."""
    return block_size if ones == block_size else block_size - 1 - ones


def value_to_bit(value: int | float) -> int:
    """The bit a number stands for: its nearest integer mod 2 (halves round up; ints are exact at any size)."""
    if isinstance(value, int):
        return value % 2
    return math.floor(value + 0.5) % 2


@dataclass(frozen=True)
class TrapCheck:
    """The verdict on one returned list: its bits and block values, or why it is unusable.

    problem: a public sentence when the list cannot be scored (wrong type, length, a non-number), else None.
    ones: ones per block, in block order. values: trap value per block, each in 0..block_size.
    """

    problem: str | None
    bits: tuple[int, ...] = ()
    ones: tuple[int, ...] = ()
    values: tuple[int, ...] = ()

    @property
    def score(self) -> float:
        """sum(trap) / (m * k) in [0, 1]; 0.0 when unusable."""
        if self.problem is not None or not self.bits:
            return 0.0
        return sum(self.values) / len(self.bits)


def check_values(value: Any, *, blocks: int, block_size: int) -> TrapCheck:
    """Read `value` (what `solution()` returned) as blocks * block_size bits and score each block."""
    expected = blocks * block_size
    if not isinstance(value, list):
        return TrapCheck(problem=f"solution() returned a {type(value).__name__}, expected a list of {expected} numbers")
    if len(value) != expected:
        return TrapCheck(
            problem=f"solution() returned {len(value)} numbers, expected {expected} ({blocks} blocks of {block_size})"
        )
    for index, item in enumerate(value):
        # bool is an int subclass, but True/False as "numbers" is almost surely a mistake worth naming.
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            return TrapCheck(problem=f"element {index} is {_short(item)}, expected a number")
    bits = tuple(value_to_bit(item) for item in value)
    ones = tuple(sum(bits[b * block_size : (b + 1) * block_size]) for b in range(blocks))
    return TrapCheck(problem=None, bits=bits, ones=ones, values=tuple(trap(u, block_size) for u in ones))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHORT_CHARS else text[: _SHORT_CHARS - 3] + "..."


class DeceptiveTrap(HarnessBenchmark):
    """Concatenated trap functions: m blocks of k bits, read from the numbers `solution()` returns.

    blocks: m, 1..64 (default 4). block_size: k, 3..16 (default 4).
    timeout_s: wall-clock limit of one run, seconds. memory_mb: memory limit, MiB.
    """

    name = "deceptive"
    entry_function = FUNCTION  # what the harness calls; the static check keeps it callable
    description = (
        "Concatenated trap functions: small greedy steps lead into a deceptive local optimum (program search)."
    )

    def __init__(
        self,
        blocks: int = 4,
        *,
        block_size: int = 4,
        timeout_s: float = 30.0,
        memory_mb: int = 512,
        feedback_policy: FeedbackPolicy | None = None,
    ) -> None:
        self.options = parse_options(
            {"blocks": blocks, "block_size": block_size, "timeout_s": timeout_s, "memory_mb": memory_mb}
        )
        self.feedback_policy = feedback_policy or FeedbackPolicy()  # failures show their traceback anyway
        #: Each descriptor's (low, high) range: the fraction of ones of one block.
        self.descriptor_bounds: Mapping[str, tuple[float, float] | None] = MappingProxyType(
            {f"{DESCRIPTOR_PREFIX}{b}": (0.0, 1.0) for b in range(self.blocks)}
        )
        self.contract = self._contract()

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any] | None = None, *, feedback_policy: FeedbackPolicy | None = None
    ) -> DeceptiveTrap:
        """Build from a user's option mapping and the run's feedback policy; BenchmarkError names an unknown key
        or bad value."""
        parsed = parse_options(options)
        return cls(
            parsed.blocks,
            block_size=parsed.block_size,
            timeout_s=parsed.timeout_s,
            memory_mb=parsed.memory_mb,
            feedback_policy=feedback_policy,
        )

    @property
    def blocks(self) -> int:
        return self.options.blocks

    @property
    def block_size(self) -> int:
        return self.options.block_size

    @property
    def task_id(self) -> str:
        return f"trap{self.blocks}x{self.block_size}"

    def seed_values(self) -> list[int]:
        """The seed's numbers: in every block k // 2 ones first, then zeros."""
        half = self.block_size // 2
        return ([1] * half + [0] * (self.block_size - half)) * self.blocks

    def seed(self) -> Genome:
        text = (
            resources.files("cambrian.evaluators.deceptive")
            .joinpath("seed")
            .joinpath(SEED_ENTRY)
            .read_text(encoding="utf-8")
        )
        # The file holds the 4 x 4 list; other shapes get their own list on the same line.
        line = "VALUES = [" + ", ".join(str(v) for v in self.seed_values()) + "]"
        text, count = _VALUES_LINE.subn(line, text, count=1)
        if count != 1:
            raise RuntimeError(f"the packaged seed {SEED_ENTRY} has no one-line `VALUES = [...]`; reinstall cambrian")
        return Genome(files={SEED_ENTRY: text}, entry=SEED_ENTRY)

    def tasks(self, split: str) -> Sequence[Task]:
        if split == "search":
            return [Task(id=self.task_id, split="search", inputs={})]
        if split == "holdout":
            return []  # program search without input: nothing to generalise to
        raise BenchmarkError(f"unknown split {split!r}", fix="use 'search' or 'holdout'")

    def stages(self) -> Sequence[Stage]:
        return [Stage(task_ids=(self.task_id,), threshold=None)]

    def score(self, task: Task, result: RunResult) -> TaskScore:
        """Score one run on the host; a crash, timeout or unusable list is executed=False with a public reason."""
        failure = run_failure(result, opened(self.feedback_policy), who="the program")
        if failure is not None:
            return failure
        outcome = read_outcome(result.files)
        assert outcome is not None  # run_failure returned None: the run wrote a value
        check = check_values(outcome.value, blocks=self.blocks, block_size=self.block_size)
        if check.problem is not None:
            return not_executed(f"unusable result: {check.problem}", self.feedback_policy)
        k = self.block_size
        bit_text = " ".join("".join(str(b) for b in check.bits[i * k : (i + 1) * k]) for i in range(self.blocks))
        feedback = (
            f"bits by block: {bit_text}; ones per block: {' '.join(str(u) for u in check.ones)}; "
            f"block values (each out of {k}): {' '.join(str(v) for v in check.values)}; score {check.score:.4f}"
        )
        descriptor = {f"{DESCRIPTOR_PREFIX}{b}": u / k for b, u in enumerate(check.ones)}
        return TaskScore(
            score=check.score,
            passed=all(u == k for u in check.ones),
            executed=True,
            feedback=feedback,
            descriptor=descriptor,
        )

    def aggregate(self, scores: Sequence[TaskScore]) -> float:
        """Mean task score; 0.0 for no tasks."""
        return sum(s.score for s in scores) / len(scores) if scores else 0.0

    def _contract(self) -> str:
        m, k = self.blocks, self.block_size
        return (
            f"The entry file defines `def {FUNCTION}() -> list[float]`, called once with no arguments; in the seed "
            "it returns the list `VALUES` written in the EVOLVE-BLOCK. It must return "
            f"exactly {m * k} numbers (ints or floats). Each number is read as a bit: round it to the nearest "
            "integer (halves round up); an odd integer is bit 1, an even one is bit 0 (so 1, 3, -1 are 1; "
            f"0, 2, -2 are 0). The bits form {m} consecutive blocks of {k}.\n"
            f"Score: a block with u ones is worth {k} if u == {k}, otherwise {k - 1} - u; the score is the sum "
            f"over blocks divided by {m * k}, from 0 to 1. Higher is better; 1.0 (every bit 1) is the maximum. "
            "A crash, a timeout, a wrong number of elements or a non-number is not scored.\n"
            "Environment: Python 3 with the standard library plus numpy and scipy (both installed); no network; "
            f"{self.options.timeout_s:g} s wall clock and {self.options.memory_mb} MiB of memory per run.\n"
            "Edit only between the EVOLVE-BLOCK-START and EVOLVE-BLOCK-END markers."
        )
