"""Where a kept run's FM time goes, and what two levers could give back: its repairs, and a perfect prompt cache.

Reads run folders (`bench/generality.py --keep-runs DIR` keeps them; each has an `archive.db`) and prints a row
per run from its ledger:

- FM seconds by purpose (mutate, redraw, repair, diagnose; calls answered from the response cache and agents' own calls
  left out), and the repairs' share;
- what the repairs gave: children that a repair built and that ran (`repair_note` starting "FM repair"), and of
  those how many beat their parent; the same for the redraws (`fm.redraws`: "FM redraw");
- the run without them, as counted from the same run (not run again): children that only a repair made
  (`FM repair after the run failed`) are not proposed, children that a repair fixed before they ran are
  invalid, and the proposing minutes (from the seed's score to the last child) shrink by the repairs' share of
  FM seconds (a run on a CPU server is bound by its FM);
- the prompt-cache floor: the prompt characters no earlier call of the run began with (its longest common
  prefix with any earlier prompt and reply), in tokens at the run's own characters per token, against the
  prompt tokens the server processed (its `server.log`). No cache can process fewer. Beside it, simulated
  over the same calls: one server slot, and three slots with each conversation pinned to its own (a repair
  finds its conversation; llama.cpp's `id_slot`).

    .venv/bin/python bench/fm_time.py /work/suite9/*/ --label suite9

Writes bench/results/fm-time-<label>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from completions import _PROMPT  # llama.cpp's line per prompt: milliseconds, tokens processed

from cambrian.archive.lineage import improves
from cambrian.archive.models import AgentStatus
from cambrian.archive.store import Archive

RESULTS_DIR = Path(__file__).resolve().parent / "results"
_PURPOSES = ("mutate", "redraw", "repair", "diagnose")


def common_prefix(a: str, b: str) -> int:
    """Characters `a` and `b` share from their start."""
    n = min(len(a), len(b))
    low, high = 0, n  # the largest k with a[:k] == b[:k], by bisection (slices compare in C)
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def rendered(messages: Sequence[dict[str, str]]) -> str:
    """A conversation as one string, in the order a chat template lays it out."""
    return "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages)


def cache_floor(prompts: Sequence[tuple[str, str]]) -> int:
    """Characters of `prompts` ((prompt, reply) in call order) that no earlier prompt and reply began with."""
    seen: list[str] = []
    new = 0
    for prompt, reply in prompts:
        new += len(prompt) - max((common_prefix(held, prompt) for held in seen), default=0)
        seen.append(prompt + reply)
    return new


def pinned_slots(prompts: Sequence[tuple[str, str]], slots: int) -> int:
    """Characters of `prompts` a server with `slots` slots would process if each call went to the slot holding
    its conversation (a repair's), else to the least recently used one (`slots` = 1: one slot, as a run's
    server has; llama.cpp's prompt cache in RAM, which sometimes brings an older prompt back, left out)."""
    held = [""] * slots
    used = [0] * slots
    new = 0
    for clock, (prompt, reply) in enumerate(prompts, start=1):
        continuing = [i for i in range(slots) if held[i] and prompt.startswith(held[i])]
        slot = max(continuing, key=lambda i: len(held[i])) if continuing else min(range(slots), key=used.__getitem__)
        new += len(prompt) - common_prefix(held[slot], prompt)
        held[slot], used[slot] = prompt + reply, clock
    return new


def processed_tokens(run_dir: Path) -> int | None:
    """Prompt tokens the run's llama.cpp server processed (its log), None without one."""
    log = run_dir / "server.log"
    if not log.is_file():
        return None
    return sum(int(tokens) for _ms, tokens in _PROMPT.findall(log.read_text(encoding="utf-8", errors="replace")))


def read_run(run_dir: Path) -> dict[str, Any] | None:
    """One run's row; None for a folder without a finished archive."""
    database = run_dir / "archive.db"
    if not database.is_file():
        return None
    with Archive.at(database, readonly=True) as archive:
        runs = archive.list_runs()
        if not runs:
            return None
        run_id = int(runs[0].id or 0)
        agents = archive.agents(run_id)
        calls = [c for c in archive.llm_calls(run_id) if not c.cache_hit and c.error is None and c.purpose != "agent"]
        requests, responses = archive.llm_exchanges(c.request_hash for c in calls)
    seconds = {p: round(sum(c.latency_s for c in calls if c.purpose == p), 1) for p in _PURPOSES}
    counts = {p: sum(c.purpose == p for c in calls) for p in _PURPOSES}
    fm_s = sum(c.latency_s for c in calls)
    scores = {a.key: a.score for a in agents}
    seed = next((a for a in agents if a.operator == "seed" and a.status == AgentStatus.evaluated), None)
    children = [a for a in agents if a.iteration > 0]
    valid = [a for a in children if a.status == AgentStatus.evaluated]
    by_fm_repair = [a for a in valid if (a.repair_note or "").startswith("FM repair")]
    by_redraw = [a for a in valid if (a.repair_note or "").startswith("FM redraw")]
    made_by_repair = [a for a in children if (a.repair_note or "").startswith("FM repair after the run failed")]
    beat = [a for a in by_fm_repair if a.parent_id is not None and improves(a.score, scores.get(int(a.parent_id)))]
    redraw_beat = [a for a in by_redraw if a.parent_id is not None and improves(a.score, scores.get(int(a.parent_id)))]
    minutes = (
        (max(a.created_at for a in children) - seed.updated_at).total_seconds() / 60 if seed and children else None
    )
    repair_share = seconds["repair"] / fm_s if fm_s else 0.0
    prompts = []
    for call in calls:
        request, response = requests.get(call.request_hash), responses.get(call.request_hash)
        if request is not None:
            prompts.append((rendered(json.loads(request.messages)), response.text if response else ""))
    characters = sum(len(p) for p, _ in prompts)
    tokens = sum(c.prompt_tokens for c in calls)
    per_character = tokens / characters if characters else 0.0
    floor = round(cache_floor(prompts) * per_character) if characters else None
    proposals, without = len(children), len(children) - len(made_by_repair)
    minutes_without = minutes * (1 - repair_share) if minutes else None
    return {
        "run": run_dir.name,
        "calls": counts,
        "fm_seconds": seconds,
        "repair_share": round(repair_share, 3),
        "repaired_valid": len(by_fm_repair),
        "repaired_beat_parent": len(beat),
        "redrawn_valid": len(by_redraw),
        "redrawn_beat_parent": len(redraw_beat),
        "proposals": proposals,
        "valid": len(valid),
        "proposing_minutes": round(minutes, 2) if minutes else None,
        "without_repairs": {
            "proposals": without,
            "valid": len(valid) - len(by_fm_repair),
            "proposing_minutes": round(minutes_without, 2) if minutes_without else None,
        },
        "prompt_tokens": tokens,
        "processed_tokens": processed_tokens(run_dir),
        "cache_floor_tokens": floor,
        "one_slot_tokens": round(pinned_slots(prompts, 1) * per_character),
        "three_pinned_slots_tokens": round(pinned_slots(prompts, 3) * per_character),
    }


def _rate(proposals: int, minutes: float | None) -> str:
    return f"{proposals / minutes:.2f}" if minutes else "-"


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table, with a line for all runs together."""
    lines = [
        "| run | FM s: mutate / redraw / repair / diagnose | redraws: calls, children valid (beat parent) "
        "| repairs: calls, share | repaired children valid (beat parent) | valid / proposals, /min "
        "| without repairs: valid / proposals, /min | prompt tokens processed, floor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s, w = r["fm_seconds"], r["without_repairs"]
        lines.append(
            f"| {r['run']} | {s['mutate']:.0f} / {s.get('redraw', 0):.0f} / {s['repair']:.0f} / {s['diagnose']:.0f} "
            f"| {r['calls'].get('redraw', 0)}, {r.get('redrawn_valid', 0)} ({r.get('redrawn_beat_parent', 0)}) "
            f"| {r['calls']['repair']}, "
            f"{r['repair_share']:.0%} | {r['repaired_valid']} ({r['repaired_beat_parent']}) | {r['valid']}/"
            f"{r['proposals']}, {_rate(r['proposals'], r['proposing_minutes'])} | {w['valid']}/{w['proposals']}, "
            f"{_rate(w['proposals'], w['proposing_minutes'])} | {r['processed_tokens'] or '-'}, "
            f"{r['cache_floor_tokens'] or '-'} |"
        )
    keys = ("proposals", "valid", "proposing_minutes", "repaired_valid", "redrawn_valid")
    total = {k: sum(r.get(k) or 0 for r in rows) for k in keys}
    w_total = {k: sum(r["without_repairs"][k] or 0 for r in rows) for k in ("proposals", "valid", "proposing_minutes")}
    fm = sum(sum(r["fm_seconds"].values()) for r in rows)
    repair = sum(r["fm_seconds"]["repair"] for r in rows)
    processed = sum(r["processed_tokens"] or 0 for r in rows)
    floor = sum(r["cache_floor_tokens"] or 0 for r in rows)
    lines.append(
        f"| all | {fm:.0f} in all | {sum(r['calls'].get('redraw', 0) for r in rows)}, {total['redrawn_valid']} "
        f"| {repair / fm if fm else 0:.0%} | {total['repaired_valid']} | {total['valid']}/"
        f"{total['proposals']}, {_rate(total['proposals'], total['proposing_minutes'])} | {w_total['valid']}/"
        f"{w_total['proposals']}, {_rate(w_total['proposals'], w_total['proposing_minutes'])} | {processed}, "
        f"{floor} |"
    )
    one = sum(r["one_slot_tokens"] for r in rows)
    pinned = sum(r["three_pinned_slots_tokens"] for r in rows)
    lines.append(
        f"\nprompt tokens to process, simulated without the RAM cache: one slot {one}, three slots with each "
        f"conversation pinned to its own (least recently used first) {pinned}; the floor {floor}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders, each with its archive.db")
    parser.add_argument("--label", default="runs", help="names bench/results/fm-time-<label>.json")
    args = parser.parse_args(argv)
    rows = [row for row in (read_run(path) for path in args.runs) if row is not None]
    if not rows:
        print("no run folder with an archive.db among those given", file=sys.stderr)
        return 2
    print(table(rows))
    out = RESULTS_DIR / f"fm-time-{args.label}.json"
    meta = {"command": "bench/fm_time.py " + " ".join(map(str, args.runs)), "at": datetime.now(timezone.utc)}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2, default=str) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
