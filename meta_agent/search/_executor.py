"""Where evaluations run: one `Executor` interface, a local and a Ray implementation.

The search loop hands an executor one agent's evaluation at a time (several at once) and awaits its
`AgentResult`. What every evaluation of a run shares (the benchmark, the limits, the agents' FM gateway and
budget) comes bound in one `EvaluationContext`; a call adds what varies: the agent, its genome, the split.
`LocalExecutor` runs it in this machine's sandbox, one agent's tasks after another in one session of its
own (what the loop always did). `RayExecutor` (meta_agent.search._ray_executor) spreads the TASKS of each
stage over a Ray cluster's sandbox slots, so one agent's many tasks run at once and staged evaluation still
stops early. A parent agent writing its child (`self_modify`) runs where evaluations do (`run_parent`), so a
Ray search needs no sandbox on the driver's machine.

Infrastructure faults: a `SandboxError` or `GatewayError` from `evaluate` means the agent's evaluation
failed through no fault of its own (the loop marks it failed and retries it). Task runs an executor lost
to infrastructure and ran again elsewhere by itself (a Ray node that died) are counted in `infra_faults`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from cambrian.evaluators.base import Genome, Task
from cambrian.evaluators.runner import AgentResult
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.errors import ConfigError
from cambrian.meta_agent.search.evaluation import (
    EvaluationContext,
    SelfModifyRun,
    evaluate_in_sandbox,
    run_self_modify,
)
from cambrian.sandbox.base import Sandbox


class Executor(Protocol):
    """Runs agents' evaluations. `slots`: task runs at once (the loop evaluates up to that many agents at once);
    `infra_faults`: task runs lost to infrastructure and run again (counted since the executor started).
    One executor serves any context: a cluster's pools outlive one benchmark."""

    name: str
    slots: int
    infra_faults: int

    async def evaluate(
        self, context: EvaluationContext, genome: Genome, *, agent_id: int, iteration: int, split: str, repeat: int = 0
    ) -> AgentResult:
        """Evaluate one agent on `split` (staged on "search"), its `repeat`-th time; with the context's gateway its
        FM calls go through it, recorded under `agent_id`. SandboxError / GatewayError: an infrastructure fault."""
        ...

    async def run_parent(
        self,
        context: EvaluationContext,
        parent: Genome,
        task: Task,
        *,
        iteration: int,
        fm_seed: int,
        proposal_id: str | None = None,
    ) -> SelfModifyRun:
        """Run the parent agent on `task` (asking it to write its child) in a session of its own; its FM calls
        are recorded with purpose "self_modify", no agent id and `proposal_id`, which links them to the child.
        SandboxError / GatewayError: an infrastructure fault."""
        ...

    def kill_running(self) -> None:
        """Kill the agent runs in progress, at once and without waiting (a second Ctrl-C): their evaluations
        end as infrastructure faults and their agents stay queued for `resume`."""
        ...

    async def finish(self) -> None:
        """End what lives on the running event loop (a TCP listener); `evaluate` may be called again later."""
        ...

    def close(self) -> None:
        """Release what the executor holds (a cluster's node pools). Idempotent."""
        ...


class LocalExecutor:
    """This machine's sandbox: each agent in a session of its own, its tasks one after another.

    slots: agents evaluated at once (`evaluation.concurrency`). The sandbox stays the caller's to close.
    """

    name = "local"

    def __init__(self, sandbox: Sandbox, *, slots: int) -> None:
        self.sandbox = sandbox
        self.slots = slots
        self.infra_faults = 0  # a local sandbox fault fails the agent's evaluation (the loop retries it)

    async def evaluate(
        self, context: EvaluationContext, genome: Genome, *, agent_id: int, iteration: int, split: str, repeat: int = 0
    ) -> AgentResult:
        return await evaluate_in_sandbox(
            context, genome, self.sandbox, agent_id=agent_id, iteration=iteration, split=split, repeat=repeat
        )

    async def run_parent(
        self,
        context: EvaluationContext,
        parent: Genome,
        task: Task,
        *,
        iteration: int,
        fm_seed: int,
        proposal_id: str | None = None,
    ) -> SelfModifyRun:
        return await run_self_modify(
            context, parent, task, self.sandbox, iteration=iteration, fm_seed=fm_seed, proposal_id=proposal_id
        )

    def kill_running(self) -> None:
        self.sandbox.close()  # kills the running sandboxed processes

    async def finish(self) -> None:
        return None

    def close(self) -> None:
        return None


def make_executor(config: RunConfig, sandbox: Sandbox | None, *, warn: Callable[[str], None]) -> Executor:
    """The executor `evaluation.executor` names: "local" over `sandbox` (which it needs), or "ray" on the cluster
    of `evaluation.ray_address` / RAY_ADDRESS (a local one when neither is set); ClusterError when unreachable."""
    if config.evaluation.executor == "local":
        if sandbox is None:
            raise ValueError("the local executor needs this machine's sandbox")
        return LocalExecutor(sandbox, slots=config.evaluation.concurrency)
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise ConfigError(
            "evaluation.executor = ray needs Ray, which is not installed",
            fix="pip install 'cambrian[ray]' on this machine and on every node, or use --executor local",
        )
    from cambrian.meta_agent.search._ray_executor import RayExecutor  # imports ray: only runs that use it pay for it

    return RayExecutor.connect(config, warn=warn)
