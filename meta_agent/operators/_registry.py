"""Operators by name: `make_operator` and the weighted draw `choose_operator`."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from meta_agent.operators._ast_mutate import AstMutation
from meta_agent.operators._base import OPERATORS, AnyOperator, OperatorWeightsError, UnknownOperatorError
from meta_agent.operators._fm import CrossoverOperator, DiagnoseOperator, DiffOperator, LinesOperator, RewriteOperator
from meta_agent.operators._prompting import PromptLimits
from meta_agent.operators._self_modify import SelfModifyOperator

# ---------------------------------------------------------------- the registry


def make_operator(name: str, *, limits: PromptLimits | None = None) -> AnyOperator:
    """The operator called `name` (one of OPERATORS); UnknownOperatorError otherwise.

    limits: what prompts show; None keeps each operator's default. OPERATOR_KINDS[name]
    says which protocol the result follows (Operator, TwoStepOperator, SandboxOperator
    or LocalOperator).
    """
    if name == "ast_mutate":
        return AstMutation()
    builders = {
        "rewrite": RewriteOperator,
        "diff": DiffOperator,
        "lines": LinesOperator,
        "crossover": CrossoverOperator,
        "diagnose": DiagnoseOperator,
        "self_modify": SelfModifyOperator,
    }
    if name not in builders:
        raise UnknownOperatorError(
            f"there is no mutation operator named {name!r}; the operators are: {', '.join(OPERATORS)}",
            fix=f"use one of: {', '.join(OPERATORS)}",
        )
    builder = builders[name]
    return builder() if limits is None else builder(limits=limits)


def choose_operator(weights: Mapping[str, float], rng: np.random.Generator) -> str:
    """Draw an operator name with probability proportional to its weight.

    weights: operator name -> weight (finite, >= 0; at least one > 0). Names not
    listed are never drawn. The draw depends only on `rng` and the weights' order.
    """
    for name in weights:
        if name not in OPERATORS:
            raise UnknownOperatorError(
                f"operator weights name {name!r}, which is not an operator; the operators are: {', '.join(OPERATORS)}",
                fix=f"use only these names as operator weights: {', '.join(OPERATORS)}",
            )
    names = list(weights)
    values = [float(weights[name]) for name in names]
    if any(not math.isfinite(v) or v < 0 for v in values) or sum(values) <= 0:
        raise OperatorWeightsError(
            f"operator weights must be finite, non-negative and not all zero; got {dict(weights)}",
            fix='give at least one operator a positive weight, e.g. {"diff": 0.7, "rewrite": 0.3}',
        )
    probabilities = np.asarray(values) / sum(values)
    return names[int(rng.choice(len(names), p=probabilities))]
