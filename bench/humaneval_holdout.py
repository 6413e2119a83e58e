"""Does the best agent a HumanEval search finds beat the seed agent on the holdout tasks it never saw?

Per seed: a real search through the CLI (`cambrian run humaneval --set seed=S [extra]`: local model,
best available sandbox, fresh runs folder), then `cambrian eval RUN:AGENT --split holdout` for the seed
agent and for the run's best agent (by search score, the one selection saw). The holdout tasks never drove
selection, so the difference between the two holdout scores is the search's gain that generalises.

It reports, per seed, the seed's and the best agent's search and holdout scores and the edits that made the
best agent; then the mean holdout gain over seeds with a 95% interval from a paired bootstrap over the
holdout tasks (each seed's 40 tasks resampled, best and seed paired by task), and how many seeds gained.
A run whose best agent is its seed gains exactly 0 (nothing to evaluate twice). By default the seed agent's
holdout is evaluated in every run's own archive, so the best agent's greedy FM questions that the seed
asked too are answered from that run's cache with the seed's answers (a local server's greedy answers vary
from run to run), and the difference is the best agent's code alone. `--seed-holdout once` evaluates it in
the first run only and reuses it where the seed's genome hash is the same (faster, noisier); the JSON says
which run measured it.

    .venv/bin/python bench/humaneval_holdout.py --seeds 0,1,2 -- --model qwen2.5-coder-0.5b
    .venv/bin/python bench/humaneval_holdout.py --report bench/results/humaneval_holdout-TIME.json

Results go to bench/results/humaneval_holdout-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS_DIR = Path(__file__).resolve().parent / "results"
BOOTSTRAP = 10_000


@dataclass
class SeedRun:
    seed: int
    search_minutes: float
    holdout_minutes: float
    exit_code: int
    proposals: int
    valid: int
    seed_agent: int | None
    best_agent: int | None
    seed_search: float | None
    best_search: float | None
    seed_holdout: float | None
    best_holdout: float | None
    path: str  # the edits from the seed to the best agent
    seed_tasks: dict[str, float] = field(default_factory=dict)  # holdout task id -> score
    seed_tasks_from: str = ""  # the run whose evaluation of the seed agent gave seed_tasks
    best_tasks: dict[str, float] = field(default_factory=dict)
    tail: str = ""  # the last lines a failing command printed


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cambrian", *args]
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})


def holdout_tasks(database: Path, agent_id: int) -> dict[str, float]:
    from cambrian.archive.store import Archive

    with Archive.at(database, readonly=True) as archive:
        return {e.task_id: float(e.score) for e in archive.evaluations(agent_id) if e.split == "holdout"}


def run_seed(
    seed: int, search_args: Sequence[str], runs_dir: Path, known_seed: dict[str, tuple[str, dict[str, float]]]
) -> SeedRun:
    """One search and its holdout evaluations; known_seed maps a seed genome hash to (run, holdout scores)
    measured already (and gets this run's when it measures one)."""
    from cambrian.archive.store import Archive
    from cambrian.meta_agent.search import summarize_run

    name = f"humaneval-{seed}"
    started = time.perf_counter()
    done = cli(*search_args, "--set", f"seed={seed}", "--name", name, "--runs-dir", str(runs_dir))
    search_minutes = (time.perf_counter() - started) / 60
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-12:])
    database = runs_dir / name / "archive.db"
    empty = SeedRun(seed, search_minutes, 0.0, done.returncode, 0, 0, None, None, None, None, None, None, "", tail=tail)
    if not database.exists():
        return empty
    with Archive.at(database, readonly=True) as archive:
        run_id = int(archive.get_run(name).id)
        summary = summarize_run(archive, run_id)
        seeds = archive.seeds(run_id)
        best = archive.best(run_id)
    if not seeds or not best:
        return empty
    seed_agent, best_agent = int(seeds[0].id or 0), int(best[0].id or 0)
    seed_hash = str(seeds[0].genome_hash)
    started = time.perf_counter()
    to_score = [best_agent] if seed_hash in known_seed else [seed_agent, best_agent]
    for agent_id in dict.fromkeys(to_score):
        scored = cli("eval", f"{name}:{agent_id}", "--split", "holdout", "--runs-dir", str(runs_dir))
        if scored.returncode != 0:
            tail = "\n".join((scored.stdout + scored.stderr).strip().splitlines()[-12:])
    holdout_minutes = (time.perf_counter() - started) / 60
    if seed_hash not in known_seed:
        known_seed[seed_hash] = (name, holdout_tasks(database, seed_agent))
    seed_from, seed_tasks = known_seed[seed_hash]
    best_tasks = seed_tasks if best_agent == seed_agent else holdout_tasks(database, best_agent)
    path = "; ".join(f"#{e.agent_id} {e.operator} {e.parent_score or 0:.4f}->{e.score:.4f}" for e in summary.path)
    return SeedRun(
        seed=seed,
        search_minutes=search_minutes,
        holdout_minutes=holdout_minutes,
        exit_code=done.returncode,
        proposals=summary.proposals,
        valid=summary.valid,
        seed_agent=seed_agent,
        best_agent=best_agent,
        seed_search=summary.seed_score,
        best_search=summary.best_score,
        seed_holdout=_mean(seed_tasks),
        best_holdout=_mean(best_tasks),
        path=path,
        seed_tasks=seed_tasks,
        seed_tasks_from=seed_from,
        best_tasks=best_tasks,
        tail=tail,
    )


def _mean(scores: dict[str, float]) -> float | None:
    return sum(scores.values()) / len(scores) if scores else None


