"""The search loop with a scripted FM (exact replies needed) and the real local sandbox and archive."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from cambrian.archive.models import AgentStatus, RunStatus
from cambrian.archive.store import Archive
from cambrian.evaluators.base import Genome
from cambrian.evaluators.circle_packing import CirclePacking
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.errors import SeedFailed
from cambrian.meta_agent.llm import ArchiveLedger, Completion, Endpoint, LLMClient, MemoryLedger, Request
from cambrian.meta_agent.llm._client import Asked
from cambrian.meta_agent.search import SearchLoop, loop_from_config
from cambrian.meta_agent.testing import ScriptedFM
from cambrian.sandbox.local import LocalSandbox

VALID = """import math


def pack_circles(n):
    columns = math.ceil(math.sqrt(n))
    rows = math.ceil(n / columns)
    radius = 0.5 / max(columns, rows) * 0.999
    return [((2 * (i % columns) + 1) * radius, (2 * (i // columns) + 1) * radius, radius) for i in range(n)]
"""
HANG = "def pack_circles(n):\n    while True:\n        pass\n"
CRASH = "def pack_circles(n):\n    return 1 / 0\n"
FLOOD = "def pack_circles(n):\n    while True:\n        print('x' * 100000)\n"


def fenced(code: str) -> str:
    return f"Here is the program.\n```python\n{code}```\n"


def make_loop(
    tmp_path: Path, scripted: ScriptedFM, *, benchmark=None, store: str | None = None, on_event=None, **config
) -> tuple[SearchLoop, Archive]:
    cfg = RunConfig.model_validate(
        {
            "name": "t",
            "runs_dir": str(tmp_path),
            "search": {"strategy": "greedy", "operators": {"rewrite": 1.0}},
            "evaluation": {"concurrency": 2, "timeout_s": 3},
            **config,
            # Each scripted reply is one proposal's: no redraw or repair round takes the next reply (the tests of
            # those turn them on).
            "fm": {"concurrency": 1, "repair_rounds": 0, "redraws": 0, **config.get("fm", {})},
        }
    )
    archive = Archive.at(tmp_path / "archive.db") if store is None else Archive(store)
    run = archive.create_run(name="t", benchmark="circle_packing", seed=0, config_json=cfg.to_json())
    loop = loop_from_config(
        archive=archive,
        run=run,
        config=cfg,
        benchmark=benchmark or CirclePacking(start="grid"),
        sandbox=LocalSandbox(),
        llm=scripted,
        model_label="scripted",
        on_event=on_event,
    )
    return loop, archive


def test_hostile_children_end_invalid_and_the_loop_goes_on_fake_fm(tmp_path: Path) -> None:
    fm = ScriptedFM([fenced(HANG), fenced(CRASH), fenced(FLOOD), "no code at all", fenced(VALID)])
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 5})
    outcome = asyncio.run(loop.run_until_done())
    assert outcome.status == RunStatus.finished
    children = {a.iteration: a for a in archive.agents(1) if a.iteration > 0}
    reasons = {i: (children[i].status, children[i].invalid_reason or "") for i in children}
    assert reasons[1][0] == AgentStatus.invalid and "timed out" in reasons[1][1]
    assert reasons[2][0] == AgentStatus.invalid and "ZeroDivisionError" in reasons[2][1]
    assert reasons[3][0] == AgentStatus.invalid and "output" in reasons[3][1]
    assert reasons[4][0] == AgentStatus.invalid and "python" in reasons[4][1].lower()
    assert reasons[5][0] == AgentStatus.evaluated and children[5].score > 2.0
    # The invalid edits' reasons reach later prompts of the same parent as feedback.
    assert [a.invalid_reason for a in archive.recent_invalid_children(1, 3)][0] == reasons[4][1]


def test_a_child_that_fails_its_run_is_named_once_in_the_next_prompt_of_its_parent_fake_fm(tmp_path: Path) -> None:
    # Proposal 1 crashes in the sandbox; proposal 2 (same parent: greedy, the seed stays best) is made after
    # that evaluation, and its prompt names the crash once: refused proposals and failed runs alike.
    fm = ScriptedFM([fenced(CRASH), "no code at all", fenced(VALID)])
    loop, archive = make_loop(
        tmp_path,
        fm,
        budget={"iterations": 3},
        search={"strategy": "greedy", "operators": {"rewrite": 1.0}, "max_pending": 1},
    )
    asyncio.run(loop.run_until_done())
    prompts = ["\n".join(m["content"] for m in messages) for _, messages in fm.requests]
    assert len(prompts) == 3
    assert "ZeroDivisionError" not in prompts[0]
    assert prompts[1].count("ZeroDivisionError") == 1
    assert prompts[2].count("ZeroDivisionError") == 1 and prompts[2].count("python") >= 1
    reasons = [a.invalid_reason for a in archive.recent_invalid_children(1, 5)]
    assert len(reasons) == 2 and "ZeroDivisionError" in reasons[1]


def test_a_failed_reply_goes_back_once_with_its_error_fake_fm(tmp_path: Path) -> None:
    # The first reply drops `import math` and breaks the syntax; the repair round's reply fixes the syntax
    # but still lacks the import, which the static check adds. One child, evaluated, both repairs recorded.
    broken = VALID.replace("import math\n", "").replace("return [", "return [[")
    unimported = VALID.replace("import math\n", "")
    fm = ScriptedFM([fenced(broken), fenced(unimported)])
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 1}, fm={"concurrency": 1, "repair_rounds": 1})
    asyncio.run(loop.run_until_done())
    (child,) = [a for a in archive.agents(1) if a.iteration == 1]
    assert child.status == AgentStatus.evaluated and child.score > 2.0
    assert "FM repair round 1 fixed: the edited packing.py is not valid Python" in child.repair_note
    assert "added `import math`" in child.repair_note
    assert [purpose for purpose, _ in fm.requests] == ["mutate", "repair"]
    repair_messages = fm.requests[1][1]
    assert repair_messages[-2] == {"role": "assistant", "content": fenced(broken)}
    assert "could not be used: the edited packing.py is not valid Python" in repair_messages[-1]["content"]
    assert "```python block" in repair_messages[-1]["content"]


def test_a_line_edit_sent_back_is_asked_for_its_lines_again_not_the_program_fake_fm(tmp_path: Path) -> None:
    # Told "reply again with the whole corrected answer", qwen2.5-coder-1.5b answered a third of its line
    # edits' repairs with the whole program, cut off at the reply's cap: the repair restates the lines.
    fm = ScriptedFM(["```python\n    x = = 1\n```", "```python\n    x = = 2\n```"])
    loop, _ = make_loop(
        tmp_path,
        fm,
        budget={"iterations": 1},
        fm={"concurrency": 1, "repair_rounds": 1},
        search={"operators": {"lines": 1.0}},
    )
    asyncio.run(loop.run_until_done())
    assert [purpose for purpose, _ in fm.requests] == ["mutate", "repair"]
    asked = re.search(
        r"these lines of packing.py so that the program scores higher:\n(```python\n.*?\n```)",
        fm.requests[0][1][-1]["content"],
        re.S,
    )
    assert asked is not None
    repair = fm.requests[1][1][-1]["content"]
    assert "not valid Python" in repair
    assert f"new code for only these lines of packing.py, not the whole program:\n{asked[1]}\n" in repair


def test_a_reply_failing_every_repair_round_is_invalid_with_the_last_error_fake_fm(tmp_path: Path) -> None:
    fm = ScriptedFM(["no code at all", "still no code"])
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 1}, fm={"concurrency": 1, "repair_rounds": 1})
    asyncio.run(loop.run_until_done())
    (child,) = [a for a in archive.agents(1) if a.iteration == 1]
    assert child.status == AgentStatus.invalid
    assert "no ```python block" in child.invalid_reason and "after 1 repair round" in child.invalid_reason
    assert child.prompt_tokens == 20  # both calls' usage stays on the invalid child


def test_a_reply_that_cannot_be_used_is_drawn_again_from_the_same_prompt_with_another_seed_fake_fm(
    tmp_path: Path,
) -> None:
    fm = ScriptedFM(["no code at all", fenced(VALID)])
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 1}, fm={"concurrency": 1, "redraws": 1})
    asyncio.run(loop.run_until_done())
    (child,) = [a for a in archive.agents(1) if a.iteration == 1]
    assert child.status == AgentStatus.evaluated and child.score > 2.0
    assert child.repair_note.startswith("FM redraw 1 fixed: the reply had no ```python block")
    assert [purpose for purpose, _ in fm.requests] == ["mutate", "redraw"]
    assert fm.requests[0][1] == fm.requests[1][1]  # the same messages: the server's cached prompt
    assert fm.seeds[0] != fm.seeds[1]
    assert child.prompt_tokens == 20  # both calls' usage is the child's


def test_redraws_come_before_the_repair_rounds_and_a_reply_failing_all_names_both_fake_fm(tmp_path: Path) -> None:
    fm = ScriptedFM(["no code at all", "still no code", "nor now"])
    loop, archive = make_loop(
        tmp_path, fm, budget={"iterations": 1}, fm={"concurrency": 1, "redraws": 1, "repair_rounds": 1}
    )
    asyncio.run(loop.run_until_done())
    (child,) = [a for a in archive.agents(1) if a.iteration == 1]
    assert child.status == AgentStatus.invalid
    assert child.invalid_reason.endswith("(still failing after 1 redraw and 1 repair round(s))")
    assert [purpose for purpose, _ in fm.requests] == ["mutate", "redraw", "repair"]
    first, _, repair = (messages for _, messages in fm.requests)
    assert repair[: len(first)] == first and repair[len(first)] == {"role": "assistant", "content": "still no code"}
    assert len(set(fm.seeds)) == 2  # the repair goes on in the redraw's conversation, with its seed


def test_a_child_that_crashes_goes_back_with_its_run_and_the_fix_is_a_new_child_fake_fm(tmp_path: Path) -> None:
    fm = ScriptedFM([fenced(CRASH), fenced(VALID)])
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 1}, fm={"concurrency": 1, "repair_rounds": 1})
    asyncio.run(loop.run_until_done())
    crashed, fixed = [a for a in archive.agents(1) if a.iteration == 1]
    assert crashed.status == AgentStatus.invalid and "ZeroDivisionError" in crashed.invalid_reason
    assert fixed.status == AgentStatus.evaluated and fixed.score > 2.0 and fixed.parent_id == crashed.parent_id == 1
    assert fixed.repair_note.startswith("FM repair after the run failed: crashed: ZeroDivisionError")
    assert [purpose for purpose, _ in fm.requests] == ["mutate", "repair"]
    sent = fm.requests[1][1]
    assert sent[-2]["content"] == fenced(CRASH) and "was run and failed" in sent[-1]["content"]
    assert "ZeroDivisionError" in sent[-1]["content"]
    assert archive.iterations_done(1) == 1  # the repair is part of the same iteration


def test_a_refused_run_repair_is_stored_invalid_and_still_marked_as_the_repair_fake_fm(tmp_path: Path) -> None:
    # The crash goes back to the FM; its answer has no code: a second child of the iteration, refused, whose
    # repair note still says which failed run it repaired (the lineage keeps the link either way).
    fm = ScriptedFM([fenced(CRASH), "no code at all"])
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 1}, fm={"concurrency": 1, "repair_rounds": 1})
    asyncio.run(loop.run_until_done())
    crashed, refused = [a for a in archive.agents(1) if a.iteration == 1]
    assert crashed.status == refused.status == AgentStatus.invalid and crashed.repair_note is None
    assert refused.invalid_reason.endswith("(the repair after a failed run)") and refused.genome_hash is None
    assert refused.repair_note == "FM repair after the run failed: crashed: ZeroDivisionError: division by zero"
    assert [purpose for purpose, _ in fm.requests] == ["mutate", "repair"]


def test_no_run_repair_once_the_rounds_are_spent_fake_fm(tmp_path: Path) -> None:
    # The first reply does not parse; the repair round's reply crashes: no round is left for its run.
    fm = ScriptedFM(["no code at all", fenced(CRASH), fenced(VALID)])
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 1}, fm={"concurrency": 1, "repair_rounds": 1})
    asyncio.run(loop.run_until_done())
    (child,) = [a for a in archive.agents(1) if a.iteration == 1]
    assert child.status == AgentStatus.invalid and "ZeroDivisionError" in child.invalid_reason
    assert [purpose for purpose, _ in fm.requests] == ["mutate", "repair"]


def test_duplicate_child_is_rejected_fake_fm(tmp_path: Path) -> None:
    fm = ScriptedFM([fenced(VALID)])  # the same edit twice, from the same parent
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 2})
    asyncio.run(loop.run_until_done())
    first, second = archive.agents(1)[1:]
    assert first.status == AgentStatus.evaluated
    assert second.status == AgentStatus.invalid
    assert f"identical to agent {first.id}" in (second.invalid_reason or "")


def test_usd_budget_stops_proposing_fake_fm(tmp_path: Path) -> None:
    fm = ScriptedFM([fenced(VALID.replace("0.999", f"0.99{i}")) for i in range(9)], cost_usd=0.01)
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 50, "usd": 0.025})
    outcome = asyncio.run(loop.run_until_done())
    assert outcome.status == RunStatus.finished and "USD budget" in outcome.reason
    assert fm.calls == 3  # 0.00, 0.01, 0.02 spent before each call; stops at 0.03
    assert archive.iterations_done(1) == 3


class _CrashingSeed(CirclePacking):
    def seed(self) -> Genome:
        return Genome(files={"packing.py": CRASH}, entry="packing.py")


def test_failing_seed_stops_the_run_with_cause_fake_fm(tmp_path: Path) -> None:
    loop, archive = make_loop(tmp_path, ScriptedFM([fenced(VALID)]), benchmark=_CrashingSeed())
    with pytest.raises(SeedFailed, match="ZeroDivisionError"):
        asyncio.run(loop.run_until_done())
    assert archive.get_run("t").status == RunStatus.failed


def test_a_child_stored_while_a_slot_waits_is_stored_as_evaluating_fake_fm(tmp_path: Path) -> None:
    # max_pending 1: each child is proposed once the one before is scored, so both slots wait for it and it
    # is stored as evaluating (no separate mark); one evaluation attempt counted, as with the mark.
    fm = ScriptedFM([fenced(VALID.replace("0.999", f"0.99{i}")) for i in range(3)])
    stored_as = {}

    def on_event(event) -> None:
        if event.kind == "proposed":
            stored_as[event.agent_id] = archive.get_agent(event.agent_id).status

    loop, archive = make_loop(
        tmp_path,
        fm,
        budget={"iterations": 3},
        search={"strategy": "greedy", "operators": {"rewrite": 1.0}, "max_pending": 1},
        on_event=on_event,
    )
    assert asyncio.run(loop.run_until_done()).status == RunStatus.finished
    assert len(stored_as) == 3 and set(stored_as.values()) == {AgentStatus.evaluating}
    children = [a for a in archive.agents(1) if a.iteration > 0]
    assert [(a.status, a.eval_attempts) for a in children] == [(AgentStatus.evaluated, 1)] * 3


def test_stop_request_leaves_a_resumable_run_fake_fm(tmp_path: Path, store_url: str) -> None:
    fm = ScriptedFM([fenced(VALID.replace("0.999", f"0.99{i}")) for i in range(9)])

    def stop_after_two(event) -> None:
        if event.kind == "proposed" and event.iteration == 2:
            loop.request_stop("test stop")

    # SQLite and PostgreSQL
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 6}, store=store_url, on_event=stop_after_two)
    outcome = asyncio.run(loop.run_until_done())
    assert outcome.status == RunStatus.stopped and outcome.reason == "test stop"
    done = archive.iterations_done(1)
    assert 2 <= done < 6
    # Resume: a fresh loop over the same archive finishes the budget.
    run = archive.get_run("t")
    again = loop_from_config(
        archive=archive,
        run=run,
        config=RunConfig.model_validate_json(run.config_json),
        benchmark=CirclePacking(start="grid"),
        sandbox=LocalSandbox(),
        llm=fm,
        model_label="scripted",
    )
    outcome = asyncio.run(again.run_until_done())
    assert outcome.status == RunStatus.finished
    assert sorted(a.iteration for a in archive.agents(1) if a.iteration > 0) == [1, 2, 3, 4, 5, 6]
    assert not archive.pending(1, max_attempts=3)


def test_a_second_ctrl_c_kills_the_running_evaluation_and_its_agent_stays_queued_fake_fm(tmp_path: Path) -> None:
    """First Ctrl-C: stop proposing, let the evaluation finish. Second: kill it now (not at its 60 s task's end);
    the agent is `failed` by the sandbox, not by its own code, and `resume` takes it up again."""
    import os
    import signal
    import time

    from cambrian.meta_agent.search.session import _run_with_signals
    from cambrian.meta_agent.testing import SleepBenchmark

    loop, archive = make_loop(
        tmp_path,
        ScriptedFM([fenced(VALID)]),
        benchmark=SleepBenchmark(tasks=1, seconds=60.0, timeout_s=120.0),
        budget={"iterations": 1},
        evaluation={"concurrency": 1, "agent_fm": False},
    )

    async def press_twice():
        search = asyncio.create_task(_run_with_signals(loop))
        deadline = time.monotonic() + 60
        while not [a for a in archive.agents(1) if a.status == AgentStatus.evaluating]:
            assert time.monotonic() < deadline and not search.done(), "the seed's evaluation never started"
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # its run is up in the sandbox
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)
        return await search

    outcome = asyncio.run(press_twice())
    assert outcome.status == RunStatus.stopped and outcome.reason.startswith("interrupted (Ctrl-C)")
    assert "Ctrl-C again to kill them" in outcome.reason
    [seed] = archive.agents(1)
    assert seed.status == AgentStatus.failed and "closed during this run" in str(seed.invalid_reason)
    assert [a.id for a in archive.pending(1, max_attempts=3)] == [seed.id]


def test_an_operator_that_cannot_edit_the_parent_is_skipped_before_any_fm_call_fake_fm(tmp_path: Path) -> None:
    # The knapsack seed is one `return value`: no number for ast_mutate, one line for `lines`. Every iteration
    # goes to `lines`; nothing is stored as an ast_mutate failure.
    from cambrian.evaluators.programs import Knapsack

    # No reply writes a number or an operator, so no child gives ast_mutate anything to change either.
    rules = ("max(value, weight)", "min(value, weight)", "max(value, capacity)", "round(value)")
    fm = ScriptedFM([f"```python\nreturn {rule}\n```" for rule in rules])
    loop, archive = make_loop(
        tmp_path,
        fm,
        benchmark=Knapsack(),
        budget={"iterations": 4},
        search={"strategy": "greedy", "operators": {"ast_mutate": 3, "lines": 1}},
    )
    asyncio.run(loop.run_until_done())
    children = [a for a in archive.agents(1) if a.iteration > 0]
    assert len(children) == 4 and {a.operator for a in children} == {"lines"}
    assert fm.calls == 4
    assert all(a.status == AgentStatus.evaluated for a in children)


def test_a_program_the_run_already_has_is_proposed_again_not_stored_fake_fm(tmp_path: Path) -> None:
    # Iteration 2 first repeats iteration 1's program: no new child, so it is not stored; the iteration
    # proposes again and stores the next one, charged with both calls. Only the last try stores a repeat.
    other = VALID.replace("* 0.999", "* 0.99")
    fm = ScriptedFM([fenced(VALID), fenced(VALID), fenced(other), fenced(VALID), fenced(VALID), fenced(VALID)])
    search = {"strategy": "greedy", "operators": {"rewrite": 1.0}, "max_pending": 1, "novelty": {"max_reproposals": 2}}
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 3}, search=search)
    asyncio.run(loop.run_until_done())
    children = [a for a in archive.agents(1) if a.iteration > 0]
    assert [(a.iteration, a.status) for a in children] == [
        (1, AgentStatus.evaluated),
        (2, AgentStatus.evaluated),
        (3, AgentStatus.invalid),
    ]
    assert children[1].prompt_tokens == 20 and fm.calls == 6  # iteration 2: its repeat and its child
    assert "identical to agent" in (children[2].invalid_reason or "") and children[2].prompt_tokens == 30
    # Each attempt after a repeat is shown the changes the earlier ones made, so it is not the same prompt again.
    prompts = [messages[-1]["content"] for _, messages in fm.requests]
    assert "Already tried in this proposal" not in prompts[0] + prompts[1]
    assert "1. -" in prompts[2].split("## Already tried in this proposal")[1] and "* 0.999" in prompts[2]
    assert "2. -" in prompts[5].split("## Already tried in this proposal")[1]  # iteration 3: two repeats shown


def test_a_valid_child_below_the_optimum_is_not_sent_back_to_be_fixed_fake_fm(tmp_path: Path) -> None:
    # Knapsack passes a task only at the optimum: a child that scores below it ran well and is no failed run.
    # Asked to "fix" such a child, models sent it back unchanged (stored as a duplicate, invalid).
    from cambrian.evaluators.programs import Knapsack

    fm = ScriptedFM(["```python\nreturn value * 2\n```", "```python\nreturn value + weight\n```"])
    loop, archive = make_loop(
        tmp_path,
        fm,
        benchmark=Knapsack(),
        budget={"iterations": 2},
        search={"strategy": "greedy", "operators": {"lines": 1}, "max_pending": 1},
        fm={"concurrency": 1, "repair_rounds": 1},
    )
    asyncio.run(loop.run_until_done())
    children = [a for a in archive.agents(1) if a.iteration > 0]
    scored = [a for a in children if a.status == AgentStatus.evaluated and (a.score or 0) > 0]
    assert len(children) == 2 and len(scored) == 2 and fm.calls == 2
    assert all(not any(e.passed for e in archive.evaluations(a.key)) for a in scored)  # below the optimum


class _HangingRepairFM(ScriptedFM):
    """Answers proposals at once; a repair call hangs (a local model's minutes-long call) until cancelled."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__(replies)
        self.repair_started = asyncio.Event()

    async def complete(self, request: Request) -> Completion:
        if request.purpose == "repair":
            self.repair_started.set()
            await asyncio.Event().wait()  # never answers
        return await super().complete(request)


def test_a_stop_cancels_an_fm_repair_in_flight_at_once_fake_fm(tmp_path: Path) -> None:
    # A run once ignored two Ctrl-Cs and a SIGTERM for about 3 minutes: a repair's FM call was in flight.
    fm = _HangingRepairFM([fenced(CRASH), fenced(VALID)])
    search = {"strategy": "greedy", "operators": {"rewrite": 1.0}, "max_pending": 1}
    loop, archive = make_loop(
        tmp_path, fm, budget={"iterations": 10}, fm={"concurrency": 1, "repair_rounds": 1}, search=search
    )

    async def scenario():  # type: ignore[no-untyped-def]
        run = asyncio.create_task(loop.run_until_done())
        await fm.repair_started.wait()
        loop.request_stop("stopped by the user")
        return await asyncio.wait_for(run, timeout=120)  # a ceiling only: the stop returns once the call is cancelled

    outcome = asyncio.run(scenario())
    assert outcome.status == RunStatus.stopped and outcome.reason == "stopped by the user"
    crashed = [a for a in archive.agents(1) if a.iteration == 1]
    assert len(crashed) == 1 and crashed[0].status.value == "invalid"  # kept; its repair was not stored


def test_a_repair_that_sends_the_failed_program_back_is_not_stored_fake_fm(tmp_path: Path) -> None:
    # Asked to fix its crash, the model answers with the same program: no new child (the call stays in the run's
    # FM ledger, which LLMClient writes; this scripted FM has none).
    fm = ScriptedFM([fenced(CRASH), fenced(CRASH)])
    events: list[str] = []
    loop, archive = make_loop(
        tmp_path,
        fm,
        budget={"iterations": 1},
        fm={"concurrency": 1, "repair_rounds": 1},
        on_event=lambda event: events.append(event.message),
    )
    asyncio.run(loop.run_until_done())
    children = [a for a in archive.agents(1) if a.iteration == 1]
    assert len(children) == 1 and children[0].status == AgentStatus.invalid and fm.calls == 2
    crashed = children[0].key
    assert any(f"the repair of agent {crashed} rebuilt agent {crashed}: not stored" in note for note in events)


def test_each_fm_call_is_linked_to_the_child_of_its_proposal_by_id_fake_fm(tmp_path: Path) -> None:
    """The real client and the run's archive ledger, with a scripted transport: the proposal's call and the
    repair of its crashed child are two proposals, each with its own id, each call linked to its own child
    (both of iteration 1: an iteration number could not tell them apart)."""
    replies = iter([fenced(CRASH), fenced(VALID)])

    async def scripted_transport(asked: Asked) -> SimpleNamespace:
        message = SimpleNamespace(content=next(replies))
        usage = SimpleNamespace(prompt_tokens=40, completion_tokens=20)
        return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason="stop")], usage=usage)

    client = LLMClient(
        Endpoint("openai/scripted", api_base="http://127.0.0.1:9/v1", label="scripted"), ledger=MemoryLedger()
    )
    client._send = scripted_transport  # type: ignore[method-assign]  # the model's replies, scripted
    loop, archive = make_loop(
        tmp_path,
        client,
        budget={"iterations": 1},
        fm={"concurrency": 1, "repair_rounds": 1},  # type: ignore[arg-type]
    )
    client.ledger = ArchiveLedger(archive, loop.run_id)
    asyncio.run(loop.run_until_done())
    crashed, repaired = [a for a in archive.agents(1) if a.iteration == 1]
    assert (crashed.status, repaired.status) == (AgentStatus.invalid, AgentStatus.evaluated)
    assert crashed.proposal_id and repaired.proposal_id and crashed.proposal_id != repaired.proposal_id
    for child, purpose in ((crashed, "mutate"), (repaired, "repair")):
        (call,) = archive.agent_llm_calls(child.key)
        assert (call.purpose, call.proposal_id, call.iteration) == (purpose, child.proposal_id, 1)


def test_an_attempt_after_a_repeat_asks_another_kind_of_question_fake_fm(tmp_path: Path) -> None:
    # Iteration 2's rewrite of the seed (the better parent) rebuilds iteration 1's child: the next attempt is a
    # diff (the only other kind of operator), shown the repeated change; the child it stores is the diff's,
    # charged with both calls.
    diff = "<<<<<<< SEARCH\n    radius = 0.5 / max(columns, rows)\n=======\n"
    diff += "    radius = 0.5 / max(columns, rows) * 0.99\n>>>>>>> REPLACE\n"
    fm = ScriptedFM([fenced(VALID), fenced(VALID), diff])
    search = {"strategy": "greedy", "operators": {"rewrite": 1.0, "diff": 1e-6}, "max_pending": 1}
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 2}, search=search)
    asyncio.run(loop.run_until_done())
    children = [a for a in archive.agents(1) if a.iteration > 0]
    assert [(a.iteration, a.operator, a.status) for a in children] == [
        (1, "rewrite", AgentStatus.evaluated),
        (2, "diff", AgentStatus.evaluated),
    ]
    assert children[1].prompt_tokens == 20 and fm.calls == 3
    prompts = [messages[-1]["content"] for _, messages in fm.requests]
    assert "SEARCH/REPLACE" in prompts[2] and "1. -" in prompts[2].split("## Already tried in this proposal")[1]
