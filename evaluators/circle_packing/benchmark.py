"""Circle packing (program search): n circles in the unit square, maximise the sum of radii.

The agent is a program with `pack_circles(n) -> [(x, y, r), ...]`. It runs in
the sandbox through the stdlib harness; the packing it returns is checked and
scored here on the host with numpy, and the feedback on a valid packing says
what limits its sum (`feedback.py`). A packing that breaks a rule is unusable
(not executed, its violations named), as a broken answer is in every program
benchmark: a child that returns one is invalid, not a valid child scoring 0.
Published best for n = 26: about 2.635 (AlphaEvolve 2.635, ShinkaEvolve
2.63598, OpenEvolve 2.634).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from importlib import resources
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from cambrian.evaluators.base import BenchmarkError, FeedbackPolicy, Genome, Stage, Task, TaskScore
from cambrian.evaluators.base import parse_options as parse_benchmark_options
from cambrian.evaluators.circle_packing.feedback import describe_valid_packing
from cambrian.evaluators.feedback import not_executed, opened, run_failure
from cambrian.evaluators.harness import HarnessBenchmark
from cambrian.evaluators.harness.run_program import read_outcome
from cambrian.sandbox.base import RunResult

TOLERANCE = 1e-9  # a break of the rules up to this much is repaired by shrinking radii; more is invalid
_NEAR = 1e-7  # pairs and edges closer than this (in floats) are checked in exact arithmetic
CERTIFY_ROUNDS = 200  # shrinking rounds before a radius that still breaks an exact rule becomes 0
BORDER_TOUCH = 1e-6  # a circle this close to an edge counts as touching it (unit-square units)
BEST_KNOWN = {26: 2.635}  # published sums of radii, quoted in feedback and the contract
FUNCTION = "pack_circles"
SEED_ENTRY = "packing.py"
_MAX_EXAMPLES = 3  # violations of one kind named in feedback; the rest are counted


class CirclePackingOptions(BaseModel):
    """Options of the circle packing benchmark (unknown keys are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n: int = Field(26, ge=2, le=200, description="number of circles")
    # SLSQP over all 78 variables of n = 26 from a random start takes 0.2 s on one core (2.549); a child
    # that loops forever holds a core this long.
    timeout_s: float = Field(30.0, gt=0, le=3600, description="wall-clock limit per run, seconds")
    memory_mb: int = Field(1024, ge=64, le=65536, description="memory limit per run, MiB")
    start: Literal["rings", "grid"] = Field(
        "rings",
        description="the seed program: rings (centres on rings, each radius as large as its neighbours allow: "
        "1.0917 for n=26, many single edits improve it) or grid (equal circles on a square grid: 2.1667, a strict "
        "local optimum for small edits)",
    )


def parse_options(options: Mapping[str, Any] | None) -> CirclePackingOptions:
    """Validate `options`; BenchmarkError names the bad key or value."""
    return parse_benchmark_options(
        CirclePackingOptions,
        options,
        benchmark="circle_packing",
        hint="n in 2..200, timeout_s > 0, memory_mb >= 64, start rings or grid",
    )


@dataclass(frozen=True)
class PackingCheck:
    """The verdict on one returned packing."""

    valid: bool
    sum_of_radii: float  # 0.0 unless valid
    violations: tuple[str, ...]  # public sentences, worst first within each kind
    radii: tuple[float, ...] = ()
    centres: tuple[tuple[float, float], ...] = ()  # (x, y) per circle; empty unless valid
    border_fraction: float = 0.0  # share of circles touching an edge within BORDER_TOUCH, 0..1; 0.0 unless valid
    shrunk: float = 0.0  # the most any radius was shrunk to make the packing exactly valid (0: it was already)

    @property
    def radius_spread(self) -> float:
        """Standard deviation of the radii / their mean (0 for equal radii or no radius); 0.0 unless valid."""
        if not self.radii:
            return 0.0
        radii = np.asarray(self.radii)
        mean = float(radii.mean())
        return float(radii.std() / mean) if mean > 0 else 0.0

    def descriptor(self) -> dict[str, float]:
        """The behaviour features MAP-Elites bins a packing by (see CirclePacking.descriptor_bounds)."""
        return {"radius_spread": self.radius_spread, "border_fraction": self.border_fraction}


def check_packing(value: Any, n: int, *, tolerance: float = TOLERANCE) -> PackingCheck:
    """Check that `value` is n non-overlapping (x, y, r) circles inside the unit square."""
    if not isinstance(value, list):
        return _invalid(f"returned a {type(value).__name__}, expected a list of {n} (x, y, r) triples")
    if len(value) != n:
        return _invalid(f"returned {len(value)} circles, expected {n}")
    for index, circle in enumerate(value):
        if not (
            isinstance(circle, list)
            and len(circle) == 3
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in circle)
        ):
            return _invalid(f"circle {index} is {_short(circle)}, expected three numbers (x, y, r)")
    try:
        circles = np.asarray(value, dtype=float)
    except OverflowError:
        return _invalid("a coordinate or radius is too large to be a float")
    bad_rows = np.flatnonzero(~np.isfinite(circles).all(axis=1))
    if bad_rows.size:
        return _invalid(f"circle {bad_rows[0]} is {_short(value[bad_rows[0]])}: not finite")
    x, y, r = circles[:, 0], circles[:, 1], circles[:, 2]
    violations = _named(
        [f"circle {i} has a negative radius {r[i]:.4g}" for i in np.flatnonzero(r < 0)], noun="negative radii"
    )
    for axis, centre in (("x", x), ("y", y)):
        for edge, outside in (("0", centre - r < -tolerance), ("1", centre + r > 1 + tolerance)):
            violations += _named(
                [
                    f"circle {i} ({axis}={centre[i]:.4g}, r={r[i]:.4g}) extends past {axis}={edge}"
                    for i in np.flatnonzero(outside)
                ],
                noun=f"circles past {axis}={edge}",
            )
    violations += _overlaps(x, y, r, tolerance)
    if violations:
        return PackingCheck(valid=False, sum_of_radii=0.0, violations=tuple(violations))
    x, y, certified = certify(x, y, r)
    touching = (
        np.minimum.reduce([x - certified, 1 - x - certified, y - certified, 1 - y - certified]) <= BORDER_TOUCH
    ).mean()
    return PackingCheck(
        valid=True,
        sum_of_radii=float(sum(Fraction(v) for v in certified.tolist())),
        violations=(),
        radii=tuple(certified.tolist()),
        centres=tuple(zip(x.tolist(), y.tolist())),
        border_fraction=float(touching),
        shrunk=float(np.max(r - certified)) if len(r) else 0.0,
    )


