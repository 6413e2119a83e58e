"""A real local Ray cluster for tests and benches: each node a `ray start --block` process of its own.

Every node runs in its own process group (its GCS, raylet and agents); `kill_node` and `stop` SIGKILL
that group and every process it spawned (worker processes make groups of their own), so nothing
another Ray on this machine runs is touched (never `ray stop`, which stops them all).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


@dataclass
class RayNode:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


class LocalRayCluster:
    """`head(...)`, then `add_node(...)` for each other node; `address` is HEAD:PORT. Use as a context manager."""

    def __init__(self, log_dir: Path, *, cpus: int = 2) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.cpus = cpus
        self.nodes: dict[str, RayNode] = {}
        self.address = ""

    def __enter__(self) -> LocalRayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start_head(self, name: str = "head") -> None:
        port = free_port()
        self.address = f"{_host_ip()}:{port}"
        self._start(
            name,
            [
                "--head",
                f"--port={port}",
                "--include-dashboard=false",
                f"--ray-client-server-port={free_port()}",
                f"--dashboard-port={free_port()}",
            ],
        )
        self._wait_for_nodes(1)

    def add_node(self, name: str) -> None:
        self._start(name, [f"--address={self.address}"])
        self._wait_for_nodes(len(self.nodes))

    def node_id(self, name: str) -> str:
        """The Ray node id of the node started as `name` (by its custom resource)."""
        import ray

        for node in ray.nodes():
            if node["Alive"] and f"cambrian_test_{name}" in node["Resources"]:
                return str(node["NodeID"])
        raise LookupError(f"no live Ray node named {name}")

    def kill_node(self, name: str) -> None:
        node = self.nodes.pop(name)
        _kill_tree(node)

    def stop(self) -> None:
        for name in list(self.nodes)[::-1]:
            self.kill_node(name)

    def _start(self, name: str, args: list[str]) -> None:
        log = self.log_dir / f"ray-{name}.log"
        resources = json.dumps({f"cambrian_test_{name}": 1})
        argv = [
            RAY,
            "start",
            *args,
            f"--num-cpus={self.cpus}",
            f"--resources={resources}",
            "--block",
            "--disable-usage-stats",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--metrics-export-port={free_port()}",
        ]
        env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
        env["RAY_AUTH_MODE"] = "disabled"  # a local test cluster; a token file in ~/.ray must not turn it on
        with log.open("wb") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.nodes[name] = RayNode(name, process, log)

    def _wait_for_nodes(self, count: int, timeout_s: float = 120.0) -> None:
        """Until each node's `ray start` says it runs and the cluster lists `count` live nodes."""
        deadline = time.monotonic() + timeout_s
        for node in self.nodes.values():
            while b"Ray runtime started" not in node.log.read_bytes():
                if node.process.poll() is not None:
                    raise RuntimeError(f"ray node {node.name} exited: {node.log.read_text()[-2000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"ray node {node.name} did not start in {timeout_s:g} s")
                time.sleep(0.5)
        # Asked from another process: this one may connect to the cluster later, and only once.
        probe = (
            "import sys, time, ray\n"
            f"ray.init(address={self.address!r}, logging_level='ERROR')\n"
            f"while sum(n['Alive'] for n in ray.nodes()) < {count}: time.sleep(0.5)\n"
        )
        subprocess.run([sys.executable, "-c", probe], check=True, timeout=max(1.0, deadline - time.monotonic()))


def _host_ip() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: only picks the outgoing interface
            return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _group(root: int) -> set[int]:
    """`root` and every process below it now."""
    tree, seen, todo = _children(), set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += tree.get(pid, [])
    return seen


def _kill_tree(node: RayNode) -> None:
    pids = _group(node.process.pid)  # now, before the kill: worker processes are the raylet's children
    try:
        os.killpg(node.process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    node.process.wait(timeout=30)
