"""The loop's lifecycle writes, committed together when several are ready at once (group commit).

Every proposal and evaluation writes the archive from the event-loop thread: the child (`AddAgent`), its
start (`MarkEvaluating`), its result (`FinishEvaluation`), each a lifecycle command (archive/commands.py).
Alone, each is a transaction with its own BEGIN and COMMIT. `GroupCommit` rate-limits commits instead: a
write after a quiet spell commits as soon as the event loop gets to it (a loop waiting on its FM pays
nothing), and one that comes within `window_s` of the last commit waits for the window to end, with every
write submitted meanwhile, and they go to `Archive.write_batch` as one transaction. A busy loop (many
evaluation slots, a fast FM) so commits at most 1 / window_s times a second, however many writes it makes.
Either way a caller resumes only after its write committed, with the agent or the error the command gives
alone (archive/commands.py), so no code after an `await` acts on a write that is not durable.
"""

from __future__ import annotations

import asyncio
import logging

from cambrian.archive.commands import LifecycleCommand
from cambrian.archive.models import Agent
from cambrian.archive.store import Archive

_log = logging.getLogger(__name__)


class GroupCommit:
    """Awaitable archive writes; writes submitted close together share a transaction."""

    def __init__(self, archive: Archive, *, window_s: float = 0.02, max_batch: int = 64) -> None:
        """window_s: the least time between two commits. A write that comes after a quiet spell commits as soon
        as the callbacks ready now have run; one that comes sooner waits for the window to end, and the
        writes that arrive meanwhile join it: commits are rate-limited only when the loop is busy.
        max_batch: the most writes in one transaction (a long one holds the database's write lock
        longer); a full batch commits at once."""
        self.archive = archive
        self.window_s = window_s
        self.max_batch = max_batch
        self.writes = 0  # committed (or refused) so far, for measurements
        self.transactions = 0
        self._pending: list[tuple[LifecycleCommand, asyncio.Future[Agent]]] = []
        self._timer: asyncio.Handle | None = None
        self._last_commit = float("-inf")  # event-loop time of the last flush

    async def __call__(self, command: LifecycleCommand) -> Agent:
        """`await writes(AddAgent(run_id, ...))`: the command's agent once committed, or its error."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Agent] = loop.create_future()
        self._pending.append((command, future))
        if len(self._pending) >= self.max_batch:
            self.flush()
        elif self._timer is None:
            self._timer = loop.call_later(max(0.0, self._last_commit + self.window_s - loop.time()), self.flush)
        return await future

    def flush(self) -> None:
        """Commit every write submitted so far and hand each caller its outcome. Never raises an Exception
        (a callback's error would leave its callers waiting forever): the archive's is given to them."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending:
            self._last_commit = asyncio.get_running_loop().time()
        while self._pending:
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            try:
                outcomes = self.archive.write_batch([command for command, _ in batch])
            except Exception as error:  # noqa: BLE001 - the database stayed away: every caller gets it
                outcomes = [error] * len(batch)
            self.writes += len(batch)
            self.transactions += 1
            for (_, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():  # its caller was cancelled (the run stopping): a write stands, a refusal is logged
                    if isinstance(outcome, Exception):
                        _log.warning("an archive write whose caller had stopped failed: %s", outcome)
                    continue
                if isinstance(outcome, Exception):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)
