"""The (model, operator) arms a proposal can pull, how one is drawn, and the bandit's state, read back from the
archive.

`OperatorMix` is the loop's operators: the operator objects, their weights, the arms they make with the run's
models, and the draw of one arm per proposal (the bandit's, or by weight), among the operators that can edit
the parent.

The archive's agent rows are the bandit's persisted state: each proposal row
names its model and operator, and its outcome (the child's score against its
parent's, or invalid) is the reward. `restore_bandit` replays them in proposal
order, so a resumed run chooses exactly as the uninterrupted one would have;
`cambrian status` shows the same history.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from cambrian.archive.models import Agent, AgentStatus
from cambrian.evaluators.base import Genome
from cambrian.meta_agent.config import BanditConfig
from cambrian.meta_agent.errors import ConfigError
from cambrian.meta_agent.operators import Operator, choose_operator
from cambrian.meta_agent.search._memory import _LRU
from cambrian.meta_agent.search.bandit import Arm, Bandit, improvement_reward

__all__ = ["OperatorMix", "arm_history", "cost_of", "operator_arms", "restore_bandit"]


class OperatorMix:
    """The operators of a search and how each proposal's (model, operator) arm is drawn.

    operators: name -> operator, one for every weighted name. weights: name -> weight (> 0 to be drawn), the
    draw's odds without a bandit and its prior with one. arms: the arms to draw from (default: one per operator
    and model, `operator_arms`). models: the FM labels an FM operator can run on (the first is the run's
    `fm.model`; none for a search without FM; with the default arms an FM operator needs at least one, else a
    ConfigError). bandit: learns which arm pays (None: draws by weight).
    """

    def __init__(
        self,
        operators: Mapping[str, Operator],
        *,
        weights: Mapping[str, float],
        models: Sequence[str] = (),
        arms: Sequence[Arm] | None = None,
        bandit: Bandit | None = None,
    ) -> None:
        self.operators = dict(operators)
        self.weights = {name: float(weight) for name, weight in weights.items() if weight > 0}
        missing = sorted(set(self.weights) - set(self.operators))
        if missing:
            raise ConfigError(
                f"search.operators weighs {', '.join(missing)}, but no such operator was given to the loop",
                fix="pass an operator object for every weighted name (loop_from_config builds them all)",
            )
        armless: list[str] = []
        if arms is None:
            arms = operator_arms(self.weights, self.operators, models=models, gateway_model=models[0] if models else "")
            armless = sorted(set(self.weights) - {arm.operator for arm in arms})
        self.arms = list(arms)
        if armless:
            raise ConfigError(
                f"search.operators weighs {', '.join(armless)}, but no model was given for it to run on",
                fix="give OperatorMix the labels of the FM clients the proposer holds (models=[...]; "
                "loop_from_config does)",
            )
        self.bandit = bandit
        self._editable = _LRU[tuple[str, int], bool](capacity=4096)

    def choose(self, rng: np.random.Generator, parent_id: int, parent: Genome, *, pairs: bool) -> Arm:
        """The (model, operator) of a proposal from `parent`: the bandit's choice, or operator by weight and model
        uniformly, among the operators that can edit it (`Operator.cannot_edit`: no FM call is spent on one that
        cannot). When none can, the draw is over all of them and the operator's refusal names the cause.
        pairs: whether two evaluated agents exist (crossover is not drawn until they do)."""
        arms = self._drawable(pairs)
        able = [arm for arm in arms if self.can_edit(arm.operator, parent_id, parent)]
        return self._draw(rng, able or arms)

    def choose_other(
        self, rng: np.random.Generator, parent_id: int, parent: Genome, *, pairs: bool, tried: Collection[str]
    ) -> Arm | None:
        """An arm of an operator of another kind (`Operator.kind`) than those `tried` that can edit `parent`,
        drawn as `choose` draws; None when none is left (a proposal whose attempt rebuilt a known program moves
        on to another kind of question)."""
        kinds = {self.operators[name].kind_name() for name in tried}
        able = [
            arm
            for arm in self._drawable(pairs)
            if self.operators[arm.operator].kind_name() not in kinds and self.can_edit(arm.operator, parent_id, parent)
        ]
        return self._draw(rng, able) if able else None

    def _drawable(self, pairs: bool) -> list[Arm]:
        return self.arms if pairs else [arm for arm in self.arms if arm.operator != "crossover"]

    def _draw(self, rng: np.random.Generator, arms: Sequence[Arm]) -> Arm:
        if self.bandit is not None:
            return self.bandit.choose(rng, allowed=arms)
        weights = {name: w for name, w in self.weights.items() if any(a.operator == name for a in arms)}
        operator = choose_operator(weights, rng)
        models = [arm.model for arm in arms if arm.operator == operator]
        return Arm(models[int(rng.integers(len(models)))] if len(models) > 1 else models[0], operator)

    def can_edit(self, operator: str, parent_id: int, parent: Genome) -> bool:
        """Whether `operator` can try to edit `parent` (remembered per agent: parents are drawn again and again)."""
        key = (operator, parent_id)
        able = self._editable.get(key)
        if able is None:
            able = self.operators[operator].cannot_edit(parent) is None
            self._editable.put(key, able)
        return able

    def record_pull(self, arm: Arm) -> None:
        """A proposal was made with `arm` (its reward comes when the child is scored)."""
        if self.bandit is not None:
            self.bandit.record_pull(arm)

    def cancel_pull(self, arm: Arm) -> None:
        """A proposal made with `arm` was never stored (a program the run has): it does not count."""
        if self.bandit is not None:
            self.bandit.cancel_pull(arm)


def operator_arms(
    weights: Mapping[str, float], operators: Mapping[str, Operator], *, models: Sequence[str], gateway_model: str
) -> list[Arm]:
    """The arms of operators with a positive weight: an operator whose agents write their children
    (`runs_agent`, self_modify) runs on the model the gateway serves agents, an FM operator (`uses_fm`) on
    each configured model, any other needs no model ("")."""
    arms = []
    for name, weight in weights.items():
        if weight <= 0:
            continue
        operator = operators[name]
        if operator.runs_agent:
            arms.append(Arm(gateway_model, name))
        elif operator.uses_fm:
            arms.extend(Arm(model, name) for model in models)
        else:
            arms.append(Arm("", name))
    return arms


def cost_of(agent: Agent) -> float:
    """What a proposal cost, for a cost-aware bandit: the wall seconds of the FM calls that made it."""
    return float(agent.fm_seconds)


def arm_history(agents: Sequence[Agent]) -> list[tuple[Arm, float | None, float]]:
    """(arm, reward, cost) of every proposal, in proposal (id) order: what a bandit is replayed from.

    reward: the child's improvement over its parent clipped at 0 (0 for an invalid child), None while
    it is not finished.
    """
    scores: dict[int, float | None] = {}
    history = []
    for agent in sorted(agents, key=lambda a: a.key):
        scores[agent.key] = agent.score if agent.status == AgentStatus.evaluated else None
        if agent.iteration <= 0:
            continue
        if agent.status == AgentStatus.evaluated:
            parent = scores.get(int(agent.parent_id)) if agent.parent_id is not None else None
            reward: float | None = improvement_reward(agent.score, parent)
        elif agent.status == AgentStatus.invalid:
            reward = 0.0
        else:
            reward = None
        history.append((Arm(agent.model or "", agent.operator), reward, cost_of(agent)))
    return history


def restore_bandit(
    settings: BanditConfig, arms: Sequence[Arm], agents: Sequence[Agent], *, weights: Mapping[str, float]
) -> Bandit | None:
    """The run's bandit (None when `search.bandit.algorithm` is off), replayed from its agents; `weights` (the
    operator weights) are its prior, shared by an operator's arms (one per model).

    Proposals made with arms this config does not have (a run resumed with other operators or models)
    are left out.
    """
    if settings.algorithm == "off":
        return None
    known = set(arms)
    history = [entry for entry in arm_history(agents) if entry[0] in known]
    per_model = {name: sum(arm.operator == name for arm in arms) for name in weights}
    prior = {arm: weights.get(arm.operator, 0.0) / max(1, per_model.get(arm.operator, 1)) for arm in arms}
    return Bandit.replay(
        arms,
        history,
        algorithm=settings.algorithm,
        cost_aware=settings.cost_aware,
        exploration=settings.exploration,
        prior=prior,
        prior_strength=settings.prior_strength,
    )
