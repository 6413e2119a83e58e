"""The search core: the loop, how a proposal is made and a child evaluated, behaviour, and a run's start.

- `SearchLoop`, `LoopEvent`, `LoopOutcome`: the asyncio pipeline of proposers and evaluators over an
  archive, with its budgets, stop and resume; it is composed of built objects (a selector, an `OperatorMix`,
  a `Proposer`, an `Executor` (`LocalExecutor`: this machine's sandbox) and its `EvaluationContext`, a
  budget, `LoopSettings`, a reporter), and `loop_from_config` / `selector_from_config` build them from a
  run's config;
- `RunBook`: what the loop writes down (agents, results, the best so far, events, the outcome), returning
  what happened for the loop to act on; the loop's `Scheduler` owns the queue, the stop and the counters;
  `PromptMemory`: what prompts show of the archive, read once and cached;
- `Proposer`: one proposal, from the parent to a checked child, with repair rounds;
- `BehaviourSpace`, `TaskRow`: descriptors, embeddings, novelty and the duplicate gate of a run;
- `start_run`, `resume_run`, `Reporter`, `INTERRUPTED`: a run from its config to its outcome, as `cambrian
  run` and `cambrian.search` make it;
- `summarize_run`, `categorize`: the closing summary of a run.

By role, in modules of their own:

- `cambrian.meta_agent.search.session`: the pieces a run is built from (`build_benchmark`,
  `choose_sandbox`, `fm_endpoint`, `make_llm_client`, `sandbox_with_socket_dir`, ...);
- `cambrian.meta_agent.search.stores`: where a run's archive lives, opening and deleting a run, its lock;
- `cambrian.meta_agent.search.evaluation`: a child's evaluation in the sandbox (`evaluate_in_sandbox`, with
  what a run's evaluations share bound once in an `EvaluationContext`; `evaluation_row`, `AgentFMBudget`,
  `run_limits`);
- `cambrian.meta_agent.search.holdout`: one agent (archived or exported) scored on a split and stored apart
  from its search score (`evaluate_target`: what `cambrian eval` and `Run.evaluate` do; an exported
  folder read safely by `_export_folder`);
- `cambrian.meta_agent.search.bandit`: choosing (model, operator) arms by reward (`Bandit`, `Arm`,
  `ALGORITHMS`, `improvement_reward`); `cambrian.meta_agent.search.arms`: a run's operators and arms, how
  one is drawn (`OperatorMix`), and the bandit's state, read back from the archive (`arm_history`,
  `restore_bandit`).
"""

from typing import TYPE_CHECKING

from cambrian.meta_agent._lazy import lazy_exports

if TYPE_CHECKING:
    from cambrian.meta_agent.search._behaviour import BehaviourSpace, TaskRow
    from cambrian.meta_agent.search._book import RunBook
    from cambrian.meta_agent.search._compose import selector_from_config
    from cambrian.meta_agent.search._executor import Executor, LocalExecutor
    from cambrian.meta_agent.search._from_config import loop_from_config
    from cambrian.meta_agent.search._loop import LoopEvent, LoopOutcome, SearchLoop
    from cambrian.meta_agent.search._memory import PromptMemory
    from cambrian.meta_agent.search._proposals import Proposer
    from cambrian.meta_agent.search._settings import LoopSettings
    from cambrian.meta_agent.search._summary import categorize, summarize_run
    from cambrian.meta_agent.search.arms import OperatorMix
    from cambrian.meta_agent.search.session import INTERRUPTED, Reporter, resume_run, start_run

# Imported on first use (meta_agent/_lazy.py): `cambrian status` and the other readers need `stores` and `arms`,
# not the loop, the sandbox and the FM client (0.4 s of imports a call).
_NAMES: dict[str, tuple[str, ...]] = {
    "cambrian.meta_agent.search._behaviour": ("BehaviourSpace", "TaskRow"),
    "cambrian.meta_agent.search._book": ("RunBook",),
    "cambrian.meta_agent.search._compose": ("selector_from_config",),
    "cambrian.meta_agent.search._executor": ("Executor", "LocalExecutor"),
    "cambrian.meta_agent.search._from_config": ("loop_from_config",),
    "cambrian.meta_agent.search._loop": ("LoopEvent", "LoopOutcome", "SearchLoop"),
    "cambrian.meta_agent.search._memory": ("PromptMemory",),
    "cambrian.meta_agent.search._proposals": ("Proposer",),
    "cambrian.meta_agent.search._settings": ("LoopSettings",),
    "cambrian.meta_agent.search.arms": ("OperatorMix",),
    "cambrian.meta_agent.search._summary": ("categorize", "summarize_run"),
    "cambrian.meta_agent.search.session": ("INTERRUPTED", "Reporter", "resume_run", "start_run"),
}
__getattr__ = lazy_exports(__name__, _NAMES)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "INTERRUPTED",
    "BehaviourSpace",
    "Executor",
    "LocalExecutor",
    "LoopEvent",
    "LoopOutcome",
    "LoopSettings",
    "OperatorMix",
    "PromptMemory",
    "Proposer",
    "Reporter",
    "RunBook",
    "SearchLoop",
    "TaskRow",
    "categorize",
    "loop_from_config",
    "resume_run",
    "selector_from_config",
    "start_run",
    "summarize_run",
]
