"""Names to objects: the built-ins plus what installed packages register under an entry point group.

`PluginRegistry` is the one registry behind the three plugin kinds, each kept beside what it registers:
benchmarks (`cambrian.evaluators.registry.BENCHMARKS`), mutation operators
(`cambrian.meta_agent.operators.OPERATOR_REGISTRY`) and selection strategies
(`cambrian.archive.selection.SELECTORS`). A third-party package adds to them in its `pyproject.toml`:

    [project.entry-points."cambrian.benchmarks"]
    my_bench = "my_package.bench:make_benchmark"   # called with the benchmark's options as keywords

    [project.entry-points."cambrian.operators"]
    swap_lines = "my_package.ops:SwapLines"        # a class or factory; called with no arguments

    [project.entry-points."cambrian.selectors"]
    top_half = "my_package.select:TopHalf"         # a class or factory; called with the strategy's params

A built-in name wins over an entry point of the same name. Entry points are read once per process
(`refresh()` reads them again). Plugins are installed packages the user chose, trusted like Cambrian itself:
they run in the Cambrian process. Nothing an FM wrote ever gets here. This module sits at the root layer, with
`cambrian.errors`, so every package may use it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

__all__ = ["BENCHMARK_GROUP", "OPERATOR_GROUP", "SELECTOR_GROUP", "PluginRegistry"]

T = TypeVar("T")

#: Entry point groups through which installed packages add benchmarks, operators and selection strategies.
BENCHMARK_GROUP = "cambrian.benchmarks"
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
        """The built-in called `name`, else the object its entry point names (loaded now). `error` for an
        unknown name (naming the closest and every valid one) or a plugin that cannot be loaded (naming its
        entry point line and package)."""
        if name in self.builtins:
            return self.builtins[name]
        plugin = self.entry_points().get(name)
        if plugin is None:
            names = self.names()
            close = difflib.get_close_matches(name, names, n=1)
            raise self.error(
                f"there is no {self.what} named {name!r}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; valid choices: {', '.join(names)}",
                fix=f"use one of: {', '.join(names)}, or install a package that registers {name!r} "
                f"in the entry point group {self.group!r}",
            )
        try:
            return plugin.load()
        except Exception as exc:
            package = plugin.dist.name if plugin.dist is not None else "the package that provides it"
            raise self.error(
                f"the {self.what} {name!r} cannot be loaded from its entry point line `{name} = {plugin.value}` "
                f"(group {self.group!r} of {package}): {type(exc).__name__}: {exc}",
                fix=f'fix that line in {package}\'s pyproject.toml ([project.entry-points."{self.group}"]: '
                "module:object, importable) or the module it names, then reinstall the package; or remove "
                f"{name!r} from the config",
            ) from exc
