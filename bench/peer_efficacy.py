"""Cambrian beside its peers: OpenEvolve and ShinkaEvolve with the same model, seed program and proposal budget.

One local llama.cpp server (Cambrian's `LocalServer`) serves all three, one system after another, through a
counting relay (bench/peers/fm_meter.py) that records every FM request the same way for each. All three start
from one seed program and make `--proposals` proposals. `--task circle_packing` (the default) is OpenEvolve's
circle-packing example (bench/peers/circle_packing/, n = 26, maximise the sum of radii), as below; a suite task
(`--task knapsack`, symbolic_regression, tsp, fast_primes, job_order) starts all three from the Cambrian
benchmark's seed, tells the peers the task in the benchmark's words, runs them with their defaults for a new
task, and scores every system's programs with the benchmark itself (bench/_peer_tasks.py says how). On circle
packing:
- Cambrian: its default search configuration, as `cambrian run --model MODEL` sets it for a model served on
  this machine, but for the budget, the run seed and the endpoint (the shared server). Its genome is
  OpenEvolve's file plus a fixed `pack_circles(n)` below the EVOLVE-BLOCK that calls `run_packing()`, so the
  same evolvable code is scored by Cambrian's circle-packing benchmark (exact checks, its own sandbox).
- OpenEvolve (`openevolve` from PyPI) with its circle-packing example config, and ShinkaEvolve
  (`shinka-evolve`) with its shipped default config, each run by a driver (bench/peers/*_driver.py) in the
  peers' own virtual environment (`--peers-python`), scored by OpenEvolve's example evaluator. The peers are
  bench-only dependencies, never Cambrian's. The drivers' docstrings list every setting changed.

Every system's best program (and the seed) is then re-scored with BOTH evaluators: OpenEvolve's evaluator.py
(in a peers-venv subprocess) and Cambrian's scorer (Cambrian's sandbox). The report gives one row per system
at the proposal budget (proposals, valid ones, FM calls and tokens, the seed's and the best's scores, the
proposal at which the best was reached, wall seconds, proposals per minute) and a second view at equal wall
time: what each had reached by the time the fastest system finished.

    .venv/bin/python bench/peer_efficacy.py --model smollm2-135m --proposals 2 --max-tokens 256 --label smoke
    .venv/bin/python bench/peer_efficacy.py --model qwen2.5-coder-1.5b --proposals 20 --seed 0
    .venv/bin/python bench/peer_efficacy.py --systems cambrian,openevolve --wall-seconds 3600
    .venv/bin/python bench/peer_efficacy.py --task knapsack --proposals 40 --seed 0
    .venv/bin/python bench/peer_efficacy.py --task knapsack --proposals 40 --seed 0 --systems openevolve \
        --keep-from bench/results/peers-knapsack-qwen2.5-coder-1.5b-40p-s0.json --label knapsack-openevolve-again
    .venv/bin/python bench/peer_efficacy.py --report bench/results/peers-qwen2.5-coder-1.5b-20p-s0.json

The peers' venv: `python3 -m venv /work/peers-venv && /work/peers-venv/bin/pip install openevolve==0.4.0
shinka-evolve==0.0.7`. Results go to bench/results/peers-<label>.json, rewritten after every system and after
the re-scoring. `--keep-from FILE` runs only `--systems` again and takes the other systems' runs from an
earlier result of the same task, model, budget and seed (the file's meta records which, and from what commit).
A valid proposal is one whose program its own system scored above 0 (a valid packing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._peer_runs import SystemRun, equal_seconds, fmt_score, from_payload, sha, table
from bench._peer_tasks import PEERS, TASKS, PeerTask, peer_task
from bench.peers.fm_meter import FMMeter

BENCH = Path(__file__).resolve().parent
RESULTS_DIR = BENCH / "results"
SYSTEMS = ("cambrian", "openevolve", "shinka")
_SCORE_TIMEOUT_S = 900  # one re-scoring by OpenEvolve's evaluator (it gives the program 600 s)


# ----- one system's run ---------------------------------------------------------------------------


def run_cambrian(
    task: PeerTask, args: argparse.Namespace, endpoint: Any, workdir: Path, say: Callable[[str], None]
) -> dict[str, Any]:
    """Cambrian's search, built as `cambrian run` builds it, with the shared server's endpoint; a driver payload."""
    from cambrian.archive.models import AgentStatus
    from cambrian.archive.store import Archive
    from cambrian.evaluators.base import FeedbackPolicy
    from cambrian.meta_agent import __version__
    from cambrian.meta_agent.config import load_config
    from cambrian.meta_agent.llm import ArchiveLedger, close_http_sessions
    from cambrian.meta_agent.search import SearchLoop, loop_from_config
    from cambrian.meta_agent.search.session import choose_sandbox, make_llm_client

    config = load_config(
        sets=args.cambrian_set,
        overrides={
            "name": "cambrian",
            "benchmark": task.name,
            "seed": args.seed,
            "runs_dir": str(workdir),
            "budget.iterations": args.proposals,
            "budget.wall_seconds": args.wall_seconds,
            # A registry name, as `cambrian run --model NAME` gets it: the operator mix for a model served here.
            "fm.model": args.model,
            "fm.concurrency": args.fm_parallel,
            "fm.max_tokens": args.max_tokens,
        },
    )
    policy = FeedbackPolicy.from_options(config.evaluation.feedback.model_dump())
    benchmark = task.benchmark(config.benchmark_options, feedback_policy=policy)
    sandbox = choose_sandbox(config, say)

    async def search(loop: SearchLoop) -> Any:
        try:
            return await loop.run_until_done()
        finally:
            await close_http_sessions()

    try:
        with Archive.at(workdir / "cambrian" / "archive.db") as archive:
            run = archive.create_run(
                name="cambrian",
                benchmark=config.benchmark,
                seed=args.seed,
                config_json=config.to_json(),
                cambrian_version=__version__,
            )
            llm = make_llm_client(endpoint, config, ledger=ArchiveLedger(archive, run.key), warn=say)
            loop = loop_from_config(
                archive=archive,
                run=run,
                config=config,
                benchmark=benchmark,
                sandbox=sandbox,
                llm=llm,
                model_label=args.model,
            )
            started = time.time()
            outcome = asyncio.run(search(loop))
            finished = time.time()
            agents = archive.agents(run.key)
            codes = {a.key: archive.get_genome(a.genome_hash) for a in agents if a.genome_hash}
    finally:
        sandbox.close()
    say(f"cambrian: {outcome.status.value} ({outcome.reason})")
    seed = next((a for a in agents if a.operator == "seed"), None)
    done = (AgentStatus.evaluated, AgentStatus.invalid, AgentStatus.failed)
    proposals = []
    for agent in agents:
        if agent.iteration <= 0 or agent.status not in done:
            continue
        evaluated = agent.status == AgentStatus.evaluated
        files, entry = codes.get(agent.key, ({}, task.entry))
        proposals.append(
            {
                "t": _unix(agent.updated_at),
                "score": agent.score if evaluated else None,
                "code": files.get(entry) if evaluated else None,
                "note": agent.invalid_reason or "",
            }
        )
    return {
        "system": "cambrian",
        "version": __version__,
        "started": started,
        "finished": finished,
        "seed": {"score": seed.score if seed is not None else None},
        "proposals": proposals,
        "settings": {**json.loads(config.to_json()), "sandbox": sandbox.name},
    }


def _unix(moment: datetime) -> float:
    """Unix seconds of an archive time (SQLite gives them back without their zone: UTC)."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def run_peer(task: PeerTask, system: str, args: argparse.Namespace, api_base: str, workdir: Path) -> dict[str, Any]:
    """One peer's driver in the peers' venv; its payload, or RuntimeError with the tail of its log."""
    folder = workdir / system
    folder.mkdir(parents=True, exist_ok=True)
    program, out = folder / "initial_program.py", folder / f"{system}.json"
    program.write_text(task.seed_program())
    common = [
        "--program",
        str(program),
        "--api-base",
        api_base,
        "--model",
        args.model,
        "--seed",
        str(args.seed),
        "--llm-timeout",
        str(args.llm_timeout),
        "--workers",
        str(args.fm_parallel),
        "--workdir",
        str(folder),
        "--out",
        str(out),
    ]
    if args.wall_seconds is not None:
        common += ["--wall-seconds", str(args.wall_seconds)]
    if args.max_tokens is not None:
        common += ["--max-tokens", str(args.max_tokens)]
    if system == "openevolve":
        extra = [*task.openevolve_args(folder), "--iterations", str(args.proposals)]
    else:
        extra = [*task.shinka_args(folder), "--proposals", str(args.proposals)]
    # A safety net only: each system stops itself at its budget (and at --wall-seconds).
    limit = (args.wall_seconds or args.proposals * args.llm_timeout) + args.llm_timeout + 600
    code = run_group(
        [args.peers_python, str(PEERS / f"{system}_driver.py"), *common, *extra],
        cwd=folder,
        log=folder / "driver.log",
        timeout_s=limit,
        env=task.peer_env(args.seed),
    )
    if code != 0 or not out.exists():
        raise RuntimeError(f"{system} driver exited {code}:\n{_tail(folder / 'driver.log')}")
    return json.loads(out.read_text())


