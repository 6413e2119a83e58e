"""Errors a user can cause, caught once in the CLI, which prints cause and fix."""

from __future__ import annotations


class CambrianError(Exception):
    """Base of the meta-agent's user-facing errors: the message names the cause, `fix` the fix."""

    def __init__(self, message: str, *, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix


class ConfigError(CambrianError):
    """A bad config file, key or value."""


class SeedFailed(CambrianError):
    """The benchmark's seed program does not run: nothing can be evolved from it."""


class RunAborted(CambrianError):
    """The run stopped on an error that needs the user (dead FM, dead sandbox)."""


def user_error_types() -> tuple[type[Exception], ...]:
    """Every exception type whose message and `fix` are meant for the user.

    `archive` and `sandbox` import no other Cambrian package, so their error bases
    cannot subclass CambrianError; the CLI catches them all through this tuple.
    """
    from archive.errors import ArchiveError
    from evaluators.base import BenchmarkError
    from meta_agent.edits import EditError
    from meta_agent.llm import LLMError
    from sandbox.base import SandboxError

    return (CambrianError, ArchiveError, BenchmarkError, LLMError, SandboxError, EditError)
