"""The crossover, diagnose and self_modify operators.

Tests named `_fake_fm` apply scripted replies (exact texts are needed to check
parsing). Self-modification also runs for real: a scripted agent rewrites itself
in the local sandbox on the task HumanEval builds. One test asks the real
SmolLM2 for a diagnosis plan.
"""

from __future__ import annotations

import ast

import pytest

from cambrian.evaluators.base import Genome
from cambrian.evaluators.circle_packing.benchmark import CirclePacking
from cambrian.evaluators.harness.run_program import read_outcome
from cambrian.evaluators.humaneval import HumanEval
from cambrian.meta_agent.edits import EditError
from cambrian.meta_agent.llm import LLMClient, MemoryLedger, Request
from cambrian.meta_agent.llm.serve import LocalServer
from cambrian.meta_agent.operators import (
    AstMutation,
    CrossoverOperator,
    DiagnoseOperator,
    FMOperator,
    ParentInfo,
    PromptContext,
    PromptLimits,
    SelfModifyOperator,
    make_operator,
    supports_self_modify,
)
from cambrian.sandbox.local import LocalSandbox

SEED = """\
import math

# EVOLVE-BLOCK-START
def radius(i):
    return 0.05
# EVOLVE-BLOCK-END


def total(n):
    return sum(radius(i) for i in range(n))
"""
GENOME_A = Genome(files={"main.py": SEED}, entry="main.py")
GENOME_B = Genome(files={"main.py": SEED.replace("return 0.05", "return 0.04 + 0.01 * (i % 2)")}, entry="main.py")
PARENT_A = ParentInfo(agent_id=1, genome=GENOME_A, score=1.3, feedback="sum of radii 1.3")
PARENT_B = ParentInfo(agent_id=2, genome=GENOME_B, score=1.1, feedback="sum of radii 1.1; circle 3 overlaps")

AGENT = '''\
"""An agent for HumanEval."""
import re

VERSION = 1


def solve(task, llm):
    reply = llm("Complete:\\n```python\\n" + task["prompt"] + "```")
    blocks = re.findall(r"```(?:python)?\\n(.*?)```", reply, re.DOTALL)
    return blocks[0] if blocks else reply
'''
AGENT_GENOME = Genome(files={"agent.py": AGENT}, entry="agent.py")
AGENT_FEEDBACK = "HumanEval/0: failed (AssertionError)\nHumanEval/2: passed\nHumanEval/4: failed (NameError: x)"


def context(**overrides: object) -> PromptContext:
    values: dict[str, object] = {
        "contract": "Define total(n).",
        "benchmark": "toy",
        "parent": PARENT_A,
        "failed_attempts": ("SEARCH block 1 did not match main.py",),
    }
    values.update(overrides)
    return PromptContext(**values)  # type: ignore[arg-type]


def agent_context(**overrides: object) -> PromptContext:
    values: dict[str, object] = {
        "parent": ParentInfo(agent_id=5, genome=AGENT_GENOME, score=0.25, feedback=AGENT_FEEDBACK),
        "benchmark": "humaneval",
        "failed_attempts": ("the edited agent.py is not valid Python: invalid syntax at line 3",),
    }
    values.update(overrides)
    return context(**values)


# ---------------------------------------------------------------- crossover


def test_crossover_prompt_shows_both_parents_and_needs_the_second() -> None:
    operator = CrossoverOperator()
    assert operator.needs_second_parent and isinstance(operator, FMOperator) and operator.uses_fm
    user = operator.messages(context(second_parent=PARENT_B))[1]["content"]
    assert user.index("## Program A (score: 1.3)") < user.index("## Program B (score: 1.1)")
    assert SEED.rstrip() in user and GENOME_B.files["main.py"].rstrip() in user
    assert "sum of radii 1.3" in user and "circle 3 overlaps" in user
    assert "1. SEARCH block 1 did not match main.py" in user
    assert "combines the strengths of program A and program B" in user and "EVOLVE-BLOCK-START" in user
    assert user.rstrip().endswith("```")
    with pytest.raises(ValueError, match="second_parent"):
        operator.messages(context())


def test_crossover_apply_differs_from_both_parents_fake_fm() -> None:
    operator = CrossoverOperator()
    combined = SEED.replace("return 0.05", "return 0.05 + 0.01 * (i % 2)")
    child = operator.apply(GENOME_A, f"Combining both:\n```python\n{combined}```", second_parent=GENOME_B)
    assert child.files["main.py"] == combined and child.entry == "main.py"
    with pytest.raises(EditError, match="copy of program B"):
        operator.apply(GENOME_A, f"```python\n{GENOME_B.files['main.py']}```", second_parent=GENOME_B)
    with pytest.raises(EditError, match="unchanged"):
        operator.apply(GENOME_A, f"```python\n{SEED}```", second_parent=GENOME_B)