def run_group(command: list[str], *, cwd: Path, log: Path, timeout_s: float, env: dict[str, str] | None = None) -> int:
    """Run `command` in a process group of its own (output to `log`, `env` added to the environment); past
    `timeout_s` the whole group is killed (the peers start worker and evaluation processes of their own). The
    exit status, -9 when killed."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | (env or {})
    with log.open("w") as handle:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return -9
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # leftovers (evaluations) of a finished run too
            process.wait()


def _tail(path: Path, n_chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n_chars:]
    except OSError:
        return "(no log)"


# ----- re-scoring --------------------------------------------------------------------------------


def score_openevolve(code: str, args: argparse.Namespace, folder: Path) -> float | None:
    """Sum of radii by OpenEvolve's evaluator (0 for an invalid packing), None when the scoring itself failed."""
    folder.mkdir(parents=True, exist_ok=True)
    program, out = folder / f"{sha(code)}.py", folder / f"{sha(code)}.score.json"
    program.write_text(code)
    command = [args.peers_python, str(PEERS / "openevolve_score.py"), "--program", str(program), "--out", str(out)]
    run_group(command, cwd=folder, log=folder / f"{sha(code)}.log", timeout_s=_SCORE_TIMEOUT_S)
    try:
        return float(json.loads(out.read_text())["metrics"].get("sum_radii", 0.0))
    except (OSError, ValueError, KeyError):
        return None


