"""What is there for a HumanEval search to find? Hand-written agents on the holdout, same agent model.

The search's holdout target asks a discovered agent to beat the seed agent on the 40 holdout tasks. This
measures how far better agents go with the model the agents call: the seed agent and hand-written
variants of it (`selfcheck` in bench/humaneval_agents/, a repair round on the docstring's examples;
`sample4`, the seed with SAMPLES = 4: up to four answers, the first passing those examples kept), each
evaluated on the holdout tasks through the CLI as a user would: a run of the seed (`cambrian run
humaneval --iterations 0`), its export, and `cambrian eval DIR --split holdout --model M
--allow-modified` on a copy with the variant's agent.py.
Per agent: holdout score, FM calls, minutes, the gain over the seed with a 95% interval from a paired
bootstrap over the tasks, and the tasks that changed.

    .venv/bin/python bench/humaneval_ceiling.py --model qwen2.5-coder-0.5b

Results go to bench/results/humaneval_ceiling-<model>.json (or --out).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from humaneval_holdout import RESULTS_DIR, bootstrap_mean, cli

AGENTS_DIR = Path(__file__).resolve().parent / "humaneval_agents"
SEED_AGENT = Path(__file__).resolve().parent.parent / "evaluators" / "humaneval" / "seed" / "agent.py"
SEED_RUN = [
    "--iterations",
    "0",
    "--name",
    "seed",
    "--set",
    "benchmark_options.n_search=5",
    "--set",
    "benchmark_options.stage_sizes=[5]",
    "--set",
    "benchmark_options.thresholds=[0.2]",
]


#: Variants that are the seed agent with some of its constants set (its sampling path, off in the seed).
SETTINGS = {"sample4": {"SAMPLES": 4}}


def assemble(variant: str) -> str:
    """A variant's agent.py: the seed agent's module with the constants of SETTINGS[variant] set, or with its
    `solve` replaced by the variant's (the last definition of bench/humaneval_agents/VARIANT.py); the
    docstring helpers are the seed's doc_examples.py."""
    seed = SEED_AGENT.read_text(encoding="utf-8")
    if variant in SETTINGS:
        for name, value in SETTINGS[variant].items():
            seed, found = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", seed, count=1, flags=re.MULTILINE)
            if not found:
                raise SystemExit(f"the seed agent {SEED_AGENT} has no `{name} = ...` line for variant {variant}")
        return seed
    old = next(node for node in ast.parse(seed).body if isinstance(node, ast.FunctionDef) and node.name == "solve")
    lines = seed.splitlines(keepends=True)
    source = (AGENTS_DIR / f"{variant}.py").read_text(encoding="utf-8")
    solve = source[source.index("def solve(") :]
    return "".join(lines[: old.lineno - 1]) + solve + "".join(lines[old.end_lineno :])


def _checked(done: subprocess.CompletedProcess[str], what: str) -> None:
    if done.returncode != 0:
        raise SystemExit(f"{what} failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def evaluate(folder: Path, model: str) -> dict:
    started = time.monotonic()
    done = cli("eval", str(folder), "--split", "holdout", "--model", model, "--allow-modified")
    _checked(done, f"cambrian eval {folder}")
    record = json.loads((folder / "holdout.json").read_text())
    return {
        "score": record["score"],
        "fm_calls": record["fm_calls"],
        "minutes": (time.monotonic() - started) / 60,
        "tasks": {task["task_id"]: float(task["score"]) for task in record["tasks"]},
    }


def table(results: dict[str, dict]) -> str:
    seed = results["seed"]["tasks"]
    lines = [
        "| agent | holdout | FM calls | minutes | gain over the seed (95% interval) | tasks changed |",
        "|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        tasks = result["tasks"]
        changed = [f"{t} {seed[t]:.0f}->{tasks[t]:.0f}" for t in sorted(seed) if tasks.get(t) != seed[t]]
        gain = "-"
        if name != "seed":
            mean, low, high = bootstrap_mean([[tasks[t] - seed[t] for t in sorted(seed)]])
            gain = f"{mean:+.4f} [{low:+.4f}, {high:+.4f}]"
        lines.append(
            f"| {name} | {result['score']:.4f} | {result['fm_calls']} | {result['minutes']:.1f} | {gain} "
            f"| {', '.join(changed) or '-'} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="the model the agents call")
    parser.add_argument("--agents", default="selfcheck,sample4", help="variants: SETTINGS or bench/humaneval_agents/")
    parser.add_argument(
        "--agent-timeout",
        type=float,
        default=None,
        help="benchmark_options.timeout_s: seconds for one agent run (default: the benchmark's 180; a 1.5B agent "
        "model on 2 cores needs more for several answers)",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--report", type=Path, default=None, help="print the table of an earlier JSON file only")
    args = parser.parse_args(argv)
    if args.report is not None:
        saved = json.loads(args.report.read_text())
        print(table(saved["results"]))
        return
    label = Path(args.model).stem if args.model.endswith(".gguf") else args.model
    out = args.out or RESULTS_DIR / f"humaneval_ceiling-{label}.json"
    meta = {
        "model": args.model,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "agent_timeout_s": args.agent_timeout or 180.0,
        "command": f"cambrian eval DIR --split holdout --model {args.model} --allow-modified",
    }
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="cambrian-ceiling-") as scratch:
        runs = Path(scratch) / "runs"
        timeout = ["--set", f"benchmark_options.timeout_s={args.agent_timeout}"] if args.agent_timeout else []
        seed_run = ["run", "humaneval", "--model", args.model, "--runs-dir", str(runs), *SEED_RUN, *timeout]
        _checked(cli(*seed_run), "the seed run")
        _checked(cli("export", "seed", "--runs-dir", str(runs), "--to", str(Path(scratch) / "out")), "the export")
        exported = Path(scratch) / "out" / "agent-1"
        for name in ["seed", *[a for a in args.agents.split(",") if a]]:
            folder = Path(scratch) / name
            shutil.copytree(exported, folder)
            if name != "seed":
                (folder / "agent.py").write_text(assemble(name), encoding="utf-8")
            results[name] = evaluate(folder, args.model)
            print(
                f"{name}: holdout {results[name]['score']:.4f} ({results[name]['fm_calls']} FM calls, "
                f"{results[name]['minutes']:.1f} min)",
                flush=True,
            )
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()
