"""Does the default search improve programs it was never tuned for? The generality suite.

Runs `cambrian run TASK --iterations N` as a user would (the CLI, the default model and sandbox, a fresh
runs folder, no per-task flags) on program tasks of different shapes, over seeds, and prints one row per
task: the seed's score, the best found (median over seeds), the known reference, valid children of
proposals, how many seeds improved on the seed program, and proposals per minute.

The tasks (`TASKS`): circle packing from both seeds, the deceptive trap, one ARC program, and the suite's
own program benchmarks (`evaluators/programs`): a one-`return` priority function (knapsack), symbolic
regression, a TSP construction heuristic, a function to make faster (measured speed), a seed that is a
class (load balancing), a two-file genome (graph colouring), a seed with no numeric constants (job order)
and a 300-line seed (strip packing). Each program benchmark ships a reference program, scored here beside
its seed.

    .venv/bin/python bench/generality.py --seeds 0 --iterations 20                   # one seed, all tasks
    .venv/bin/python bench/generality.py --tasks knapsack,tsp --seeds 0,1,2 --label after
    .venv/bin/python bench/generality.py --label lines-only -- --set 'search.operators={lines = 1}'
    .venv/bin/python bench/generality.py --report bench/results/generality-after.json
    .venv/bin/python bench/generality.py --tasks tsp --seeds 0 --keep-runs /tmp/suite   # then: cambrian status

Arguments after `--` go to every `cambrian run` (to compare a setting against the defaults). Results go to
bench/results/generality-<label>.json, rewritten after every run, so a long measurement can be read (and
resumed with --resume) while it goes on. Each row keeps the commit that ran it, the load when it started, the
host's CPU (proposals per minute compare only within one host: a resumed suite may run on another machine), and
per operator its valid children, improvements and FM seconds, with the reasons the others did not count;
--resume continues a file only from a checkout whose code is that of the commits its rows were made at (docs,
tests and other tools may differ: `changed_code`), so a suite too long for one sitting (three seeds take about
15 hours on two cores) can be run in parts, one table of one search.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "bench" / "results"


@dataclass(frozen=True)
class SuiteTask:
    """One row of the suite: a benchmark (with options that choose its seed, never the search) and its shape."""

    name: str
    benchmark: str
    shape: str
    options: tuple[tuple[str, object], ...] = ()
    reference_note: str = ""  # where no reference program ships: the known best and its source


TASKS: tuple[SuiteTask, ...] = (
    SuiteTask(
        "circle_packing-rings",
        "circle_packing",
        "numbers in loops (rings seed)",
        (("start", "rings"),),
        "2.635 (AlphaEvolve; published best)",
    ),
    SuiteTask(
        "circle_packing-grid",
        "circle_packing",
        "strict local optimum (grid seed)",
        (("start", "grid"),),
        "2.635 (AlphaEvolve; published best)",
    ),
    SuiteTask("deceptive", "deceptive", "a list of numbers, deceptive", (), "1.0 (every bit 1)"),
    SuiteTask("arc-program", "arc-program", "grid transform (ARC a5313dff)", (), "1.0 (every pair exact)"),
    SuiteTask("knapsack", "knapsack", "one-return priority function"),
    SuiteTask("symbolic_regression", "symbolic_regression", "formula from data"),
    SuiteTask("tsp", "tsp", "construction heuristic"),
    SuiteTask("fast_primes", "fast_primes", "make it faster (measured speed)"),
    SuiteTask("load_balancing", "load_balancing", "a class"),
    SuiteTask("graph_colouring", "graph_colouring", "two-file genome"),
    SuiteTask("job_order", "job_order", "no numeric constants"),
    SuiteTask("strip_packing", "strip_packing", "300-line seed"),
)


@dataclass
class TaskRun:
    """One search of one task with one run seed."""

    task: str
    seed: int
    exit_code: int
    seconds: float
    seed_score: float | None
    best_score: float | None
    improved: bool
    proposals: int
    valid: int
    proposing_minutes: float | None  # from the seed's score to the last child's, where both exist
    #: operator -> [valid, proposed, improved on the parent, FM seconds] (older rows: the first two)
    by_operator: dict[str, list[float]] = field(default_factory=dict)
    path: str = ""  # the edits from the seed to the best agent
    tail: str = ""  # the last lines the command printed
    commit: str = ""  # the checkout that ran it (a suite resumed in a later session keeps one commit)
    load: float | None = None  # the 1-minute load average when it started (2 on a busy 2-core machine)
    reasons: dict[str, int] = field(default_factory=dict)  # why the other children did not count (`categorize`)
    host: str = ""  # the CPU that ran it (`host()`): proposals per minute compare only between rows of one host


#: The CPU features llama.cpp's matrix kernels use: prompt processing of one model differs with them.
_SIMD = ("avx2", "avx512f", "avx512_vnni", "amx_tile")


def host() -> str:
    """The CPU model, its cores and the SIMD features llama.cpp uses, e.g. 'AMD EPYC, 2 cores, avx2': a suite
    resumed in a later session may run on another machine, and the 1.5B model's prompt processing differed about
    twofold between two of ours (docs/results/generality.md, "Two hosts")."""
    from cambrian.meta_agent.llm.serve import default_threads  # the cores a llama.cpp server here would use

    model, flags = "unknown CPU", set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    features = " ".join(flag for flag in _SIMD if flag in flags) or "no AVX2"
    return f"{model}, {default_threads()} cores, {features}"


def changed_code(before: str, after: str) -> list[str]:
    """The files that make or count a run which differ between two commits: all but the docs, the tests, CI,
    Markdown and the other bench scripts. A suite may be resumed from a commit where this is empty (only docs or
    other tools changed): its rows measure one search."""
    if before == after:
        return []
    done = subprocess.run(["git", "diff", "--name-only", before, after], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:  # a commit this clone lacks: not known to be the same code
        return [f"(git diff {before} {after}: {(done.stderr.strip() or 'failed').splitlines()[0]})"]
    return [
        path
        for path in done.stdout.split()
        if not (path.startswith(("docs/", "tests/", ".ci/", "bench/")) or path.endswith(".md") or path == "mkdocs.yml")
        or path == "bench/generality.py"
    ]


def reference_score(task: SuiteTask) -> float | None:
    """The score of the benchmark's shipped reference program (local sandbox), or None when it ships none."""
    from cambrian.evaluators.programs import ProgramBenchmark
    from cambrian.evaluators.registry import get_benchmark
    from cambrian.evaluators.runner import evaluate_agent
    from cambrian.sandbox.local import LocalSandbox

    benchmark = get_benchmark(task.benchmark, dict(task.options))
    if not isinstance(benchmark, ProgramBenchmark):
        return None
    sandbox = LocalSandbox()
    try:
        return evaluate_agent(benchmark, benchmark.reference(), sandbox).score
    finally:
        sandbox.close()