def score_cambrian(task: PeerTask, code: str, benchmark: Any, sandbox: Any, limits: Any) -> float:
    """The score by Cambrian's scorer of the task (circle packing: the sum of radii), the program run in
    Cambrian's sandbox (0: invalid)."""
    from cambrian.evaluators.runner import evaluate_agent

    result = evaluate_agent(benchmark, task.genome(code), sandbox, limits=limits)
    return float(result.score) if result.valid else 0.0


# ----- the report --------------------------------------------------------------------------------


# ----- main --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="circle_packing", choices=TASKS, help="what all three evolve")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="a local model (`cambrian models list`)")
    parser.add_argument("--proposals", type=int, default=20, help="proposals per system (default 20)")
    parser.add_argument("--wall-seconds", type=float, default=None, help="also stop each system after this long")
    parser.add_argument("--seed", type=int, default=0, help="run seed of every system")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, run in this order")
    parser.add_argument("--peers-python", default="/work/peers-venv/bin/python", help="the peers' interpreter")
    parser.add_argument("--llm-timeout", type=int, default=1800, help="the peers' seconds per LLM request")
    parser.add_argument("--fm-parallel", type=int, default=1, help="FM requests each system makes at once")
    parser.add_argument("--n-ctx", type=int, default=8192, help="the server's context per request (tokens)")
    parser.add_argument("--threads", type=int, default=None, help="the server's CPU threads (default: one per core)")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="cap every system's reply length (default: each system's own setting)",
    )
    parser.add_argument(
        "--cambrian-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another Cambrian config key (not the budget, seed, model, fm.concurrency or "
        "fm.max_tokens: this script sets those)",
    )
    parser.add_argument("--label", default=None, help="names the result file (default: MODEL-Np-sSEED)")
    parser.add_argument("--keep-runs", type=Path, default=None, help="keep every system's files here")
    parser.add_argument("--report", type=Path, default=None, help="print the tables of an earlier JSON file only")
    parser.add_argument(
        "--keep-from",
        type=Path,
        default=None,
        help="an earlier result of the same task, model, budget and seed: the runs of the systems not in "
        "--systems come from it",
    )
    args = parser.parse_args(argv)
    if args.report is not None:
        print(table(json.loads(args.report.read_text())))
        return
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown system(s) {', '.join(sorted(unknown))}; the systems are {', '.join(SYSTEMS)}")
    if any(s != "cambrian" for s in systems) and not Path(args.peers_python).exists():
        parser.error(f"no peers' interpreter at {args.peers_python}: make the venv (see this script's docstring)")
    task = peer_task(args.task)
    label = (
        args.label
        or f"{'' if task.name == 'circle_packing' else task.name + '-'}{args.model}-{args.proposals}p-s{args.seed}"
    )
    out = RESULTS_DIR / f"peers-{label}.json"
    out.parent.mkdir(parents=True, exist_ok=True)

    def say(line: str) -> None:
        print(line, flush=True)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=BENCH)
    saved: dict[str, Any] = {
        "meta": {
            "command": "bench/peer_efficacy.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "task": task.name,
            "evaluators": list(task.evaluators),
            "model": args.model,
            "proposals": args.proposals,
            "seed": args.seed,
            "wall_seconds": args.wall_seconds,
            "fm_parallel": args.fm_parallel,
            "llm_timeout": args.llm_timeout,
            "max_tokens": args.max_tokens,
            "n_ctx": args.n_ctx,
            "threads": args.threads,
            "commit": commit.stdout.strip(),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "load": os.getloadavg()[0],
        },
        "seed": {"sha": sha(task.seed_program()), **{evaluator: None for evaluator in task.evaluators}},
        "runs": [],
        "scores": {},
        "codes": {},
    }
    kept = [] if args.keep_from is None else kept_runs(args.keep_from, systems, saved, parser.error)

    def write() -> None:
        out.write_text(json.dumps(saved, indent=1))

    folder: contextlib.AbstractContextManager[str] = tempfile.TemporaryDirectory(prefix="cambrian-peers-")
    if args.keep_runs is not None:
        args.keep_runs.mkdir(parents=True, exist_ok=True)
        folder = contextlib.nullcontext(str(args.keep_runs))
    with folder as where:
        workdir = Path(where)
        runs = run_systems(task, systems, kept, args, workdir, saved, write, say)
        saved["meta"]["equal_seconds"] = equal_seconds(runs)
        rescore(task, runs, args, workdir, saved, write, say)
    print(table(saved))
    print(f"results: {out}")


