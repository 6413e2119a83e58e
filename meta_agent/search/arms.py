"""The (model, operator) arms a proposal can pull, and the bandit's state, read back from the archive.

The archive's agent rows are the bandit's persisted state: each proposal row
names its model and operator, and its outcome (the child's score against its
parent's, or invalid) is the reward. `restore_bandit` replays them in proposal
order, so a resumed run chooses exactly as the uninterrupted one would have;
`cambrian status` shows the same history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cambrian.archive.models import Agent, AgentStatus
from cambrian.meta_agent.config import BanditConfig
from cambrian.meta_agent.operators import Operator
from cambrian.meta_agent.search.bandit import Arm, Bandit, improvement_reward

__all__ = ["arm_history", "cost_of", "operator_arms", "restore_bandit"]


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
