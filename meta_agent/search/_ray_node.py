"""One Ray node's sandbox pool: trusted Cambrian code that runs and scores task runs on that node.

`RayExecutor` places one `NodePool` actor on every node of the cluster (pinned with
NodeAffinitySchedulingStrategy). The actor builds the node's own sandbox when it starts: Docker, with
its pre-started container pool, where the node has an engine and the sandbox image (or the config
demands it, and then a node without one is reported, never silently downgraded), the local sandbox
otherwise. It runs one task per call, on one of its slots, for one agent's evaluation (a key the driver
makes per evaluation): the task runs in the session this node keeps for that (evaluation, slot), opened
on the evaluation's first task there and kept for its later ones (for Docker: one container per agent
and slot, not per task; between runs the session wipes the work dir and kills leftover processes), then
the benchmark's check run (in a one-run session of its own) and `score` — all here, in this actor's
process, never in the agent's: the agent's code runs only inside the sandbox, and the relay's token
stays in this process. A session never serves two agents: a slot that holds another evaluation's
session closes it before opening one for the new evaluation, and `release(evaluation)` closes an
evaluation's sessions when the driver has recorded its last stage. With a grant, the agent's FM socket
is served by a `SocketRelay` to the driver's gateway, kept with the session.

A parent agent writing its child (`run_parent`, the self_modify operator) runs here too, on a slot, in
a session of its own that is closed after its one run; the driver built its spec (the benchmark's
`run_spec`) and reads what it wrote. `kill_runs` (the driver's second Ctrl-C) closes this node's
sandbox, which kills every run in progress here: they come back as faults, and the pool takes no more.

This module imports no Ray: the executor wraps `NodePool` with `ray.remote`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import secrets
import shutil
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cambrian.evaluators.base import Benchmark, Genome
from cambrian.evaluators.runner import Limits, TaskJob, TaskRun, run_task
from cambrian.meta_agent.llm.gateway import SOCKET_ENV, TOKEN_ENV, GatewayError
from cambrian.meta_agent.llm.remote import RelayGrant, SocketRelay
from cambrian.sandbox.base import (
    FM_SOCKET_INSIDE,
    RunResult,
    RunSpec,
    Sandbox,
    SandboxError,
    SandboxSession,
    pid_alive,
    socket_folder_mode,
)

_BENCHMARKS_KEPT = 4  # benchmarks a node keeps deserialized (a run has one; a few for holdout and tests)


@dataclass(frozen=True)
class NodeSettings:
    """What a node's pool is built from (`evaluation.*` of the run).

    sandbox: "auto" | "docker" | "local"; image: the Docker image; slots: task runs at once on this node
    (also the Docker pool's size); memory_mb: per container (None: 1024); run_label: the containers' label.
    """

    sandbox: str
    image: str
    slots: int
    memory_mb: int | None
    run_label: str


@dataclass(frozen=True)
class NodeReport:
    """What a node's pool started with: its sandbox backend, or the problem that stopped it (with the fix)."""

    node_id: str
    host: str  # the node's hostname, for messages
    sandbox: str | None  # "docker" | "local"; None when it could not start
    note: str = ""  # e.g. why auto chose the local sandbox here
    problem: str = ""
    fix: str = ""


@dataclass(frozen=True)
class NodeFault:
    """An infrastructure fault on the node (sandbox or FM relay), returned rather than raised so the driver
    gets the message and fix intact."""

    message: str
    fix: str


@dataclass(frozen=True)
class TaskOrder:
    """One task run the driver sends a node (`NodePool.run_task`), as one argument: Ray serializes each argument
    of a call on its own (measured: the driver's event-loop thread took 1.48-1.62 ms per task with eight, 1.12-1.25
    with this one object).

    evaluation: the driver's key of this agent's evaluation (one per `RayExecutor.evaluate` call).
    benchmark_box: [ObjectRef of the benchmark], fetched once per key (a list, so Ray leaves it unresolved).
    """

    evaluation: str
    slot: int
    benchmark_key: str
    benchmark_box: list[Any]
    genome: Genome
    job: TaskJob
    limits: Limits
    grant: RelayGrant | None


@dataclass(eq=False)
class _HeldSession:
    """The session one evaluation keeps on one slot of this node between its task runs, with its FM relay.

    busy: a task runs in it now; released: the evaluation ended while it ran (closed when the run ends).
    """

    evaluation: str
    session: SandboxSession
    relay: SocketRelay | None = None
    grant: RelayGrant | None = None
    socket_name: str = ""  # where a sandbox sharing this host finds the FM socket (a name nobody can guess)
    busy: bool = False
    released: bool = False


NODE_DIR_ROOT = "/tmp"
NODE_DIR_PREFIX = "cambrian-node-"  # then the pool process's pid, a dash and mkdtemp's random part


def remove_dead_node_dirs(root: str = NODE_DIR_ROOT) -> list[Path]:
    """Remove the folders (FM sockets, sandbox mounts) of node pools on this host whose process is gone,
    ours only (same owner, not a link); return them. A live pool's folder is never touched."""
    removed = []
    for path in Path(root).glob(f"{NODE_DIR_PREFIX}*-*"):
        pid_text = path.name[len(NODE_DIR_PREFIX) :].split("-", 1)[0]
        try:
            info = path.lstat()
        except OSError:
            continue  # gone meanwhile
        mine = info.st_uid == os.getuid() and path.is_dir() and not path.is_symlink()
        if not mine or not pid_text.isdigit() or pid_alive(int(pid_text)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


class NodePool:
    """The sandbox pool of the node this actor runs on (see the module doc). Methods run on the actor's
    event loop; sandbox runs go to worker threads, the FM relays stay on the loop."""

    def __init__(self, settings: NodeSettings, node_id: str) -> None:
        self.settings = settings
        self.node_id = node_id
        self.sandbox: Sandbox | None = None
        self._benchmarks: dict[str, Benchmark] = {}
        self._slots: asyncio.Semaphore | None = None
        self._dir: Path | None = None
        self._held: dict[int, _HeldSession] = {}  # slot -> the session it keeps for one evaluation
        self._closing: set[asyncio.Task[None]] = set()  # sessions being closed in the background
        self.sessions_opened = 0  # since the start (for Docker: a container each), for benches and tests

    async def start(self) -> NodeReport:
        """Build this node's sandbox (and its pre-started pool); a report, never an exception."""
        host = socket.gethostname()
        loop = asyncio.get_running_loop()
        workers = 2 * self.settings.slots + 4  # a run and a session start/close per slot, with room
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="cambrian-node"))
        self._slots = asyncio.Semaphore(self.settings.slots)
        # Unix socket paths are limited to 107 bytes: a short folder (0700, 0711 where sandbox users pass).
        # Its name carries this process's pid: a node killed mid-run leaves it behind, and the next start on
        # this host removes it (its process is gone).
        await asyncio.to_thread(remove_dead_node_dirs)
        self._dir = Path(tempfile.mkdtemp(prefix=f"{NODE_DIR_PREFIX}{os.getpid()}-", dir=NODE_DIR_ROOT))
        try:
            sandbox, note = await asyncio.to_thread(self._build_sandbox)
        except SandboxError as exc:
            return NodeReport(self.node_id, host, None, problem=str(exc), fix=exc.fix)
        os.chmod(self._dir, socket_folder_mode(sandbox))  # its relay sockets: see sandbox.base
        self.sandbox = sandbox
        return NodeReport(self.node_id, host, sandbox.name, note=note)

    def _build_sandbox(self) -> tuple[Sandbox, str]:
        from cambrian.sandbox.image import engine_available, image_status
        from cambrian.sandbox.local import LocalSandbox, isolation_summary

        settings = self.settings
        choice = settings.sandbox
        if choice == "auto":
            status = image_status(settings.image) if engine_available() else None
            if status is None or not status.current:
                reason = "no Docker engine answers" if status is None else f"the image {settings.image} is not current"
                return LocalSandbox(), f"{reason}, so agents run in the LOCAL sandbox here: {isolation_summary()}"
            choice = "docker"
        if choice == "local":
            return LocalSandbox(), ""
        from cambrian.sandbox.docker import DockerSandbox

        assert self._dir is not None
        fm_dir = self._dir / "fm"
        fm_dir.mkdir(mode=0o711)
        os.chmod(fm_dir, 0o711)
        return DockerSandbox(
            image=settings.image,
            pool_size=settings.slots,
            run_label=settings.run_label,
            memory_mb=settings.memory_mb or 1024,
            fm_dir_root=fm_dir,
        ), ""

    async def run_task(self, order: TaskOrder) -> TaskRun | NodeFault:
        """Run and score one task of `order.genome` on `order.slot`, in the session this node keeps for
        (`order.evaluation`, `order.slot`); with a grant, its FM socket relays to the driver."""
        assert self.sandbox is not None and self._slots is not None and self._dir is not None, "start() first"
        benchmark = await self._benchmark(order.benchmark_key, order.benchmark_box)
        async with self._slots:
            sandbox = self.sandbox
            try:
                held = await self._session_for(order.evaluation, order.slot)
            except SandboxError as exc:
                return NodeFault(str(exc), exc.fix)
            faulted = True
            try:
                env = await self._serve_fm(held, order.grant)
                outcome = await asyncio.to_thread(
                    run_task,
                    benchmark,
                    order.genome,
                    held.session,
                    order.job,
                    limits=order.limits,
                    env=env,
                    checker=sandbox,
                )
                faulted = False
                return outcome
            except (SandboxError, GatewayError) as exc:
                return NodeFault(str(exc), exc.fix)
            except OSError as exc:
                return _relay_fault(exc)
            finally:
                held.busy = False
                if faulted or held.released:  # a session that failed under a run is not trusted with the next
                    if self._held.get(order.slot) is held:
                        del self._held[order.slot]
                    await self._close(held)

    async def run_parent(self, spec: RunSpec, grant: RelayGrant | None) -> RunResult | NodeFault:
        """Run a parent agent writing its child (`spec`, made by the driver) on one of this node's slots, in a
        session of its own closed after the run; with a grant, its FM socket relays to the driver."""
        assert self.sandbox is not None and self._slots is not None and self._dir is not None, "start() first"
        async with self._slots:
            try:
                session = await asyncio.to_thread(self.sandbox.session)
            except SandboxError as exc:
                return NodeFault(str(exc), exc.fix)
            held = _HeldSession("", session, socket_name=f"fm-{secrets.token_hex(8)}.sock", busy=True)
            try:
                env = await self._serve_fm(held, grant)
                return await asyncio.to_thread(session.run, dataclasses.replace(spec, env={**spec.env, **env}))
            except (SandboxError, GatewayError) as exc:
                return NodeFault(str(exc), exc.fix)
            except OSError as exc:
                return _relay_fault(exc)
            finally:
                await self._close(held)

    async def _session_for(self, evaluation: str, slot: int) -> _HeldSession:
        """The session `slot` keeps for `evaluation` (marked busy), opened now when it keeps none for it."""
        assert self.sandbox is not None
        held = self._held.get(slot)
        if held is not None and not held.busy:
            if held.evaluation == evaluation:
                held.busy = True
                return held
            del self._held[slot]  # another agent's: never shared, closed meanwhile
            self._close_later(held)
        session = await asyncio.to_thread(self.sandbox.session)
        self.sessions_opened += 1
        fresh = _HeldSession(evaluation, session, socket_name=f"fm-{secrets.token_hex(8)}.sock", busy=True)
        if slot in self._held:
            # The driver gave this slot out again while a run it had cancelled still holds it here: this
            # run gets a session of its own, closed after it.
            fresh.released = True
        else:
            self._held[slot] = fresh
        return fresh

    async def _serve_fm(self, held: _HeldSession, grant: RelayGrant | None) -> dict[str, str]:
        """The env that points the agent at its FM socket, served by a relay kept with the session (started
        anew when the session moved to another container, whose socket folder differs)."""
        if grant is None:
            return {}
        assert self._dir is not None
        host_path = await asyncio.to_thread(held.session.fm_socket_host_path)
        # A sandbox sharing this host's file system finds the socket where it is, under a name no other
        # agent's program can guess (the folder cannot be listed).
        path = Path(host_path or self._dir / held.socket_name)
        if held.relay is None or held.relay.path != path or held.grant != grant:
            if held.relay is not None:
                await held.relay.close()
            held.relay, held.grant = SocketRelay(path, grant), grant
            await held.relay.start()
        return {SOCKET_ENV: FM_SOCKET_INSIDE if host_path else str(path), TOKEN_ENV: grant.agent_token}

    async def release(self, evaluation: str) -> int:
        """The evaluation has ended: close its sessions (in the background; one still running closes when its
        run ends). Returns how many it held here."""
        count = 0
        for slot, held in list(self._held.items()):
            if held.evaluation != evaluation:
                continue
            count += 1
            if held.busy:
                held.released = True
            else:
                del self._held[slot]
                self._close_later(held)
        return count

    async def sessions(self) -> tuple[int, dict[str, int]]:
        """Sessions opened since the start, and those kept now by evaluation key (for benches and tests)."""
        kept: dict[str, int] = {}
        for held in self._held.values():
            kept[held.evaluation] = kept.get(held.evaluation, 0) + 1
        return self.sessions_opened, kept

    def _close_later(self, held: _HeldSession) -> None:
        task = asyncio.ensure_future(self._close(held))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close(self, held: _HeldSession) -> None:
        """Close the relay, then the session (for Docker: its container is removed)."""
        if held.relay is not None:
            await held.relay.close()
            held.relay = None
        with contextlib.suppress(SandboxError):
            await asyncio.to_thread(held.session.close)

    async def _benchmark(self, key: str, box: list[Any]) -> Benchmark:
        known = self._benchmarks.get(key)
        if known is None:
            known = await box[0]  # an ObjectRef: deserialized once per benchmark
            if len(self._benchmarks) >= _BENCHMARKS_KEPT:
                self._benchmarks.pop(next(iter(self._benchmarks)))
            self._benchmarks[key] = known
        return known

    async def kill_runs(self) -> None:
        """Close this node's sandbox now, which kills every run in progress here (the driver's second Ctrl-C):
        they return as faults, and later runs are refused until `stop()` ends the pool."""
        if self.sandbox is not None:
            with contextlib.suppress(SandboxError):
                await asyncio.to_thread(self.sandbox.close)

    async def stop(self) -> None:
        """Close every kept session, then the sandbox (its containers are removed) and the socket folder."""
        held, self._held = list(self._held.values()), {}
        await asyncio.gather(*(self._close(one) for one in held), *self._closing, return_exceptions=True)
        if self.sandbox is not None:
            with contextlib.suppress(SandboxError):
                await asyncio.to_thread(self.sandbox.close)
            self.sandbox = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


def _relay_fault(exc: OSError) -> NodeFault:
    return NodeFault(
        f"cannot serve the agent's FM socket on this node: {exc}",
        "check that /tmp on the node is a writable local folder",
    )
