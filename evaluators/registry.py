"""Benchmarks by name: the built-ins plus any registered under the `cambrian.benchmarks` entry point group.

A third-party package registers a factory that takes the options as keyword
arguments, and the run's `FeedbackPolicy` as `feedback_policy`, and returns a Benchmark:

    [project.entry-points."cambrian.benchmarks"]
    my_bench = "my_package.bench:MyBenchmark"

A built-in name wins over an entry point of the same name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cambrian.evaluators.arc import ArcAgentBenchmark, ArcProgramBenchmark
from cambrian.evaluators.base import Benchmark, BenchmarkError, FeedbackPolicy
from cambrian.evaluators.circle_packing import CirclePacking
from cambrian.evaluators.deceptive import DeceptiveTrap
from cambrian.evaluators.humaneval import HumanEval
from cambrian.evaluators.programs import PROGRAM_BENCHMARKS
from cambrian.plugins import BENCHMARK_GROUP, PluginRegistry

ENTRY_POINT_GROUP = BENCHMARK_GROUP


@dataclass(frozen=True)
class _Builtin:
    build: Callable[..., Benchmark]  # (options, *, feedback_policy): validates the option mapping itself
    description: str


def _builtin(cls: Any) -> _Builtin:
    return _Builtin(build=cls.from_options, description=cls.description)


#: Benchmarks by name: the built-ins, then what installed packages register under `cambrian.benchmarks`.
BENCHMARKS: PluginRegistry[_Builtin] = PluginRegistry(
    what="benchmark",
    group=BENCHMARK_GROUP,
    builtins=MappingProxyType(
        {
            cls.name: _builtin(cls)
            for cls in (CirclePacking, DeceptiveTrap, HumanEval, ArcAgentBenchmark, ArcProgramBenchmark)
        }
        | {program.name: _builtin(program) for program in PROGRAM_BENCHMARKS}
    ),
    error=BenchmarkError,
)


def benchmark_names() -> list[str]:
    """Every benchmark name `get_benchmark` accepts, sorted."""
    return sorted(BENCHMARKS.names())


def describe_benchmarks() -> list[tuple[str, str]]:
    """(name, one-line description) for every benchmark, sorted by name; loads entry points to read them."""
    rows: list[tuple[str, str]] = []
    for name in benchmark_names():
        try:
            found = BENCHMARKS.get(name)
        except BenchmarkError as exc:  # a broken plugin must not hide the others
            rows.append((name, f"({exc})"))
            continue
        if isinstance(found, _Builtin):
            rows.append((name, found.description))
            continue
        description = getattr(found, "description", None) or (found.__doc__ or "").strip().split("\n")[0]
        rows.append((name, str(description) or f"from {BENCHMARKS.entry_points()[name].value}"))
    return rows


def get_benchmark(
    name: str, options: Mapping[str, Any] | None = None, *, feedback_policy: FeedbackPolicy | None = None
) -> Benchmark:
    """The benchmark called `name`, built with `options` and the run's `feedback_policy` (None: the
    benchmark's default, `FeedbackPolicy()`).

    Raises BenchmarkError for an unknown name (naming the valid choices), bad
    options (naming the bad key or value), a plugin that fails to load, or a plugin whose factory cannot take
    a feedback policy other than its default.
    """
    if options is not None and not isinstance(options, Mapping):
        raise BenchmarkError(
            f"benchmark options must be a mapping, got {type(options).__name__}",
            fix="pass options as key = value pairs (a TOML table or a dict)",
        )
    found = BENCHMARKS.get(name)
    if isinstance(found, _Builtin):
        return found.build(options or {}, feedback_policy=feedback_policy)
    return _build_plugin(name, found, dict(options or {}), feedback_policy)


def _build_plugin(
    name: str, factory: Callable[..., Any], options: dict[str, Any], feedback_policy: FeedbackPolicy | None
) -> Benchmark:
    value = BENCHMARKS.entry_points()[name].value
    takes_policy = _takes_feedback_policy(factory)
    bad_keys = [key for key in options if not isinstance(key, str) or not key.isidentifier()]
    if bad_keys:
        raise BenchmarkError(
            f"bad option name {bad_keys[0]!r} for benchmark {name!r}",
            fix="option names are identifiers such as 'n' or 'timeout_s'",
        )
    if "feedback_policy" in options:
        raise BenchmarkError(
            f"benchmark {name!r}: feedback_policy is no benchmark option",
            fix="set what failures show with evaluation.feedback (`cambrian config` lists its keys)",
        )
    policy = {"feedback_policy": feedback_policy} if takes_policy and feedback_policy is not None else {}
    try:
        benchmark = factory(**options, **policy)
    except BenchmarkError:
        raise
    except (TypeError, ValueError) as exc:
        # An unexpected keyword arrives as TypeError; a bad value (pydantic included) as ValueError.
        raise BenchmarkError(
            f"bad options for benchmark {name!r}: {exc}",
            fix=f"check the option names and values that {value} accepts",
        ) from exc
    if not isinstance(benchmark, Benchmark):
        raise BenchmarkError(
            f"benchmark {name!r} ({value}) did not return a Benchmark",
            fix="its factory must return an object with the evaluators.base.Benchmark attributes",
        )
    if feedback_policy is not None and not takes_policy and benchmark.feedback_policy != feedback_policy:
        raise BenchmarkError(
            f"benchmark {name!r} ({value}) takes no feedback_policy, so the run's evaluation.feedback cannot reach it",
            fix="give its factory a keyword argument `feedback_policy=None` and build the benchmark with it "
            "(the guide: Your benchmark), or leave evaluation.feedback at its defaults",
        )
    return benchmark


def _takes_feedback_policy(factory: Callable[..., Any]) -> bool:
    """Whether a plugin's factory names a `feedback_policy` parameter (its `**options` alone do not count)."""
    try:
        return "feedback_policy" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
