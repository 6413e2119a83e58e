"""The FM-efficacy table (bench/fm_efficacy.py): each proposal's `Record`, and per cell (model, operator,
benchmark) how many children were valid and improved, with 95% Wilson intervals, best@N, tokens and seconds
per proposal, and the top reasons a proposal did not count (`summarize`, `table`).

Pure functions of the records: `fm_efficacy.py --report FILE` prints the table of an earlier measurement from
its JSON alone.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Record:
    """One proposal and what became of it."""

    model: str
    operator: str
    benchmark: str
    seed: int
    index: int
    outcome: str  # valid | invalid_edit | failed_eval | infra
    reason: str  # "" when valid
    category: str  # histogram bucket of `reason`
    parent_score: float
    score: float | None  # the child's score when it was evaluated
    improved: bool
    prompt_tokens: int
    completion_tokens: int
    propose_s: float
    eval_s: float
    repair_note: str = ""
    change: str = ""  # unified diff of the child's entry file against its parent's (truncated)
    idea: str = ""  # the direction the prompt asked for (search.ideas), if any
    repaired_after_run: bool = False  # the child failed when run and went back to the FM once (fm.repair_rounds)
    repair_s: float = 0.0  # wall clock of that repair call


def wilson(successes: int, n: int) -> tuple[float, float, float]:
    """Proportion and its 95% Wilson interval."""
    if n == 0:
        return math.nan, math.nan, math.nan
    z = 1.96
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, max(0.0, centre - half), min(1.0, centre + half)


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    k = (len(ordered) - 1) * q
    low, high = math.floor(k), math.ceil(k)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


@dataclass
class CellSummary:
    model: str
    operator: str
    benchmark: str
    proposals: int
    valid: int
    improved: int
    parent_score: float
    best_at_n: float | None  # mean over seeds of the best child score (None: no valid child at all)
    best: float | None
    tokens_per_proposal: float
    seconds_median: float
    seconds_p90: float
    reasons: dict[str, int] = field(default_factory=dict)
    run_repairs: int = 0  # children whose failed run went back to the FM
    run_repairs_valid: int = 0  # ... and ended valid


def summarize(records: Sequence[Record]) -> list[CellSummary]:
    cells: dict[tuple[str, str, str], list[Record]] = {}
    for record in records:
        cells.setdefault((record.model, record.operator, record.benchmark), []).append(record)
    out = []
    for (model, operator, benchmark), rows in cells.items():
        per_seed: dict[int, list[float]] = {}
        for r in rows:
            if r.outcome == "valid" and r.score is not None:
                per_seed.setdefault(r.seed, []).append(r.score)
        seeds = sorted({r.seed for r in rows})
        # A seed with no valid child contributes its parent's score: best@N never rewards failing.
        bests = [max(per_seed.get(s, []), default=rows[0].parent_score) for s in seeds]
        valid_scores = [score for scores in per_seed.values() for score in scores]
        out.append(
            CellSummary(
                model=model,
                operator=operator,
                benchmark=benchmark,
                proposals=len(rows),
                valid=sum(r.outcome == "valid" for r in rows),
                improved=sum(r.improved for r in rows),
                parent_score=rows[0].parent_score,
                best_at_n=statistics.fmean(bests) if bests else None,
                best=max(valid_scores) if valid_scores else None,
                tokens_per_proposal=statistics.fmean(r.prompt_tokens + r.completion_tokens for r in rows),
                seconds_median=statistics.median(r.propose_s for r in rows),
                seconds_p90=_percentile([r.propose_s for r in rows], 0.9),
                reasons=dict(Counter(r.category for r in rows if r.outcome != "valid").most_common()),
                run_repairs=sum(r.repaired_after_run for r in rows),
                run_repairs_valid=sum(r.repaired_after_run and r.outcome == "valid" for r in rows),
            )
        )
    return out


def table(summaries: Sequence[CellSummary]) -> str:
    """The markdown table the README keeps."""
    header = (
        "| benchmark | model | operator | valid (95% CI) | improved (95% CI) | parent | best@N | best "
        "| tokens/proposal | s/proposal median (p90) | run repairs (valid after) "
        "| top reasons it did not count |"
    )
    lines = [header, "|" + "---|" * 12]
    for s in summaries:
        _, vlo, vhi = wilson(s.valid, s.proposals)
        _, ilo, ihi = wilson(s.improved, s.proposals)
        reasons = ", ".join(f"{name} {count}" for name, count in list(s.reasons.items())[:3]) or "-"
        lines.append(
            f"| {s.benchmark} | {s.model} | {s.operator} | {s.valid}/{s.proposals} ({vlo:.2f}-{vhi:.2f}) "
            f"| {s.improved}/{s.proposals} ({ilo:.2f}-{ihi:.2f}) | {s.parent_score:.4f} "
            f"| {_fmt(s.best_at_n)} | {_fmt(s.best)} | {s.tokens_per_proposal:.0f} "
            f"| {s.seconds_median:.1f} ({s.seconds_p90:.1f}) | {s.run_repairs} ({s.run_repairs_valid}) | {reasons} |"
        )
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
