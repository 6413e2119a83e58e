"""Operators by name (built-in or installed under `cambrian.operators`): `make_operator`, `choose_operator`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import cast

import numpy as np

from meta_agent.operators._ast_mutate import AstMutation
from meta_agent.operators._base import (
    AnyOperator,
    LocalOperator,
    Operator,
    OperatorWeightsError,
    SandboxOperator,
    TwoStepOperator,
    UnknownOperatorError,
)
from meta_agent.operators._fm import CrossoverOperator, DiagnoseOperator, DiffOperator, LinesOperator, RewriteOperator
from meta_agent.operators._prompting import PromptLimits
from meta_agent.operators._self_modify import SelfModifyOperator
from meta_agent.plugins import OPERATOR_GROUP, PluginRegistry

#: The built-in operators: name -> class (each takes `limits=`, but ast_mutate, which shows no prompt).
_BUILTINS: Mapping[str, type] = MappingProxyType(
    {
        "rewrite": RewriteOperator,
        "diff": DiffOperator,
        "lines": LinesOperator,
        "crossover": CrossoverOperator,
        "diagnose": DiagnoseOperator,
        "self_modify": SelfModifyOperator,
        "ast_mutate": AstMutation,
    }
)

#: Operators by name: the built-ins, then what installed packages register under `cambrian.operators`.
OPERATOR_REGISTRY: PluginRegistry[type] = PluginRegistry(
    what="mutation operator", group=OPERATOR_GROUP, builtins=_BUILTINS, error=UnknownOperatorError
)

#: What each kind of operator must provide, for checking plugins.
_PROTOCOLS: Mapping[str, type] = MappingProxyType(
    {"fm": Operator, "fm_two_step": TwoStepOperator, "sandbox": SandboxOperator, "local": LocalOperator}
)


def operator_names() -> tuple[str, ...]:
    """Every name `make_operator` accepts: the built-ins (`OPERATORS`), then installed plugins."""
    return OPERATOR_REGISTRY.names()


def make_operator(name: str, *, limits: PromptLimits | None = None) -> AnyOperator:
    """The operator called `name`; UnknownOperatorError when there is none (or a plugin is broken).

    limits: what prompts show; None keeps each operator's default (plugins are built with no
    arguments). The operator's `kind` ("fm", "fm_two_step", "sandbox" or "local") says which
    protocol it follows (Operator, TwoStepOperator, SandboxOperator or LocalOperator) and so
    how the loop drives it.
    """
    factory = OPERATOR_REGISTRY.get(name)
    if name in _BUILTINS:
        return factory() if limits is None or factory is AstMutation else factory(limits=limits)
    operator = factory()
    kind = getattr(operator, "kind", None)
    protocol = _PROTOCOLS.get(kind) if isinstance(kind, str) else None
    if protocol is None or not isinstance(operator, protocol) or getattr(operator, "name", None) != name:
        raise UnknownOperatorError(
            f"the operator plugin {name!r} built a {type(operator).__name__} that is not an operator: it needs "
            f"`name = {name!r}`, a `kind` (one of {', '.join(_PROTOCOLS)}) and the methods of that kind",
            fix="see meta_agent.operators (the Operator protocols); the example plugin in examples/ has one",
        )
    return cast(AnyOperator, operator)  # it follows the protocol of its kind (checked above)


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
