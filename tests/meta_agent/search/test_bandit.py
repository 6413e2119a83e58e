"""The (model, operator) bandit: UCB1 and Thompson sampling on simulated arms, cost-awareness, replay.

Pure: the arms are simulated with a seeded numpy generator, no FM involved. The operator mix's draw after a
repeat too.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cambrian.evaluators.base import Genome
from cambrian.meta_agent.operators import make_operator
from cambrian.meta_agent.search.arms import OperatorMix
from cambrian.meta_agent.search.bandit import ALGORITHMS, Arm, Bandit, BanditError, improvement_reward

ARMS = [Arm("qwen", "diff"), Arm("qwen", "rewrite"), Arm("smol", "diff")]
PROBABILITIES = {ARMS[0]: 0.2, ARMS[1]: 0.7, ARMS[2]: 0.4}


def simulate(bandit: Bandit, *, rounds: int, seed: int, reward_size: float = 0.05) -> Counter[Arm]:
    """Pull `rounds` times; arm a pays `reward_size` with probability PROBABILITIES[a], else 0."""
    rng = np.random.default_rng(seed)
    counts: Counter[Arm] = Counter()
    for _ in range(rounds):
        arm = bandit.choose(rng)
        bandit.record_pull(arm)
        paid = rng.random() < PROBABILITIES[arm]
        bandit.record_outcome(arm, reward=reward_size if paid else 0.0, cost=0.0)
        counts[arm] += 1
    return counts


def test_improvement_reward() -> None:
    assert improvement_reward(0.7, 0.5) == pytest.approx(0.2)
    assert improvement_reward(0.4, 0.5) == 0.0
    assert improvement_reward(None, 0.5) == 0.0  # invalid child
    assert improvement_reward(0.9, None) == 0.0  # seed: no parent


def test_a_score_above_the_parent_by_rounding_only_earns_nothing() -> None:
    # Measured: a knob edit recomputed its parent's circle packing in another order and scored 2.2e-16 higher;
    # as the largest reward so far it was the most any arm had earned. Rounding is no improvement.
    parent = 1.091736758942621
    assert improvement_reward(float.fromhex("0x1.177c0f6b7fe56p+0"), float.fromhex("0x1.177c0f6b7fe55p+0")) == 0.0
    assert improvement_reward(parent + 1e-12, parent) == 0.0
    assert improvement_reward(parent + 1e-6, parent) == pytest.approx(1e-6)
    assert improvement_reward(1e6 + 1e-4, 1e6) == 0.0  # relative to the parent's score
    assert improvement_reward(1e6 + 1.0, 1e6) == pytest.approx(1.0)


def test_ucb1_pulls_every_arm_once_first() -> None:
    bandit = Bandit(ARMS)
    rng = np.random.default_rng(3)
    first = []
    for _ in ARMS:
        arm = bandit.choose(rng)
        bandit.record_pull(arm)  # still pending: no outcome yet
        first.append(arm)
    assert sorted(first) == sorted(ARMS)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_concentrates_on_the_best_arm(algorithm: str) -> None:
    # Small raw rewards (0.05 score units): normalising by the largest reward seen matters for UCB1.
    counts = simulate(Bandit(ARMS, algorithm=algorithm), rounds=2000, seed=1)  # type: ignore[arg-type]
    assert counts.most_common(1)[0][0] == ARMS[1]
    assert counts[ARMS[1]] > 0.6 * 2000
    assert min(counts.values()) >= 1


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_same_seed_same_choices(algorithm: str) -> None:
    def choices(seed: int) -> list[Arm]:
        bandit = Bandit(ARMS, algorithm=algorithm)  # type: ignore[arg-type]
        rng = np.random.default_rng(seed)
        out = []
        for step in range(200):
            arm = bandit.choose(rng)
            bandit.record_pull(arm)
            bandit.record_outcome(arm, reward=float(step % 3 == 0) * 0.1, cost=0.0)
            out.append(arm)
        return out

    assert choices(5) == choices(5)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_cost_aware_prefers_the_cheaper_of_two_equal_arms(algorithm: str) -> None:
    cheap, dear = Arm("local", "diff"), Arm("api", "diff")
    costs = {cheap: 2.0, dear: 20.0}  # FM seconds
    bandit = Bandit([dear, cheap], algorithm=algorithm, cost_aware=True)  # type: ignore[arg-type]
    rng = np.random.default_rng(2)
    counts: Counter[Arm] = Counter()
    for _ in range(1000):
        arm = bandit.choose(rng)
        bandit.record_pull(arm)
        bandit.record_outcome(arm, reward=0.1 if rng.random() < 0.5 else 0.0, cost=costs[arm])
        counts[arm] += 1
    assert counts[cheap] > 0.75 * 1000
    stats = {s.arm: s for s in bandit.stats()}
    assert stats[dear].cost_sum == pytest.approx(20.0 * counts[dear])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_cost_aware_failures_cost_what_they_took_before_any_improvement(algorithm: str) -> None:
    # Nothing improves yet: a failing 100 s rewrite must count 50 times a failing 2 s line edit, so the cheap
    # arm gets the proposals even though its prior is the smaller one.
    lines, rewrite = Arm("m", "lines"), Arm("m", "rewrite")
    costs = {lines: 2.0, rewrite: 100.0}
    bandit = Bandit(
        [lines, rewrite],
        algorithm=algorithm,
        cost_aware=True,  # type: ignore[arg-type]
        prior={lines: 0.3, rewrite: 0.7},
    )
    rng = np.random.default_rng(4)
    counts: Counter[Arm] = Counter()
    for _ in range(200):
        arm = bandit.choose(rng)
        bandit.record_pull(arm)
        bandit.record_outcome(arm, reward=0.0, cost=costs[arm])
        counts[arm] += 1
    assert counts[lines] > 0.85 * 200, counts
    assert bandit.choice_shares()[0] > 0.85


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_replay_equals_the_live_bandit(algorithm: str) -> None:
    live = Bandit(ARMS, algorithm=algorithm, cost_aware=True)  # type: ignore[arg-type]
    rng = np.random.default_rng(9)
    history: list[list] = []  # [arm, reward or None, cost], in proposal order
    pending: list[int] = []
    for step in range(300):
        arm = live.choose(rng)
        live.record_pull(arm)
        history.append([arm, None, 0.0])
        pending.append(step)
        if len(pending) >= 3:  # outcomes arrive later, and out of order
            done = pending.pop(int(rng.integers(len(pending))))
            reward, cost = float(rng.random() < 0.3) * rng.random(), float(rng.random()) * 0.01
            live.record_outcome(history[done][0], reward=reward, cost=cost)
            history[done][1:] = [reward, cost]
    entries = [(arm, reward, cost) for arm, reward, cost in history]
    replayed = Bandit.replay(ARMS, entries, algorithm=algorithm, cost_aware=True)  # type: ignore[arg-type]

    for a, b in zip(live.stats(), replayed.stats()):
        assert (a.arm, a.pulls, a.rewarded) == (b.arm, b.pulls, b.rewarded)
        for field in ("reward_sum", "cost_sum", "value_sum"):
            assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-12)
    assert sum(s.pending for s in live.stats()) == 2
    draws_live = [live.choose(np.random.default_rng(s)) for s in range(20)]
    assert draws_live == [replayed.choose(np.random.default_rng(s)) for s in range(20)]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_choose_keeps_to_the_allowed_arms(algorithm: str) -> None:
    # The loop leaves crossover out until two agents exist; the left-out arm stays untried meanwhile.
    bandit = Bandit(ARMS, algorithm=algorithm)  # type: ignore[arg-type]
    allowed = ARMS[:2]
    rng = np.random.default_rng(4)
    for _ in range(50):
        arm = bandit.choose(rng, allowed=allowed)
        assert arm in allowed
        bandit.record_pull(arm)
        bandit.record_outcome(arm, reward=0.1, cost=0.0)
    if algorithm == "ucb1":
        assert bandit.choose(rng) == ARMS[2]  # once allowed, the untried arm comes first
    with pytest.raises(BanditError, match="no allowed arm"):
        bandit.choose(rng, allowed=[])


def test_misuse_is_a_typed_error() -> None:
    with pytest.raises(BanditError, match="no arms") as info:
        Bandit([])
    assert isinstance(info.value, ValueError) and info.value.fix
    with pytest.raises(BanditError, match="repeat: qwen/diff"):
        Bandit([ARMS[0], ARMS[0]])
    with pytest.raises(BanditError, match="unknown bandit algorithm 'epsilon'"):
        Bandit(ARMS, algorithm="epsilon")  # type: ignore[arg-type]
    bandit = Bandit(ARMS)
    with pytest.raises(BanditError, match="not one of this bandit's arms"):
        bandit.record_pull(Arm("gpt", "diff"))
    with pytest.raises(BanditError, match="without a pull"):
        bandit.record_outcome(ARMS[0], reward=0.1, cost=0.0)
    bandit.record_pull(ARMS[0])
    with pytest.raises(BanditError, match="reward must be finite"):
        bandit.record_outcome(ARMS[0], reward=-1.0, cost=0.0)
    with pytest.raises(BanditError, match="not one of this bandit's arms"):
        Bandit.replay(ARMS, [(Arm("gpt", "diff"), None, 0.0)])


def test_the_prior_leans_thompson_towards_the_heavier_operator_until_outcomes_speak() -> None:
    light, heavy = Arm("m", "rewrite"), Arm("m", "lines")
    bandit = Bandit([light, heavy], algorithm="thompson", prior={light: 0.1, heavy: 0.9}, prior_strength=4.0)
    shares = dict(zip(bandit.arms, bandit.choice_shares()))
    assert shares[heavy] > 0.7 and sum(shares.values()) == pytest.approx(1.0)
    for _ in range(30):  # the light arm improves every time, the heavy one never
        for arm, reward in ((light, 1.0), (heavy, 0.0)):
            bandit.record_pull(arm)
            bandit.record_outcome(arm, reward=reward, cost=1.0)
    assert dict(zip(bandit.arms, bandit.choice_shares()))[light] > 0.95
    flat = Bandit([light, heavy], algorithm="thompson")
    assert dict(zip(flat.arms, flat.choice_shares()))[heavy] == pytest.approx(0.5, abs=0.05)


def test_a_prior_that_is_not_a_weight_is_refused() -> None:
    with pytest.raises(BanditError, match="prior"):
        Bandit(ARMS, algorithm="thompson", prior={ARMS[0]: -1.0})


@pytest.mark.parametrize("with_bandit", [False, True])
def test_after_a_repeat_the_mix_draws_another_kind_of_operator(with_bandit: bool) -> None:
    """`knob` asks what `lines` asks (on a number's line): a proposal that tried either moves to another kind;
    none is left once every kind that can edit the parent was tried."""
    names = ["lines", "knob", "rewrite", "diff"]
    weights = {"lines": 0.4, "knob": 0.4, "rewrite": 0.1, "diff": 0.1}
    arms = [Arm("qwen", name) for name in names]
    mix = OperatorMix(
        {name: make_operator(name) for name in names},
        weights=weights,
        models=["qwen"],
        bandit=Bandit(arms, algorithm="thompson", prior={arm: weights[arm.operator] for arm in arms})
        if with_bandit
        else None,
    )
    parent = Genome(files={"p.py": "LIMIT = 3\n\n\ndef f(x):\n    return x * LIMIT\n"}, entry="p.py")
    rng = np.random.default_rng(0)
    for tried in ({"lines"}, {"knob"}):
        drawn = {mix.choose_other(rng, 1, parent, pairs=True, tried=tried) for _ in range(40)}
        assert {arm.operator for arm in drawn if arm is not None} == {"rewrite", "diff"}
    assert mix.choose_other(rng, 1, parent, pairs=True, tried={"knob", "rewrite"}) == Arm("qwen", "diff")
    assert mix.choose_other(rng, 1, parent, pairs=True, tried={"lines", "rewrite", "diff"}) is None
