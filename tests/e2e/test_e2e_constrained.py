"""Constrained decoding with the real SmolLM2-135M served by llama.cpp (xllamacpp).

SmolLM2 writes poor code, but with the reply grammars on it can no longer write a reply that fails to
parse: every block has its markers and every SEARCH section is a run of lines of the parent.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from cambrian.archive.store import Archive
from cambrian.evaluators.circle_packing import CirclePacking
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.edits import EditError
from cambrian.meta_agent.llm import ArchiveLedger, LLMClient, MemoryLedger, Request, derive_seed
from cambrian.meta_agent.llm.serve import LocalServer
from cambrian.meta_agent.operators import Focus, LinesOperator, ParentInfo, PromptContext, RewriteOperator
from cambrian.meta_agent.search import categorize, loop_from_config
from cambrian.meta_agent.search.session import make_llm_client
from cambrian.sandbox.local import LocalSandbox

# A real model search: on a busy machine (load 4-13) it ran past the 900 s default; what it checks is not time.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

#: What the grammars make impossible: no reply may be refused for these.
FORMAT_FAILURES = {
    "format: no SEARCH/REPLACE block",
    "format: no code block",
    "SEARCH did not match",
    "SEARCH ambiguous",
    "edit outside EVOLVE-BLOCK",
}


def test_every_child_of_a_constrained_smollm2_search_parses(tmp_path: Path, local_fm: LocalServer) -> None:
    config = RunConfig.model_validate(
        {
            "name": "constrained",
            "runs_dir": str(tmp_path),
            "seed": 3,
            "budget": {"iterations": 6},
            "search": {
                "strategy": "greedy",
                "operators": {"diff": 0.4, "lines": 0.3, "rewrite": 0.3},
                "max_pending": 2,
            },
            # A call may wait long on a busy machine (three model servers on two cores: over 300 s), and what this
            # checks is that the server takes every grammar, not its speed.
            "fm": {"concurrency": 2, "max_tokens": 400, "constrained": "on", "repair_rounds": 1, "timeout_s": 1800},
            "evaluation": {"concurrency": 2, "timeout_s": 20, "agent_fm": False},
        }
    )
    warnings: list[str] = []
    with Archive.at(tmp_path / "archive.db") as archive:
        run = archive.create_run(name="constrained", benchmark="circle_packing", seed=3, config_json=config.to_json())
        llm = make_llm_client(
            local_fm.endpoint(), config, ledger=ArchiveLedger(archive, int(run.id)), warn=warnings.append
        )
        loop = loop_from_config(
            archive=archive,
            run=run,
            config=config,
            benchmark=CirclePacking(),
            sandbox=LocalSandbox(),
            llm=llm,
            model_label=local_fm.alias,
        )
        asyncio.run(loop.run_until_done())
        children = [a for a in archive.agents(int(run.id)) if a.iteration > 0]
        assert len({a.iteration for a in children}) == 6
        stored = [a for a in children if a.genome_hash is not None]
        for agent in stored:
            files, _ = archive.get_genome(str(agent.genome_hash))
            for path, text in files.items():
                ast.parse(text, filename=path)  # every stored child parses
        refused = [categorize(a.invalid_reason or "") for a in children if a.genome_hash is None]
        assert not FORMAT_FAILURES & set(refused), refused
        calls = archive.llm_calls(int(run.id))
    assert llm.constrained and not warnings  # the server took every grammar
    assert {c.purpose for c in calls} <= {"mutate", "redraw", "repair"} and all(c.error is None for c in calls)


def test_a_grammar_the_server_refuses_falls_back_for_that_request_only(local_fm: LocalServer) -> None:
    warnings: list[str] = []
    llm = LLMClient(
        local_fm.endpoint(), ledger=MemoryLedger(), max_tokens=16, constrained=True, on_warning=warnings.append
    )
    messages = [{"role": "user", "content": "Say hello."}]
    first = llm.complete_sync(Request(messages, seed=derive_seed(0, 1, 0), grammar="root ::= this is ( not gbnf"))
    second = llm.complete_sync(Request(messages, seed=derive_seed(0, 2, 0), grammar="root ::= also ( broken"))
    assert first.text and second.text
    assert len(warnings) == 1 and "refused a grammar" in warnings[0] and "fm.constrained=off" in warnings[0]
    failed = [e for e in llm.ledger.entries if e.error]  # type: ignore[attr-defined]
    assert len(failed) == 2 and all("400" in e.error for e in failed)  # each refused request fell back itself
    assert llm.constrained  # one bad grammar turns nobody else's off
    yes = llm.complete_sync(Request(messages, seed=derive_seed(0, 3, 0), grammar='root ::= "yes"'))
    assert yes.text == "yes"


def test_a_region_rewrite_under_the_real_server_writes_no_marker_and_changes_nothing_outside(
    local_fm: LocalServer,
) -> None:
    seed = CirclePacking(start="grid").seed()
    operator = RewriteOperator()
    ctx = PromptContext(
        contract="pack circles",
        benchmark="circle_packing",
        parent=ParentInfo(1, seed, 1.0, None),
        failed_attempts=("the rewrite changed line 1 of packing.py, outside the EVOLVE-BLOCK markers",),
    )
    llm = LLMClient(local_fm.endpoint(), ledger=MemoryLedger(), max_tokens=300, constrained=True)
    for number in range(3):
        reply = llm.complete_sync(
            Request(operator.messages(ctx), seed=derive_seed(5, number, 0), grammar=operator.grammar(ctx))
        ).text
        assert not [line for line in reply.splitlines() if "EVOLVE-BLOCK-" in line], reply
        try:
            child = operator.apply(seed, reply)
        except EditError as error:
            assert categorize(str(error)) != "edit outside EVOLVE-BLOCK", error
        else:
            assert child.files["packing.py"].startswith(seed.files["packing.py"].split("import math")[0])


def test_a_line_edit_under_the_real_server_never_copies_the_lines_it_was_asked_to_change(local_fm: LocalServer) -> None:
    seed = CirclePacking(start="grid").seed()
    operator = LinesOperator()
    focus = Focus.find(seed, "    radius = 0.5 / max(columns, rows)")
    ctx = PromptContext(
        contract="pack circles", benchmark="circle_packing", parent=ParentInfo(1, seed, 1.0, None), focus=focus
    )
    warnings: list[str] = []
    llm = LLMClient(
        local_fm.endpoint(), ledger=MemoryLedger(), max_tokens=60, constrained=True, on_warning=warnings.append
    )
    for number in range(4):
        reply = llm.complete_sync(
            Request(operator.messages(ctx), seed=derive_seed(7, number, 0), grammar=operator.grammar(ctx))
        ).text
        try:
            operator.apply(seed, reply, focus=focus)
        except EditError as error:  # cut off at max_tokens, say: never the lines again
            assert "unchanged" not in str(error), reply
    assert not warnings  # the server took the grammar
