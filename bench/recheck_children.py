"""Judge again, with today's static check, the children a saved fm_efficacy run counted as valid.

`bench/fm_efficacy.py` keeps every child's entry file as a diff against its
parent, the benchmark's seed. This script rebuilds each child it counted as
valid from that diff and runs the static check (`check_child`) on it, so a
change to the check is measured on real model output without model time:
how many of the children a run counted would the check refuse today, and why.
A child whose diff was cut short, or fits none of the benchmark's seeds (the
seed changed since), is reported and not counted.

    .venv/bin/python bench/recheck_children.py bench/results/fm_efficacy-rewrite-1.5b-rings.json [...]

Prints one line per child and a table per file; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cambrian.evaluators.base import Genome
from cambrian.meta_agent.edits import EditError, check_child
from cambrian.meta_agent.search import categorize

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def apply_diff(parent: str, diff: str) -> str | None:
    """`parent` with the unified diff applied, or None when the diff fits it nowhere, or in more than one
    place (hunks of blank lines only), or was cut. Like `patch`, the hunks may sit some lines from where
    their headers say (the seed's docstring grew), all by the same offset, where every hunk's old lines
    match exactly."""
    if diff.rstrip().endswith("(cut)"):
        return None
    old = parent.splitlines(keepends=True)
    hunks = [(start, body, [text for tag, text in body if tag in (" ", "-")]) for start, body in _hunks(diff)]
    if not hunks:
        return parent

    def fits(shift: int) -> bool:
        at = 0
        for start, _, before in hunks:
            if start + shift < at or old[start + shift : start + shift + len(before)] != before:
                return False
            at = start + shift + len(before)
        return True

    shifts = [k for k in range(-len(old), len(old) + 1) if fits(k)]
    if len(shifts) != 1:
        return None
    shift = shifts[0]
    out: list[str] = []
    at = 0
    for start, body, before in hunks:
        out.extend(old[at : start + shift])
        out.extend(text for tag, text in body if tag in (" ", "+"))
        at = start + shift + len(before)
    out.extend(old[at:])
    return "".join(out)


def _hunks(diff: str) -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """(0-based line where the hunk's old lines start, [(tag, line)]) for each hunk of a unified diff."""
    start, body = -1, list[tuple[str, str]]()
    for line in diff.splitlines(keepends=True):
        match = _HUNK.match(line)
        if match is not None:
            if start >= 0:
                yield start, body
            start, body = int(match.group(1)) - (0 if match.group(2) == "0" else 1), []
        elif start >= 0 and line[:1] in (" ", "-", "+"):
            body.append((line[:1], line[1:]))
    if start >= 0:
        yield start, body


def seeds(benchmark: str) -> Iterator[tuple[Genome, str | None]]:
    """(seed program, the function its harness calls) for each seed a child of `benchmark` may have been made
    from: every start for circle packing."""
    if benchmark == "circle_packing":
        from cambrian.evaluators.circle_packing import CirclePacking

        for start in ("rings", "grid"):
            packing = CirclePacking(start=start)
            yield packing.seed(), packing.entry_function
        return
    from cambrian.evaluators.registry import get_benchmark

    built = get_benchmark(benchmark)
    yield built.seed(), getattr(built, "entry_function", None)


def recheck(row: dict) -> tuple[str, str]:
    """(verdict, reason) for one recorded valid child: kept, refused (with the check's reason) or unknown."""
    if not row.get("change"):
        return "unknown", "the run kept no diff of its children"
    for parent, entry_function in seeds(row["benchmark"]):
        text = apply_diff(parent.files[parent.entry], row["change"])
        if text is None:
            continue
        child = Genome(files={**parent.files, parent.entry: text}, entry=parent.entry)
        try:
            check_child(child, parent, entry_function=entry_function)
        except EditError as error:
            return "refused", str(error)
        return "kept", ""
    return "unknown", "the recorded diff fits no seed of the benchmark in one place (cut, or the seed changed)"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="fm_efficacy JSON files")
    args = parser.parse_args(argv)
    for path in args.results:
        saved = json.loads(path.read_text())
        cells: dict[tuple[str, str, str], Counter[str]] = {}
        reasons: Counter[str] = Counter()
        print(f"{path.name}: {saved['meta'].get('label', '')} (git {saved['meta'].get('git', '?')})")
        for row in saved["proposals"]:
            cell = cells.setdefault((row["benchmark"], row["model"], row["operator"]), Counter())
            cell["proposals"] += 1
            if row["outcome"] != "valid":
                continue
            verdict, reason = recheck(row)
            cell["valid then"] += 1
            cell[verdict] += 1
            if verdict == "refused":
                reasons[categorize(reason)] += 1
            print(
                f"  {row['model']} {row['operator']} seed {row['seed']} #{row['index']}: {verdict}"
                + (f": {reason}" if reason else "")
            )
        print("| benchmark | model | operator | valid then | kept by today's check | refused | unknown |")
        print("|---|---|---|---|---|---|---|")
        for (benchmark, model, operator), cell in cells.items():
            print(
                f"| {benchmark} | {model} | {operator} | {cell['valid then']}/{cell['proposals']} | "
                f"{cell['kept']}/{cell['proposals']} | {cell['refused']} | {cell['unknown']} |"
            )
        if reasons:
            print("refused: " + ", ".join(f"{label} {count}" for label, count in reasons.most_common()))
        print()


if __name__ == "__main__":
    main()