def kept_runs(
    path: Path, systems: Sequence[str], saved: dict[str, Any], error: Callable[[str], NoReturn]
) -> list[SystemRun]:
    """The runs in the earlier result at `path` of the systems not run again, their best programs' code added
    to `saved`; `error` (which exits) when the file is not a result of the same comparison."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        error(f"--keep-from {path}: cannot read it as a result file ({exc})")
    theirs = {"task": "circle_packing", **earlier["meta"]}  # files written before the suite tasks: circle packing
    same = ("task", "model", "proposals", "seed", "wall_seconds", "fm_parallel", "max_tokens")
    differ = [key for key in same if theirs.get(key) != saved["meta"][key]]
    if differ:
        error(
            f"--keep-from {path} is another comparison: its "
            + ", ".join(f"{key} {theirs.get(key)!r}, not {saved['meta'][key]!r}" for key in differ)
        )
    runs = [SystemRun(**row) for row in earlier["runs"] if row["system"] not in systems]
    saved["codes"].update(earlier["codes"])
    saved["meta"]["kept_from"] = {
        "file": str(path),
        "commit": earlier["meta"].get("commit"),
        "systems": [run.system for run in runs],
    }
    return runs


def run_systems(
    task: PeerTask,
    systems: Sequence[str],
    kept: Sequence[SystemRun],
    args: argparse.Namespace,
    workdir: Path,
    saved: dict[str, Any],
    write: Callable[[], None],
    say: Callable[[str], None],
) -> list[SystemRun]:
    """Start the shared server and its relay, run each system in turn, and record each as it ends (beside the
    `kept` runs of an earlier result, in the order of SYSTEMS)."""
    from cambrian.meta_agent.llm.models import resolve
    from cambrian.meta_agent.llm.serve import LocalServer

    server = LocalServer(
        resolve(args.model, progress=say),
        alias=args.model,
        n_ctx=args.n_ctx,
        n_parallel=2,
        threads=args.threads,
        backend="llamacpp",
        log_path=workdir / "server.log",
    )
    say(f"starting the shared llama.cpp server for {args.model}")
    server.start(timeout_s=300)
    runs = list(kept)
    try:
        with FMMeter(server.base_url) as meter:
            for system in systems:
                meter.system = system
                say(f"{system}: {args.proposals} proposals ...")
                try:
                    if system == "cambrian":
                        endpoint = dataclasses.replace(server.endpoint(), api_base=meter.base_url)
                        payload = run_cambrian(task, args, endpoint, workdir, say)
                    else:
                        payload = run_peer(task, system, args, meter.base_url, workdir)
                    run = from_payload(system, payload, saved["codes"], task.seed_program())
                except Exception as exc:  # noqa: BLE001 - one system's failure is reported, the others still run
                    run = SystemRun(system=system, exit_code=1, error=f"{type(exc).__name__}: {exc}")
                calls = meter.calls(system)
                run.fm_calls = sum(1 for c in calls if c.path.endswith("/completions"))
                run.fm_hung_up = sum(1 for c in calls if c.status == 0)
                run.prompt_tokens = sum(c.prompt_tokens for c in calls)
                run.completion_tokens = sum(c.completion_tokens for c in calls)
                runs.append(run)
                runs.sort(key=lambda r: SYSTEMS.index(r.system))
                saved["runs"] = [asdict(r) for r in runs]
                write()
                best = run.best()
                say(
                    f"{system}: {len(run.trajectory)} proposals, {run.valid} valid, "
                    f"seed {fmt_score(run.seed_score)} -> best {fmt_score(best['score'] if best else None)}, "
                    f"{run.fm_calls} FM calls, "
                    f"{run.wall_seconds:.0f} s" + (f"\n{run.error}" if run.error else "")
                )
    finally:
        server.stop()
    return runs


def rescore(
    task: PeerTask,
    runs: Sequence[SystemRun],
    args: argparse.Namespace,
    workdir: Path,
    saved: dict[str, Any],
    write: Callable[[], None],
    say: Callable[[str], None],
) -> None:
    """The seed and each system's best (at the budget and at equal time) by the task's evaluators."""
    from cambrian.meta_agent.config import load_config
    from cambrian.meta_agent.search.evaluation import run_limits
    from cambrian.meta_agent.search.session import choose_sandbox

    config = load_config(overrides={"seed": args.seed})
    benchmark = task.benchmark()
    sandbox = choose_sandbox(config, lambda line: None)
    cut = saved["meta"].get("equal_seconds")
    wanted = {sha(task.seed_program()): task.seed_program()}
    saved["codes"].update(wanted)
    for run in runs:
        for best in (run.best(), run.best(cut) if cut else None):
            if best is not None and best["sha"] in saved["codes"]:
                wanted[best["sha"]] = saved["codes"][best["sha"]]
            elif best is not None and best["sha"]:  # a kept run's best at a new cut: its file kept only its bests
                say(f"{run.system}: the code of {best['sha']} is not kept (an earlier result's run); not re-scored")
    try:
        for key, code in wanted.items():
            scores = {"cambrian": score_cambrian(task, code, benchmark, sandbox, run_limits(config))}
            if "openevolve" in task.evaluators:
                scores = {"openevolve": score_openevolve(code, args, workdir / "rescore"), **scores}
            saved["scores"][key] = scores
            say(f"re-scored {key}: " + ", ".join(f"{name} {fmt_score(value)}" for name, value in scores.items()))
            write()
    finally:
        sandbox.close()
    saved["seed"].update(saved["scores"][sha(task.seed_program())])
    saved["codes"] = {k: v for k, v in saved["codes"].items() if k in wanted}
    write()


if __name__ == "__main__":
    main()
