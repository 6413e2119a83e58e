"""Making and checking children away from the search loop's thread: a small pool of processes.

An FM reply becomes a child by parsing and applying it (`operator.child(ctx, reply)`) and passing the
static check (`check_child`): a few milliseconds of pure Python per reply, which a driver feeding many
evaluation slots should not spend on its own thread. `EditPool.derive` does both in one of its
processes when it has any and the work can be sent there (it pickles), and in the calling thread
otherwise; either way the child and every error are the same. Nothing here runs the child: the
static check only parses it.

The processes are started (spawn: no inherited threads or locks) at the first use, ignore SIGINT (the
loop's Ctrl-C stops the run, not them), and end with `close()`; a later use starts them again.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from cambrian.evaluators.base import Genome
from cambrian.meta_agent.edits._base import EditError
from cambrian.meta_agent.edits._static_check import CheckedChild, check_child

log = logging.getLogger(__name__)

#: What a worker sends back, in plain picklable values: ("child", genome, repairs), ("refused", message, fix)
#: for an EditError, or ("unloadable", why) when the work could not be unpickled there.
_Outcome = tuple[Any, ...]


def edit_processes(setting: int | str) -> int:
    """The number of processes `search.edit_processes` asks for: "auto" keeps one core for the loop and one
    for the rest of the machine (none on a machine of 2 cores or fewer, at most 4)."""
    if setting == "auto":
        return max(0, min(4, (os.cpu_count() or 1) - 2))
    return max(0, int(setting))


class EditPool:
    """`derive(make, parent)`: the checked child `make()` builds, made in one of `processes` worker processes
    (0: in the calling thread). entry_function: as for `check_child`."""

    def __init__(self, processes: int, *, entry_function: str | None) -> None:
        self.processes = max(0, processes)
        self.entry_function = entry_function
        self._executor: ProcessPoolExecutor | None = None
        self._warned: set[str] = set()  # kinds of work that did not pickle, warned about once each

    async def derive(self, make: Callable[[], Genome], parent: Genome) -> CheckedChild:
        """The child `make()` builds, after the static check and its repairs. EditError (the same one
        `make` or `check_child` raises) when the reply cannot become a child."""
        work = None
        if self.processes:
            try:
                work = pickle.dumps((make, parent, self.entry_function), protocol=pickle.HIGHEST_PROTOCOL)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                self._warn_once(make, exc)
        if work is None:
            return check_child(make(), parent, entry_function=self.entry_function)
        try:
            outcome = await asyncio.get_running_loop().run_in_executor(self._pool(), _derive_pickled, work)
        except BrokenProcessPool as exc:
            # A worker died (killed, out of memory). Starting processes again costs seconds each time, so
            # the rest of the run checks its replies here.
            log.warning("an edit process died (%s); replies are checked in the loop from now on", exc)
            self.close()
            self.processes = 0
            return check_child(make(), parent, entry_function=self.entry_function)
        if outcome[0] == "unloadable":
            self._warn_once(make, str(outcome[1]))
            return check_child(make(), parent, entry_function=self.entry_function)
        if outcome[0] == "refused":
            raise EditError(str(outcome[1]), fix=str(outcome[2]))
        kind, genome, repairs = outcome  # ("child", genome, repairs)
        return CheckedChild(genome, tuple(repairs))

    def close(self) -> None:
        """Stop the processes (work not started is dropped); a later `derive` starts new ones."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                max_workers=self.processes,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_ignore_sigint,
            )
        return self._executor

    def _warn_once(self, make: Callable[[], Genome], exc: Exception | str) -> None:
        kind = getattr(make, "func", make).__qualname__
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("%s cannot be sent to an edit process (%s); its replies are checked in the loop", kind, exc)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _derive_pickled(work: bytes) -> _Outcome:
    """In a worker: build the child, check it, and say what came of it in plain picklable values."""
    try:
        make, parent, entry_function = pickle.loads(work)
    except Exception as exc:  # noqa: BLE001 - e.g. a class the worker cannot import: the caller does it itself
        return "unloadable", f"{type(exc).__name__}: {exc}"
    try:
        checked = check_child(make(), parent, entry_function=entry_function)
    except EditError as exc:
        return "refused", str(exc), exc.fix
    return "child", checked.genome, tuple(checked.repairs)
