"""Names to objects: the built-ins plus what installed packages register under an entry point group.

`PluginRegistry` is the one helper behind the operator and selector registries. A third-party
package adds to them in its `pyproject.toml`, exactly as it adds a benchmark:

    [project.entry-points."cambrian.operators"]
    swap_lines = "my_package.ops:SwapLines"        # a class or factory; called with no arguments

    [project.entry-points."cambrian.selectors"]
    top_half = "my_package.select:TopHalf"         # a class or factory; called with the strategy's params

A built-in name wins over an entry point of the same name. Entry points are read once per process
(`refresh()` reads them again). Plugins are installed packages the user chose, trusted like
Cambrian itself: they run in the Cambrian process. Nothing an FM wrote ever gets here.

(Benchmarks, `cambrian.benchmarks`, keep their own registry in `cambrian.evaluators.registry`: `evaluators`
imports no other Cambrian package but `sandbox`, so it cannot use this one.)
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from cambrian.archive.errors import SelectorConfigError
from cambrian.archive.selection import SELECTOR_CLASSES, ParentSelector, build_selector

T = TypeVar("T")

#: Entry point groups through which installed packages add operators and selection strategies.
OPERATOR_GROUP = "cambrian.operators"
SELECTOR_GROUP = "cambrian.selectors"


class PluginRegistry(Generic[T]):
    """Built-in name -> object, then the entry points of `group`; errors are `error(message, fix=...)`."""

    def __init__(self, *, what: str, group: str, builtins: Mapping[str, T], error: Callable[..., Exception]) -> None:
        self.what = what
        self.group = group
        self.builtins = builtins
        self.error = error
        self._entry_points: dict[str, EntryPoint] | None = None

    def entry_points(self) -> dict[str, EntryPoint]:
        """The installed entry points of this group by name (read once; see `refresh`)."""
        if self._entry_points is None:
            self._entry_points = {ep.name: ep for ep in entry_points(group=self.group)}
        return self._entry_points

    def refresh(self) -> None:
        """Forget the entry points read so far (after installing a package in this process)."""
        self._entry_points = None

    def names(self) -> tuple[str, ...]:
        """Built-in names in their order, then plugin names sorted."""
        plugins = sorted(name for name in self.entry_points() if name not in self.builtins)
        return (*self.builtins, *plugins)

    def __contains__(self, name: object) -> bool:
        return name in self.builtins or name in self.entry_points()

    def get(self, name: str) -> T | Any:
        """The built-in called `name`, else the object its entry point names (loaded now)."""
        if name in self.builtins:
            return self.builtins[name]
        plugin = self.entry_points().get(name)
        if plugin is None:
            close = difflib.get_close_matches(name, self.names(), n=1)
            raise self.error(
                f"there is no {self.what} named {name!r}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; valid choices: {', '.join(self.names())}",
                fix=f"use one of: {', '.join(self.names())}, or install a package that registers {name!r} "
                f"in the entry point group {self.group!r}",
            )
        try:
            return plugin.load()
        except Exception as exc:
            package = plugin.dist.name if plugin.dist is not None else "the package that provides it"
            raise self.error(
                f"the {self.what} {name!r} ({plugin.value}, from {package}) cannot be loaded: "
                f"{type(exc).__name__}: {exc}",
                fix=f"reinstall or fix {package}, or remove {name!r} from the config",
            ) from exc


#: Selection strategies: the built-ins of `cambrian.archive.selection`, then `cambrian.selectors` entry points.
SELECTORS: PluginRegistry[type] = PluginRegistry(
    what="selection strategy", group=SELECTOR_GROUP, builtins=SELECTOR_CLASSES, error=SelectorConfigError
)


def make_selector(name: str, params: Mapping[str, Any] | None = None) -> ParentSelector:
    """The strategy called `name` (built-in or plugin) built with `params`; SelectorConfigError if it cannot be.

    A plugin's factory gets the params as keywords; what it returns must follow `ParentSelector`
    (a `name`, `probabilities(view)` and `select(view, k, rng)`).
    """
    factory = SELECTORS.get(name)
    selector = build_selector(factory, name, dict(params or {}))
    if not isinstance(selector, ParentSelector):
        raise SelectorConfigError(
            f"the selection strategy {name!r} built a {type(selector).__name__}, which is not a ParentSelector "
            "(it needs `name`, `probabilities(view)` and `select(view, k, rng)`)",
            fix=f"fix the factory registered as {name!r} in {SELECTOR_GROUP!r}",
        )
    return selector
