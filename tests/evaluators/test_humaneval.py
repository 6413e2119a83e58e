"""HumanEval: data, the fixed split, two-phase scoring in the real local sandbox, cheating agents, stages,
and the seed agent through the gateway to the real SmolLM2."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from cambrian.archive.store import Archive
from cambrian.evaluators.base import BenchmarkError, FeedbackPolicy, Genome, Task
from cambrian.evaluators.humaneval import HumanEval, assemble_program, load_problems, split_task_ids
from cambrian.evaluators.humaneval.check_driver import MAX_VALUE_CHARS, plain_text
from cambrian.evaluators.runner import AgentResult, evaluate_agent
from cambrian.meta_agent.llm import ArchiveLedger, LLMClient
from cambrian.meta_agent.llm.gateway import FMGateway
from cambrian.sandbox.base import RunResult
from cambrian.sandbox.local import LocalSandbox

STAGE_OPTIONS = {"n_search": 3, "stage_sizes": [3], "thresholds": [0.0], "timeout_s": 30.0}


def scripted_agent(solve_body: str, **constants: object) -> Genome:
    """An agent genome that never calls the FM: `solve` runs `solve_body` (constants are module globals)."""
    header = "".join(f"{name} = {value!r}\n" for name, value in constants.items())
    code = f"import glob, json, os, sys\n{header}\n\ndef solve(task, llm):\n{textwrap.indent(solve_body, '    ')}\n"
    return Genome(files={"agent.py": code}, entry="agent.py")


def answering(bench: HumanEval, code_by_id: dict[str, str]) -> Genome:
    """An agent that returns the given code for each task id (an empty answer for the others)."""
    return scripted_agent("return ANSWERS.get(task['task_id'], '')", ANSWERS=code_by_id)


def canonical(bench: HumanEval, task_id: str) -> str:
    problem = bench.problem(task_id)
    return problem.prompt + problem.canonical_solution


def evaluate(bench: HumanEval, genome: Genome) -> AgentResult:
    return evaluate_agent(bench, genome, LocalSandbox())


def test_data_has_164_problems() -> None:
    problems = load_problems()
    assert len(problems) == 164
    assert len({p.task_id for p in problems}) == 164
    assert problems[0].task_id == "HumanEval/0" and problems[0].entry_point == "has_close_elements"
    assert all("def check(candidate)" in p.test for p in problems)


def test_split_is_fixed_disjoint_and_stable_across_processes() -> None:
    first, second = HumanEval(), HumanEval()
    for split in ("search", "holdout"):
        assert [t.id for t in first.tasks(split)] == [t.id for t in second.tasks(split)]
    search = {t.id for t in first.tasks("search")}
    holdout = {t.id for t in first.tasks("holdout")}
    assert len(holdout) >= 40 and len(search) == 164 - len(holdout)
    assert not search & holdout
    # Another interpreter with another hash seed draws the same split.
    script = (
        "import json; from cambrian.evaluators.humaneval import HumanEval; b = HumanEval(); "
        "print(json.dumps([t.id for t in b.tasks('holdout')]))"
    )
    other = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "123"}
    )
    assert json.loads(other.stdout) == [t.id for t in first.tasks("holdout")]
    assert split_task_ids(["a", "b", "c"], n_holdout=1) == split_task_ids(["c", "b", "a"], n_holdout=1)


def test_agent_sees_only_prompt_and_entry_point() -> None:
    bench = HumanEval()
    task = bench.tasks("search")[0]
    problem = bench.problem(task.id)
    spec = bench.run_spec(bench.seed(), task)
    assert set(task.inputs) == {"task_id", "prompt", "entry_point"}
    assert not any("check" in name or "test" in name for name in spec.files)
    assert not any(problem.test in text or problem.canonical_solution in text for text in spec.files.values())
    assert json.loads(spec.files["task.json"])["llm"] is True


def test_canonical_solutions_pass_the_check_run() -> None:
    bench = HumanEval(**STAGE_OPTIONS)
    ids = [t.id for t in bench.tasks("search")]
    result = evaluate(bench, answering(bench, {tid: canonical(bench, tid) for tid in ids}))
    assert [t.passed for t in result.task_results] == [True, True, True], result.feedback
    assert result.score == 1.0
    assert all(t.feedback == f"{t.task_id}: passed" for t in result.task_results)


def test_full_definition_and_bare_body_are_both_accepted() -> None:
    bench = HumanEval(**STAGE_OPTIONS)
    first, second, third = [t.id for t in bench.tasks("search")]
    body_only = bench.problem(first).canonical_solution
    full = canonical(bench, second)  # the prompt plus the body: a full definition
    result = evaluate(bench, answering(bench, {first: body_only, second: full, third: "   "}))
    assert [t.passed for t in result.task_results] == [True, True, False]
    assert "returned an empty string" in result.task_results[2].feedback
    assert not result.task_results[2].executed


def wrong_answers(bench: HumanEval, first: str, second: str) -> dict[str, str]:
    """A wrong constant for `first`, a ZeroDivisionError for `second`."""
    return {
        first: f"def {bench.problem(first).entry_point}(*args, **kwargs):\n    return 12345\n",
        second: f"def {bench.problem(second).entry_point}(*args, **kwargs):\n    return 1 / 0\n",
    }


def test_search_failure_names_the_failing_case() -> None:
    bench = HumanEval(**STAGE_OPTIONS)
    first, second, _ = [t.id for t in bench.tasks("search")]
    result = evaluate(bench, answering(bench, wrong_answers(bench, first, second)))
    wrong, raising = result.task_results[0], result.task_results[1]
    assert not wrong.passed and wrong.executed
    # The failing assertion, the call's input, what it returned and what was expected.
    lines = wrong.feedback.splitlines()
    assert lines[0] == f"{first}: failed (AssertionError)"
    assert lines[1].startswith("failing check: assert candidate(")
    assert lines[1][len("failing check: ") :] in " ".join(bench.problem(first).test.split())
    assert lines[2].startswith("last call: candidate(") and lines[2].endswith(") returned 12345")
    assert lines[3].startswith("expected: ") and "12345" not in lines[3]
    # The exception with its message, and the input that raised it.
    lines = raising.feedback.splitlines()
    assert lines[0] == f"{second}: failed (the code raised: ZeroDivisionError: division by zero)"
    assert lines[1].startswith("failing check: assert candidate(")
    assert lines[2].startswith("last call: candidate(") and lines[2].endswith(") raised ZeroDivisionError")
    assert len(wrong.feedback) < 800 and len(raising.feedback) < 800
    for feedback in (wrong.feedback, raising.feedback):  # never the reference solution
        assert bench.problem(first).canonical_solution.strip() not in feedback


def test_failing_case_values_and_errors_from_the_real_check_run() -> None:
    bench = HumanEval()
    sandbox = LocalSandbox()

    def verdict(task_id: str, code: str, *, split: str = "search") -> str:
        task = Task(id=task_id, split=split, inputs={})
        agent_run = answering_result(code)
        check = sandbox.run(bench.check_spec(task, agent_run))
        return bench.score(task, agent_run, check=check).feedback

    # A test inside a loop: the values come from the call that failed, not from the test's text.
    feedback = verdict("HumanEval/38", "def decode_cyclic(s):\n    return s\n")
    assert "failing check: assert candidate(encoded_str) == str" in feedback
    call = re.search(r"last call: candidate\('([a-z]+)'\) returned '([a-z]+)'", feedback)
    expected = re.search(r"expected: '([a-z]+)'", feedback)
    assert call and expected and call[1] == call[2] != expected[1]
    # An error of the tests' own code (the solution returned None): the statement, the call, the message.
    feedback = verdict("HumanEval/2", "def truncate_number(number):\n    return 0.5 if number == 3.5 else None\n")
    assert feedback.splitlines()[1:] == [
        "failing check: assert abs(candidate(1.33) - 0.33) < 1e-6",
        "last call: candidate(1.33) returned None",
        "error: TypeError: unsupported operand type(s) for -: 'NoneType' and 'float'",
    ]
    # The solution's own objects never reach the check: only plain data crosses from its process.
    code = "class S(str):\n    def __repr__(self):\n        raise SystemExit('no')\n\n"
    code += "def longest(strings):\n    return S('z')\n"
    feedback = verdict("HumanEval/12", code)
    assert "NotPlainData" in feedback and "solution.S" in feedback, feedback
    assert "last call: candidate([]) raised NotPlainData" in feedback
    # The helpers a test calls come from the prompt (HumanEval/32's poly): a correct answer passes.
    problem = bench.problem("HumanEval/32")
    assert verdict("HumanEval/32", problem.prompt + problem.canonical_solution) == "HumanEval/32: passed"


def test_plain_text_writes_builtin_values_and_names_other_objects() -> None:
    class Loud(list):
        def __repr__(self) -> str:
            raise AssertionError("a value's own __repr__ must not run")

    assert plain_text([1, (2,), {"a": None}, 2.5, b"x", True]) == "[1, (2,), {'a': None}, 2.5, b'x', True]"
    assert plain_text(set()) == "set()" and plain_text(frozenset({3})) == "frozenset({3})"
    assert plain_text(list(range(20))) == "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ...]"
    assert plain_text(Loud([1])).endswith("Loud object>") and plain_text([Loud()]).startswith("[<")
    assert plain_text(10**2000) == "<int of 6644 bits>"
    assert len(plain_text("x" * 10_000)) == MAX_VALUE_CHARS and plain_text("x" * 10_000).endswith("...")
    assert len(plain_text([[[["deep"] * 50] * 50] * 50])) <= MAX_VALUE_CHARS


def answering_result(code: str) -> RunResult:
    """The agent run of an agent that returned `code` (for check runs without the agent's own run)."""
    payload = json.dumps({"ok": True, "value": code, "seconds": 0.01})
    return RunResult(exit_code=0, stdout="", stderr="", duration_s=0.1, files={"result.json": payload})


def test_holdout_failure_shows_no_test_case_or_value() -> None:
    bench = HumanEval(n_holdout=2, timeout_s=30.0)
    first, second = [t.id for t in bench.tasks("holdout")]
    # The check runs of the holdout split do not even describe a failing case.
    for task in bench.tasks("holdout"):
        spec = bench.check_spec(task, answering_result("def f():\n    pass\n"))
        assert spec is not None and "REPORT_CASES = False" in spec.files["_check.py"]
    genome = answering(bench, wrong_answers(bench, first, second))
    result = evaluate_agent(bench, genome, LocalSandbox(), split="holdout")
    wrong, raising = result.task_results
    assert wrong.feedback == f"{first}: failed (AssertionError)"
    assert raising.feedback == f"{second}: failed (ZeroDivisionError)"
    for task_id, feedback in ((first, wrong.feedback), (second, raising.feedback)):
        problem = bench.problem(task_id)
        test_lines = [line.strip() for line in problem.test.splitlines() if len(line.strip()) > 12]
        assert not any(line in feedback for line in test_lines)
        assert "candidate" not in feedback and "assert" not in feedback and "expected" not in feedback


def test_feedback_policy_without_messages_hides_the_case() -> None:
    bench = HumanEval(
        feedback_policy=FeedbackPolicy(error_message=False), **{**STAGE_OPTIONS, "n_search": 2, "stage_sizes": [2]}
    )
    first, second = [t.id for t in bench.tasks("search")]
    result = evaluate(bench, answering(bench, wrong_answers(bench, first, second)))
    assert [t.feedback for t in result.task_results] == [
        f"{first}: failed (AssertionError)",
        f"{second}: failed (the code raised: ZeroDivisionError)",
    ]


CHEATS = {
    # (a) leaves the check run at import, before any test ran
    "exits": "import sys\nsys.exit(0)\n",
    "hard_exits": "import os\nos._exit(0)\n",
    # (b) claims a pass: prints it and writes its own verdict, then leaves
    "forges": (
        "import json, os\nprint('PASS')\n"
        "json.dump({'passed': True, 'nonce': 'guess', 'salt': 'x'}, open('result.json', 'w'))\nos._exit(0)\n"
    ),
    # (d) rewrites the check driver and patches what the driver and tests use
    "rewrites": (
        "import builtins, sys\nopen('_check.py', 'w').write('print(\"PASS\")')\n"
        "main = sys.modules['__main__']\nmain._failure = lambda *a: {'passed': True}\n"
        "builtins.compile = lambda *a, **k: compile_('def check(c): pass', 'x', 'exec')\n"
        "compile_ = compile\n"
    ),
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_cheating_solutions_do_not_score(cheat: str) -> None:
    bench = HumanEval(**{**STAGE_OPTIONS, "n_search": 1, "stage_sizes": [1]})
    [task] = bench.tasks("search")
    entry = bench.problem(task.id).entry_point
    code = CHEATS[cheat] + f"\ndef {entry}(*args, **kwargs):\n    return None\n"
    result = evaluate(bench, answering(bench, {task.id: code}))
    [run] = result.task_results
    assert not run.passed and result.score == 0.0, run.feedback
    assert run.executed  # it returned code; the code failed the check


def test_agent_that_hunts_for_the_tests_finds_nothing_and_cannot_plant_any() -> None:
    bench = HumanEval(**{**STAGE_OPTIONS, "n_search": 1, "stage_sizes": [1]})
    [task] = bench.tasks("search")
    hunt = """
found = [p for p in glob.glob('**/*', recursive=True) if 'test' in p or 'check' in p]
found += [p for p in glob.glob('**/*', recursive=True)
          if os.path.isfile(p) and 'def check' + '(candidate)' in open(p, errors='replace').read()]
print('found:', found)
# (d) plant a passing check and a verdict where the tests would be
open('_check.py', 'w').write('print("PASS")')
json.dump({'passed': True, 'nonce': 'x', 'salt': 'y'}, open('result.json.planted', 'w'))
return 'def ' + task['entry_point'] + '(*a, **k):\\n    return None\\n'
"""
    result = evaluate(bench, scripted_agent(hunt.strip()))
    [run] = result.task_results
    assert "found: []" in run.stdout_tail
    assert run.executed and not run.passed


def test_crashing_agent_is_not_executed_and_shows_its_error_per_policy() -> None:
    bench = HumanEval(**{**STAGE_OPTIONS, "n_search": 1, "stage_sizes": [1]})
    result = evaluate(bench, scripted_agent("return task['no_such_key']"))
    assert not result.valid
    assert result.task_results[0].feedback == "agent crashed: KeyError: 'no_such_key'"
    bench = HumanEval(
        feedback_policy=FeedbackPolicy(error_message=False, traceback=True),
        **{**STAGE_OPTIONS, "n_search": 1, "stage_sizes": [1]},
    )
    result = evaluate(bench, scripted_agent("return task['no_such_key']"))
    feedback = result.task_results[0].feedback
    assert feedback.startswith("agent crashed: KeyError\n") and "agent.py" in feedback
    assert "'no_such_key'" in feedback  # the traceback's own line; the message alone is hidden


def test_staged_evaluation_stops_a_weak_agent_after_stage_one() -> None:
    bench = HumanEval(n_search=6, stage_sizes=[2], thresholds=[0.6], timeout_s=30.0)
    stage_one = list(bench.stages()[0].task_ids)
    assert len(bench.stages()) == 2 and len(bench.stages()[1].task_ids) == 4
    result = evaluate(bench, answering(bench, {stage_one[0]: canonical(bench, stage_one[0])}))
    assert result.stage_reached == 0
    assert [t.task_id for t in result.task_results] == stage_one
    assert result.ran_score == 0.5  # what it earned on what it ran
    assert result.score == pytest.approx(1 / 6)  # like with like: the 4 unrun tasks count as 0


def test_options_are_validated() -> None:
    with pytest.raises(BenchmarkError) as info:
        HumanEval.from_options({"stage_sizes": [5, 20], "thresholds": [0.2]})
    assert "thresholds" in str(info.value) and info.value.fix
    with pytest.raises(BenchmarkError):
        HumanEval.from_options({"n_serach": 3})
    with pytest.raises(BenchmarkError):
        FeedbackPolicy.from_options({"traceback": "yes"})
    assert FeedbackPolicy.from_options({"max_chars": 100}).max_chars == 100


def test_assemble_program() -> None:
    prompt = 'from typing import List\n\ndef f(x: List[int]) -> int:\n    """Doc."""\n'
    assert assemble_program(prompt, "f", "    return 1\n") == prompt + "    return 1\n"
    full = assemble_program(prompt, "f", "def f(x):\n    return 2\n")
    assert full.startswith(prompt.rstrip()) and full.endswith("def f(x):\n    return 2\n")


@pytest.mark.slow
def test_seed_agent_runs_through_the_gateway_on_the_real_model(tmp_path: Path, local_fm) -> None:
    bench = HumanEval(n_search=2, stage_sizes=[2], thresholds=[0.0], timeout_s=240.0)
    archive = Archive.at(tmp_path / "archive.db")
    run = archive.create_run(name="he", benchmark="humaneval", seed=0, config_json="{}")
    seed = bench.seed()
    agent = archive.add_agent(int(run.id), files=dict(seed.files), entry=seed.entry)
    fm = LLMClient(local_fm.endpoint(), ledger=ArchiveLedger(archive, int(run.id)), max_tokens=256)
    socket_dir = Path(tempfile.mkdtemp(prefix="che-", dir="/tmp"))

    async def evaluate_seed() -> AgentResult:
        async with FMGateway(fm, socket_dir=socket_dir) as gateway:
            channel = await gateway.open_agent(int(agent.id), max_calls=4, max_tokens=4000, run_seed=0, iteration=0)
            try:
                env = channel.env(str(channel.socket_path))
                return await asyncio.to_thread(evaluate_agent, bench, seed, LocalSandbox(), env=env)
            finally:
                await channel.close()

    try:
        result = asyncio.run(evaluate_seed())
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)
    assert len(result.task_results) == 2
    assert all(t.executed for t in result.task_results), result.feedback  # returned code, crashed nowhere
    assert all(t.feedback.startswith(f"{t.task_id}: ") for t in result.task_results)
    calls = [c for c in archive.llm_calls(int(run.id)) if c.purpose == "agent"]
    assert len(calls) == 2 and all(c.agent_id == agent.id and c.error is None for c in calls)


SEED_SAMPLES_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import agent
agent.SAMPLES = int(sys.argv[2])
replies = iter(json.loads(sys.argv[3]))
asked = []
def llm(messages, max_tokens=None, temperature=None, seed=None):
    asked.append([temperature, seed])
    return next(replies)
task = {"task_id": "T/0", "entry_point": "add",
        "prompt": 'def add(a, b):\\n    \\"\\"\\"Sum.\\n    >>> add(2, 3)\\n    5\\n    \\"\\"\\"\\n'}
print(json.dumps({"code": agent.solve(task, llm), "asked": asked}))
"""


@pytest.mark.parametrize(
    ("samples", "expected_code", "expected_calls"),
    [
        (1, "return a - b", [[0.0, 0]]),  # the seed as shipped: one greedy answer, kept unchecked
        (3, "return a + b", [[0.0, 0], [0.8, 1]]),  # stops at the first answer passing the docstring's example
    ],
)
def test_seed_agent_samples_until_an_answer_passes_the_docstring_examples_scripted_fm(
    tmp_path: Path, samples: int, expected_code: str, expected_calls: list[list[float]]
) -> None:
    # A scripted FM (exact replies): the seed's files in a folder, imported as the harness does.
    seed = HumanEval().seed()
    for name, text in seed.files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    replies = [f"```python\ndef add(a, b):\n    {body}\n```" for body in ("return a - b", "return a + b", "return 0")]
    done = subprocess.run(
        [sys.executable, "-c", SEED_SAMPLES_SCRIPT, str(tmp_path), str(samples), json.dumps(replies)],
        capture_output=True,
        text=True,
        check=True,
    )
    answer = json.loads(done.stdout)
    assert expected_code in answer["code"]
    assert answer["asked"] == expected_calls
