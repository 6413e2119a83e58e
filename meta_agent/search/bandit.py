"""Choosing a (model, operator) pair by the improvements it has produced: UCB1 or Thompson sampling.

Pure and seeded: no I/O, all randomness from the caller's `numpy.random.Generator`.
The loop calls `choose(rng)` and `record_pull(arm)` when it proposes a child, and
`record_outcome(arm, reward=..., cost=...)` once the child is scored (or found
invalid). Pulls are counted at proposal time, so proposals made while earlier
ones are still being evaluated spread over the arms instead of piling onto one.
`choose(rng, allowed=...)` restricts one choice to some arms (crossover needs two agents).

Rewards are non-negative reals (`improvement_reward`: how much a child beat its
parent) whose scale depends on the benchmark. Both algorithms divide them by the
largest reward seen so far, which puts them in [0, 1]:

- UCB1: each arm is tried once (the order drawn with `rng`), then the arm with the
  largest `mean + exploration * sqrt(ln N / n)` wins, where N is all pulls, n the
  arm's pulls (pending ones included) and mean its normalised mean outcome. An arm
  whose pulls are all pending gets the mean of all outcomes so far. Ties are broken
  with `rng`.
- Thompson: each arm's value is drawn from Beta(1 + p s0 + s, 1 + (1 - p) s0 + f) with
  fractional pseudo-counts s = sum of its normalised outcomes and f = outcomes - s (a
  Bernoulli reward is the special case s = successes), and a prior: the arm's share p of
  the `prior` weights, worth s0 = `prior_strength` outcomes; the largest draw wins. Pending
  pulls do not change the posterior; the draw's randomness spreads concurrent proposals.

With `cost_aware`, arms are ranked by expected reward per unit of cost (the FM seconds of the
proposal, in the search): each arm's score (its UCB1 score, or its Thompson draw) is divided by its
mean cost so far, max(mean, cost_floor), an arm without outcomes taking the mean of all arms (budgeted
Thompson sampling, Xia et al. 2015). So an arm whose proposals fail costs in proportion to the seconds
it spends: before any improvement, a 2 s operator is drawn over a 100 s one of the same prior, where
dividing each reward by its cost (zero for every failure) told them apart only once one succeeded. The
floor (default 1.0) keeps an arm whose FM calls were cache hits (about 0 s) from looking infinitely
cheap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from cambrian.archive.lineage import improves
from cambrian.errors import CambrianError

__all__ = ["ALGORITHMS", "Arm", "ArmStats", "Bandit", "BanditError", "improvement_reward"]

Algorithm = Literal["ucb1", "thompson"]
ALGORITHMS: tuple[str, ...] = ("ucb1", "thompson")


class BanditError(CambrianError, ValueError):
    """A bandit built or used wrongly (no arms, duplicates, unknown algorithm or arm). `fix` names the fix."""


@dataclass(frozen=True, order=True)
class Arm:
    """One choice of the bandit: which model runs which mutation operator."""

    model: str
    operator: str


@dataclass(frozen=True)
class ArmStats:
    """What an arm has done so far.

    pulls: proposals made with it (counted at proposal time; >= rewarded).
    rewarded: outcomes recorded for it (zero rewards included).
    reward_sum: sum of its raw rewards (score units). cost_sum: sum of its outcomes' costs.
    value_sum: sum of reward / max(cost, floor) when cost-aware, else of rewards (for reports; the algorithms
    rank by mean reward and mean cost).
    """

    arm: Arm
    pulls: int
    rewarded: int
    reward_sum: float
    cost_sum: float
    value_sum: float

    @property
    def mean(self) -> float:
        """Mean raw reward per recorded outcome (0.0 before the first)."""
        return self.reward_sum / self.rewarded if self.rewarded else 0.0

    @property
    def pending(self) -> int:
        """Pulls still waiting for their outcome."""
        return self.pulls - self.rewarded


def improvement_reward(child_score: float | None, parent_score: float | None) -> float:
    """child - parent in score units where the child improves on its parent (`archive.lineage.improves`: by more
    than rounding), else 0.0: an invalid child or a parentless seed (None), a lower score, or one above by
    rounding only (as the largest reward so far, 2.2e-16 would be worth the most any arm had earned)."""
    if child_score is None or parent_score is None or not improves(child_score, parent_score):
        return 0.0
    return float(child_score) - float(parent_score)


class Bandit:
    """A multi-armed bandit over (model, operator) arms; see the module docstring for the algorithms.

    arms: the choices, distinct, at least one. algorithm: "ucb1" or "thompson".
    cost_aware: rank arms by reward per cost. exploration: UCB1's c (>= 0; sqrt(2) is the
    textbook value). cost_floor: the smallest cost an outcome is divided by (> 0, in the cost's unit).
    prior: arm -> weight (>= 0; arms left out weigh 0), Thompson's prior belief, each arm's share of the
    weights worth `prior_strength` (>= 0) outcomes; None: a flat prior. UCB1 ignores it.
    """

    def __init__(
        self,
        arms: Sequence[Arm],
        *,
        algorithm: Algorithm = "ucb1",
        cost_aware: bool = False,
        exploration: float = 2**0.5,
        cost_floor: float = 1.0,
        prior: Mapping[Arm, float] | None = None,
        prior_strength: float = 2.0,
    ) -> None:
        arms = list(arms)
        if not arms:
            raise BanditError("the bandit has no arms", fix="give at least one (model, operator) arm")
        duplicates = sorted({f"{a.model}/{a.operator}" for a in arms if arms.count(a) > 1})
        if duplicates:
            raise BanditError(
                f"the bandit's arms repeat: {', '.join(duplicates)}", fix="list each (model, operator) pair once"
            )
        if algorithm not in ALGORITHMS:
            raise BanditError(f"unknown bandit algorithm {algorithm!r}", fix=f"use one of: {', '.join(ALGORITHMS)}")
        if not (math.isfinite(exploration) and exploration >= 0):
            raise BanditError(f"exploration must be finite and >= 0, got {exploration}", fix="use e.g. 1.414")
        if not (math.isfinite(cost_floor) and cost_floor > 0):
            raise BanditError(f"cost_floor must be finite and > 0, got {cost_floor}", fix="use e.g. 1e-6")
        self.arms: tuple[Arm, ...] = tuple(arms)
        self.algorithm = algorithm
        self.cost_aware = cost_aware
        self.exploration = float(exploration)
        self.cost_floor = float(cost_floor)
        self._index = {arm: i for i, arm in enumerate(self.arms)}
        n = len(self.arms)
        self._pulls = np.zeros(n, dtype=np.int64)
        self._rewarded = np.zeros(n, dtype=np.int64)
        self._reward_sum = np.zeros(n)
        self._cost_sum = np.zeros(n)
        self._value_sum = np.zeros(n)
        self._max_reward = 0.0  # the largest single reward: the normaliser
        weights = np.array([float((prior or {}).get(arm, 0.0)) for arm in self.arms])
        if not (
            np.isfinite(weights).all()
            and (weights >= 0).all()
            and math.isfinite(prior_strength)
            and prior_strength >= 0
        ):
            raise BanditError("prior weights and prior_strength must be finite and >= 0", fix="use e.g. {arm: 0.5}")
        share = weights / weights.sum() if weights.sum() > 0 else np.zeros(n)
        self._prior_successes = prior_strength * share if prior else np.zeros(n)
        self._prior_failures = prior_strength * (1.0 - share) if prior else np.zeros(n)

    @classmethod
    def replay(cls, arms: Sequence[Arm], history: Iterable[tuple[Arm, float | None, float]], **settings: Any) -> Bandit:
        """A bandit in the state a live one reaches after `history`, e.g. on resume from the archive.

        history: (arm, reward or None while its evaluation is pending, cost) per proposal, in
        proposal order. A pending proposal counts as a pull only: its cost is given later, with
        its outcome, exactly as the live loop does. Keyword arguments: as the constructor's.
        """
        bandit = cls(arms, **settings)
        for arm, reward, cost in history:
            bandit.record_pull(arm)
            if reward is not None:
                bandit.record_outcome(arm, reward=reward, cost=cost)
        return bandit

    def _arm_index(self, arm: Arm) -> int:
        index = self._index.get(arm)
        if index is None:
            raise BanditError(
                f"arm {arm.model}/{arm.operator} is not one of this bandit's arms",
                fix="use an arm the bandit was built with (see Bandit.arms)",
            )
        return index

    def record_pull(self, arm: Arm) -> None:
        """Count a proposal made with `arm` (call when proposing, before its outcome is known)."""
        self._pulls[self._arm_index(arm)] += 1

    def cancel_pull(self, arm: Arm) -> None:
        """Take back a pull whose proposal came to nothing to record (e.g. a program the run already has)."""
        index = self._arm_index(arm)
        if self._pulls[index] <= self._rewarded[index]:
            raise BanditError(
                f"no pull of arm {arm.model}/{arm.operator} is waiting to be taken back",
                fix="cancel_pull only a pull whose outcome was never recorded",
            )
        self._pulls[index] -= 1

    def record_outcome(self, arm: Arm, *, reward: float, cost: float) -> None:
        """Record the outcome of one earlier pull of `arm`.

        reward: >= 0, finite (see `improvement_reward`). cost: >= 0, finite, USD or the caller's proxy.
        """
        index = self._arm_index(arm)
        if not (math.isfinite(reward) and reward >= 0):
            raise BanditError(f"reward must be finite and >= 0, got {reward}", fix="use improvement_reward(...)")
        if not (math.isfinite(cost) and cost >= 0):
            raise BanditError(f"cost must be finite and >= 0, got {cost}", fix="pass the proposal's cost in USD")
        if self._rewarded[index] >= self._pulls[index]:
            raise BanditError(
                f"an outcome for arm {arm.model}/{arm.operator} arrived without a pull waiting for it",
                fix="call record_pull(arm) when proposing, record_outcome once per pull",
            )
        value = reward / max(cost, self.cost_floor) if self.cost_aware else reward
        self._rewarded[index] += 1
        self._reward_sum[index] += reward
        self._cost_sum[index] += cost
        self._value_sum[index] += value
        self._max_reward = max(self._max_reward, reward)

    def choose(self, rng: np.random.Generator, *, allowed: Sequence[Arm] | None = None) -> Arm:
        """The arm to pull next; does not count the pull (call `record_pull`).

        allowed: the arms that may be chosen now (a non-empty subset of `arms`, e.g. without
        crossover while there is only one parent to cross); None allows every arm.
        """
        mask = self._allowed_mask(allowed)
        if self.algorithm == "ucb1":
            scores = self._ucb1_scores(mask)
        else:
            scores = self._thompson_draws(rng)
        scores = np.where(mask, scores, -np.inf)
        best = np.flatnonzero(scores == scores.max())
        return self.arms[int(best[0] if len(best) == 1 else rng.choice(best))]

    def _allowed_mask(self, allowed: Sequence[Arm] | None) -> np.ndarray:
        mask = np.zeros(len(self.arms), dtype=bool)
        if allowed is None:
            mask[:] = True
            return mask
        for arm in allowed:
            mask[self._arm_index(arm)] = True
        if not mask.any():
            raise BanditError("choose() was given no allowed arm", fix="allow at least one of the bandit's arms")
        return mask

    def _normalised_means(self) -> np.ndarray:
        """Each arm's mean reward divided by the largest reward seen, in [0, 1]."""
        scale = self._max_reward if self._max_reward > 0 else 1.0
        total = int(self._rewarded.sum())
        overall = float(self._reward_sum.sum()) / total / scale if total else 0.0
        safe = np.maximum(self._rewarded, 1)
        return np.where(self._rewarded > 0, self._reward_sum / safe / scale, overall)

    def _mean_costs(self) -> np.ndarray:
        """What each arm's scores are divided by: its mean cost per outcome (floored), the mean of all arms for
        one without outcomes; all 1 when not cost-aware."""
        if not self.cost_aware:
            return np.ones(len(self.arms))
        total = int(self._rewarded.sum())
        overall = float(self._cost_sum.sum()) / total if total else self.cost_floor
        safe = np.maximum(self._rewarded, 1)
        return np.maximum(np.where(self._rewarded > 0, self._cost_sum / safe, overall), self.cost_floor)

    def _ucb1_scores(self, mask: np.ndarray) -> np.ndarray:
        untried = (self._pulls == 0) & mask
        if untried.any():
            return untried.astype(float)  # every arm once first; rng breaks the tie among them
        pulls = np.maximum(self._pulls, 1)  # arms left out by the mask may be untried
        bonus = self.exploration * np.sqrt(math.log(float(self._pulls.sum())) / pulls)
        return (self._normalised_means() + bonus) / self._mean_costs()

    def _posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """Thompson's Beta parameters per arm: 1 + prior + outcomes, successes and failures."""
        scale = self._max_reward if self._max_reward > 0 else 1.0
        successes = np.clip(self._reward_sum / scale, 0.0, self._rewarded)
        failures = self._rewarded - successes
        return 1.0 + self._prior_successes + successes, 1.0 + self._prior_failures + failures

    def _thompson_draws(self, rng: np.random.Generator) -> np.ndarray:
        alpha, beta = self._posterior()
        return rng.beta(alpha, beta) / self._mean_costs()

    def choice_shares(self, *, draws: int = 4000, seed: int = 0) -> list[float]:
        """How often each arm would be chosen next, in the order of `arms` (sums to 1): for Thompson sampling
        the share of `draws` seeded posterior draws each arm wins; for UCB1 1 for the arm it picks (ties
        shared). What the bandit has learnt, as `cambrian status` and the UI show it."""
        rng = np.random.default_rng(seed)
        if self.algorithm == "thompson":
            alpha, beta = self._posterior()
            winners = np.argmax(rng.beta(alpha, beta, size=(draws, len(self.arms))) / self._mean_costs(), axis=1)
            return (np.bincount(winners, minlength=len(self.arms)) / draws).tolist()
        scores = self._ucb1_scores(np.ones(len(self.arms), dtype=bool))
        best = scores == scores.max()
        return (best / best.sum()).tolist()

    def stats(self) -> list[ArmStats]:
        """One ArmStats per arm, in the order the arms were given."""
        return [
            ArmStats(
                arm=arm,
                pulls=int(self._pulls[i]),
                rewarded=int(self._rewarded[i]),
                reward_sum=float(self._reward_sum[i]),
                cost_sum=float(self._cost_sum[i]),
                value_sum=float(self._value_sum[i]),
            )
            for i, arm in enumerate(self.arms)
        ]
