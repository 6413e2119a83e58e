"""Strategies by name, built-in or installed under `cambrian.selectors` (`SELECTORS`): `make_selector`,
`STRATEGY_NAMES` (the built-ins), and `build_selector` for any strategy class."""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any

from cambrian.archive.errors import SelectorConfigError
from cambrian.archive.selection._base import ParentSelector
from cambrian.archive.selection._classic import DGM, Greedy, PowerLaw, Tournament, Uniform
from cambrian.archive.selection._open_ended import HGM, MapElites, Novelty
from cambrian.plugins import SELECTOR_GROUP, PluginRegistry

#: Built-in strategy name -> its class (a frozen dataclass whose init fields are its parameters).
SELECTOR_CLASSES: Mapping[str, type] = types.MappingProxyType(
    {
        "uniform": Uniform,
        "greedy": Greedy,
        "tournament": Tournament,
        "power_law": PowerLaw,
        "dgm": DGM,
        "hgm": HGM,
        "map_elites": MapElites,
        "novelty": Novelty,
    }
)

#: The built-in strategies' names (`SELECTORS.names()` adds the installed plugins').
STRATEGY_NAMES: tuple[str, ...] = tuple(SELECTOR_CLASSES)

#: Strategies by name: the built-ins, then what installed packages register under `cambrian.selectors`.
SELECTORS: PluginRegistry[type] = PluginRegistry(
    what="selection strategy", group=SELECTOR_GROUP, builtins=SELECTOR_CLASSES, error=SelectorConfigError
)


def selector_parameters(factory: Callable[..., Any]) -> list[str]:
    """The keyword parameters a strategy class (or factory) accepts."""
    if dataclasses.is_dataclass(factory):
        return [f.name for f in dataclasses.fields(factory) if f.init]
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in signature.parameters.values() if p.kind in kinds]


def build_selector(factory: Callable[..., Any], name: str, params: Mapping[str, Any]) -> Any:
    """`factory(**params)`, refusing parameters it does not accept with a SelectorConfigError naming them."""
    valid = selector_parameters(factory)
    unknown = sorted(set(params) - set(valid))
    if unknown:
        accepted = ", ".join(valid) if valid else "none"
        raise SelectorConfigError(
            f"{name}: unknown parameter(s) {', '.join(unknown)}; {name} accepts: {accepted}",
            fix=f"remove {', '.join(unknown)} or use one of: {accepted}",
        )
    try:
        return factory(**params)
    except SelectorConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise SelectorConfigError(f"{name}: {exc}", fix=f"check the parameters of the {name!r} strategy") from exc


def make_selector(name: str, **params: Any) -> ParentSelector:
    """The strategy called `name` (built-in, or a plugin's: `SELECTORS`) built with keyword `params`.

    Params arrive as parsed from TOML: numbers, strings, booleans or lists (e.g. map_elites `dims`); each
    strategy validates its own. A plugin's factory gets them as keywords; what it returns must follow
    `ParentSelector` (a `name`, `probabilities(view)` and `select(view, k, rng)`).

    Raises SelectorConfigError (a ValueError) for an unknown name, an unknown parameter, a bad parameter value
    or a plugin that builds no strategy; the message names the valid choices.
    """
    selector = build_selector(SELECTORS.get(name), name, params)
    if not isinstance(selector, ParentSelector):
        raise SelectorConfigError(
            f"the selection strategy {name!r} built a {type(selector).__name__}, which is not a ParentSelector "
            "(it needs `name`, `probabilities(view)` and `select(view, k, rng)`)",
            fix=f"fix the factory registered as {name!r} in {SELECTOR_GROUP!r}",
        )
    return selector
