"""The loop a run's config describes: `loop_from_config`.

`SearchLoop` is built from objects; this builds them from a `RunConfig` by name (the selector and operators,
built-in or installed plugins), with what the caller started (the sandbox or an executor, the FM clients,
the agents' gateway), and hands them over. Nothing here is kept: the loop never reads the config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cambrian.archive.models import Run
from cambrian.archive.novelty import EndpointEmbedder
from cambrian.archive.store import Archive
from cambrian.evaluators.base import Benchmark
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.llm import LLMClient
from cambrian.meta_agent.llm.gateway import FMGateway
from cambrian.meta_agent.llm.models import model_label as label_of_model
from cambrian.meta_agent.operators import make_operator
from cambrian.meta_agent.search._behaviour import BehaviourSpace
from cambrian.meta_agent.search._book import LoopEvent
from cambrian.meta_agent.search._compose import prompt_limits, selector_from_config
from cambrian.meta_agent.search._executor import Executor, LocalExecutor
from cambrian.meta_agent.search._loop import SearchLoop
from cambrian.meta_agent.search._memory import PromptMemory
from cambrian.meta_agent.search._proposals import Proposer
from cambrian.meta_agent.search._reflection import RunNotes
from cambrian.meta_agent.search._settings import LoopSettings
from cambrian.meta_agent.search.arms import OperatorMix, operator_arms, restore_bandit
from cambrian.meta_agent.search.evaluation import EvaluationContext
from cambrian.sandbox.base import Sandbox


def loop_from_config(
    *,
    archive: Archive,
    run: Run,
    config: RunConfig,
    benchmark: Benchmark,
    sandbox: Sandbox | None = None,
    executor: Executor | None = None,
    llm: LLMClient | None = None,
    model_label: str = "",
    more_llms: Mapping[str, LLMClient] | None = None,
    gateway: FMGateway | None = None,
    on_event: Callable[[LoopEvent], None] | None = None,
    code_embedder: EndpointEmbedder | None = None,
) -> SearchLoop:
    """The search loop of `run` as `config` describes it.

    executor: where children are evaluated (None: a `LocalExecutor` over `sandbox`, with
    `evaluation.concurrency` slots); the caller closes it. llm / model_label: the run's FM (`fm.model`); None
    only when nothing in the run calls one. more_llms: label -> client for `fm.models`. gateway: serves the FM
    to agents under evaluation; None: agents call none. code_embedder: the embedding model's embedder
    (`search.novelty.embedding_model`, started by `session.code_embedder`); None: the local hashing vectorizer.
    """
    if executor is None:
        if sandbox is None:
            raise ValueError("loop_from_config: give a sandbox, or an executor that evaluates elsewhere")
        executor = LocalExecutor(sandbox, slots=config.evaluation.concurrency)
    llms = {model_label: llm} if llm is not None else {}
    llms.update(more_llms or {})
    context = EvaluationContext.of_run(config, benchmark, gateway)
    operators = {name: make_operator(name, limits=prompt_limits(config)) for name in config.search.operators}
    # Agents (and so a parent writing its child) call evaluation.agent_model where one is set.
    agent_model = config.evaluation.agent_model
    weights = config.search.operators
    arms = operator_arms(
        weights, operators, models=list(llms), gateway_model=label_of_model(agent_model) if agent_model else model_label
    )
    bandit = restore_bandit(config.search.bandit, arms, archive.agents(run.key), weights=weights)
    every = config.search.reflect_every
    return SearchLoop(
        archive=archive,
        run=run,
        selector=selector_from_config(config, benchmark),
        operators=OperatorMix(operators, weights=weights, arms=arms, bandit=bandit),
        proposer=Proposer.from_config(config, context=context, operators=operators, llms=llms, executor=executor),
        executor=executor,
        context=context,
        budget=config.budget,
        settings=LoopSettings.of_run(config),
        behaviour=BehaviourSpace(benchmark, config.search.novelty, code_embedder=code_embedder),
        memory=PromptMemory(
            archive, failed_attempts_shown=config.search.failed_attempts_shown, inspirations=config.search.inspirations
        ),
        notes=RunNotes.restore(archive, run.key, llms[model_label], every=every) if every and llms else None,
        on_event=on_event,
    )
