"""Strategies by name: `make_selector` and `STRATEGY_NAMES`."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any

from archive.errors import SelectorConfigError
from archive.selection._base import ParentSelector
from archive.selection._classic import DGM, Greedy, PowerLaw, Tournament, Uniform
from archive.selection._open_ended import HGM, MapElites, Novelty

_SELECTORS: Mapping[str, type] = types.MappingProxyType(
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

#: Names `make_selector` accepts, e.g. for a CLI `--strategy` choice.
STRATEGY_NAMES: tuple[str, ...] = tuple(_SELECTORS)


def _parameter_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.init]


def make_selector(name: str, **params: Any) -> ParentSelector:
    """The strategy called `name` (one of `STRATEGY_NAMES`) built with keyword `params`.

    Params arrive as parsed from TOML: numbers, strings, booleans or lists (e.g. map_elites
    `dims`); each strategy validates its own.

    Raises SelectorConfigError (a ValueError) for an unknown name, an unknown parameter or
    a bad parameter value; the message names the valid choices.
    """
    cls = _SELECTORS.get(name)
    if cls is None:
        raise SelectorConfigError(
            f"unknown selection strategy {name!r}; valid strategies: {', '.join(STRATEGY_NAMES)}",
            fix=f"use one of: {', '.join(STRATEGY_NAMES)}",
        )
    valid = _parameter_names(cls)
    unknown = sorted(set(params) - set(valid))
    if unknown:
        accepted = ", ".join(valid) if valid else "none"
        raise SelectorConfigError(
            f"{name}: unknown parameter(s) {', '.join(unknown)}; {name} accepts: {accepted}",
            fix=f"remove {', '.join(unknown)} or use one of: {accepted}",
        )
    return cls(**params)
