"""The Docker backend: hardened containers, pre-started, each serving the runs of one agent.

Every container gets: no network (`network_mode="none"`), the non-root
sandbox user (uid/gid 10001), a read-only root fs with tmpfs /work and /tmp,
memory = memory+swap limit (no swap), a CPU quota, a PID limit, every
capability dropped, no-new-privileges, no host mounts except a RunSpec's own
`mounts`, and the labels `cambrian=1`, `cambrian.run`, `cambrian.pid`,
`cambrian.host`. Its PID 1 is `container_runner.py`, which serves task
requests over the attached stdin/stdout, so a task costs one round trip
rather than a `docker run` (see that file for the per-task protocol).

Limits, and where they hold:
- container level, fixed when the sandbox is built (`memory_mb`, `cpus`,
  `pids`, `tmpfs_mb`): the ceiling for every run in the container. A spec's
  `cpus` and `pids` are not applied per run; the container's apply.
- per run, from the spec: `memory_mb` as RLIMIT_AS (a larger spec value is
  still capped by the container's memory), `timeout_s` (the runner kills the
  task's process group; a host-side watchdog kills the whole container if no
  reply comes within timeout + `WATCHDOG_GRACE_S`), output caps, `max_file_bytes`.
- `network=True` is refused: these containers never get a network; an agent
  reaches the FM through a mounted gateway socket.

Pool: `pool_size` containers are started ahead of need by a background
thread, which refills the pool as sessions take them. A session takes its
container on its FIRST run: mounts are fixed when a container is created, so a
first spec with `mounts` starts a dedicated container with them instead of
taking one from the pool (and a later spec with other mounts gets a fresh
container too). A container never serves two agents: `session.close()`
removes it. If a container dies or its watchdog fires, the session goes on in
a fresh container of its own.

Leftovers: at construction, containers labelled `cambrian=1` from this host
whose `cambrian.pid` process is gone are removed; `close()` removes every
container this sandbox made. Nothing else is ever removed or pruned.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import threading
import time
from typing import Any

import docker
import docker.errors

from cambrian.sandbox.base import FM_SOCKET_INSIDE, Mount, RunResult, RunSpec, SandboxError
from cambrian.sandbox.container_runner import REAP_GRACE_S
from cambrian.sandbox.docker_container import (
    DOCKER_ERRORS,
    ChannelClosed,
    ContainerLimits,
    NoReply,
    RunnerChannel,
    SandboxContainer,
    container_labels,
    hardened_settings,
    remove_dead_leftovers,
)
from cambrian.sandbox.guest import DRAIN_GRACE_S
from cambrian.sandbox.image import DEFAULT_IMAGE, ImageStatus, connect_engine, image_missing, image_stale, recipe_of
from cambrian.sandbox.local import check_relative_path

__all__ = ["DockerSandbox", "DockerSession", "ContainerLimits", "hardened_settings", "WATCHDOG_GRACE_S"]

#: Past a spec's timeout, how long the host waits for the runner's own timeout reply before it drops the whole
#: container (and the task's output with it). The runner may take REAP_GRACE_S + DRAIN_GRACE_S (5.5 s) to kill,
#: reap and drain the task, more on a loaded machine: at 3.5 s the watchdog fired first in 2 of 8 gateway
#: evaluations on Docker and their output was lost. A hung runner costs this much longer to detect.
WATCHDOG_GRACE_S = REAP_GRACE_S + DRAIN_GRACE_S + 10.0
START_TIMEOUT_S = 60.0  # how long a new container may take to say it is ready
_REFILL_BACKOFF_S = 2.0  # pool thread: pause after a failed start before trying again


class DockerSandbox:
    """Hardened Docker containers with a pre-started pool (see the module doc for what holds where).

    image: the sandbox image (`cambrian sandbox build` makes the default); one made by an
        older recipe (see sandbox.image.RECIPE_VERSION) is refused with the fix.
    pool_size: containers kept started ahead of need (0..); each holds up to memory_mb.
    run_label: stored as the `cambrian.run` label, to tell runs apart in `docker ps`.
    memory_mb, cpus, pids, tmpfs_mb: container-level limits (MiB, cores, processes, MiB per tmpfs).
    fm_dir_root: host folder for the per-container FM socket folders (None: no FM socket).
    client: a docker SDK client to use (default: the engine of DOCKER_HOST / the local socket).
    """

    name = "docker"
    isolated = True
    shares_host_paths = False  # each container's socket folder is bound at /run/cambrian

    def __init__(
        self,
        *,
        image: str = DEFAULT_IMAGE,
        pool_size: int = 2,
        run_label: str = "",
        memory_mb: int = 1024,
        cpus: float = 1.0,
        pids: int = 64,
        tmpfs_mb: int = 256,
        fm_dir_root: str | os.PathLike[str] | None = None,
        client: docker.DockerClient | None = None,
    ) -> None:
        self.image = image
        # Each container gets its own host folder under fm_dir_root, mounted read-only at /run/cambrian:
        # the FM gateway puts the socket of the agent the container serves there, so pooled containers
        # (whose mounts are fixed before the agent is known) still reach the FM, and only their own agent's.
        self.fm_dir_root = None if fm_dir_root is None else str(fm_dir_root)
        self.pool_size = max(0, int(pool_size))
        self.limits = ContainerLimits(memory_mb=memory_mb, cpus=cpus, pids=pids, tmpfs_mb=tmpfs_mb)
        self._owns_client = client is None
        self.client = client or connect_engine()
        self._labels = container_labels(run_label)
        try:
            status = ImageStatus(image, present=True, recipe=recipe_of(self.client.images.get(image).labels))
        except DOCKER_ERRORS as exc:
            if self._owns_client:
                self.client.close()
            if isinstance(exc, docker.errors.ImageNotFound):
                raise image_missing(image) from exc
            raise SandboxError(
                f"cannot inspect the sandbox image {image!r}: {exc}", fix="check the engine with `docker info`"
            ) from exc
        if status.stale:
            if self._owns_client:
                self.client.close()
            raise image_stale(status)
        self.leftovers_removed = remove_dead_leftovers(self.client)
        self._lock = threading.Condition()
        self._live: dict[str, SandboxContainer] = {}  # every container this sandbox made and has not removed
        self._ready: list[SandboxContainer] = []  # started, in the pool, untouched
        self._closed = False
        self.last_pool_error: SandboxError | None = None
        self._filler: threading.Thread | None = None
        if self.pool_size:
            self._filler = threading.Thread(target=self._fill_pool, name="cambrian-docker-pool", daemon=True)
            self._filler.start()

    # ----- the Sandbox protocol --------------------------------------------------------------

    def session(self) -> DockerSession:
        """A session for one agent's runs; it takes its container on its first run."""
        self._refuse_if_closed()
        return DockerSession(self)

    def run(self, spec: RunSpec) -> RunResult:
        """Run `spec` in a one-run session (its own container, removed afterwards)."""
        with self.session() as session:
            return session.run(spec)

    def close(self) -> None:
        """Stop refilling and remove every container this sandbox made (pool included). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify_all()
        if self._filler is not None:
            self._filler.join()
        with self._lock:
            doomed = list(self._live.values())
            self._live.clear()
            self._ready.clear()
        for container in doomed:
            container.remove()
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- containers ------------------------------------------------------------------------

    def container_ids(self) -> list[str]:
        """Ids of the containers this sandbox holds now (pool and sessions)."""
        with self._lock:
            return list(self._live)

    def take_container(self, mounts: tuple[Mount, ...]) -> SandboxContainer:
        """A started container with `mounts`: from the pool when it has no mounts, else a new one."""
        self._refuse_if_closed()
        if not mounts:
            with self._lock:
                if self._ready:
                    container = self._ready.pop(0)
                    self._lock.notify_all()
                    return container
        return self.start_container(mounts)

    def start_container(self, mounts: tuple[Mount, ...] = ()) -> SandboxContainer:
        """Create, attach and start one hardened container, and wait for its runner's ready frame."""
        fm_dir = None
        create_mounts = mounts
        if self.fm_dir_root is not None:
            fm_dir = tempfile.mkdtemp(prefix="c", dir=self.fm_dir_root)
            os.chmod(fm_dir, 0o755)  # the sandbox user (uid 10001) must reach the socket inside
            create_mounts = (*mounts, Mount(fm_dir, os.path.dirname(FM_SOCKET_INSIDE), read_only=True))
        settings = hardened_settings(self.image, limits=self.limits, labels=self._labels, mounts=create_mounts)
        try:
            created = self.client.containers.create(detach=True, **settings)
        except docker.errors.ImageNotFound as exc:
            raise image_missing(self.image) from exc
        except DOCKER_ERRORS as exc:
            raise SandboxError(
                f"cannot create a sandbox container: {exc}",
                fix="check the engine (`docker info`) and that every mount's host path exists",
            ) from exc
        container = SandboxContainer(created, RunnerChannel.attach(self.client, created.id), mounts, fm_dir=fm_dir)
        with self._lock:
            self._live[container.id] = container
        try:
            created.start()
            ready = container.channel.receive(deadline=time.monotonic() + START_TIMEOUT_S)
        except (NoReply, ChannelClosed, *DOCKER_ERRORS) as exc:
            self.discard(container)
            raise SandboxError(
                f"a sandbox container did not start: {exc} {container.channel.diagnostics()}".strip(),
                fix="run `cambrian sandbox check`; rebuild the image with `cambrian sandbox build --force`",
            ) from exc
        if ready.get("undumpable") is not True:
            self.discard(container)
            raise SandboxError(
                "the sandbox runner could not make itself non-dumpable (prctl through ctypes failed), so a task "
                "could write on its channel",
                fix="rebuild the image with `cambrian sandbox build --force` (its python3 needs the ctypes module)",
            )
        return container

    def discard(self, container: SandboxContainer) -> None:
        """Remove `container` (never back into the pool)."""
        with self._lock:
            self._live.pop(container.id, None)
        container.remove()

    def _fill_pool(self) -> None:
        while True:
            with self._lock:
                while not self._closed and len(self._ready) >= self.pool_size:
                    self._lock.wait()
                if self._closed:
                    return
            try:
                container = self.start_container()
            except SandboxError as exc:
                self.last_pool_error = exc  # sessions then start their own and raise it themselves
                with self._lock:
                    self._lock.wait(_REFILL_BACKOFF_S)
                continue
            with self._lock:
                if not self._closed:
                    self._ready.append(container)
                    continue
            self.discard(container)

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise SandboxError("this DockerSandbox was closed", fix="create a new DockerSandbox for further runs")