def run_task(task: SuiteTask, seed: int, iterations: int, extra: Sequence[str], runs_dir: Path, commit: str) -> TaskRun:
    from cambrian.archive.models import AgentStatus
    from cambrian.archive.store import Archive
    from cambrian.meta_agent.search import summarize_run

    name = f"{task.name}-{seed}"
    options = [arg for key, value in task.options for arg in ("--set", f"benchmark_options.{key}={value}")]
    command = [
        sys.executable,
        "-m",
        "cambrian",
        "run",
        task.benchmark,
        "--iterations",
        str(iterations),
        "--name",
        name,
        "--runs-dir",
        str(runs_dir),
        "--set",
        f"seed={seed}",
        *options,
        *extra,
    ]
    load = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    seconds = time.perf_counter() - started
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-14:])
    database = runs_dir / name / "archive.db"
    if not database.exists():
        return TaskRun(
            task.name,
            seed,
            done.returncode,
            seconds,
            None,
            None,
            False,
            0,
            0,
            None,
            tail=tail,
            commit=commit,
            load=load,
            host=host(),
        )
    with Archive.at(database, readonly=True) as archive:
        run_id = int(archive.get_run(name).id)
        summary = summarize_run(archive, run_id)
        agents = archive.agents(run_id)
    seeds = [a for a in agents if a.operator == "seed" and a.status == AgentStatus.evaluated]
    children = [a for a in agents if a.iteration > 0]
    scores = {a.key: a.score for a in agents}
    by_operator: dict[str, list[float]] = {}
    for child in children:
        counts = by_operator.setdefault(child.operator, [0, 0, 0, 0.0])
        valid = child.status == AgentStatus.evaluated
        parent_score = scores.get(int(child.parent_id)) if child.parent_id is not None else None
        counts[0] += valid
        counts[1] += 1
        counts[2] += valid and child.score is not None and parent_score is not None and child.score > parent_score
        counts[3] = round(counts[3] + child.fm_seconds, 1)
    minutes = None
    if seeds and children:
        minutes = (max(a.created_at for a in children) - seeds[0].updated_at).total_seconds() / 60
    gain = summary.gain
    path = "; ".join(f"#{e.agent_id} {e.operator} {e.parent_score or 0:.4f}->{e.score:.4f}" for e in summary.path)
    return TaskRun(
        task=task.name,
        seed=seed,
        exit_code=done.returncode,
        seconds=seconds,
        seed_score=summary.seed_score,
        best_score=summary.best_score,
        improved=gain is not None and gain > 1e-9,
        proposals=summary.proposals,
        valid=summary.valid,
        proposing_minutes=minutes,
        by_operator=by_operator,
        path=path,
        tail=tail,
        commit=commit,
        load=load,
        reasons=summary.reasons,
        host=host(),
    )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def table(runs: Sequence[TaskRun], references: dict[str, float | None]) -> str:
    """The suite's table: one row per task (medians over its seeds), then the totals the targets read."""
    by_task: dict[str, list[TaskRun]] = {}
    for run in runs:
        by_task.setdefault(run.task, []).append(run)
    shapes = {task.name: task for task in TASKS}
    lines = [
        "| task | shape | seed | best (median) | reference | valid / proposals | improved | proposals/min |",
        "|" + "---|" * 8,
    ]
    improved_tasks = 0
    total_minutes = 0.0
    for name, task_runs in by_task.items():
        task = shapes.get(name)
        bests = [r.best_score for r in task_runs if r.best_score is not None]
        median_best = statistics.median(bests) if bests else None
        seed_score = next((r.seed_score for r in task_runs if r.seed_score is not None), None)
        valid, proposals = sum(r.valid for r in task_runs), sum(r.proposals for r in task_runs)
        improved = sum(r.improved for r in task_runs)
        if improved * 2 > len(task_runs):  # the median seed improved
            improved_tasks += 1
        minutes = sum(r.proposing_minutes or 0.0 for r in task_runs)
        total_minutes += minutes
        rate = proposals / minutes if minutes > 0 else None
        reference = references.get(name)
        shown_reference = _fmt(reference) if reference is not None else (task.reference_note if task else "-")
        share = f"{valid}/{proposals} ({valid / proposals:.0%})" if proposals else "0/0"
        lines.append(
            f"| {name} | {task.shape if task else '-'} | {_fmt(seed_score)} | {_fmt(median_best)} | {shown_reference} "
            f"| {share} | {improved}/{len(task_runs)} | {'-' if rate is None else f'{rate:.2f}'} |"
        )
    valid_all = sum(r.valid for r in runs)
    proposals_all = sum(r.proposals for r in runs)
    lowest = min(
        (sum(r.valid for r in rs) / max(1, sum(r.proposals for r in rs)) for rs in by_task.values()), default=0.0
    )
    lines.append(
        f"\nimproved on the seed (median over seeds) in {improved_tasks} of {len(by_task)} tasks; valid children "
        f"{valid_all}/{proposals_all} ({valid_all / max(1, proposals_all):.0%}), lowest task {lowest:.0%}; "
        f"{proposals_all / total_minutes if total_minutes > 0 else 0:.2f} proposals per minute (all proposals over all "
        "the minutes spent proposing)"
    )
    hosts = sorted({r.host or "not recorded" for r in runs})
    if len(hosts) > 1:
        lines.append(f"rows from {len(hosts)} hosts ({'; '.join(hosts)}): proposals per minute compare within one")
    return "\n".join(lines)


