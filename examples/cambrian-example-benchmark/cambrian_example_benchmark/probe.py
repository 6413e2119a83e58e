"""Runs inside the sandbox (standard library only): call the agent's `f` on each x, return the values.

The harness calls `evaluate(module=..., xs=[...])`; only the x values ever
enter the sandbox, never the y values the host scores against.
"""

import importlib


def evaluate(module: str, xs: list) -> list:
    """[f(x) for x in xs] as floats, f taken from the agent's entry module."""
    f = getattr(importlib.import_module(module), "f", None)
    if not callable(f):
        raise AttributeError(f"the entry file defines no function f(x) (module {module!r})")
    return [float(f(x)) for x in xs]