class DockerSession:
    """The runs of one agent, all in one container (a fresh one only if the last died or timed out)."""

    def __init__(self, sandbox: DockerSandbox) -> None:
        self._sandbox = sandbox
        self._container: SandboxContainer | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def container_id(self) -> str | None:
        """The id of the container serving this session now (None before the first run)."""
        return None if self._container is None else self._container.id

    def run(self, spec: RunSpec) -> RunResult:
        """Run `spec` in this session's container; candidate faults come back as results."""
        _validate(spec)
        with self._lock:
            if self._closed:
                raise SandboxError("this sandbox session was closed", fix="open a new session for further runs")
            if self._container is not None and self._container.mounts != tuple(spec.mounts):
                self._drop_container()  # mounts are fixed at creation
            if self._container is None:
                self._container = self._sandbox.take_container(tuple(spec.mounts))
            return self._run_in(self._container, spec)

    def fm_socket_host_path(self) -> str | None:
        """Where the FM socket of this session's agent goes on the host (takes the container now)."""
        with self._lock:
            if self._closed:
                raise SandboxError("this sandbox session was closed", fix="open a new session for further runs")
            if self._container is None:
                self._container = self._sandbox.take_container(())
            fm_dir = self._container.fm_dir
        return None if fm_dir is None else os.path.join(fm_dir, os.path.basename(FM_SOCKET_INSIDE))

    def close(self) -> None:
        """Remove this session's container. Idempotent."""
        with self._lock:
            self._closed = True
            self._drop_container()

    def __enter__(self) -> DockerSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drop_container(self) -> None:
        if self._container is not None:
            self._sandbox.discard(self._container)
            self._container = None

    def _run_in(self, container: SandboxContainer, spec: RunSpec) -> RunResult:
        started = time.monotonic()
        request = _request(spec)
        try:
            container.channel.send(request)
            reply = container.channel.receive(
                deadline=started + spec.timeout_s + WATCHDOG_GRACE_S, max_frame_bytes=reply_cap(spec)
            )
        except NoReply:
            self._drop_container()  # the watchdog: the whole container goes, the session goes on in a new one
            return RunResult(
                exit_code=None,
                stdout="",
                stderr="[cambrian sandbox] no reply from the container in time; it was killed\n",
                duration_s=time.monotonic() - started,
                timed_out=True,
            )
        except ChannelClosed as exc:
            oom = container.died_of_oom()
            diagnostics = container.channel.diagnostics()
            self._drop_container()
            if oom:
                return RunResult(
                    exit_code=None,
                    stdout="",
                    stderr="[cambrian sandbox] the container ran out of memory and was killed\n",
                    duration_s=time.monotonic() - started,
                    oom_killed=True,
                )
            raise SandboxError(
                f"the sandbox container died during a run: {exc} {diagnostics}".strip(),
                fix="run `cambrian sandbox check`; if the engine restarted, start the run again",
            ) from exc
        if reply.get("id") != request["id"]:
            # Only a task writing on the runner's channel sends a reply that does not echo the request's id.
            self._drop_container()
            return RunResult(
                exit_code=None,
                stdout="",
                stderr="[cambrian sandbox] a reply that was not the runner's reached the host (the task wrote on "
                "the runner's channel); the run is void\n",
                duration_s=time.monotonic() - started,
            )
        if "error" in reply:
            raise SandboxError(
                f"the sandbox runner could not serve the run: {reply['error']}",
                fix="check the run spec's files and command; rebuild the image with `cambrian sandbox build --force`",
            )
        return RunResult(
            exit_code=reply["exit_code"],
            stdout=reply["stdout"],
            stderr=reply["stderr"],
            duration_s=float(reply["duration_s"]),
            timed_out=bool(reply["timed_out"]),
            oom_killed=bool(reply["oom_killed"]),
            output_truncated=bool(reply["output_truncated"]),
            files=dict(reply["files"]),
        )