def operator_table(runs: Sequence[TaskRun]) -> str:
    """Which operators paid, over all the runs: children, valid, improved on the parent, FM seconds (repairs
    included) and FM seconds per improvement. Rows made before these counts were kept are left out, by number."""
    totals: dict[str, list[float]] = {}
    counted = [run for run in runs if all(len(counts) == 4 for counts in run.by_operator.values())]
    for run in counted:
        for operator, counts in run.by_operator.items():
            total = totals.setdefault(operator, [0, 0, 0, 0.0])
            for i, value in enumerate(counts):
                total[i] += value
    lines = [
        "| operator | children | valid | improved on the parent | FM seconds | FM seconds per improvement |",
        "|" + "---|" * 6,
    ]
    for operator, (valid, proposed, improved, seconds) in sorted(totals.items(), key=lambda item: -item[1][1]):
        per = f"{seconds / improved:,.0f}" if improved else "-"
        lines.append(f"| {operator} | {proposed:.0f} | {valid:.0f} | {improved:.0f} | {seconds:,.0f} | {per} |")
    if not counted:
        return "(no run kept its operators' improvements and FM seconds: made before they were kept)"
    if len(counted) < len(runs):
        lines.append(f"\n({len(runs) - len(counted)} runs made before these counts were kept are not in it)")
    return "\n".join(lines)


