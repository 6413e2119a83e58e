"""A run's memory of what worked: every N finished proposals the FM reads what the recent edits did to the
score and writes a few notes, which later prompts show (ShinkaEvolve's meta-recommendations).

`RunNotes` keeps the recent outcomes (operator, the lines the edit changed, the score before and after or
why the child did not count) and the latest notes; `reflect` asks the FM for new ones (ledger purpose
"reflect"). The notes of a resumed run are its last reflection's reply, read back from the ledger.
"""

from __future__ import annotations

import difflib
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from cambrian.archive.lineage import improves
from cambrian.archive.store import Archive
from cambrian.evaluators.base import Genome
from cambrian.meta_agent.llm import FMBadRequest, FMUnavailable, LLMClient, Request
from cambrian.meta_agent.operators import ParentInfo, render

#: The most characters of notes kept (and shown to prompts).
MAX_NOTES_CHARS = 900
#: Changed lines shown per outcome.
MAX_DIFF_LINES = 6
PURPOSE = "reflect"


@dataclass(frozen=True)
class Outcome:
    """One finished proposal as the reflection reads it."""

    operator: str
    change: str  # the changed lines, "-" and "+" prefixed, or "" when none were made
    result: str  # "1.0917 -> 1.1781 (+0.0864)", "no change in score", "invalid: ..."


def changed_lines(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    """The lines an edit removed and added, "-"/"+" prefixed, at most MAX_DIFF_LINES of them."""
    lines: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path, "").splitlines(), after.get(path, "").splitlines()
        for line in difflib.unified_diff(old, new, lineterm="", n=0):
            if line.startswith(("---", "+++", "@@")) or not line[1:].strip():
                continue
            lines.append(line[:160])
    shown = lines[:MAX_DIFF_LINES]
    if len(lines) > len(shown):
        shown.append(f"... ({len(lines) - len(shown)} more changed lines)")
    return "\n".join(shown)


def result_text(parent_score: float | None, child_score: float | None, reason: str | None) -> str:
    if child_score is None:
        return f"did not count: {(reason or 'no reason').splitlines()[0][:200]}"
    if parent_score is None:
        return f"scored {child_score:.6g}"
    if not (improves(child_score, parent_score) or improves(parent_score, child_score)):  # within rounding
        return f"no change in score ({child_score:.6g})"
    return f"{parent_score:.6g} -> {child_score:.6g} ({child_score - parent_score:+.4g})"


class RunNotes:
    """The recent outcomes and the FM's latest notes about them: `llm` writes them, every `every` finished
    proposals (> 0)."""

    def __init__(self, llm: LLMClient, *, every: int, notes: str | None = None) -> None:
        self.llm = llm
        self.every = every
        self.text = notes
        self._recent: deque[Outcome] = deque(maxlen=2 * every)
        self._since = 0
        self.reflecting = False

    @classmethod
    def restore(cls, archive: Archive, run_id: int, llm: LLMClient, *, every: int) -> RunNotes:
        """The notes of a resumed run: its last reflection's reply (None before its first)."""
        calls = [call for call in archive.llm_calls(run_id) if call.purpose == PURPOSE and call.error is None]
        if not calls:
            return cls(llm, every=every)
        _, responses = archive.llm_exchanges([calls[-1].request_hash])
        response = responses.get(calls[-1].request_hash)
        return cls(llm, every=every, notes=clean_notes(response.text) if response is not None else None)

    def record(self, outcome: Outcome) -> None:
        self._recent.append(outcome)
        self._since += 1

    def record_proposal(
        self, operator: str, parent: ParentInfo, child: Genome | None, score: float | None, reason: str | None
    ) -> None:
        """Record a finished proposal: the lines its child changed in the parent (none without a child), and its
        score against the parent's, or why it did not count."""
        change = changed_lines(parent.genome.files, child.files) if child is not None else ""
        self.record(Outcome(operator, change, result_text(parent.score, score, reason)))

    def due(self) -> bool:
        """Whether a reflection should start now: `every` outcomes since the last, and none running."""
        return not self.reflecting and self._since >= self.every

    def messages(self, contract: str) -> list[dict[str, str]]:
        """The reflection prompt: the contract, the recent outcomes, the notes so far."""
        outcomes = "\n\n".join(
            f"{number}. {outcome.operator}: {outcome.result}" + (f"\n{outcome.change}" if outcome.change else "")
            for number, outcome in enumerate(self._recent, start=1)
        )
        values = {"contract": contract.strip(), "outcomes": outcomes, "notes": self.text or "(none yet)"}
        return [{"role": "user", "content": render("reflect", values).strip()}]

    async def reflect(self, *, contract: str, seed: int, iteration: int | None = None) -> None:
        """Ask the FM for new notes from the recent outcomes (ledger purpose "reflect"); an FM error propagates
        and leaves the notes as they were. iteration: None, so the call is never taken for a child's."""
        self.reflecting, self._since = True, 0
        try:
            completion = await self.llm.complete(
                Request(self.messages(contract), seed=seed, purpose=PURPOSE, iteration=iteration, max_tokens=256)
            )
            self.text = clean_notes(completion.text) or self.text
        finally:
            self.reflecting = False

    async def refresh(self, *, contract: str, seed: int) -> str | None:
        """`reflect`, for a running search: an FM that fails leaves the notes as they were, and the sentence that
        says so is returned (None: new notes were written)."""
        try:
            await self.reflect(contract=contract, seed=seed)
        except (FMUnavailable, FMBadRequest) as exc:
            return f"the run's notes stay as they were: the FM could not write new ones ({exc})"
        return None


def clean_notes(text: str) -> str | None:
    """The reply's prose: code blocks dropped, blank lines squeezed, cut to MAX_NOTES_CHARS."""
    prose = re.sub(r"```.*?(```|$)", "", text, flags=re.DOTALL)
    lines = [line.rstrip() for line in prose.strip().splitlines() if line.strip()]
    notes = "\n".join(lines)
    if len(notes) > MAX_NOTES_CHARS:  # whole lines where there are several
        cut = notes[:MAX_NOTES_CHARS]
        notes = cut.rsplit("\n", 1)[0] if "\n" in cut else cut
    return notes or None
