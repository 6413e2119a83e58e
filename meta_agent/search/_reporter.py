"""What a run's session tells its user: `Reporter`, the callbacks the CLI (or the Python API) gives it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from cambrian.meta_agent.search._book import LoopEvent


@dataclass
class Reporter:
    """Callbacks the CLI gives a session: messages for the user and loop events."""

    info: Callable[[str], None]
    warn: Callable[[str], None]
    event: Callable[[LoopEvent], None]
    progress: Callable[[int, int], contextlib.AbstractContextManager]  # (completed, total) -> context
    #: Given, once the search starts, a function any thread may call to stop it as a first Ctrl-C does (no
    #: more proposals; running evaluations finish and are stored): how the library API cancels a search.
    started: Callable[[Callable[[str], None]], None] | None = None
