"""One error root: every exception a Cambrian package defines is a `CambrianError`, except a short list of
internal signals that never reach a user and the code that runs inside the sandbox (standard library only).
The CLI catches that one type and prints cause and fix."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from cambrian.errors import CambrianError

PACKAGES = ("cambrian.archive", "cambrian.sandbox", "cambrian.evaluators", "cambrian.meta_agent", "cambrian.ui")

#: Exceptions that are not for users: raised and caught inside one module, or defined by code that runs
#: inside the sandbox (it cannot import Cambrian), with why.
NOT_FOR_USERS = {
    "cambrian.sandbox.docker_container.NoReply": "the container runner did not answer in time; DockerSandbox turns "
    "it into a SandboxError",
    "cambrian.sandbox.docker_container.ChannelClosed": "the runner's channel closed; turned into a SandboxError",
    "cambrian.meta_agent.llm._http.HTTPError": "an HTTP status inside the gateway's request handling, answered "
    "to the agent",
    "cambrian.evaluators.harness.llm_client.LLMError": "runs inside the sandbox (agents' FM client)",
    "cambrian.evaluators.harness.llm_client.LLMBudgetExceeded": "runs inside the sandbox",
    "cambrian.evaluators.harness.run_program.UnsafeResultError": "runs inside the sandbox",
    "cambrian.evaluators.humaneval.solution_process.SolutionError": "runs inside the sandbox",
    "cambrian.evaluators.humaneval.solution_process.ImportFailed": "runs inside the sandbox",
    "cambrian.evaluators.arc.data.GridError": "a malformed grid inside the ARC scorer; becomes the task's feedback",
}


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        names = [package_name] + [
            info.name for info in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}.")
        ]
        for name in names:
            if name.endswith("__main__"):
                continue
            module = importlib.import_module(name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == name:
                    found[f"{name}.{cls.__qualname__}"] = cls
    return found


def test_every_user_facing_exception_derives_from_the_one_root() -> None:
    classes = _exception_classes()
    assert len(classes) > 40  # the walk found the packages' errors
    strays = sorted(
        name for name, cls in classes.items() if not issubclass(cls, CambrianError) and name not in NOT_FOR_USERS
    )
    assert not strays, f"exceptions outside CambrianError: {strays}"
    assert set(NOT_FOR_USERS) <= set(classes), "the allow-list names a class that no longer exists"


@pytest.mark.parametrize(
    "name",
    [
        "cambrian.archive.errors.RunNotFound",
        "cambrian.sandbox.base.SandboxError",
        "cambrian.evaluators.base.BenchmarkError",
        "cambrian.meta_agent.llm._errors.FMUnavailable",
        "cambrian.meta_agent.edits._base.EditError",
        "cambrian.meta_agent.errors.ConfigError",
        "cambrian.meta_agent.operators._base.UnknownOperatorError",
    ],
)
def test_each_family_keeps_message_and_fix(name: str) -> None:
    cls = _exception_classes()[name]
    error = cls("the cause", fix="the fix")
    assert isinstance(error, CambrianError) and str(error) == "the cause" and error.fix == "the fix"
