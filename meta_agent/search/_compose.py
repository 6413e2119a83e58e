"""Putting a loop together: the selector and operators a config names, and the checks that the parts fit.

`SearchLoop` takes objects; `loop_from_config` gets them here by name (built-in or installed plugins).
Whatever built them, the loop checks them against the benchmark before anything runs: the descriptor axes
and neighbours the selector reads, a benchmark that supports `self_modify`, an FM for the FM operators, and
agents enough for crossover alone; and a run is refused when no operator can edit its seed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from cambrian.archive.selection import SELECTORS, ParentSelector, make_selector, selector_needs, selector_parameters
from cambrian.evaluators.base import Benchmark, Genome, agents_call_fm, descriptor_bounds
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.errors import ConfigError
from cambrian.meta_agent.operators import Operator, PromptLimits, supports_self_modify


def selector_from_config(config: RunConfig, benchmark: Benchmark) -> ParentSelector:
    """`search.strategy` built with `selector_params`."""
    return make_selector(config.search.strategy, **selector_params(config, benchmark))


def selector_params(config: RunConfig, benchmark: Benchmark) -> dict[str, Any]:
    """`search.params`, and for a strategy with a `dims` parameter that was given none, the benchmark's own
    behaviour axes (or code size and pass rate when it has none)."""
    params: dict[str, Any] = dict(config.search.params)
    if "dims" not in params and "dims" in selector_parameters(SELECTORS.get(config.search.strategy)):
        bounds = descriptor_bounds(benchmark)
        params["dims"] = tuple(bounds) or ("code_size", "pass_fraction")
    return params


def check_selector_needs(
    kept: int, benchmark: Benchmark, selector: ParentSelector, descriptor_names: Sequence[str]
) -> None:
    """What the selector reads must exist: descriptor axes, and enough kept neighbours (`SelectorNeeds`; kept:
    the neighbours kept per agent, `search.novelty.k`)."""
    needs = selector_needs(selector)
    if needs.neighbours > kept:
        raise ConfigError(
            f"the {selector.name} strategy reads {needs.neighbours} nearest neighbours "
            f"(search.params.k), more than the {kept} kept per agent (search.novelty.k)",
            fix=f"set search.novelty.k to at least {needs.neighbours}, or lower search.params.k",
        )
    unknown = [name for name in needs.descriptor_axes if name not in descriptor_names]
    if unknown:
        raise ConfigError(
            f"search.params.dims: {benchmark.name} has no descriptor {', '.join(map(repr, unknown))}",
            fix=f"use some of {', '.join(descriptor_names)}",
        )


def check_operators(
    weights: Mapping[str, float], benchmark: Benchmark, operators: Mapping[str, Operator], *, has_fm: bool
) -> None:
    """Operators whose agents write their children (`runs_agent`) need a benchmark that supports them, FM
    operators (`uses_fm`) an FM (`OperatorMix` holds an operator for every weighted name already)."""
    weights = {name: w for name, w in weights.items() if w > 0}
    in_sandbox = [name for name in weights if operators[name].runs_agent]
    if in_sandbox and not supports_self_modify(benchmark):
        raise ConfigError(
            f"search.operators: {', '.join(in_sandbox)} needs a benchmark whose agents write code (such as "
            f"humaneval); {benchmark.name} has none",
            fix=f"remove {', '.join(in_sandbox)} from search.operators, or search a benchmark such as humaneval",
        )
    needs_fm = any(operators[name].uses_fm for name in weights)
    if needs_fm and not has_fm:
        raise ConfigError("search.operators names FM operators but the run has no FM", fix="configure fm.model")


def check_can_start(operators: Collection[str], *, evaluated: int, islands: int) -> None:
    """A search whose one operator is crossover needs two evaluated agents to start from, on each island (a run
    with islands starts each from the seed alone)."""
    if set(operators) == {"crossover"} and (evaluated < 2 or islands > 1):
        raise ConfigError(
            "search.operators: crossover alone cannot start a search (it needs two evaluated agents"
            + (", on each of the search.islands)" if islands > 1 else ")"),
            fix="add another operator, e.g. {crossover = 0.3, diff = 0.7}",
        )


def fm_needed(config: RunConfig, benchmark: Benchmark, operators: Mapping[str, Operator]) -> bool:
    """Whether the run will call an FM: an operator that writes with one (or whose agents write their children),
    the run's notes (`search.reflect_every`), or agents that call one through the gateway (a benchmark whose
    harness hands its agents an FM client, with `evaluation.agent_fm` on). When none will, no model server is
    started (nor, on a fresh machine, a model downloaded)."""
    weighted = [operators[name] for name, weight in config.search.operators.items() if weight > 0]
    agents_call = config.evaluation.agent_fm and agents_call_fm(benchmark)
    return any(op.uses_fm or op.runs_agent for op in weighted) or config.search.reflect_every > 0 or agents_call


def check_models(config: RunConfig, *, fm: bool = True) -> None:
    """Every model the run uses that is a .gguf path exists: checked before the run is created (a missing file
    once ran to exit 0 with every proposal invalid). fm: whether the run calls its FM models (else only the
    embedding model is checked)."""
    fm_models = (config.fm.model, *config.fm.models, config.evaluation.agent_model) if fm else ()
    for spec in (*fm_models, config.search.novelty.embedding_model):
        if spec is not None and spec.endswith(".gguf") and not Path(spec).expanduser().is_file():
            raise ConfigError(
                f"no model file at {spec}",
                fix="check the path, or name a model Cambrian downloads (`cambrian models list`, e.g. --model "
                "qwen2.5-coder-1.5b)",
            )


def prompt_limits(config: RunConfig) -> PromptLimits:
    """What the run's prompts show (the operators' defaults) and how long a reply may be (`fm.max_tokens`)."""
    return PromptLimits(max_reply_tokens=config.fm.max_tokens)


def check_seed_editable(config: RunConfig, seed: Genome, operators: Mapping[str, Operator]) -> None:
    """At least one weighted operator can edit the seed (`Operator.cannot_edit`), else a ConfigError that
    names each operator and what it needs: a run that could never make a child is refused before it starts."""
    weights = [name for name, weight in config.search.operators.items() if weight > 0 and name in operators]
    reasons = {name: operators[name].cannot_edit(seed) for name in weights}
    if weights and all(reasons.values()):
        raise ConfigError(
            f"no operator of search.operators can edit the seed {seed.entry}: "
            + "; ".join(f"{reason}" for reason in reasons.values()),
            fix="add an operator that can, e.g. --set 'search.operators={rewrite = 1}' (it writes the whole "
            "EVOLVE-BLOCK), or give the seed's EVOLVE-BLOCK the code those operators need",
        )
