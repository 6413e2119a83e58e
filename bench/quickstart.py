"""Does README command 1 show a search improving? The quickstart search, run as a user runs it, over seeds.

Each seed is README command 1, `cambrian run symbolic_regression --iterations 40 --wall-seconds 480`, with
`--set seed=S` (plus any extra arguments, e.g.
`--model`), a real search through the CLI: local model, best available sandbox, fresh runs folder. Per
seed it reports the wall clock, the seed's and the best score, and the edit path that made the best
agent; then how many seeds improved on the seed program.

    .venv/bin/python bench/quickstart.py                      # seeds 0-4, the README's command as it is
    .venv/bin/python bench/quickstart.py --seeds 0,1 -- --model qwen2.5-coder-1.5b --iterations 12
    .venv/bin/python bench/quickstart.py --report bench/results/quickstart-TIME.json

Results go to bench/results/quickstart-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# README command 1, after `cambrian`: 40 proposals or 8 minutes of proposing, whichever comes first.
README_ARGS = ("run", "symbolic_regression", "--iterations", "40", "--wall-seconds", "480")


@dataclass
class SeedRun:
    seed: int
    seconds: float
    exit_code: int
    seed_score: float | None
    best_score: float | None
    improved: bool
    proposals: int
    valid: int
    path: str  # the edits from the seed to the best agent
    tail: str  # the last lines the command printed


def run_seed(seed: int, extra: Sequence[str], runs_dir: Path) -> SeedRun:
    from cambrian.archive.store import Archive
    from cambrian.meta_agent.search import summarize_run

    name = f"quickstart-{seed}"
    command = [
        sys.executable,
        "-m",
        "cambrian",
        *README_ARGS,
        "--set",
        f"seed={seed}",
        "--name",
        name,
        "--runs-dir",
        str(runs_dir),
        *extra,
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    seconds = time.perf_counter() - started
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-12:])
    database = runs_dir / name / "archive.db"
    if not database.exists():
        return SeedRun(seed, seconds, done.returncode, None, None, False, 0, 0, "", tail)
    with Archive.at(database, readonly=True) as archive:
        summary = summarize_run(archive, int(archive.get_run(name).id))
    gain = summary.gain
    path = "; ".join(f"#{e.agent_id} {e.operator} {e.parent_score or 0:.4f}->{e.score:.4f}" for e in summary.path)
    return SeedRun(
        seed=seed,
        seconds=seconds,
        exit_code=done.returncode,
        seed_score=summary.seed_score,
        best_score=summary.best_score,
        improved=gain is not None and gain > 1e-9,
        proposals=summary.proposals,
        valid=summary.valid,
        path=path,
        tail=tail,
    )


def table(runs: Sequence[SeedRun]) -> str:
    lines = ["| seed | minutes | seed score | best | gain | valid children | edits to the best |", "|" + "---|" * 7]
    for r in runs:
        gain = f"{r.best_score - r.seed_score:+.4f}" if r.best_score is not None and r.seed_score is not None else "-"
        best = f"{r.best_score:.4f}" if r.best_score is not None else "-"
        seed_score = f"{r.seed_score:.4f}" if r.seed_score is not None else "-"
        lines.append(
            f"| {r.seed} | {r.seconds / 60:.1f} | {seed_score} | {best} | {gain} | {r.valid}/{r.proposals} "
            f"| {r.path or '-'} |"
        )
    improved = sum(r.improved for r in runs)
    slowest = max((r.seconds for r in runs), default=0.0)
    lines.append(f"\nimproved on the seed in {improved} of {len(runs)} seeds; slowest {slowest / 60:.1f} min")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated run seeds")
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default bench/results/quickstart-TIME.json)")
    parser.add_argument("--report", type=Path, default=None, help="print the table of an earlier JSON file only")
    parser.add_argument("extra", nargs="*", help="more `cambrian run` arguments (after --)")
    args = parser.parse_args(argv)
    if args.report is not None:
        saved = json.loads(args.report.read_text())
        print(saved["meta"]["command"])
        print(table([SeedRun(**row) for row in saved["runs"]]))
        return
    out = args.out or RESULTS_DIR / f"quickstart-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": "cambrian " + " ".join([*README_ARGS, *args.extra]) + " --set seed=S",
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    runs: list[SeedRun] = []
    with tempfile.TemporaryDirectory(prefix="cambrian-quickstart-") as runs_dir:
        for seed in [int(s) for s in args.seeds.split(",") if s]:
            runs.append(run_seed(seed, args.extra, Path(runs_dir)))
            r = runs[-1]
            print(
                f"seed {seed}: {r.seconds / 60:.1f} min, exit {r.exit_code}, seed {r.seed_score} best {r.best_score}"
                f" ({r.valid}/{r.proposals} valid) {r.path}",
                flush=True,
            )
            out.write_text(json.dumps({"meta": meta, "runs": [asdict(x) for x in runs]}, indent=1))
    print(table(runs))


if __name__ == "__main__":
    main()