def reasons_table(runs: Sequence[TaskRun], top: int = 3) -> str:
    """Why children did not count, per task over its seeds: the most common reasons (`categorize`)."""
    by_task: dict[str, dict[str, int]] = {}
    for run in runs:
        reasons = by_task.setdefault(run.task, {})
        for reason, count in run.reasons.items():
            reasons[reason] = reasons.get(reason, 0) + count
    lines = ["| task | invalid | most common reasons |", "|---|---|---|"]
    for task, reasons in by_task.items():
        invalid = sum(run.proposals - run.valid for run in runs if run.task == task)
        ranked = sorted(reasons.items(), key=lambda item: -item[1])[:top]
        shown = "; ".join(f"{reason} {count}" for reason, count in ranked) or ("-" if not invalid else "not kept")
        lines.append(f"| {task} | {invalid} | {shown} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tasks", default="", help="comma-separated task names (default: all): " + ", ".join(t.name for t in TASKS)
    )
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated run seeds")
    parser.add_argument("--iterations", type=int, default=40, help="proposals per search")
    parser.add_argument("--label", default=None, help="names the result file (default: the time)")
    parser.add_argument("--resume", action="store_true", help="skip the (task, seed) runs the result file has")
    parser.add_argument("--report", type=Path, default=None, help="print the table of an earlier JSON file only")
    parser.add_argument(
        "--keep-runs",
        type=Path,
        default=None,
        help="keep the runs in this folder (to read with `cambrian status`) instead of a temporary one",
    )
    parser.add_argument("extra", nargs="*", help="more `cambrian run` arguments (after --)")
    args = parser.parse_args(argv)
    if args.report is not None:
        saved = json.loads(args.report.read_text())
        print(saved["meta"]["command"])
        rows = [TaskRun(**row) for row in saved["runs"]]
        print(table(rows, saved["references"]))
        print("\n" + operator_table(rows) + "\n\n" + reasons_table(rows))
        return
    chosen = [t for t in TASKS if not args.tasks or t.name in args.tasks.split(",")]
    unknown = set(filter(None, args.tasks.split(","))) - {t.name for t in TASKS}
    if unknown:
        parser.error(f"unknown task(s) {', '.join(sorted(unknown))}; the tasks are {', '.join(t.name for t in TASKS)}")
    label = args.label or datetime.now().strftime("%Y%m%d-%H%M%S")
    out = RESULTS_DIR / f"generality-{label}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    runs: list[TaskRun] = []
    saved_meta: dict[str, Any] = {}
    saved_references: dict[str, float | None] = {}
    if args.resume and out.exists():
        saved = json.loads(out.read_text())
        runs, saved_meta = [TaskRun(**row) for row in saved["runs"]], saved["meta"]
        saved_references = saved.get("references", {})
        others = sorted({r.commit for r in runs if r.commit and changed_code(r.commit, commit)})
        if others:  # one table measures one search: a resumed suite runs the code its first rows ran
            parser.error(
                f"--resume: {out.name} holds runs made at {', '.join(others)}, whose code differs from this "
                f"checkout's ({commit}: {', '.join(changed_code(others[0], commit)[:5])}); resume from a checkout "
                f"of that commit (git worktree add /tmp/suite {others[0]}, then copy the file into its "
                "bench/results), or choose another --label"
            )
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    command = (
        f"bench/generality.py --iterations {args.iterations} --seeds {args.seeds} "
        + (f"--tasks {args.tasks} " if args.tasks else "")
        + (f"-- {' '.join(args.extra)}" if args.extra else "")
    )
    meta = {  # a resumed file keeps its first sitting's command; each later sitting's is kept beside its time
        "command": saved_meta.get("command", command),
        "started": saved_meta.get("started", now),
        "resumed": [*saved_meta.get("resumed", []), now] if saved_meta else [],
        "resumed_commands": [*saved_meta.get("resumed_commands", []), command] if saved_meta else [],
        "commit": commit,
        "load": os.getloadavg()[0],
        "host": host(),
    }
    done = {(r.task, r.seed) for r in runs}
    folder: contextlib.AbstractContextManager[str] = tempfile.TemporaryDirectory(prefix="cambrian-generality-")
    if args.keep_runs is not None:
        pending = [f"{t.name}-{s}" for s in args.seeds.split(",") if s for t in chosen if (t.name, int(s)) not in done]
        if leftovers := [name for name in pending if (args.keep_runs / name).exists()]:
            parser.error(  # a run name cambrian refuses to reuse: its row would record the refusal
                f"{args.keep_runs} already holds {', '.join(leftovers)}, which {out.name} has no row for (a sitting "
                "stopped while running it): remove those folders, then run again"
            )
        args.keep_runs.mkdir(parents=True, exist_ok=True)
        folder = contextlib.nullcontext(str(args.keep_runs))
    references = {**saved_references, **{task.name: reference_score(task) for task in chosen}}
    with folder as runs_dir:
        for seed in [int(s) for s in args.seeds.split(",") if s]:
            for task in chosen:
                if (task.name, seed) in done:
                    continue
                run = run_task(task, seed, args.iterations, args.extra, Path(runs_dir), commit)
                runs.append(run)
                rate = f"{run.proposals / run.proposing_minutes:.2f}/min" if run.proposing_minutes else "-"
                print(
                    f"{task.name} seed {seed}: exit {run.exit_code}, {run.seconds / 60:.1f} min, seed "
                    f"{_fmt(run.seed_score)} -> best {_fmt(run.best_score)}, {run.valid}/{run.proposals} valid, "
                    f"{rate}, {run.by_operator} {run.path}",
                    flush=True,
                )
                if run.exit_code != 0:
                    print(run.tail, flush=True)
                meta["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
                payload = {"meta": meta, "references": references, "runs": [asdict(r) for r in runs]}
                out.write_text(json.dumps(payload, indent=1))
    print(table(runs, references))
    print("\n" + operator_table(runs) + "\n\n" + reasons_table(runs))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