def test_crossover_apply_respects_the_evolve_block_fake_fm() -> None:
    outside = SEED.replace("import math", "import math, os").replace("0.05", "0.06")
    # One region: only the reply's region reaches the child; the outside stays as it was.
    child = CrossoverOperator().apply(GENOME_A, f"```python\n{outside}```", second_parent=GENOME_B)
    assert child.files["main.py"] == SEED.replace("0.05", "0.06")
    with pytest.raises(EditError, match="not valid Python"):
        CrossoverOperator().apply(GENOME_A, "```python\ndef radius(i):\n    return (0.05\n```")


# ---------------------------------------------------------------- diagnose


def test_diagnose_plan_prompt_asks_for_a_plan_without_code() -> None:
    operator = DiagnoseOperator()
    assert isinstance(operator, FMOperator) and operator.uses_fm and not operator.needs_second_parent
    system, user = operator.plan_messages(context())
    assert '"toy"' in system["content"]
    assert "Do not write code" in user["content"] and "numbered plan" in user["content"]
    assert "sum of radii 1.3" in user["content"] and "did not match main.py" in user["content"]
    with pytest.raises(ValueError, match="ctx.plan"):
        operator.messages(context())


def test_diagnose_parse_plan_fake_fm() -> None:
    operator = DiagnoseOperator(limits=PromptLimits(max_plan_chars=200))
    reply = (
        "Plan:\n1. Give odd circles larger radii.\n```python\ndef radius(i):\n    return 1\n```\n"
        "```text\n2. Keep the sum below the bound.\n```\n"
    )
    plan = operator.parse_plan(reply)
    assert plan == "Plan:\n1. Give odd circles larger radii.\n2. Keep the sum below the bound."
    long_plan = operator.parse_plan("\n".join(f"{i}. step number {i} of the plan" for i in range(1, 40)))
    assert len(long_plan) < 260 and "more lines not shown" in long_plan
    for empty in ("", "   \n", "```python\nx = 1\n```"):
        with pytest.raises(EditError, match="no plan"):
            operator.parse_plan(empty)


def test_diagnose_implements_the_plan_with_blocks_or_a_whole_file_fake_fm() -> None:
    operator = DiagnoseOperator()
    messages = operator.messages(context(plan="1. Give odd circles larger radii."))
    # The plan's own conversation, its reply the plan: a server's prompt cache holds all of it but the request.
    assert messages[:2] == operator.plan_messages(context())
    assert messages[2] == {"role": "assistant", "content": "1. Give odd circles larger radii."}
    user = messages[3]["content"]
    assert user.startswith("## Task\nChange the program as your plan says") and "sum of radii" not in user
    assert user.rstrip().endswith(">>>>>>> REPLACE")
    blocks = "<<<<<<< SEARCH\n    return 0.05\n=======\n    return 0.05 + 0.01 * (i % 2)\n>>>>>>> REPLACE\n"
    expected = SEED.replace("return 0.05", "return 0.05 + 0.01 * (i % 2)")
    assert operator.apply(GENOME_A, blocks).files["main.py"] == expected
    # Small models often ignore the block format and send the whole file.
    assert operator.apply(GENOME_A, f"```python\n{expected}```").files["main.py"] == expected
    with pytest.raises(EditError, match="did not match"):
        operator.apply(GENOME_A, blocks.replace("return 0.05\n=", "return 0.5\n="))


def test_diagnose_plan_from_the_real_model(local_fm: LocalServer) -> None:
    operator = DiagnoseOperator()
    client = LLMClient(local_fm.endpoint(), ledger=MemoryLedger(), max_tokens=40)
    reply = client.complete_sync(Request(operator.plan_messages(context()), seed=1, purpose="diagnose")).text
    try:
        plan = operator.parse_plan(reply)
    except EditError as error:  # a 135M model may answer with code only: refused with a reason
        assert "no plan" in str(error)
        return
    assert plan.strip() and len(plan) <= operator.limits.max_plan_chars + 40
    assert operator.messages(context(plan=plan))[2]["content"] == plan.strip()


# ---------------------------------------------------------------- self_modify


