"""How often does an FM's edit count? Real local models x operators x benchmarks, one step from a fixed parent.

For every cell (model, operator, benchmark) and every seed, N proposals are made
from the benchmark's seed program (crossover: the seed and a second, fixed
parent from bench/efficacy_parents/) through the same code path a search uses
(`Proposer.from_config`: prompt, FM call, parsing, checks, repair), and every
child that comes out is evaluated in the sandbox. Proposals are made one at a
time while the previous child is evaluated, as in a search.

Per cell it reports:
- valid: applied and evaluated without error (circle packing: a valid packing;
  humaneval: every task ran to an answer), over all proposals, with a 95%
  Wilson interval. As in a search, a reply that fails to parse, apply or pass
  the static check, or a child whose run fails, goes back to the FM with the
  error at most `fm.repair_rounds` times in all (by the model class: 0 small, 1 large); the table counts
  the run repairs and how many of them ended valid;
- improved: child scores higher than its parent (crossover: than the better
  parent), over all proposals;
- best@N: the best child score over a seed's N proposals, averaged over seeds;
- tokens (prompt + completion) and seconds per proposal (median and 90th
  percentile of the proposal's wall clock: every FM call it made, repair
  included; evaluation not included);
- a histogram of why proposals did not count
(the records and the table: bench/_fm_efficacy_table.py).

    .venv/bin/python bench/fm_efficacy.py --models qwen2.5-coder-0.5b --operators diff,rewrite \\
        --benchmarks circle_packing --n 4 --seeds 0,1,2
    .venv/bin/python bench/fm_efficacy.py --report bench/results/FILE.json     # reprint a saved run

Results go to bench/results/fm_efficacy-<time>.json (every proposal: reply
reason, score, tokens, seconds). `--set KEY=VALUE` changes the run config of
every cell (e.g. `--set fm.constrained=off`), so a lever can be measured on
and off with the same command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _fm_efficacy_table import Record, summarize, table

from cambrian.meta_agent.search import categorize

MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
OPERATORS = ("diff", "rewrite", "diagnose", "crossover")
BENCHMARKS = ("circle_packing", "humaneval")
RESULTS_DIR = Path(__file__).resolve().parent / "results"
PARENTS_DIR = Path(__file__).resolve().parent / "efficacy_parents"
SECOND_PARENTS = {"circle_packing": "circle_packing_greedy.py", "humaneval": "humaneval_agent.py"}


# ----- one cell --------------------------------------------------------------------------------------


def _config(model: str, operator: str, benchmark: str, seed: int, args: argparse.Namespace, runs_dir: str) -> Any:
    from cambrian.meta_agent.config import load_config

    options: dict[str, Any] = {}
    if benchmark == "humaneval":
        options = {"n_search": args.humaneval_tasks, "stage_sizes": [], "thresholds": []}
    return load_config(
        sets=list(args.set or []),
        overrides={
            "name": f"efficacy-{benchmark}-{operator}-{seed}",
            "benchmark": benchmark,
            "seed": seed,
            "runs_dir": runs_dir,
            "fm.model": model,
            "fm.concurrency": 1,
            "fm.threads": args.threads,
            "search.operators": {operator: 1.0},
            "evaluation.sandbox": args.sandbox,
            "evaluation.concurrency": 1,
            "benchmark_options": options,
        },
    )


def _change(parent: Any, child: Any, limit: int = 3000) -> str:
    """The child's entry file as a unified diff against the parent's, for reading what the model did."""
    diff = "".join(
        difflib.unified_diff(
            parent.files[parent.entry].splitlines(keepends=True),
            child.files[child.entry].splitlines(keepends=True),
            "parent",
            "child",
            n=1,
        )
    )
    return diff if len(diff) <= limit else diff[:limit] + "\n... (cut)\n"


def _valid(benchmark: str, result: Any) -> bool:
    """Applied and evaluated without error: circle packing a valid packing, humaneval every task answered."""
    if not result.valid or not result.task_results:
        return False
    if benchmark == "circle_packing":
        return all(t.passed for t in result.task_results)
    return all(t.executed for t in result.task_results)


def _failure(result: Any) -> str:
    if not result.valid:
        return str(result.invalid_reason or "invalid")
    bad = next((t for t in result.task_results if not t.executed or not t.passed), None)
    return bad.feedback if bad is not None else "evaluated"


async def _evaluate(
    benchmark: Any, genome: Any, sandbox: Any, gateway: Any, config: Any, agent_id: int
) -> tuple[Any, float]:
    from cambrian.meta_agent.search.evaluation import EvaluationContext, evaluate_in_sandbox

    started = time.perf_counter()
    context = EvaluationContext.of_run(config, benchmark, gateway)  # as a search
    result = await evaluate_in_sandbox(context, genome, sandbox, agent_id=agent_id, iteration=agent_id, split="search")
    return result, time.perf_counter() - started


async def _cell(
    *,
    model: str,
    operator_name: str,
    benchmark_name: str,
    seeds: Sequence[int],
    n: int,
    args: argparse.Namespace,
    llm: Any,
    parents: dict[str, Any],
    sandbox: Any,
    gateway: Any,
    runs_dir: str,
    say: Any,
) -> list[Record]:
    """N proposals per seed from the fixed parent(s), each evaluated while the next one is proposed."""
    from cambrian.meta_agent.operators import make_operator
    from cambrian.meta_agent.search import Proposer
    from cambrian.meta_agent.search._executor import LocalExecutor
    from cambrian.meta_agent.search.evaluation import EvaluationContext
    from cambrian.meta_agent.search.session import build_benchmark

    records: list[Record] = []
    for seed in seeds:
        config = _config(model, operator_name, benchmark_name, seed, args, runs_dir)
        benchmark = build_benchmark(config)
        operator = make_operator(operator_name)
        proposer = Proposer.from_config(
            config,
            context=EvaluationContext.of_run(config, benchmark, gateway),
            operators={operator_name: operator},
            llms={model: llm},
            executor=LocalExecutor(sandbox, slots=1),
        )
        if args.idea:
            proposer.ideas = (args.idea,)  # every proposal asked for this one direction
        parent_score = parents["parent_score"]
        ctx = parents["ctx"]
        if operator_name == "crossover":
            ctx = parents["crossover_ctx"]
            parent_score = max(parent_score, parents["second_score"])
        pending: list[asyncio.Task[None]] = []

        async def judge(record: Record, proposal: Any, agent_id: int) -> None:
            genome = proposal.genome
            try:
                result, record.eval_s = await _evaluate(benchmark, genome, sandbox, gateway, config, agent_id)
                failed = not result.valid or not any(t.passed for t in result.task_results)
                if failed and getattr(proposal, "repairs_left", 0) > 0:
                    # As the loop does: the failed run goes back to the FM once, in the same conversation.
                    started = time.perf_counter()
                    fixed = await proposer.fix(
                        operator_name,
                        ctx,
                        proposal,
                        result.invalid_reason or result.feedback,
                        model=model,
                        iteration=record.index,
                        attempt=0,
                    )
                    record.repair_s = time.perf_counter() - started
                    record.prompt_tokens += fixed.prompt_tokens
                    record.completion_tokens += fixed.completion_tokens
                    record.repaired_after_run = True
                    if fixed.genome is None:
                        record.outcome, record.reason = "invalid_edit", str(fixed.reason)
                        record.category = categorize(record.reason)
                        return
                    record.change = _change(ctx.parent.genome, fixed.genome)
                    record.repair_note = fixed.repair_note or ""
                    result, seconds = await _evaluate(benchmark, fixed.genome, sandbox, gateway, config, agent_id)
                    record.eval_s += seconds
            except Exception as exc:  # noqa: BLE001 - an infrastructure fault is counted, not fatal to the bench
                record.outcome, record.reason = "infra", f"{type(exc).__name__}: {exc}"
                record.category = "infrastructure fault"
                return
            record.score = float(result.score) if result.valid else None
            if _valid(benchmark_name, result):
                record.outcome, record.category = "valid", "valid"
                record.improved = result.score > parent_score + 1e-12
            else:
                record.outcome, record.reason = "failed_eval", _failure(result)
                record.category = categorize(record.reason)
            say(
                f"  {model} {operator_name} {benchmark_name} seed {seed} #{record.index}: {record.outcome}"
                f" score {record.score} {record.category if record.outcome != 'valid' else ''}"
            )

        for index in range(1, n + 1):
            started = time.perf_counter()
            proposal = await proposer.propose(operator_name, ctx, model=model, iteration=index, attempt=0)
            seconds = time.perf_counter() - started
            record = Record(
                model=model,
                operator=operator_name,
                benchmark=benchmark_name,
                seed=seed,
                index=index,
                outcome="invalid_edit",
                reason=proposal.reason or "",
                category="",
                parent_score=parent_score,
                score=None,
                improved=False,
                prompt_tokens=proposal.prompt_tokens,
                completion_tokens=proposal.completion_tokens,
                propose_s=seconds,
                eval_s=0.0,
                repair_note=getattr(proposal, "repair_note", "") or "",
                idea=getattr(proposal, "idea", "") or "",
            )
            records.append(record)
            if proposal.genome is not None:
                record.change = _change(ctx.parent.genome, proposal.genome)
            if proposal.genome is None:
                record.category = categorize(record.reason)
                say(
                    f"  {model} {operator_name} {benchmark_name} seed {seed} #{index}: invalid edit "
                    f"({record.category}) in {seconds:.1f} s"
                )
                continue
            agent_id = 1000 * seed + index + 10
            # One evaluation at a time, overlapping the next proposal (as a search's pipeline does).
            if pending:
                await pending.pop()
            pending.append(asyncio.create_task(judge(record, proposal, agent_id)))
        for task in pending:
            await task
    return records


async def _evaluate_parents(
    benchmark_name: str, model: str, args: argparse.Namespace, sandbox: Any, gateway: Any, runs_dir: str
) -> dict[str, Any]:
    """The seed (and crossover's second parent) evaluated once: their scores and feedback go into prompts."""
    from cambrian.evaluators.base import Genome
    from cambrian.meta_agent.operators import ParentInfo, PromptContext
    from cambrian.meta_agent.search.session import build_benchmark

    config = _config(model, "diff", benchmark_name, 0, args, runs_dir)
    benchmark = build_benchmark(config)
    seed = benchmark.seed()
    seed_result, _ = await _evaluate(benchmark, seed, sandbox, gateway, config, 1)
    second_text = (PARENTS_DIR / SECOND_PARENTS[benchmark_name]).read_text()
    second = Genome(files={seed.entry: second_text}, entry=seed.entry)
    second_result, _ = await _evaluate(benchmark, second, sandbox, gateway, config, 2)
    parent = ParentInfo(agent_id=1, genome=seed, score=seed_result.score, feedback=seed_result.feedback)
    other = ParentInfo(agent_id=2, genome=second, score=second_result.score, feedback=second_result.feedback)
    ctx = PromptContext(contract=benchmark.contract, benchmark=benchmark.name, parent=parent)
    return {
        "parent": parent,
        "parent_score": float(seed_result.score),
        "second_score": float(second_result.score),
        "ctx": ctx,
        "crossover_ctx": PromptContext(
            contract=benchmark.contract, benchmark=benchmark.name, parent=parent, second_parent=other
        ),
    }


async def _model_cells(model: str, args: argparse.Namespace, say: Any) -> list[Record]:
    """Every cell of one model, with one local server and one sandbox for all of them."""
    from cambrian.meta_agent.llm import MemoryLedger
    from cambrian.meta_agent.llm.gateway import FMGateway
    from cambrian.meta_agent.search import Reporter
    from cambrian.meta_agent.search.session import choose_sandbox, fm_endpoint, make_llm_client

    records: list[Record] = []
    with tempfile.TemporaryDirectory(prefix="cambrian-efficacy-") as runs_dir:
        config = _config(model, "diff", args.benchmarks[0], 0, args, runs_dir)
        reporter = Reporter(info=say, warn=say, event=lambda _e: None, progress=lambda *_: contextlib.nullcontext())
        socket_dir = Path(tempfile.mkdtemp(prefix="cambrian-fm-", dir="/tmp"))
        os.chmod(socket_dir, 0o711)
        sandbox = choose_sandbox(config, say, fm_dir=socket_dir)
        say(f"sandbox: {sandbox.name}")
        try:
            with fm_endpoint(config, reporter) as (endpoint, label):
                llm = make_llm_client(endpoint, config, ledger=MemoryLedger(), warn=say)
                gateway = FMGateway(llm, socket_dir=socket_dir)
                try:
                    for benchmark_name in args.benchmarks:
                        parents = await _evaluate_parents(benchmark_name, model, args, sandbox, gateway, runs_dir)
                        say(
                            f"{benchmark_name}: seed scores {parents['parent_score']:.4f}, "
                            f"crossover's second parent {parents['second_score']:.4f}"
                        )
                        for operator_name in args.operators:
                            records += await _cell(
                                model=model,
                                operator_name=operator_name,
                                benchmark_name=benchmark_name,
                                seeds=args.seeds,
                                n=args.n,
                                args=args,
                                llm=llm,
                                parents=parents,
                                sandbox=sandbox,
                                gateway=gateway,
                                runs_dir=runs_dir,
                                say=say,
                            )
                finally:
                    await gateway.close()
        finally:
            sandbox.close()
            shutil.rmtree(socket_dir, ignore_errors=True)
    return records


def _git_commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        return done.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated registry names")
    parser.add_argument("--operators", default=",".join(OPERATORS), help="comma-separated")
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS), help="comma-separated")
    parser.add_argument("--n", type=int, default=5, help="proposals per seed and cell (default 5)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated run seeds (default 0,1,2)")
    parser.add_argument("--sandbox", choices=("auto", "docker", "local"), default="auto")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="llama.cpp threads (default: cores)")
    parser.add_argument("--humaneval-tasks", type=int, default=6, help="search tasks a humaneval child runs")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override for every cell")
    parser.add_argument(
        "--idea", default="", help="ask every proposal for this direction instead of a draw from the benchmark's ideas"
    )
    parser.add_argument("--label", default="", help="a name for this measurement, kept in the JSON")
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON file (default bench/results/fm_efficacy-TIME.json)"
    )
    parser.add_argument("--report", type=Path, default=None, help="print the table of an earlier JSON file only")
    args = parser.parse_args(argv)
    if args.report is not None:
        saved = json.loads(args.report.read_text())
        print(f"{saved['meta'].get('label', '')} {saved['meta']['command']}")
        print(table(summarize([Record(**row) for row in saved["proposals"]])))
        return
    args.models = [m for m in args.models.split(",") if m]
    args.operators = [o for o in args.operators.split(",") if o]
    args.benchmarks = [b for b in args.benchmarks.split(",") if b]
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    out = args.out or RESULTS_DIR / f"fm_efficacy-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "label": args.label,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git": _git_commit(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "sets": args.set or [],
    }

    def say(line: str) -> None:
        print(line, flush=True)

    records: list[Record] = []
    started = time.perf_counter()
    for model in args.models:
        records += asyncio.run(_model_cells(model, args, say))
        meta["seconds"] = round(time.perf_counter() - started, 1)
        out.write_text(json.dumps({"meta": meta, "proposals": [asdict(r) for r in records]}, indent=1))
    summaries = summarize(records)
    print(f"\n{len(records)} proposals in {time.perf_counter() - started:.0f} s; per-proposal results: {out}\n")
    print(table(summaries))


if __name__ == "__main__":
    main()
