"""Operators by name (built-in or installed under `cambrian.operators`): `make_operator`, `choose_operator`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from cambrian.meta_agent.operators._ast_mutate import AstMutation
from cambrian.meta_agent.operators._base import Operator, OperatorWeightsError, UnknownOperatorError
from cambrian.meta_agent.operators._fm import (
    CrossoverOperator,
    DiagnoseOperator,
    DiffOperator,
    RewriteOperator,
)
from cambrian.meta_agent.operators._lines import KnobOperator, LinesOperator
from cambrian.meta_agent.operators._prompting import PromptLimits
from cambrian.meta_agent.operators._self_modify import SelfModifyOperator
from cambrian.plugins import OPERATOR_GROUP, PluginRegistry

#: The built-in operators: name -> class (each takes `limits=`, but ast_mutate, which shows no prompt).
_BUILTINS: Mapping[str, type[Operator]] = MappingProxyType(
    {
        "rewrite": RewriteOperator,
        "diff": DiffOperator,
        "lines": LinesOperator,
        "crossover": CrossoverOperator,
        "diagnose": DiagnoseOperator,
        "self_modify": SelfModifyOperator,
        "ast_mutate": AstMutation,
        "knob": KnobOperator,
    }
)

#: Names of the built-in operators.
OPERATORS: tuple[str, ...] = tuple(_BUILTINS)

#: Operators by name: the built-ins, then what installed packages register under `cambrian.operators`.
OPERATOR_REGISTRY: PluginRegistry[type] = PluginRegistry(
    what="mutation operator", group=OPERATOR_GROUP, builtins=_BUILTINS, error=UnknownOperatorError
)


def operator_names() -> tuple[str, ...]:
    """Every name `make_operator` accepts: the built-ins (`OPERATORS`), then installed plugins."""
    return OPERATOR_REGISTRY.names()


def make_operator(name: str, *, limits: PromptLimits | None = None) -> Operator:
    """The operator called `name`; UnknownOperatorError when there is none (or a plugin is broken).

    limits: what prompts show; None keeps each operator's default (plugins are built with no
    arguments). A plugin must build an `Operator` whose `name` is its entry point name.
    """
    factory = OPERATOR_REGISTRY.get(name)
    if name in _BUILTINS:
        return factory() if limits is None or factory is AstMutation else factory(limits=limits)
    operator = factory()
    if not isinstance(operator, Operator) or getattr(operator, "name", None) != name:
        raise UnknownOperatorError(
            f"the operator plugin {name!r} built a {type(operator).__name__} that is not an operator: it needs "
            f"to subclass meta_agent.operators.Operator, with `name = {name!r}` and `async def propose(self, "
            "context, env)`",
            fix="see meta_agent.operators.Operator; the example plugin in examples/ has one",
        )
    return operator


def choose_operator(weights: Mapping[str, float], rng: np.random.Generator) -> str:
    """Draw an operator name with probability proportional to its weight.

    weights: operator name -> weight (finite, >= 0; at least one > 0). Names not
    listed are never drawn. The draw depends only on `rng` and the weights' order.
    """
    for name in weights:
        if name not in OPERATOR_REGISTRY:
            known = ", ".join(operator_names())
            raise UnknownOperatorError(
                f"operator weights name {name!r}, which is not an operator; the operators are: {known}",
                fix=f"use only these names as operator weights: {known}",
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
