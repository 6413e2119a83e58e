"""Group commit: several lifecycle writes in one transaction (`Archive.write_batch`).

Each lifecycle method (add_agent, mark_evaluating, finish_evaluation, ...) is one transaction of its
own, and a loop that drives many evaluation slots pays for each a BEGIN, a COMMIT and the Python
around them, three times a candidate. `write_batch` takes such calls, ready at the same moment, and
runs them in order inside one transaction: a call's own transaction joins the open one instead of
beginning its own, so each call's statements and checks are exactly those it runs alone.

A batch is all or nothing for the database, never for its callers: when any call fails (a refused
transition, a constraint), the whole transaction rolls back and every call runs again alone, in
order, so each gets the result or the error it would have got without the batch. On PostgreSQL a
disconnect runs the batch again as a whole (its commit mark settles a lost COMMIT, as for any
write: archive/_retry.py); only after the batch rolled back do single calls run, each retried on
its own, so no call can commit twice.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from cambrian.archive.errors import ArchiveUnreachable

T = TypeVar("T")

# Methods that write through `_transaction` alone (no ORM session, which would wait for the lock the
# batch holds) and whose whole effect is that transaction.
BATCHABLE = frozenset({"add_agent", "mark_evaluating", "finish_evaluation", "mark_failed", "set_holdout_score"})


class BatchMixin:
    """`write_batch` for `Archive`, which provides `_transaction`, `_reconnector` and `_joined`."""

    _joined: tuple[int, Any] | None  # (thread id, connection) of the batch open now, if any

    def write_batch(self, calls: Sequence[Callable[[], Any]]) -> list[Any]:
        """Run `calls` (each `functools.partial(archive.METHOD, ...)` of a lifecycle write of this archive) in
        one transaction, in order; per call, what it returned or the exception it raised alone.

        Raises only what no single call could get past either: ArchiveUnreachable when the database
        stays away, or an interrupt.
        """
        for call in calls:
            self._check_batchable(call)
        if len(calls) == 1:
            return [_outcome(calls[0])]
        try:
            return self._reconnector.call(self._run_joined, calls)  # type: ignore[attr-defined]  # Archive's
        except ArchiveUnreachable:
            raise
        except Exception:  # noqa: BLE001 - rolled back: each call runs alone and gets its own result or error
            return [_outcome(call) for call in calls]

    def _run_joined(self, calls: Sequence[Callable[[], Any]]) -> list[Any]:
        with self._transaction(write=True) as connection:  # type: ignore[attr-defined]  # Archive's
            self._joined = (threading.get_ident(), connection)
            try:
                return [call() for call in calls]
            finally:
                self._joined = None

    def _check_batchable(self, call: Callable[[], Any]) -> None:
        method = getattr(call, "func", None)
        if (
            not isinstance(call, functools.partial)
            or getattr(method, "__self__", None) is not self
            or getattr(method, "__name__", None) not in BATCHABLE
        ):
            raise TypeError(
                f"write_batch takes functools.partial(archive.METHOD, ...) of this archive, METHOD one of "
                f"{', '.join(sorted(BATCHABLE))}; got {call!r}"
            )


def _outcome(call: Callable[[], T]) -> T | Exception:
    try:
        return call()
    except ArchiveUnreachable:
        raise
    except Exception as error:  # noqa: BLE001 - handed to the caller as its call's outcome
        return error
