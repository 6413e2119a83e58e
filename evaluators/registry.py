"""Benchmarks by name: the built-ins plus any registered under the `cambrian.benchmarks` entry point group.

A third-party package registers a factory that takes the options as keyword
arguments and returns a Benchmark:

    [project.entry-points."cambrian.benchmarks"]
    my_bench = "my_package.bench:MyBenchmark"

A built-in name wins over an entry point of the same name.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from cambrian.evaluators.arc import ArcAgentBenchmark, ArcProgramBenchmark
from cambrian.evaluators.base import Benchmark, BenchmarkError
from cambrian.evaluators.circle_packing import CirclePacking
from cambrian.evaluators.deceptive import DeceptiveTrap
from cambrian.evaluators.humaneval import HumanEval
from cambrian.evaluators.programs import PROGRAM_BENCHMARKS

ENTRY_POINT_GROUP = "cambrian.benchmarks"


@dataclass(frozen=True)
class _Builtin:
    build: Callable[[Mapping[str, Any]], Benchmark]  # validates the option mapping itself
    description: str


def _builtins() -> dict[str, _Builtin]:
    # A function, not a module-level dict: no shared mutable state.
    return {
        CirclePacking.name: _Builtin(build=CirclePacking.from_options, description=CirclePacking.description),
        DeceptiveTrap.name: _Builtin(build=DeceptiveTrap.from_options, description=DeceptiveTrap.description),
        HumanEval.name: _Builtin(build=HumanEval.from_options, description=HumanEval.description),
        ArcAgentBenchmark.name: _Builtin(
            build=ArcAgentBenchmark.from_options, description=ArcAgentBenchmark.description
        ),
        ArcProgramBenchmark.name: _Builtin(
            build=ArcProgramBenchmark.from_options, description=ArcProgramBenchmark.description
        ),
        **{
            program.name: _Builtin(build=program.from_options, description=program.description)
            for program in PROGRAM_BENCHMARKS
        },
    }


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def benchmark_names() -> list[str]:
    """Every benchmark name `get_benchmark` accepts, sorted."""
    return sorted({*_builtins(), *_entry_points()})


def describe_benchmarks() -> list[tuple[str, str]]:
    """(name, one-line description) for every benchmark, sorted by name; loads entry points to read them."""
    builtins = _builtins()
    plugins = _entry_points()
    rows: list[tuple[str, str]] = []
    for name in benchmark_names():
        if name in builtins:
            rows.append((name, builtins[name].description))
            continue
        try:
            factory = plugins[name].load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not hide the others
            rows.append((name, f"(cannot be loaded: {type(exc).__name__}: {exc})"))
            continue
        description = getattr(factory, "description", None) or (factory.__doc__ or "").strip().split("\n")[0]
        rows.append((name, str(description) or f"from {plugins[name].value}"))
    return rows


def get_benchmark(name: str, options: Mapping[str, Any] | None = None) -> Benchmark:
    """The benchmark called `name`, built with `options`.

    Raises BenchmarkError for an unknown name (naming the valid choices), bad
    options (naming the bad key or value), or a plugin that fails to load.
    """
    if options is not None and not isinstance(options, Mapping):
        raise BenchmarkError(
            f"benchmark options must be a mapping, got {type(options).__name__}",
            fix="pass options as key = value pairs (a TOML table or a dict)",
        )
    builtin = _builtins().get(name)
    if builtin is not None:
        return builtin.build(options or {})
    plugin = _entry_points().get(name)
    if plugin is None:
        close = difflib.get_close_matches(name, benchmark_names(), n=1)
        raise BenchmarkError(
            f"unknown benchmark {name!r}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; valid choices: {', '.join(benchmark_names())}",
            fix=f"pick one of {', '.join(benchmark_names())}, or install a package that registers "
            f"{name!r} in the entry point group {ENTRY_POINT_GROUP!r}",
        )
    return _build_plugin(plugin, dict(options or {}))


def _build_plugin(plugin: EntryPoint, options: dict[str, Any]) -> Benchmark:
    try:
        factory = plugin.load()
    except Exception as exc:
        package = plugin.dist.name if plugin.dist is not None else "the package that provides it"
        raise BenchmarkError(
            f"benchmark {plugin.name!r} cannot be loaded from its entry point line "
            f"`{plugin.name} = {plugin.value}` (group {ENTRY_POINT_GROUP!r} of {package}): {type(exc).__name__}: {exc}",
            fix=f'fix that line in {package}\'s pyproject.toml ([project.entry-points."{ENTRY_POINT_GROUP}"]: '
            "module:function, importable) or the module it names, then reinstall the package",
        ) from exc
    bad_keys = [key for key in options if not isinstance(key, str) or not key.isidentifier()]
    if bad_keys:
        raise BenchmarkError(
            f"bad option name {bad_keys[0]!r} for benchmark {plugin.name!r}",
            fix="option names are identifiers such as 'n' or 'timeout_s'",
        )
    try:
        benchmark = factory(**options)
    except BenchmarkError:
        raise
    except (TypeError, ValueError) as exc:
        # An unexpected keyword arrives as TypeError; a bad value (pydantic included) as ValueError.
        raise BenchmarkError(
            f"bad options for benchmark {plugin.name!r}: {exc}",
            fix=f"check the option names and values that {plugin.value} accepts",
        ) from exc
    if not isinstance(benchmark, Benchmark):
        raise BenchmarkError(
            f"benchmark {plugin.name!r} ({plugin.value}) did not return a Benchmark",
            fix="its factory must return an object with the evaluators.base.Benchmark attributes",
        )
    return benchmark
