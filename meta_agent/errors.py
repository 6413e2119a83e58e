"""The meta-agent's user errors, and `CambrianError`, the root of every error a user sees (`cambrian.errors`)."""

from __future__ import annotations

from cambrian.errors import CambrianError

__all__ = ["CambrianError", "ClusterError", "ConfigError", "EvalTargetError", "RunAborted", "RunBusy", "SeedFailed"]


class ConfigError(CambrianError):
    """A bad config file, key or value."""


class SeedFailed(CambrianError):
    """The benchmark's seed program does not run: nothing can be evolved from it."""


class RunAborted(CambrianError):
    """The run stopped on an error that needs the user (dead FM, dead sandbox)."""


class ClusterError(CambrianError):
    """The Ray cluster for evaluation cannot be reached, or a node of it cannot evaluate."""


class RunBusy(CambrianError):
    """Another process is searching this run now (it holds the run's lock)."""


class EvalTargetError(CambrianError):
    """`cambrian eval` was given something it cannot evaluate (bad target, missing split, unusable folder)."""
