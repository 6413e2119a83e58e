"""`RayExecutor`: evaluation on a Ray cluster, one task per sandbox slot, staged evaluation kept.

The cluster: `evaluation.ray_address`, else RAY_ADDRESS, else a local cluster started for the run
("auto" attaches to a running cluster and fails when there is none). Every node alive at the start
gets a `NodePool` actor pinned to it, which builds the node's own sandbox pool; each node has
`evaluation.concurrency` slots, so the cluster has concurrency x nodes (`slots`). A node that joins
later is found when an evaluation starts (the cluster is looked at every `node_scan_s` seconds, in the
background): it gets its pool, and its slots take tasks as soon as the pool has started; one that cannot
build the sandbox the config demands is left out with a warning naming it (the run goes on). Starting
the pools, and what is refused then: meta_agent.search._ray_pools.

One agent's evaluation follows its `StagedPlan`: the jobs of a stage go to free slots at once (slots
handed out across nodes in turn), and the next stage starts only when every run of this one is scored
and passed its threshold. Scoring happens in the node's actor, trusted code beside the sandbox, never in
the agent's process.

Sessions: a node keeps one sandbox session (for Docker, one container) per (evaluation, slot) for the
evaluation's later tasks on that slot, and never lets two agents share one (`NodePool`); free slots go
out with affinity for those sessions (`FreeSlots`, meta_agent.search._ray_slots). When an evaluation
ends (its last stage recorded, or it failed), the nodes close its sessions (`NodePool.release`).

Faults: a node (or its actor) that dies costs only the runs it held: each runs again on a live node and
counts in `infra_faults`, never against the agent; its slots are dropped for the rest of the run. A
sandbox or relay fault on a node (`NodeFault`) is the agent evaluation's infrastructure fault
(SandboxError), which the loop retries like a local one. With no live node left, evaluation raises
SandboxError.

FM for agents: with a gateway, each evaluation opens one channel (its budget) on the gateway's TCP
listener and sends the nodes its `RelayGrant`; the channel closes when the evaluation ends, and the
token with it (meta_agent.llm.remote).

A parent agent writing its child (`self_modify`) runs on a node too (`run_parent`): one free slot, a
session of its own closed after the run, its FM calls through a grant of their own (purpose
"self_modify", no agent id), so the driver's machine never runs agent code. A second Ctrl-C
(`kill_running`) has every node close its sandbox, which kills the runs in progress there; their
evaluations end as infrastructure faults and their agents stay queued for `resume`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cambrian.evaluators.base import Benchmark, Genome, Task
from cambrian.evaluators.runner import AgentResult, Limits, StagedPlan, TaskJob, TaskRun
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.errors import ClusterError
from cambrian.meta_agent.llm.gateway import FMGateway
from cambrian.meta_agent.llm.remote import GatewayListener, RelayGrant, RemoteAgent
from cambrian.meta_agent.search._ray_node import NodeFault, NodeSettings, TaskOrder
from cambrian.meta_agent.search._ray_pools import (
    NO_CLUSTER_FIX,
    START_TIMEOUT_S,
    awaited,
    check_reachable,
    live_nodes,
    lost_node_errors,
    node_settings,
    pool_actors,
    start_pools,
    stop_actor,
)
from cambrian.meta_agent.search._ray_slots import FreeSlots, NodeHandle, Slot
from cambrian.meta_agent.search.evaluation import (
    EvaluationContext,
    SelfModifyRun,
    parent_run_outcome,
    parent_run_spec,
)
from cambrian.sandbox.base import RunResult, SandboxError

log = logging.getLogger(__name__)

NODE_SCAN_S = 15.0  # how often (at most) evaluations look for nodes that joined the cluster


@dataclass(frozen=True)
class _SharedBenchmark:
    key: str
    box: list[Any]  # [ObjectRef]: nodes fetch it once per key


class RayExecutor:
    """Evaluations spread task by task over a Ray cluster's nodes (see the module doc).

    Build it with `RayExecutor.connect(config, warn=...)`; `close()` stops the node pools and, when this
    executor connected to Ray, disconnects (a local cluster it started stops with it).
    """

    name = "ray"

    def __init__(
        self,
        nodes: list[NodeHandle],
        *,
        slots_per_node: int,
        gateway_host: str,
        gateway_port: int,
        owns_connection: bool,
        gateway_tls: bool = True,
        settings: NodeSettings | None = None,
        warn: Callable[[str], None] = log.warning,
    ) -> None:
        self.nodes = nodes
        self.settings = settings  # how a joining node builds its pool; None: nodes never join
        self.node_scan_s = NODE_SCAN_S
        self._warn = warn
        self._known = {node.node_id for node in nodes}  # node ids with a pool, or left out
        self._next_scan = 0.0  # monotonic time of the next look: the first evaluation looks
        self._scan: asyncio.Task[int] | None = None
        self._joining: list[Any] = []  # pool actors started on joining nodes (killed at close)
        self.slots_per_node = slots_per_node
        self.slots = slots_per_node * len(nodes)
        self.gateway_host = gateway_host
        self.gateway_port = gateway_port
        self.gateway_tls = gateway_tls
        self.infra_faults = 0  # task runs lost with a dead node and run again elsewhere
        self.tasks_by_node: collections.Counter[str] = collections.Counter()  # node id -> task runs done
        self.running_by_node: collections.Counter[str] = collections.Counter()  # node id -> task runs in flight
        self._owns_connection = owns_connection
        self._benchmarks: dict[int, tuple[Benchmark, _SharedBenchmark]] = {}  # id(benchmark) -> shared copy
        self._free: FreeSlots | None = None
        self._free_loop: asyncio.AbstractEventLoop | None = None
        self._listener: GatewayListener | None = None
        self._listener_lock: asyncio.Lock | None = None
        self._closed = False

    # ----- connecting -----------------------------------------------------------------------

    @classmethod
    def connect(cls, config: RunConfig, *, warn: Callable[[str], None]) -> RayExecutor:
        """Attach to (or start) the cluster and start a sandbox pool on each of its live nodes.

        ClusterError: no cluster at the address, or no live node; SandboxError: a node cannot build the
        sandbox the config demands (the message names the node, the fix says what to do there).
        """
        import ray

        evaluation = config.evaluation
        address = evaluation.ray_address or os.environ.get("RAY_ADDRESS") or None
        owns = not ray.is_initialized()
        if owns:
            check_reachable(address)
            try:
                # "local": a fresh cluster for this run, never one an earlier `ray start` left behind.
                ray.init(
                    address=address or "local",
                    logging_level=logging.WARNING,
                    log_to_driver=False,
                    include_dashboard=False if address is None else None,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ClusterError(f"no Ray cluster answers at {address!r}: {exc}", fix=NO_CLUSTER_FIX) from exc
        try:
            nodes = start_pools(config, warn=warn)
            host = evaluation.gateway_host or ray.util.get_node_ip_address()
        except BaseException:
            if owns:
                ray.shutdown()
            raise
        return cls(
            nodes,
            slots_per_node=evaluation.concurrency,
            gateway_host=host,
            gateway_port=evaluation.gateway_port,
            owns_connection=owns,
            gateway_tls=evaluation.gateway_tls,
            settings=node_settings(config),
            warn=warn,
        )

    # ----- nodes that join -----------------------------------------------------------------

    async def join_new_nodes(self) -> int:
        """Start a pool on every live node that has none yet; its slots take tasks from then on. Returns how
        many joined. A node whose pool cannot start (or cannot build the demanded sandbox) is left out for
        the rest of the run, with a warning that names it and the fix."""
        if self.settings is None or self._closed:
            return 0
        live = await asyncio.to_thread(live_nodes)
        new = [info for info in live if info["NodeID"] not in self._known]
        if not new:
            return 0
        self._known.update(str(info["NodeID"]) for info in new)
        actors = pool_actors(self.settings, new)
        self._joining.extend(actors)
        replies = await asyncio.gather(
            *(asyncio.wait_for(awaited(actor.start.remote()), START_TIMEOUT_S) for actor in actors),
            return_exceptions=True,
        )
        joined = 0
        for info, actor, reply in zip(new, actors, replies):
            where = f"{info.get('NodeManagerHostname') or info.get('NodeManagerAddress')} (node {info['NodeID'][:12]})"
            if isinstance(reply, BaseException) or reply.sandbox is None:
                problem = f"{type(reply).__name__}: {reply}" if isinstance(reply, BaseException) else reply.problem
                fix = "" if isinstance(reply, BaseException) else reply.fix
                self._warn(
                    f"Ray node {where} joined the cluster but its sandbox pool did not start ({problem}); "
                    f"it takes no tasks in this run{'; on that node: ' + fix if fix else ''}"
                )
                await asyncio.to_thread(stop_actor, actor)
                continue
            node = NodeHandle(reply.node_id, str(info["NodeManagerAddress"]), reply.host, reply.sandbox, actor)
            self.nodes.append(node)
            self.slots += self.slots_per_node
            if self._free is not None and self._free_loop is asyncio.get_running_loop():
                self._free.add(Slot(node, index) for index in range(self.slots_per_node))
            self._warn(
                f"Ray node {node} joined: {self.slots_per_node} more slots ({reply.sandbox} sandbox), "
                f"{self.slots} in all"
            )
            joined += 1
        return joined

    def _look_for_nodes(self) -> None:
        """Every node_scan_s at most: look for joined nodes in the background (an evaluation never waits)."""
        if self.settings is None or (self._scan is not None and not self._scan.done()):
            return
        now = time.monotonic()
        if now < self._next_scan:
            return
        self._next_scan = now + self.node_scan_s
        self._scan = asyncio.ensure_future(self._join_quietly())

    async def _join_quietly(self) -> int:
        try:
            return await self.join_new_nodes()
        except Exception as exc:  # noqa: BLE001 - a failed look must not fail the evaluation that started it
            log.warning("looking for Ray nodes that joined failed (%r); looking again in %.0f s", exc, self.node_scan_s)
            return 0

    # ----- evaluating -------------------------------------------------------------------------

    async def evaluate(
        self, context: EvaluationContext, genome: Genome, *, agent_id: int, iteration: int, split: str, repeat: int = 0
    ) -> AgentResult:
        benchmark, gateway, limits = context.benchmark, context.gateway, context.limits_of(repeat)
        self._look_for_nodes()
        plan = StagedPlan(benchmark, genome, split)
        shared = self._shared(benchmark)
        remote: RemoteAgent | None = None
        if gateway is not None:
            fm_budget = context.budget(split)
            listener = await self._listener_for(gateway)
            remote = await listener.open_agent(
                agent_id,
                max_calls=fm_budget.max_calls,
                max_tokens=fm_budget.max_tokens,
                run_seed=fm_budget.run_seed,
                iteration=iteration,
            )
        evaluation = uuid.uuid4().hex  # the key of this evaluation's sessions on the nodes
        try:
            while (jobs := plan.next_stage()) is not None:
                grant = remote.grant if remote else None
                plan.record(await self._run_stage(evaluation, shared, genome, jobs, limits, grant))
        finally:
            await self._release(evaluation)
            if remote is not None:
                await remote.close()
        return plan.result()

    async def _run_stage(
        self,
        evaluation: str,
        shared: _SharedBenchmark,
        genome: Genome,
        jobs: list[TaskJob],
        limits: Limits,
        grant: RelayGrant | None,
    ) -> list[TaskRun]:
        """Every job of one stage at once on free slots; the first fault cancels the others."""
        running = [asyncio.ensure_future(self._run_job(evaluation, shared, genome, job, limits, grant)) for job in jobs]
        try:
            return list(await asyncio.gather(*running))
        except BaseException:
            for future in running:
                future.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            raise

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
        gateway, fm_budget = context.gateway, dataclasses.replace(context.fm_budget, run_seed=fm_seed)
        self._look_for_nodes()
        spec = parent_run_spec(context.benchmark, parent, task, context.limits)  # trusted code: the benchmark's
        remote: RemoteAgent | None = None
        if gateway is not None:
            listener = await self._listener_for(gateway)
            remote = await listener.open_agent(
                None,
                max_calls=fm_budget.max_calls,
                max_tokens=fm_budget.max_tokens,
                run_seed=fm_budget.run_seed,
                iteration=iteration,
                purpose="self_modify",
                proposal_id=proposal_id,
            )
        grant = remote.grant if remote else None
        key = uuid.uuid4().hex  # a slot key of its own: the run keeps no session after it
        try:
            result: RunResult = await self._on_a_slot(
                key,
                f"the parent's run (iteration {iteration})",
                lambda node, slot: node.actor.run_parent.remote(spec, grant),
            )
        finally:
            self._free_slots().forget(key)  # its slot keeps no session for it
            if remote is not None:
                await remote.close()
        return parent_run_outcome(result, spec.timeout_s, remote.channel if remote else None)

    async def _run_job(
        self,
        evaluation: str,
        shared: _SharedBenchmark,
        genome: Genome,
        job: TaskJob,
        limits: Limits,
        grant: RelayGrant | None,
    ) -> TaskRun:
        return await self._on_a_slot(
            evaluation,
            f"task {job.task.id}",
            lambda node, slot: node.actor.run_task.remote(
                TaskOrder(evaluation, slot.index, shared.key, shared.box, genome, job, limits, grant)
            ),
        )

    async def _on_a_slot(self, evaluation: str, what: str, call: Callable[[NodeHandle, Slot], Any]) -> Any:
        """`call(node, slot)` (a node actor's method) on a free slot taken for `evaluation`, awaited; run again
        on a live node when its node dies (`what` names the run in the warning). A NodeFault: SandboxError."""
        lost = lost_node_errors()
        free = self._free_slots()
        while True:
            slot = await free.take(evaluation)
            node = slot.node
            self.running_by_node[node.node_id] += 1
            try:
                outcome = await call(node, slot)
            except lost as exc:
                self._lose(node, what, exc)
                continue
            except asyncio.CancelledError:
                free.give_back(slot)
                raise
            finally:
                self.running_by_node[node.node_id] -= 1
            free.give_back(slot)
            if isinstance(outcome, NodeFault):
                raise SandboxError(f"on Ray node {node}: {outcome.message}", fix=outcome.fix)
            self.tasks_by_node[node.node_id] += 1
            return outcome

    def _lose(self, node: NodeHandle, what: str, exc: Exception) -> None:
        """A node died (or its actor did) with a run on it: drop its slots; the run goes again elsewhere."""
        self.infra_faults += 1
        self._lose_node(node, exc)
        log.warning("%s lost with node %s; running it again on a live node", what, node)

    def _lose_node(self, node: NodeHandle, exc: BaseException) -> None:
        if node.alive:
            node.alive = False
            log.warning("Ray node %s is gone (%s); its task runs go to the other nodes", node, type(exc).__name__)

    def _free_slots(self) -> FreeSlots:
        """The free slots, nodes in turn (so one agent's first tasks land on different nodes); made anew for
        each event loop, since a run's evaluations never outlive its loop."""
        loop = asyncio.get_running_loop()
        if self._free is None or self._free_loop is not loop:
            slots = [Slot(node, index) for index in range(self.slots_per_node) for node in self.nodes if node.alive]
            self._free = FreeSlots(slots)
            self._free_loop = loop
        return self._free

    async def _release(self, evaluation: str) -> None:
        """Have the nodes close the sessions they keep for `evaluation` (a node that is gone has none left)."""
        if self._free is None or self._free_loop is not asyncio.get_running_loop():
            return
        nodes = [node for node in self._free.forget(evaluation) if node.alive]
        replies = await asyncio.gather(
            *(awaited(node.actor.release.remote(evaluation)) for node in nodes), return_exceptions=True
        )
        for node, reply in zip(nodes, replies):
            if isinstance(reply, lost_node_errors()):
                self._lose_node(node, reply)
            elif isinstance(reply, BaseException):  # the agent's result stands; the pool's stop() closes the rest
                log.warning("Ray node %s could not close an evaluation's sessions: %r", node, reply)

    def _shared(self, benchmark: Benchmark) -> _SharedBenchmark:
        """The benchmark in Ray's object store, put once (nodes deserialize it once per key)."""
        import ray

        held = self._benchmarks.get(id(benchmark))
        if held is None or held[0] is not benchmark:
            held = (benchmark, _SharedBenchmark(uuid.uuid4().hex, [ray.put(benchmark)]))
            self._benchmarks[id(benchmark)] = held
        return held[1]

    async def _listener_for(self, gateway: FMGateway) -> GatewayListener:
        if self._listener_lock is None:
            self._listener_lock = asyncio.Lock()
        async with self._listener_lock:
            if self._listener is not None and self._listener.gateway is gateway:
                return self._listener
            if self._listener is not None:
                await self._listener.close()
            listener = GatewayListener(gateway, host=self.gateway_host, port=self.gateway_port, tls=self.gateway_tls)
            await listener.start()
            self._listener = listener
            return listener

    # ----- ending -------------------------------------------------------------------------------

    def kill_running(self) -> None:
        """Have every live node close its sandbox now, which kills the runs in progress there (not waited for:
        this answers a second Ctrl-C). Their evaluations end as infrastructure faults; the nodes take no more
        runs, and `close()` stops their pools as usual."""
        for node in self.nodes:
            if node.alive:
                node.actor.kill_runs.remote()

    async def finish(self) -> None:
        if self._scan is not None:
            scan, self._scan = self._scan, None
            await scan  # a pool starting on a joining node is kept (or stopped), never left half-made
        if self._listener is not None:
            await self._listener.close()
        self._listener = None
        self._listener_lock = None
        self._free = None
        self._free_loop = None

    def close(self) -> None:
        """Stop every node's pool (containers removed), then disconnect when this executor connected."""
        if self._closed:
            return
        self._closed = True
        import ray

        live = [node for node in self.nodes if node.alive]
        stops = [node.actor.stop.remote() for node in live]
        try:
            ray.wait(stops, num_returns=len(stops), timeout=60)
        finally:
            for actor in [node.actor for node in self.nodes] + self._joining:
                try:
                    ray.kill(actor)
                except Exception:  # noqa: BLE001 - a dead node's actor is already gone
                    pass
            if self._owns_connection:
                ray.shutdown()

    def summary(self) -> str:
        """One line: nodes, slots, and task runs per node."""
        per_node = ", ".join(
            f"{node.host}/{node.node_id[:8]}: {self.tasks_by_node[node.node_id]}" for node in self.nodes
        )
        return f"Ray: {len(self.nodes)} nodes x {self.slots_per_node} slots; task runs {per_node}"
