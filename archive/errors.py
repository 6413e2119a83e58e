"""Errors a user can cause through the archive: each names the cause, and `fix` names the fix.

The CLI catches `ArchiveError` once and prints `str(error)` and `error.fix`.
"""

from __future__ import annotations

from cambrian.errors import CambrianError


class ArchiveError(CambrianError):
    """Base of every user-causable archive error; `fix` says what to do about it."""


class RunNotFound(ArchiveError):
    """No run has the given name or id."""


class RunExists(ArchiveError):
    """A run with the given name is already stored."""


class AgentNotFound(ArchiveError):
    """No agent has the given id (in the given run)."""


class GenomeNotFound(ArchiveError):
    """No genome has the given hash."""


class InvalidGenome(ArchiveError):
    """A genome's file paths or entry file cannot be stored or exported safely."""


class InvalidTransition(ArchiveError):
    """An agent status change that the lifecycle does not allow (or lacks what it needs)."""


class DestinationNotEmpty(ArchiveError):
    """An export would overwrite files in an existing, non-empty folder."""


class EmptyView(ArchiveError, ValueError):
    """Parent selection was asked to choose from an archive view with no evaluated agents."""


class SelectorConfigError(ArchiveError, ValueError):
    """An unknown selection strategy name or a bad parameter for one."""


class ArchiveNotFound(ArchiveError):
    """A read-only open of an archive file that does not exist (a reader never creates one)."""


class NotAnArchive(ArchiveError):
    """The database holds no Cambrian schema (empty, or someone else's tables)."""


class ArchiveOutdated(ArchiveError):
    """The archive was written by an older Cambrian; a writable open or `cambrian db upgrade RUN` upgrades it."""

    def __init__(self, message: str, *, found: int, needed: int, fix: str = "") -> None:
        super().__init__(message, fix=fix)
        self.found = found
        self.needed = needed


class ArchiveTooNew(ArchiveError):
    """The archive's schema is newer than this Cambrian knows: it refuses to read or change it."""


class ArchiveCorrupt(ArchiveError):
    """An SQLite archive file that is damaged or not a database at all (truncated, overwritten, half copied);
    `reason`: what SQLite said ("file is not a database")."""

    def __init__(self, message: str, *, reason: str, fix: str = "") -> None:
        super().__init__(message, fix=fix)
        self.reason = reason


class ArchiveReadOnly(ArchiveError):
    """A write through an archive opened with readonly=True."""


class ArchiveUnreachable(ArchiveError):
    """The archive's database server cannot be reached (refused, unknown host, bad login, no such database),
    or went away and did not come back within the reconnect deadline."""


class InvalidStoreURL(ArchiveError):
    """A store URL that is not a database Cambrian can keep an archive in (unknown scheme, missing driver)."""
