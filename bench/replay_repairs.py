"""Ask the repairs of kept runs' line edits again, with the repair message as it was and as it is today.

A line edit (`lines`, `knob`) whose reply cannot be used, or whose program failed when run, goes back to the
FM in the same conversation with the error and the format (`FMOperator.edit`, `fix`; the repair's message
ends with the operator's `format_hint`). This script reads every such repair of the runs given (their
`archive.db`), asks the model the same conversation twice, on one local server, with the call's seed,
temperature and reply cap: once with the repair message the run sent (the control), once with its format
hint as today's `LinesOperator.format_hint` writes it. Each reply is applied as the loop does
(`LinesOperator.apply`, `check_child`) and the child it builds is scored with the run's benchmark (local
sandbox, the run's seed). It prints, per arm: replies that wrote more than the lines (over 15 lines, or a
`def` where none was asked for), children built, valid children, children above their parent, and tokens
written.

    .venv/bin/python bench/replay_repairs.py /work/suite3/*/ /work/suite5/*/ --model qwen2.5-coder-1.5b

Writes bench/results/replay-repairs-<label>.json after every repair; `--report FILE` prints its table.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cambrian.archive.store import Archive
from cambrian.evaluators.base import Genome
from cambrian.evaluators.registry import get_benchmark
from cambrian.evaluators.runner import Limits, evaluate_agent
from cambrian.meta_agent.edits import EditError, check_child
from cambrian.meta_agent.operators import Focus, LinesOperator, ParentInfo, PromptContext
from cambrian.meta_agent.operators._grammars import code_grammar
from cambrian.sandbox.local import LocalSandbox

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# The `lines` template's request (meta_agent/operators/prompts/lines.txt): the file and the lines asked for.
_ASKED = re.compile(
    r"Rewrite only these lines of (?P<path>\S+) so that the program scores higher:\n```\w*\n(?P<focus>.*?)\n```", re.S
)
#: The format hint every repair message of a line edit ended with before today's (`LinesOperator.format_hint`).
OLD_HINT = ": the new lines only, in one code block, with the same indentation"


@dataclass
class Outcome:
    """What one reply to a repair message made."""

    more_than_lines: bool  # over 15 lines, or a `def` where the lines asked for have none
    built: bool  # a child passed the static check
    valid: bool
    above_parent: bool
    tokens: int
    verdict: str  # "valid 1.2345", "invalid: ...", "refused: ..."


@dataclass
class Repair:
    run: str
    agent_id: int
    kind: str  # "reply" (the reply could not be used) or "run" (the program failed when run)
    control: Outcome
    today: Outcome


def _more_than_lines(reply: str, focus: str) -> bool:
    code = reply.strip().removeprefix("```python").removesuffix("```")
    return len(code.strip().splitlines()) > 15 or ("def " in code and "def " not in focus)


def _ask(base_url: str, messages: list[dict[str, str]], *, seed: int | None, max_tokens: int) -> tuple[str, int]:
    body = {
        "model": "replay",
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0.8,
        "seed": seed,
        "cache_prompt": True,
        "grammar": code_grammar("python", markers=False),  # a line edit's grammar (`LinesOperator.grammar`)
    }
    request = urllib.request.Request(
        f"{base_url}/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=1800) as response:
        reply = json.loads(response.read())
    return reply["choices"][0]["message"]["content"] or "", int(reply.get("usage", {}).get("completion_tokens", 0))


def replay(
    folder: Path, base_url: str, sandbox: LocalSandbox, limit: int | None, save: Callable[[Repair], None]
) -> list[Repair]:
    with Archive.at(folder / "archive.db", readonly=True) as archive:
        (run,) = archive.list_runs()
        config = json.loads(run.config_json)
        agents = {agent.id: agent for agent in archive.agents(int(run.id))}
        calls = [
            call
            for call in archive.llm_calls(int(run.id))
            if call.purpose == "repair"
            and call.agent_id in agents
            and agents[call.agent_id].operator in ("lines", "knob")
        ]
        requests, _ = archive.llm_exchanges(call.request_hash for call in calls)
        genomes = {a.genome_hash: Genome(*archive.get_genome(a.genome_hash)) for a in agents.values() if a.genome_hash}
    benchmark = get_benchmark(run.benchmark, config.get("benchmark_options") or {})
    limits = Limits(seed=run.seed)
    entry_function = getattr(benchmark, "entry_function", None)
    max_tokens = LinesOperator.max_reply_tokens or 384
    rows: list[Repair] = []
    for call in calls[:limit]:
        child = agents[call.agent_id]
        request = requests.get(call.request_hash)
        if request is None or child.parent_id is None:
            continue
        messages = json.loads(request.messages)
        asked = next((m for message in messages if (m := _ASKED.search(message["content"]))), None)
        if asked is None or OLD_HINT not in messages[-1]["content"]:
            continue
        parent = agents[child.parent_id]
        parent_genome = genomes[parent.genome_hash]
        focus = Focus.find(parent_genome, asked["focus"], path=asked["path"])
        ctx = PromptContext(
            contract="",
            benchmark=run.benchmark,
            parent=ParentInfo(agent_id=parent.id, genome=parent_genome, score=parent.score, feedback=""),
            focus=focus,
        )
        hint = LinesOperator().format_hint(ctx)
        today = [*messages[:-1], {"role": "user", "content": messages[-1]["content"].replace(OLD_HINT, hint)}]
        outcomes = []
        for asked_messages in (messages, today):
            reply, tokens = _ask(base_url, asked_messages, seed=call.seed, max_tokens=max_tokens)
            try:
                built = LinesOperator().apply(parent_genome, reply, focus=focus)
                genome = check_child(built, parent_genome, entry_function=entry_function).genome
            except (EditError, ValueError) as error:
                outcomes.append(
                    Outcome(_more_than_lines(reply, focus.text), False, False, False, tokens, f"refused: {error}")
                )
                continue
            result = evaluate_agent(benchmark, genome, sandbox, limits=limits)
            above = result.valid and parent.score is not None and result.score > parent.score + 1e-9
            verdict = f"valid {result.score:.4f}" if result.valid else f"invalid: {result.invalid_reason}"
            outcomes.append(Outcome(_more_than_lines(reply, focus.text), True, result.valid, above, tokens, verdict))
        kind = "run" if (child.repair_note or "").startswith("FM repair after the run failed") else "reply"
        rows.append(Repair(folder.name, child.id, kind, outcomes[0], outcomes[1]))
        save(rows[-1])
        print(
            f"{folder.name} #{child.id} ({kind}): control {outcomes[0].verdict[:70]} | "
            f"today {outcomes[1].verdict[:70]}",
            flush=True,
        )
    return rows


def _repair(row: dict[str, Any]) -> Repair:
    return Repair(row["run"], row["agent_id"], row["kind"], Outcome(**row["control"]), Outcome(**row["today"]))


def table(rows: Sequence[Repair]) -> str:
    lines = [
        "| message | repairs | wrote more than the lines | children built | valid | above the parent | tokens out |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm in ("control", "today"):
        outcomes = [getattr(row, arm) for row in rows]
        lines.append(
            f"| {arm} | {len(outcomes)} | {sum(o.more_than_lines for o in outcomes)} "
            f"| {sum(o.built for o in outcomes)} | {sum(o.valid for o in outcomes)} "
            f"| {sum(o.above_parent for o in outcomes)} "
            f"| {sum(o.tokens for o in outcomes):,} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="run folders, each with its archive.db")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="the model the runs used")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: one per core)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many repairs per run")
    parser.add_argument("--label", default=None, help="names the result file (default: the time)")
    parser.add_argument("--report", type=Path, default=None, help="print the table of an earlier JSON file only")
    args = parser.parse_args(argv)
    if args.report is not None:
        saved = json.loads(args.report.read_text())
        print(saved["meta"]["command"])
        print(table([_repair(row) for row in saved["repairs"]]))
        return
    if not args.runs:
        parser.error("give the folders of kept runs (bench/generality.py --keep-runs), or --report FILE")
    from cambrian.meta_agent.llm.models import resolve
    from cambrian.meta_agent.llm.serve import LocalServer

    for folder in args.runs:
        if not (folder / "archive.db").exists():
            parser.error(f"{folder} has no archive.db: give the folders of kept runs (--keep-runs)")
    server = LocalServer(resolve(args.model), alias="replay", n_parallel=1, threads=args.threads)
    sandbox = LocalSandbox()
    started = time.perf_counter()
    label = args.label or datetime.now().strftime("%Y%m%d-%H%M%S")
    out = RESULTS_DIR / f"replay-repairs-{label}.json"
    rows: list[Repair] = []

    def save(row: Repair) -> None:  # after every repair: a long replay can be read while it goes on
        rows.append(row)
        meta = {
            "command": "bench/replay_repairs.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "updated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "seconds": round(time.perf_counter() - started),
        }
        out.write_text(json.dumps({"meta": meta, "repairs": [asdict(r) for r in rows]}, indent=1))

    try:
        server.start()
        for folder in args.runs:
            replay(folder, server.base_url, sandbox, args.limit, save)
    finally:
        sandbox.close()
        server.stop()
    print(table(rows))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