def test_self_modify_task_prompt_is_the_source_plus_the_failures() -> None:
    operator = SelfModifyOperator()
    assert operator.runs_agent and not operator.uses_fm and not operator.needs_second_parent
    prompt = operator.task_prompt(agent_context())
    assert prompt.startswith(AGENT.rstrip())
    tail = prompt[len(AGENT) :]
    assert "Rewrite this WHOLE module" in tail and "solve(task, llm) -> str" in tail
    assert "only the standard library, numpy and scipy" in tail and '"humaneval" (score: 0.25)' in tail
    assert "#   HumanEval/4: failed (NameError: x)" in tail
    assert "#   1. the edited agent.py is not valid Python" in tail
    ast.parse(prompt)  # the instructions are comments: the prompt is still a Python module
    long = agent_context(parent=ParentInfo(agent_id=5, genome=AGENT_GENOME, score=0.0, feedback="x\n" * 2000))
    assert "more lines not shown" in operator.task_prompt(long)
    quiet = operator.task_prompt(agent_context(parent=ParentInfo(5, AGENT_GENOME, 1.0, None), failed_attempts=()))
    assert "no failures" in quiet


def test_self_modify_apply_returned_module_fake_fm() -> None:
    operator = SelfModifyOperator()
    improved = AGENT.replace("VERSION = 1", "VERSION = 2")
    # Raw code whose own strings hold ``` fences, fenced code, and blocks are all accepted.
    assert operator.apply(AGENT_GENOME, improved).files["agent.py"] == improved
    plain = AGENT.replace('"Complete:\\n```python\\n" + ', "").replace(' + "```"', "").replace("1", "3")
    assert operator.apply(AGENT_GENOME, f"Here:\n```python\n{plain}```\n").files["agent.py"] == plain
    blocks = "<<<<<<< SEARCH\nVERSION = 1\n=======\nVERSION = 2\n>>>>>>> REPLACE\n"
    assert operator.apply(AGENT_GENOME, blocks).files["agent.py"] == improved
    # An agent that echoes its whole prompt: the task block is not kept in the child.
    echoed = operator.task_prompt(agent_context()).replace("VERSION = 1", "VERSION = 2")
    assert operator.apply(AGENT_GENOME, echoed).files["agent.py"] == improved


@pytest.mark.parametrize(
    ("returned", "reason"),
    [
        (None, "returned a NoneType, not the new module as a str"),
        ({"agent.py": AGENT}, "returned a dict"),
        ("  \n", "returned an empty string"),
        (AGENT.replace("def solve(task, llm):", "def answer(task, llm):"), "does not define solve"),
        (AGENT.replace("def solve(task, llm):", "def solve(task):"), "1 positional argument"),
        (AGENT.replace("VERSION = 1", "VERSION = (1"), "not valid Python"),
        (AGENT, "unchanged"),
    ],
)
def test_self_modify_refuses_bad_returns_fake_fm(returned: object, reason: str) -> None:
    with pytest.raises(EditError, match=reason):
        SelfModifyOperator().apply(AGENT_GENOME, returned)


def test_self_modify_runs_the_parent_agent_in_the_sandbox() -> None:
    # A scripted agent (no FM call) that returns its own source, taken from the prompt, improved.
    rewriter = """\
VERSION = 1


def solve(task, llm):
    source = task["prompt"].split("\\n# " + "-" * 10)[0]
    return source.replace("VERSION = " + "1", "VERSION = " + "2") + "\\n"
"""
    parent = Genome(files={"agent.py": rewriter}, entry="agent.py")
    bench = HumanEval(n_search=1, stage_sizes=[1], thresholds=[0.0], timeout_s=30.0)
    assert supports_self_modify(bench) and not supports_self_modify(CirclePacking())
    operator = SelfModifyOperator()
    prompt = operator.task_prompt(agent_context(parent=ParentInfo(agent_id=9, genome=parent, score=0.0, feedback=None)))
    task = bench.self_modify_task(prompt)
    assert (task.id, task.split, task.inputs["entry_point"], task.inputs["prompt"]) == (
        "self_modify",
        "search",
        "solve",
        prompt,
    )
    result = LocalSandbox().run(bench.run_spec(parent, task))
    outcome = read_outcome(result.files)
    assert outcome is not None and outcome.ok, result.stderr
    child = operator.apply(parent, outcome.value)
    assert child.files["agent.py"] == rewriter.replace("VERSION = 1", "VERSION = 2")


def test_ast_mutate_is_registered_as_a_local_operator() -> None:
    import numpy as np

    operator = make_operator("ast_mutate")
    assert isinstance(operator, AstMutation) and not operator.uses_fm and not operator.runs_agent
    child = operator.mutate(GENOME_A, np.random.default_rng(0))
    assert isinstance(child, Genome) and child.entry == "main.py"
