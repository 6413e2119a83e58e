"""Starting the node pools of a Ray cluster: one `NodePool` actor pinned to each live node, started at
once; the checks and messages that go with it (an unreachable address, a node that cannot run the
sandbox the config demands, a node that dies while its pool starts). Used by `RayExecutor`."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.errors import ClusterError
from cambrian.meta_agent.search._ray_node import NodePool, NodeReport, NodeSettings
from cambrian.meta_agent.search._ray_slots import NodeHandle
from cambrian.sandbox.base import SandboxError

START_TIMEOUT_S = 300.0  # a node's pool may pull nothing but still start containers


def lost_node_errors() -> tuple[type[Exception], ...]:
    """What awaiting a call on a node's actor raises when the node (or the actor) is gone. A node that Ray
    marks dead after it was listed alive (its raylet missed heartbeats on a busy machine, as in a CI run on two
    cores) cannot take the actor pinned to it: ActorUnschedulableError."""
    import ray.exceptions

    return (
        ray.exceptions.ActorUnschedulableError,
        ray.exceptions.RayActorError,
        ray.exceptions.NodeDiedError,
        ray.exceptions.ObjectLostError,
        ray.exceptions.WorkerCrashedError,
        ray.exceptions.OwnerDiedError,
    )


async def awaited(reference: Any) -> Any:
    """A Ray ObjectRef's value, as a coroutine (for asyncio.gather)."""
    return await reference


NO_CLUSTER_FIX = (
    "start one with `ray start --head` (and `ray start --address=HEAD:PORT` on each other node), then set "
    "evaluation.ray_address or RAY_ADDRESS to HEAD:PORT (or 'auto' on a node of it); leave both unset to start "
    "a local cluster for the run"
)


def check_reachable(address: str | None) -> None:
    """Refuse a HOST:PORT nobody listens on at once (Ray itself retries such an address for minutes)."""
    if address is None or address in ("auto", "local") or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ClusterError(f"the Ray address {address!r} is not HOST:PORT, 'auto' or a ray:// URL", fix=NO_CLUSTER_FIX)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ClusterError(f"no Ray cluster answers at {address}: {exc}", fix=NO_CLUSTER_FIX) from None


def node_settings(config: RunConfig) -> NodeSettings:
    evaluation = config.evaluation
    return NodeSettings(
        sandbox=evaluation.sandbox,
        image=evaluation.image,
        slots=evaluation.concurrency,
        memory_mb=evaluation.memory_mb,
        run_label=config.name or "",
    )


def live_nodes() -> list[dict[str, Any]]:
    import ray

    return [node for node in ray.nodes() if node.get("Alive")]


def pool_actors(settings: NodeSettings, nodes: list[dict[str, Any]]) -> list[Any]:
    """A `NodePool` actor pinned to each of `nodes` (not started yet)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # num_cpus=0: a pool waits on sandboxes; its slots are counted here, not by Ray's CPU accounting.
    actor_class = ray.remote(num_cpus=0, max_restarts=0)(NodePool)
    return [
        actor_class.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote(
            settings, node["NodeID"]
        )
        for node in nodes
    ]


def stop_actor(actor: Any) -> None:
    import ray

    try:
        ray.wait([actor.stop.remote()], timeout=30)
    finally:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001 - its node is already gone
            pass


def start_pools(config: RunConfig, *, warn: Callable[[str], None]) -> list[NodeHandle]:
    """A `NodePool` on every live node, each started; refuses (naming the node) any that cannot start."""
    import ray

    evaluation = config.evaluation
    live = live_nodes()
    if not live:
        raise ClusterError("the Ray cluster has no live node", fix="start a node with `ray start --address=HEAD:PORT`")
    actors = pool_actors(node_settings(config), live)
    starts = [actor.start.remote() for actor in actors]
    started: list[tuple[NodeReport, dict[str, Any], Any]] = []
    try:
        _, late = ray.wait(starts, num_returns=len(starts), timeout=START_TIMEOUT_S)
        if late:
            raise TimeoutError(f"{len(late)} of {len(starts)} pools had not started after {START_TIMEOUT_S:.0f} s")
        for start, info, actor in zip(starts, live, actors):
            try:
                started.append((ray.get(start), info, actor))
            except lost_node_errors() as lost:
                # A node that died just now (Ray still listed it as alive): left out, as if it had died mid-run.
                warn(
                    f"Ray node {info.get('NodeManagerAddress')} (node {str(info['NodeID'])[:12]}) died while its "
                    f"pool started ({type(lost).__name__}); the run goes on without it"
                )
    except Exception as exc:
        for actor in actors:
            ray.kill(actor)
        raise ClusterError(
            f"the Ray nodes' sandbox pools did not start: {type(exc).__name__}: {exc}",
            fix="check `ray status` and that every node runs this Cambrian in the same Python environment",
        ) from exc
    if not started:
        raise ClusterError("every Ray node died while its pool started", fix="check `ray status`, then start again")
    nodes = [
        NodeHandle(report.node_id, str(info["NodeManagerAddress"]), report.host, report.sandbox or "", actor)
        for report, info, actor in started
    ]
    reports = [report for report, _, _ in started]
    broken = [(node, report) for node, report in zip(nodes, reports) if report.sandbox is None]
    if broken:
        for node in nodes:
            ray.wait([node.actor.stop.remote()], timeout=30)
            ray.kill(node.actor)
        node, report = broken[0]
        raise SandboxError(
            f"Ray node {node} cannot run the {evaluation.sandbox} sandbox: {report.problem}"
            + (f" ({len(broken) - 1} more nodes likewise)" if len(broken) > 1 else ""),
            fix=f"on that node: {report.fix or 'start the Docker engine'}"
            + (" and build the image with `cambrian sandbox build`" if "sandbox build" not in report.fix else "")
            + "; or set evaluation.sandbox = auto to use the local sandbox on nodes without Docker",
        )
    for node, report in zip(nodes, reports):
        if report.note:
            warn(f"Ray node {node}: {report.note}")
    return nodes