def paired_gain(runs: Sequence[SeedRun], *, draws: int = BOOTSTRAP, rng_seed: int = 0) -> tuple[float, float, float]:
    """Mean holdout gain (best - seed) over seeds, and its 95% bootstrap interval: each seed's holdout tasks
    are resampled with replacement, best and seed paired by task."""
    diffs = [[r.best_tasks[t] - r.seed_tasks[t] for t in sorted(r.seed_tasks)] for r in runs if _complete(r)]
    if not diffs:
        raise ValueError("no seed has both holdout scores")
    return bootstrap_mean(diffs, draws=draws, rng_seed=rng_seed)


def bootstrap_mean(
    diffs: Sequence[Sequence[float]], *, draws: int = BOOTSTRAP, rng_seed: int = 0
) -> tuple[float, float, float]:
    """The mean over groups of each group's mean paired difference, and its 95% bootstrap interval (each
    group's differences resampled with replacement)."""
    mean = sum(sum(d) / len(d) for d in diffs) / len(diffs)
    rng = random.Random(rng_seed)
    means = sorted(sum(sum(rng.choices(d, k=len(d))) / len(d) for d in diffs) / len(diffs) for _ in range(draws))
    return mean, means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def _complete(run: SeedRun) -> bool:
    return bool(run.seed_tasks) and run.best_tasks.keys() == run.seed_tasks.keys()


def _score(value: float | None) -> str:
    return f"{value:.4f}" if value is not None else "-"


def table(runs: Sequence[SeedRun]) -> str:
    lines = [
        "| seed | search min | holdout min | valid children | seed: search / holdout | best: search / holdout "
        "| holdout gain | edits to the best |",
        "|" + "---|" * 8,
    ]
    for r in runs:
        gain = f"{r.best_holdout - r.seed_holdout:+.4f}" if _complete(r) else "-"  # type: ignore[operator]
        lines.append(
            f"| {r.seed} | {r.search_minutes:.1f} | {r.holdout_minutes:.1f} | {r.valid}/{r.proposals} "
            f"| {_score(r.seed_search)} / {_score(r.seed_holdout)} "
            f"| {_score(r.best_search)} / {_score(r.best_holdout)} "
            f"| {gain} | {r.path or '-'} |"
        )
    complete = [r for r in runs if _complete(r)]
    if complete:
        mean, low, high = paired_gain(complete)
        gained = sum(r.best_holdout > r.seed_holdout for r in complete)  # type: ignore[operator]
        verdict = "above 0" if low > 0 else "contains 0" if high >= 0 else "below 0"
        lines.append(
            f"\nholdout gain (best - seed) over {len(complete)} seeds: {mean:+.4f}, 95% interval "
            f"[{low:+.4f}, {high:+.4f}] (paired bootstrap over holdout tasks; {verdict}); "
            f"gained in {gained} of {len(complete)} seeds"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated run seeds")
    parser.add_argument("--iterations", type=int, default=40, help="proposals per search (at most)")
    parser.add_argument("--wall-seconds", type=float, default=900, help="minutes of proposing per search, in seconds")
    parser.add_argument("--n-search", type=int, default=25, help="search tasks per agent: 5, then the rest")
    parser.add_argument(
        "--seed-holdout",
        choices=("once", "every"),
        default="every",
        help="evaluate the seed agent's holdout in every run (paired through its cache) or in the first only",
    )
    parser.add_argument("--runs-dir", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default: bench/results/)")
    parser.add_argument("--report", type=Path, default=None, help="print the table of an earlier JSON file only")
    parser.add_argument("extra", nargs="*", help="more `cambrian run` arguments (after --)")
    args = parser.parse_args(argv)
    if args.report is not None:
        saved = json.loads(args.report.read_text())
        print(saved["meta"]["command"])
        print(table([SeedRun(**row) for row in saved["runs"]]))
        return
    search_args = [
        "run",
        "humaneval",
        "--iterations",
        str(args.iterations),
        "--wall-seconds",
        str(args.wall_seconds),
        "--set",
        f"benchmark_options.n_search={args.n_search}",
        "--set",
        "benchmark_options.stage_sizes=[5]",
        "--set",
        "benchmark_options.thresholds=[0.2]",
        *args.extra,
    ]
    out = args.out or RESULTS_DIR / f"humaneval_holdout-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": "cambrian " + " ".join(search_args) + " --set seed=S; then cambrian eval RUN:AGENT --split holdout",
        "seed_holdout": args.seed_holdout,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.runs_dir is not None:
        taken = [f"humaneval-{seed}" for seed in seeds if (args.runs_dir / f"humaneval-{seed}").exists()]
        if taken:  # the search would refuse the name and this bench would report the old run's scores
            parser.error(f"{args.runs_dir} already holds {', '.join(taken)}: remove them or pick another --runs-dir")
    runs: list[SeedRun] = []
    known_seed: dict[str, tuple[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="cambrian-humaneval-") as scratch:
        runs_dir = args.runs_dir or Path(scratch)
        for seed in seeds:
            runs.append(run_seed(seed, search_args, runs_dir, known_seed))
            if args.seed_holdout == "every":
                known_seed.clear()
            r = runs[-1]
            seed_scores = f"{_score(r.seed_search)}/{_score(r.seed_holdout)}"
            best_scores = f"{_score(r.best_search)}/{_score(r.best_holdout)}"
            print(
                f"seed {seed}: search {r.search_minutes:.1f} min (exit {r.exit_code}), "
                f"holdout {r.holdout_minutes:.1f} min; seed {seed_scores} best {best_scores} "
                f"({r.valid}/{r.proposals} valid) {r.path}",
                flush=True,
            )
            if r.tail and (r.exit_code != 0 or not _complete(r)):
                print(r.tail, flush=True)
            out.write_text(json.dumps({"meta": meta, "runs": [asdict(x) for x in runs]}, indent=1))
    print(table(runs))


if __name__ == "__main__":
    main()
