"""The `SandboxContract` (meta_agent.testing) on both backends: local subprocesses and the Docker pool.

The backends' own test modules hold what only one promises (Docker: no network, no host files, a
non-root user, hardened container settings; local: the uid drop as root, rlimits).
"""

from __future__ import annotations

from cambrian.meta_agent.testing import SandboxContract
from cambrian.sandbox.base import Sandbox
from cambrian.sandbox.local import LocalSandbox
from tests.conftest import skip_without_docker


class TestLocalSandbox(SandboxContract):
    def make_sandbox(self) -> Sandbox:
        return LocalSandbox()


class TestDockerSandbox(SandboxContract):
    def make_sandbox(self) -> Sandbox:
        skip_without_docker()
        from cambrian.sandbox.docker import DockerSandbox

        return DockerSandbox(pool_size=1, run_label="pytest-contract")