def certify(x: np.ndarray, y: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centres and radii (no larger than `r`) with which the packing is EXACTLY valid, checked in rational
    arithmetic on the floats themselves: r <= x, x + r <= 1 (and for y), and (xi - xj)^2 + (yi - yj)^2 >=
    (ri + rj)^2.

    A packing within TOLERANCE of valid (what an optimiser returns: overlaps of 1e-16) keeps its centres, but
    for one a hair outside the square, which moves onto its edge (by at most TOLERANCE). Each radius that
    breaks a rule exactly is shrunk by the float gap, then by doubling steps; one still breaking a rule after
    CERTIFY_ROUNDS rounds becomes 0, which satisfies every rule where the centre is in the square. So it
    settles for every input (property-tested over adversarial packings).
    """
    x, y = np.clip(x.astype(float), 0.0, 1.0), np.clip(y.astype(float), 0.0, 1.0)
    radii = np.maximum(r.astype(float), 0.0)
    n = len(radii)
    first, second = np.triu_indices(n, k=1)
    steps = np.zeros(n)
    for _ in range(CERTIFY_ROUNDS):
        broken = _exact_violators(x, y, radii, first, second)
        if not broken:
            return x, y, radii
        for i, gap in broken.items():
            steps[i] = max(gap, np.spacing(radii[i]) * 4, steps[i] * 2, 1e-300)
            radii[i] = max(0.0, radii[i] - steps[i])
    for i in _exact_violators(x, y, radii, first, second):
        radii[i] = 0.0
    return x, y, radii


def _exact_violators(
    x: np.ndarray, y: np.ndarray, r: np.ndarray, first: np.ndarray, second: np.ndarray
) -> dict[int, float]:
    """Circle index -> a float estimate of how much it must shrink, for every rule broken in exact arithmetic.
    Rules whose float margin is larger than _NEAR cannot be broken exactly and are not recomputed."""
    broken: dict[int, float] = {}

    def need(i: int, amount: float) -> None:
        broken[i] = max(broken.get(i, 0.0), amount)

    margins = np.minimum.reduce([x - r, 1 - x - r, y - r, 1 - y - r])
    for i in np.flatnonzero(margins < _NEAR).tolist():
        xi, yi, ri = Fraction(x[i]), Fraction(y[i]), Fraction(r[i])
        if ri > xi or xi + ri > 1 or ri > yi or yi + ri > 1:
            need(i, float(-margins[i]))
    distance = np.hypot(x[first] - x[second], y[first] - y[second])
    near = np.flatnonzero(distance - (r[first] + r[second]) < _NEAR)
    for k in near.tolist():
        i, j = int(first[k]), int(second[k])
        dx, dy = Fraction(x[i]) - Fraction(x[j]), Fraction(y[i]) - Fraction(y[j])
        if dx * dx + dy * dy < (Fraction(r[i]) + Fraction(r[j])) ** 2:
            overlap = float(r[i] + r[j] - distance[k]) / 2
            need(i, overlap)
            need(j, overlap)
    return broken


def _overlaps(x: np.ndarray, y: np.ndarray, r: np.ndarray, tolerance: float) -> list[str]:
    """Overlapping pairs, deepest first (vectorised over all n(n-1)/2 pairs)."""
    centres = np.stack([x, y], axis=1)
    distance = np.linalg.norm(centres[:, None, :] - centres[None, :, :], axis=-1)
    first, second = np.triu_indices(len(r), k=1)
    depth = (r[:, None] + r[None, :] - distance)[first, second]
    order = np.argsort(-depth, kind="stable")
    deepest = order[depth[order] > tolerance]
    return _named(
        [f"circles {first[k]} and {second[k]} overlap by {depth[k]:.3g}" for k in deepest],
        noun="overlapping pairs",
    )


def _named(sentences: list[str], *, noun: str) -> list[str]:
    """The first few sentences of one kind of violation, plus a count of the rest."""
    if len(sentences) <= _MAX_EXAMPLES:
        return sentences
    return sentences[:_MAX_EXAMPLES] + [f"... and {len(sentences) - _MAX_EXAMPLES} more {noun}"]


def _invalid(reason: str) -> PackingCheck:
    return PackingCheck(valid=False, sum_of_radii=0.0, violations=(reason,))


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CirclePacking(HarnessBenchmark):
    """Pack n circles in the unit square; the score is the sum of radii of a valid packing.

    n: number of circles, 2..200 (default 26, the published reference case).
    timeout_s: wall-clock limit of one run, seconds. memory_mb: memory limit, MiB.
    start: the seed program, "rings" (the shape of OpenEvolve's and ShinkaEvolve's seed) or "grid".
    """

    name = "circle_packing"
    entry_function = FUNCTION  # what the harness calls; the static check keeps it callable
    #: Directions a proposal may be asked to try (one drawn per proposal, `search.ideas`): the moves packing
    #: work names, in words, no construction given away.
    ideas = (
        "arrange the circles in offset (hexagonal) rows: shift every other row by half a spacing and bring the "
        "rows closer, with the largest radius that still fits",
        "use fewer, larger circles and put small circles in the gaps between them",
        "after placing the circles, grow each one until it touches a neighbour or a wall",
        "place circles one at a time, each where the largest possible circle fits",
        "optimise all centres and radii together from the current packing with scipy.optimize.minimize "
        "(method SLSQP, constraints: no overlap, inside the square), maximising the sum of radii",
        "tune the numbers: the spacing, the radii, the number of rows and columns, the margins",
        "give the circles along the walls and in the corners different sizes from those in the middle",
    )
    description = "Pack n circles in the unit square to maximise the sum of their radii (program search)."
    #: Descriptor ranges for binning: radius_spread = std / mean of the radii (0 = equal circles; it exceeds 1
    #: only for a few large circles among specks, up to sqrt(n - 1)); border_fraction = share of circles
    #: touching an edge within 1e-6.
    descriptor_bounds: Mapping[str, tuple[float, float] | None] = MappingProxyType(
        {"radius_spread": (0.0, 1.0), "border_fraction": (0.0, 1.0)}
    )

    def __init__(
        self,
        n: int = 26,
        *,
        timeout_s: float = 30.0,
        memory_mb: int = 1024,
        start: str = "rings",
        feedback_policy: FeedbackPolicy | None = None,
    ) -> None:
        self.options = parse_options({"n": n, "timeout_s": timeout_s, "memory_mb": memory_mb, "start": start})
        self.feedback_policy = feedback_policy or FeedbackPolicy()  # failures show their traceback anyway
        self.contract = self._contract()

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any] | None = None, *, feedback_policy: FeedbackPolicy | None = None
    ) -> CirclePacking:
        """Build from a user's option mapping and the run's feedback policy; BenchmarkError names an unknown key
        or bad value."""
        parsed = parse_options(options)
        return cls(
            parsed.n,
            timeout_s=parsed.timeout_s,
            memory_mb=parsed.memory_mb,
            start=parsed.start,
            feedback_policy=feedback_policy,
        )

    @property
    def n(self) -> int:
        return self.options.n

    def seed(self) -> Genome:
        seed_file = f"{self.options.start}.py"  # seed/rings.py or seed/grid.py, evolved as packing.py
        text = (
            resources.files("cambrian.evaluators.circle_packing")
            .joinpath("seed")
            .joinpath(seed_file)
            .read_text(encoding="utf-8")
        )
        return Genome(files={SEED_ENTRY: text}, entry=SEED_ENTRY)

    def tasks(self, split: str) -> Sequence[Task]:
        if split == "search":
            return [Task(id=f"n{self.n}", split="search", inputs={"n": self.n})]
        if split == "holdout":
            return []  # one deterministic instance: nothing held out yet
        raise BenchmarkError(f"unknown split {split!r}", fix="use 'search' or 'holdout'")

    def stages(self) -> Sequence[Stage]:
        return [Stage(task_ids=(f"n{self.n}",), threshold=None)]

    def score(self, task: Task, result: RunResult) -> TaskScore:
        n = int(task.inputs["n"])
        failure = run_failure(result, opened(self.feedback_policy), who="the program")
        if failure is not None:
            return failure
        outcome = read_outcome(result.files)
        assert outcome is not None  # run_failure returned None: the run wrote a value
        check = check_packing(outcome.value, n)
        if not check.valid:  # a broken rule makes the answer unusable, as every program benchmark's does
            return not_executed("invalid packing: " + "; ".join(check.violations), opened(self.feedback_policy))
        feedback = describe_valid_packing(
            np.asarray(check.centres), np.asarray(check.radii), best_known=BEST_KNOWN.get(n), seconds=outcome.seconds
        )
        if check.shrunk > 0:
            feedback += (
                f"\nScored with radii shrunk by up to {check.shrunk:.1e} to make the packing exactly valid "
                "(only exactly valid packings count)."
            )
        return TaskScore(
            score=check.sum_of_radii, passed=True, executed=True, feedback=feedback, descriptor=check.descriptor()
        )

    def aggregate(self, scores: Sequence[TaskScore]) -> float:
        """Mean task score; 0.0 for no tasks."""
        return float(np.mean([s.score for s in scores])) if scores else 0.0

    def _contract(self) -> str:
        n = self.n
        best = f" The best published sum for n=26 is about {BEST_KNOWN[26]} (AlphaEvolve)." if 26 in BEST_KNOWN else ""
        return (
            f"Write `def {FUNCTION}(n: int) -> list[tuple[float, float, float]]` in the entry file. "
            f"It is called once, with n = {n}, and returns one (x, y, r) triple per circle: centre (x, y) "
            "and radius r in unit-square coordinates.\n"
            "Rules: exactly n triples of finite numbers; r >= 0; every circle inside the unit square "
            "(r <= x <= 1 - r and r <= y <= 1 - r); no two circles overlap (the distance between centres is at "
            "least r_i + r_j). They are checked EXACTLY, in rational arithmetic on the returned floats: a packing "
            "that breaks them by at most 1e-9 (float rounding, an optimiser's tiny overlaps) is scored with its "
            "radii shrunk just enough to be exactly valid; a larger break makes the packing invalid.\n"
            "Return plain Python lists or tuples of floats; a numpy array of shape (n, 3) or numpy numbers are "
            "accepted too (converted to plain lists and floats before checking); NaN or infinity is refused.\n"
            "Score: the sum of the radii of a valid packing; an invalid packing, a crash or a timeout is not scored. "
            f"Higher is better.{best} Feedback on a valid packing names what limits it: the gap to the best "
            "known sum, the smallest circles and how much each can grow, the uncovered area.\n"
            "Environment: Python 3 with the standard library plus numpy and scipy (both installed); no network; "
            f"{self.options.timeout_s:g} s wall clock and {self.options.memory_mb} MiB of memory per run. "
            "Printed output is kept only as a log. If you use randomness, fix the seed so runs repeat.\n"
            "Edit only between the EVOLVE-BLOCK-START and EVOLVE-BLOCK-END markers."
        )
