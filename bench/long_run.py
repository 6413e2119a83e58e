"""How far does one long search get? Best-so-far against proposals and minutes, from a real run.

Runs `cambrian run BENCH --iterations N --name NAME --runs-dir DIR [extra]` through the CLI (or, with
`--report-only`, reads a run that exists, even one still running: the archive is opened read-only), then
prints the best score after 10, 20, 50, 100, ... proposals with the minutes it took, and saves the whole
curve (every child: proposal number, minute, operator, model, status, score, best so far).

    .venv/bin/python bench/long_run.py --iterations 200 --name cp-1.5b-200 -- --set seed=0
    .venv/bin/python bench/long_run.py --report-only --name cp-1.5b-200      # while it runs, or after

Results go to bench/results/long_run-<name>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS_DIR = Path(__file__).resolve().parent / "results"
CHECKPOINTS = (10, 20, 50, 100, 150, 200, 300, 500, 1000)


@dataclass
class Point:
    proposal: int  # children proposed so far, this one included (the seed is 0)
    minutes: float  # since the seed was stored
    agent_id: int
    operator: str
    model: str | None
    status: str
    score: float | None
    best: float  # best search score of the run up to and including this proposal


def curve(database: Path, name: str) -> list[Point]:
    """Every agent of run `name` in the order they were proposed, with the best score so far."""
    from cambrian.archive.store import Archive

    with Archive.at(database, readonly=True) as archive:
        run = archive.get_run(name)
        agents = sorted(archive.agents(int(run.id)), key=lambda a: int(a.id or 0))
    if not agents:
        return []
    start = agents[0].created_at
    best = float("-inf")
    points = []
    for number, agent in enumerate(agents):
        if agent.score is not None and agent.status.value == "evaluated":
            best = max(best, agent.score)
        points.append(
            Point(
                proposal=number,
                minutes=(agent.created_at - start).total_seconds() / 60,
                agent_id=int(agent.id or 0),
                operator=agent.operator,
                model=agent.model,
                status=agent.status.value,
                score=agent.score,
                best=best,
            )
        )
    return points


def table(points: Sequence[Point]) -> str:
    if not points:
        return "no agents yet"
    last = points[-1].proposal
    marks = [c for c in CHECKPOINTS if c < last] + [last]
    lines = ["| proposals | minutes | best so far | valid so far |", "|---|---|---|---|"]
    for mark in marks:
        upto = [p for p in points if p.proposal <= mark]
        valid = sum(p.status == "evaluated" for p in upto[1:])
        lines.append(f"| {mark} | {upto[-1].minutes:.1f} | {upto[-1].best:.4f} | {valid}/{len(upto) - 1} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="circle_packing")
    parser.add_argument("--iterations", type=int, default=200, help="proposals to make")
    parser.add_argument("--name", required=True, help="the run's name")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"))
    parser.add_argument("--report-only", action="store_true", help="read the run; start nothing")
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default bench/results/long_run-NAME.json)")
    parser.add_argument("extra", nargs="*", help="more `cambrian run` arguments (after --)")
    args = parser.parse_args(argv)
    command = [
        "run",
        args.benchmark,
        "--iterations",
        str(args.iterations),
        "--name",
        args.name,
        "--runs-dir",
        str(args.runs_dir),
        *args.extra,
    ]
    exit_code = None
    if not args.report_only:
        exit_code = subprocess.run([sys.executable, "-m", "cambrian", *command], env=os.environ).returncode
    database = args.runs_dir / args.name / "archive.db"
    if not database.exists():
        sys.exit(f"no archive at {database}: start the run first (without --report-only)")
    points = curve(database, args.name)
    out = args.out or RESULTS_DIR / f"long_run-{args.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"command": "cambrian " + " ".join(command), "exit_code": exit_code}
    out.write_text(json.dumps({"meta": meta, "points": [asdict(p) for p in points]}, indent=1))
    print(meta["command"])
    print(table(points))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
