"""Apply the `lines` and `knob` replies of kept runs again, with today's code, and score what changes.

A change to how a line edit's reply becomes a child (meta_agent/operators/_replies.py) is measured here on
real model output without model time. For every `lines`/`knob` child of the runs given (their
`archive.db`), the script reads the lines the prompt asked for and the reply that built the child, applies
the reply to the parent with today's `LinesOperator.apply` and static check (`check_child`), and compares
the result with the child the run stored. Where they differ, the new child is scored with the run's
benchmark (local sandbox, the run's seed) beside the stored verdict: how many children the change turns
valid, or invalid, and how many beat their parent.

    .venv/bin/python bench/replay_lines.py /work/suite3/*/            # the runs a generality suite kept
    .venv/bin/python bench/replay_lines.py runs/tsp-0 --show          # and print each changed child's code

Prints one line per changed child and a table per run; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cambrian.archive.models import AgentStatus, LLMCall
from cambrian.archive.store import Archive
from cambrian.evaluators.base import Genome
from cambrian.evaluators.registry import get_benchmark
from cambrian.evaluators.runner import Limits, evaluate_agent
from cambrian.meta_agent.edits import EditError, check_child
from cambrian.meta_agent.operators import Focus, LinesOperator
from cambrian.sandbox.local import LocalSandbox

# The `lines` template's request (meta_agent/operators/prompts/lines.txt): the file and the lines asked for.
_ASKED = re.compile(
    r"Rewrite only these lines of (?P<path>\S+) so that the program scores higher:\n```\w*\n(?P<focus>.*?)\n```", re.S
)


@dataclass
class Replayed:
    """One line edit whose child today's code builds differently from the stored one."""

    agent_id: int
    parent_id: int
    before: str  # the stored verdict: "valid 0.2124" or the invalid reason
    after: str  # today's: "valid 0.5561", "invalid: ...", "refused: ..." (no child)
    valid_before: bool
    valid_after: bool
    beat_parent_after: bool
    code: str  # today's child, its edited file


def replay(folder: Path, show: bool) -> list[Replayed]:
    with Archive.at(folder / "archive.db", readonly=True) as archive:
        (run,) = archive.list_runs()
        config = json.loads(run.config_json)
        agents = {agent.id: agent for agent in archive.agents(int(run.id))}
        # The reply that built a child is its proposal's last call: attempts before it were refused (a repeat)
        # and a repair answers in the same conversation, for the same lines.
        last: dict[int, LLMCall] = {}
        for call in archive.llm_calls(int(run.id)):
            if call.purpose in ("mutate", "repair") and call.agent_id in agents:
                if agents[call.agent_id].operator in ("lines", "knob"):
                    last[call.agent_id] = max(call, last.get(call.agent_id, call), key=lambda c: c.id or 0)
        calls = list(last.values())
        requests, responses = archive.llm_exchanges(call.request_hash for call in calls)
        # A child refused before its code was built (a reply that did not parse) has no genome.
        genomes = {a.genome_hash: Genome(*archive.get_genome(a.genome_hash)) for a in agents.values() if a.genome_hash}
    benchmark = get_benchmark(run.benchmark, config.get("benchmark_options") or {})
    limits = Limits(seed=run.seed)
    entry_function = getattr(benchmark, "entry_function", None)
    changed: list[Replayed] = []
    sandbox = LocalSandbox()
    try:
        for call in calls:
            child = agents[call.agent_id]
            request, response = requests.get(call.request_hash), responses.get(call.request_hash)
            if request is None or response is None or child.parent_id is None:
                continue
            messages = json.loads(request.messages)
            asked = next((m for message in reversed(messages) if (m := _ASKED.search(message["content"]))), None)
            if asked is None:
                continue
            parent = agents[child.parent_id]
            parent_genome = genomes[parent.genome_hash]
            try:
                focus = Focus.find(parent_genome, asked["focus"], path=asked["path"])
                built = LinesOperator().apply(parent_genome, response.text, focus=focus)
                today = check_child(built, parent_genome, entry_function=entry_function).genome  # as the loop does
            except (EditError, ValueError) as error:
                today = None
                refused = str(error)
            stored = genomes.get(child.genome_hash) if child.genome_hash else None
            if (today is None and stored is None) or (today and stored and today.files == stored.files):
                continue
            valid_before = child.status == AgentStatus.evaluated
            before = f"valid {child.score:.4f}" if valid_before else f"invalid: {child.invalid_reason}"
            if today is None:
                after, valid_after, beat, code = f"refused: {refused}", False, False, ""
            else:
                result = evaluate_agent(benchmark, today, sandbox, limits=limits)
                valid_after = result.valid
                after = f"valid {result.score:.4f}" if result.valid else f"invalid: {result.invalid_reason}"
                beat = result.valid and parent.score is not None and result.score > parent.score + 1e-9
                code = today.files[focus.path]
            changed.append(Replayed(child.id, parent.id, before, after, valid_before, valid_after, beat, code))
            where = f"{folder.name} #{child.id} (parent #{parent.id}, {parent.score or 0:.4f})"
            print(f"{where}: {before[:90]} -> {after[:90]}", flush=True)
            if show and code:
                print(code)
    finally:
        sandbox.close()
    print(f"{folder.name}: {len(calls)} line edits, {len(changed)} built differently today", flush=True)
    return changed


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders, each with its archive.db")
    parser.add_argument("--show", action="store_true", help="print each changed child's edited file")
    args = parser.parse_args(argv)
    rows = []
    for folder in args.runs:
        if not (folder / "archive.db").exists():
            parser.error(f"{folder} has no archive.db: give the folders of kept runs (--keep-runs)")
        changed = replay(folder, args.show)
        rows.append(
            (
                folder.name,
                len(changed),
                sum(r.valid_before for r in changed),
                sum(r.valid_after for r in changed),
                sum(r.beat_parent_after for r in changed),
            )
        )
    print("\n| run | built differently | valid before | valid today | today's beat their parent |")
    print("|---|---|---|---|---|")
    for name, n, before, after, beat in rows:
        print(f"| {name} | {n} | {before} | {after} | {beat} |")
    total = [sum(row[i] for row in rows) for i in range(1, 5)]
    print(f"| all | {total[0]} | {total[1]} | {total[2]} | {total[3]} |")


if __name__ == "__main__":
    main()