def _validate(spec: RunSpec) -> None:
    for path in [*spec.files, *spec.collect]:
        check_relative_path(path)
    if not spec.command:
        raise SandboxError("the run spec has an empty command", fix="give the command to run as argv")
    if spec.network:
        raise SandboxError(
            "the docker sandbox never gives a run network access (the spec asks for network=True)",
            fix="set network=False; agents reach the FM through the mounted gateway socket",
        )
    for mount in spec.mounts:
        if not os.path.exists(mount.host_path) or not mount.sandbox_path.startswith("/"):
            raise SandboxError(
                f"cannot mount {mount.host_path!r} at {mount.sandbox_path!r}",
                fix="give a host path that exists and an absolute sandbox path",
            )


def reply_cap(spec: RunSpec) -> int:
    """The most bytes the runner's reply to `spec` can take: both output streams and every collected file at
    their caps, each byte escaped in JSON (up to 6 bytes: \\u00XX), plus 1 MiB for the rest."""
    payload = 2 * int(spec.max_output_bytes) + len(spec.collect) * int(spec.max_collect_bytes) + 8192
    return 6 * payload + (1 << 20)


def _request(spec: RunSpec) -> dict[str, Any]:
    return {
        "op": "run",
        "id": secrets.token_hex(16),
        "files": dict(spec.files),
        "command": list(spec.command),
        "timeout_s": float(spec.timeout_s),
        "memory_mb": int(spec.memory_mb),
        "max_output_bytes": int(spec.max_output_bytes),
        "max_file_bytes": int(spec.max_file_bytes),
        "collect": list(spec.collect),
        "max_collect_bytes": int(spec.max_collect_bytes),
        "env": dict(spec.env),
    }
