"""bench/peer_efficacy.py's record of a system's search and its report: `SystemRun` (every proposal in the order
its score became known, the best within a wall time), `from_payload` (a peer driver's JSON as one), and `table`
(both views: at the proposal budget, and at the fastest system's wall time). The seed program all three
systems start from is the task's (bench/_peer_tasks.py); the short hash that names a program in the report is
here."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def sha(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()[:16]


@dataclass
class SystemRun:
    """One system's search: every proposal in the order its score (or failure) became known."""

    system: str
    version: str = ""
    exit_code: int = 0
    error: str = ""  # why the run has no (or a partial) result, with its log's tail
    wall_seconds: float = 0.0
    seed_score: float | None = None  # by the system's own evaluator (circle packing: the sum of radii)
    seed_sha: str = ""
    #: {"index": 1-based, "t": seconds since the run started, "score": own evaluator or None, "sha", "note"}
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    fm_calls: int = 0
    fm_hung_up: int = 0  # requests whose client gave up before the answer (its own timeout)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def valid(self) -> int:
        return sum(1 for p in self.trajectory if (p["score"] or 0.0) > 0)

    def best(self, by_seconds: float | None = None) -> dict[str, Any] | None:
        """The first program that reached the best own score (within `by_seconds` of the start): the seed (index
        0) unless a proposal beat it; None when nothing was scored."""
        best: dict[str, Any] | None = None
        if self.seed_score is not None:
            best = {"index": 0, "t": 0.0, "score": self.seed_score, "sha": self.seed_sha, "note": "the seed"}
        for proposal in self.trajectory:
            if by_seconds is not None and proposal["t"] > by_seconds:
                break
            if proposal["score"] is not None and (best is None or proposal["score"] > best["score"]):
                best = proposal
        return best


def from_payload(system: str, payload: dict[str, Any], codes: dict[str, str], seed_code: str) -> SystemRun:
    """A SystemRun from a driver's JSON; the code of each proposal that set a new best goes into `codes`."""
    started = float(payload["started"])
    run = SystemRun(
        system=system,
        version=str(payload.get("version", "")),
        wall_seconds=float(payload["finished"]) - started,
        seed_score=payload["seed"].get("score"),
        seed_sha=sha(seed_code),
        settings=payload.get("settings", {}),
    )
    record = run.seed_score if run.seed_score is not None else -math.inf  # as SystemRun.best decides
    for index, proposal in enumerate(sorted(payload["proposals"], key=lambda p: p["t"]), start=1):
        code, score = proposal.get("code"), proposal.get("score")
        step = {
            "index": index,
            "t": round(float(proposal["t"]) - started, 2),
            "score": score,
            "sha": sha(code) if code else None,
            "note": proposal.get("note", "")[:200],
        }
        if code and score is not None and score > record:
            record = score
            codes[step["sha"]] = code
        run.trajectory.append(step)
    return run


def fmt_score(value: float | None, digits: int = 4) -> str:
    """A score as the report shows it: 4 decimals, or "-" for none."""
    return "-" if value is None else f"{value:.{digits}f}"


def _reached(best: dict[str, Any] | None) -> str:
    if best is None:
        return "-"
    return "0 (the seed)" if best["index"] == 0 else f"{best['index']} ({best['t']:.0f} s)"


def equal_seconds(runs: Sequence[SystemRun]) -> float | None:
    """The wall time of the fastest system that finished (the equal-time cut), None without any."""
    finished = [r.wall_seconds for r in runs if r.wall_seconds > 0 and not r.error]
    return min(finished) if finished else None


_EVALUATOR_NAMES = {"openevolve": "OpenEvolve", "cambrian": "Cambrian"}


def table(saved: dict[str, Any]) -> str:
    """Both views: at the proposal budget, and at the fastest system's wall time."""
    runs = [SystemRun(**row) for row in saved["runs"]]
    scores: dict[str, dict[str, float | None]] = saved["scores"]
    seed = saved["seed"]
    meta = saved["meta"]
    task = meta.get("task", "circle_packing")  # files written before the suite tasks: circle packing
    evaluators = meta.get("evaluators", ["openevolve", "cambrian"])

    def rescored(sha_: str | None) -> str:
        return "".join(f"| {fmt_score(scores.get(sha_ or '', {}).get(e)) if sha_ else '-'} " for e in evaluators)

    heads = "".join(f"| best, {_EVALUATOR_NAMES[e]} eval " for e in evaluators)
    if task == "circle_packing":
        where = "OpenEvolve's circle_packing/initial_program.py"
        seeds = f"OpenEvolve's evaluator {fmt_score(seed['openevolve'])}, Cambrian's {fmt_score(seed['cambrian'])}"
    else:
        where = f"the {task} benchmark's seed"
        seeds = f"the benchmark's score {fmt_score(seed['cambrian'])}"
    lines = [
        f"model {meta['model']}, seed program {seed['sha']} ({where}): {seeds}; "
        f"budget {meta['proposals']} proposals, run seed {meta['seed']}"
        + (f", cap {meta['wall_seconds']:g} s" if meta.get("wall_seconds") else ""),
        "",
        f"At the proposal budget ({meta['proposals']} proposals):",
        "",
        "| system | proposals | valid | FM calls (tokens in / out) | seed, own eval | best, own eval "
        f"{heads}| best at proposal | wall s | proposals/min |",
        "|" + "---|" * (9 + len(evaluators)),
    ]
    for run in runs:
        if run.error and not run.trajectory:
            lines.append(f"| {run.system} | failed: {run.error.splitlines()[0][:80]} |" + " |" * (7 + len(evaluators)))
            continue
        best = run.best()
        rate = len(run.trajectory) / (run.wall_seconds / 60) if run.wall_seconds > 0 else 0.0
        lines.append(
            f"| {run.system} | {len(run.trajectory)} | {run.valid} | {run.fm_calls} ({run.prompt_tokens} / "
            f"{run.completion_tokens}) | {fmt_score(run.seed_score)} | {fmt_score(best['score'] if best else None)} "
            f"{rescored(best and best['sha'])}"
            f"| {best['index'] if best else '-'} | {run.wall_seconds:.0f} | {rate:.2f} |"
        )
    cut = meta.get("equal_seconds")
    if cut:
        lines += [
            "",
            f"At equal wall time ({cut:.0f} s, the fastest system's whole run):",
            "",
            f"| system | proposals by then | best, own eval {heads}| reached at proposal (s) |",
            "|" + "---|" * (4 + len(evaluators)),
        ]
        for run in runs:
            if run.error and not run.trajectory:
                continue
            best = run.best(cut)
            made = sum(1 for p in run.trajectory if p["t"] <= cut)
            lines.append(
                f"| {run.system} | {made} | {fmt_score(best['score'] if best else run.seed_score)} "
                f"{rescored(best and best['sha'])}"
                f"| {_reached(best)} |"
            )
    own = (
        "Cambrian's scorer for Cambrian, OpenEvolve's evaluator for the peers"
        if task == "circle_packing"
        else f"the {task} benchmark in Cambrian's sandbox, for all three"
    )
    lines.append(f"\nown eval: the system's own evaluator ({own}); '-' for a best: no proposal scored")
    return "\n".join(lines)
