"""The search core: the loop, how a proposal is made and a child evaluated, behaviour, and the bandit.

- `SearchLoop`, `LoopEvent`, `LoopOutcome`: the asyncio pipeline of proposers and evaluators over an
  archive, with its budgets, stop and resume; it takes a selector and operator objects, and
  `SearchLoop.from_config` / `selector_from_config` build them from their names;
- `RunBook`: what the loop writes down (agents, results, counters, the best so far, events, the outcome);
  `PromptMemory`: what prompts show of the archive, read once and cached;
- `Proposer`, `Proposal`, `RUN_REPAIR_NOTE`, `agent_fm_budget`, `run_limits`: one proposal, from the
  parent to a checked child, with repair rounds;
- `evaluate_in_sandbox`, `evaluation_row`, `AgentFMBudget`, `run_self_modify`: a child's evaluation;
- `BehaviourSpace`, `TaskRow`: descriptors, embeddings, novelty and the duplicate gate of a run;
- `Bandit`, `Arm`, `ALGORITHMS`, `BanditError`, `improvement_reward`, `arm_history`: choosing (model,
  operator) arms by reward, which is search policy;
- `start_run`, `resume_run`, `Reporter`, `INTERRUPTED` and the pieces a run is built from
  (`build_benchmark`, `choose_sandbox`, `fm_endpoint`, `make_llm_client`, `sandbox_with_socket_dir`,
  `resolve_fm_concurrency`, `server_threads`, `say_what_is_editable`);
- `open_run`, `archive_path`, `shown_store`, `store_in_use`: where a run's archive lives, and opening it;
- `summarize_run`, `categorize`: the closing summary of a run.
"""

from typing import TYPE_CHECKING

from cambrian.meta_agent._lazy import lazy_exports

if TYPE_CHECKING:
    from cambrian.meta_agent.operators import RUN_REPAIR_NOTE, Proposal  # re-exported: what the loop's proposals are
    from cambrian.meta_agent.search._arms import arm_history, restore_bandit
    from cambrian.meta_agent.search._bandit import ALGORITHMS, Arm, Bandit, BanditError, improvement_reward
    from cambrian.meta_agent.search._behaviour import BehaviourSpace, TaskRow
    from cambrian.meta_agent.search._book import RunBook
    from cambrian.meta_agent.search._compose import selector_from_config
    from cambrian.meta_agent.search._evaluation import (
        AgentFMBudget,
        evaluate_in_sandbox,
        evaluation_row,
        run_self_modify,
    )
    from cambrian.meta_agent.search._lock import run_lock
    from cambrian.meta_agent.search._loop import LoopEvent, LoopOutcome, SearchLoop
    from cambrian.meta_agent.search._memory import PromptMemory
    from cambrian.meta_agent.search._proposals import Proposer, agent_fm_budget, run_limits
    from cambrian.meta_agent.search._session import (
        INTERRUPTED,
        Reporter,
        build_benchmark,
        choose_sandbox,
        fm_endpoint,
        make_llm_client,
        resolve_fm_concurrency,
        resume_run,
        sandbox_with_socket_dir,
        say_what_is_editable,
        server_threads,
        start_run,
    )
    from cambrian.meta_agent.search._stores import archive_path, delete_run, open_run, shown_store, store_in_use
    from cambrian.meta_agent.search._summary import categorize, summarize_run

# Imported on first use (meta_agent/_lazy.py): `cambrian status` and the other readers need `_stores` and `_arms`,
# not the loop, the sandbox and the FM client (0.4 s of imports a call).
_NAMES: dict[str, tuple[str, ...]] = {
    "cambrian.meta_agent.operators": ("RUN_REPAIR_NOTE", "Proposal"),
    "cambrian.meta_agent.search._arms": ("arm_history", "restore_bandit"),
    "cambrian.meta_agent.search._bandit": ("ALGORITHMS", "Arm", "Bandit", "BanditError", "improvement_reward"),
    "cambrian.meta_agent.search._behaviour": ("BehaviourSpace", "TaskRow"),
    "cambrian.meta_agent.search._book": ("RunBook",),
    "cambrian.meta_agent.search._compose": ("selector_from_config",),
    "cambrian.meta_agent.search._evaluation": (
        "AgentFMBudget",
        "evaluate_in_sandbox",
        "evaluation_row",
        "run_self_modify",
    ),
    "cambrian.meta_agent.search._loop": ("LoopEvent", "LoopOutcome", "SearchLoop"),
    "cambrian.meta_agent.search._memory": ("PromptMemory",),
    "cambrian.meta_agent.search._proposals": ("Proposer", "agent_fm_budget", "run_limits"),
    "cambrian.meta_agent.search._session": (
        "INTERRUPTED",
        "Reporter",
        "build_benchmark",
        "choose_sandbox",
        "fm_endpoint",
        "make_llm_client",
        "resolve_fm_concurrency",
        "resume_run",
        "sandbox_with_socket_dir",
        "say_what_is_editable",
        "server_threads",
        "start_run",
    ),
    "cambrian.meta_agent.search._lock": ("run_lock",),
    "cambrian.meta_agent.search._stores": ("archive_path", "delete_run", "open_run", "shown_store", "store_in_use"),
    "cambrian.meta_agent.search._summary": ("categorize", "summarize_run"),
}
__getattr__ = lazy_exports(__name__, _NAMES)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "ALGORITHMS", "AgentFMBudget", "Arm", "Bandit", "BanditError", "BehaviourSpace", "INTERRUPTED", "LoopEvent",
    "LoopOutcome", "PromptMemory", "Proposal", "Proposer", "RUN_REPAIR_NOTE", "Reporter", "RunBook", "SearchLoop",
    "TaskRow", "agent_fm_budget", "archive_path", "arm_history", "build_benchmark", "categorize", "choose_sandbox",
    "delete_run", "evaluate_in_sandbox", "evaluation_row", "fm_endpoint", "improvement_reward", "make_llm_client",
    "open_run", "resolve_fm_concurrency", "restore_bandit", "resume_run", "run_limits", "run_lock",
    "run_self_modify", "sandbox_with_socket_dir", "say_what_is_editable", "selector_from_config", "server_threads",
    "shown_store", "start_run", "store_in_use", "summarize_run",
]  # fmt: skip
