"""`arc` (agent level): an agent that calls the FM solves ARC-AGI-1 tasks; exact match of the test grid scores.

The agent's genome has `agent.py` with `solve(task: dict, llm) -> str`. It runs
in the sandbox through the stdlib harness with the FM client `llm` (which
reaches the run's model through the gateway socket). It sees the task's
demonstration pairs and ONE test input, never the test output:

    task = {"train": [{"input": grid, "output": grid}, ...], "test_input": grid}

and returns its predicted output grid as a JSON string, e.g. "[[0, 1], [1, 0]]".
The host parses the string (plain JSON, else the last fenced block, else the
last JSON array of arrays in the text; a list of lists returned directly is
accepted as is) and compares it with the answer, which never enters the
sandbox: exact match 1.0, anything else 0.0.

Split: a fixed, seeded choice of `n_search` and `n_holdout` disjoint ARC
tasks of the chosen subset; an ARC task with several test inputs gives one
Task per test input ("<id>-<k>"). Stages: the first `stage_sizes` tasks of
the search split, then the rest, each continuing only at `thresholds`.

Feedback (public, never the expected grid nor its shape): "correct",
"wrong", "unparseable: <why>", or, when the agent produced nothing, what
happened (crash, timeout) as the run's FeedbackPolicy allows. An unparseable
reply counts as a run that executed (the agent ran; its answer was bad); a
crash, a timeout or a return value that is neither a str nor a grid does not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cambrian.evaluators.arc.common import ArcBenchmarkBase
from cambrian.evaluators.arc.data import ArcTask, Grid, GridError, Subset, check_grid, load_arc1, split_task_ids
from cambrian.evaluators.base import FeedbackPolicy, Stage, Task, TaskScore, check_stage_options, staged_plan
from cambrian.evaluators.base import parse_options as parse_benchmark_options
from cambrian.evaluators.feedback import not_executed, run_failure
from cambrian.evaluators.harness.run_program import read_outcome
from cambrian.sandbox.base import RunResult

FUNCTION = "solve"
SEED_ENTRY = "agent.py"
_FENCE = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.DOTALL)
_ARRAY_OF_ARRAYS = re.compile(r"\[(?=\s*\[)")  # a lookahead, so "[[[" yields every start


class ArcOptions(BaseModel):
    """Options of the `arc` benchmark (unknown keys are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subset: Subset = Field("training", description="ARC-AGI-1 subset the split draws from (400 tasks each)")
    n_search: int = Field(40, ge=1, le=400, description="ARC tasks in the search split")
    n_holdout: int = Field(20, ge=0, le=399, description="ARC tasks in the holdout split")
    split_seed: int = Field(0, description="seed of the fixed search/holdout split")
    stage_sizes: tuple[int, ...] = Field((5,), description="tasks in each leading stage; the rest form the last")
    thresholds: tuple[float, ...] = Field((0.2,), description="mean score (0..1) to pass each leading stage")
    timeout_s: float = Field(600.0, gt=0, le=7200, description="wall-clock limit of one agent run, seconds")
    memory_mb: int = Field(512, ge=64, le=65536, description="memory limit of one agent run, MiB")

    @model_validator(mode="after")
    def _stages_fit(self) -> ArcOptions:
        check_stage_options(self.stage_sizes, self.thresholds)
        if self.n_search + self.n_holdout > 400:
            raise ValueError(f"n_search + n_holdout = {self.n_search + self.n_holdout} exceeds the 400 tasks")
        return self


def parse_arc_options(options: Mapping[str, Any] | None) -> ArcOptions:
    """Validate `options`; BenchmarkError names the bad key or value."""
    return parse_benchmark_options(
        ArcOptions, options, benchmark="arc", hint="n_search + n_holdout <= 400, one threshold in 0..1 per stage size"
    )


def parse_grid_reply(reply: str) -> Grid:
    """The grid in an agent's reply: the whole text as JSON, else the last fenced block, else the last
    JSON array of arrays in it. GridError says why none was found (a public phrase)."""
    text = reply.strip()
    if not text:
        raise GridError("the reply is empty")
    candidates = [text] + [block.strip() for block in reversed(_FENCE.findall(text))]
    for candidate in candidates:
        try:
            return check_grid(json.loads(candidate))
        except (ValueError, GridError):
            continue
    first_problem = ""
    decoder = json.JSONDecoder()
    for match in reversed(list(_ARRAY_OF_ARRAYS.finditer(text))):
        try:
            value, _ = decoder.raw_decode(text, match.start())
            return check_grid(value)
        except GridError as exc:
            first_problem = first_problem or str(exc)
        except ValueError:
            first_problem = first_problem or "the last [[ ... ]] in the reply is not valid JSON"
    if first_problem:
        raise GridError(f"no valid grid in the reply ({first_problem})")
    raise GridError("no JSON grid (a list of lists of ints 0..9) in the reply")


class ArcAgentBenchmark(ArcBenchmarkBase):
    """ARC-AGI-1 solved by an FM-calling agent; score = fraction of test grids predicted exactly (0..1)."""

    name = "arc"
    entry_function = FUNCTION  # what the harness calls; the static check keeps it callable
    agent_calls_fm = True  # the harness passes the agent its FM client
    SEED_ENTRY = SEED_ENTRY
    description = "ARC-AGI-1: an agent that calls the FM predicts each task's test grid (exact match scores)."

    def __init__(self, options: ArcOptions | None = None, *, feedback_policy: FeedbackPolicy | None = None) -> None:
        self.options = options or ArcOptions()
        self.feedback_policy = feedback_policy or FeedbackPolicy()
        arc = load_arc1(self.options.subset)
        search_ids, holdout_ids = split_task_ids(
            list(arc), n_search=self.options.n_search, n_holdout=self.options.n_holdout, seed=self.options.split_seed
        )
        # Answers stay here, on the host; Task.inputs carry only what the agent may see.
        self._answers: dict[str, Grid] = {}
        self._tasks = {
            "search": self._make_tasks([arc[i] for i in search_ids], "search"),
            "holdout": self._make_tasks([arc[i] for i in holdout_ids], "holdout"),
        }
        self.contract = _contract(self.options)

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any] | None = None, *, feedback_policy: FeedbackPolicy | None = None
    ) -> ArcAgentBenchmark:
        """Build from a user's option mapping and the run's feedback policy; BenchmarkError names an unknown key
        or bad value."""
        return cls(parse_arc_options(options), feedback_policy=feedback_policy)

    def stages(self) -> Sequence[Stage]:
        """Leading stages of `stage_sizes` tasks, then the rest (see evaluators.base.staged_plan)."""
        ids = [task.id for task in self._tasks["search"]]
        return staged_plan(ids, self.options.stage_sizes, self.options.thresholds)

    def score(self, task: Task, result: RunResult, *, check: RunResult | None = None) -> TaskScore:
        """1.0 when the returned grid equals the answer exactly, else 0.0 (`check` is unused: no check run)."""
        policy = self.feedback_policy
        failure = run_failure(result, policy, who="the agent")
        if failure is not None:
            return failure
        outcome = read_outcome(result.files)
        value = outcome.value if outcome is not None else None
        if isinstance(value, list):
            try:
                predicted = check_grid(value)
            except GridError as exc:
                return _scored(0.0, f"unparseable: the returned list is not a grid ({exc})", policy)
        elif isinstance(value, str):
            try:
                predicted = parse_grid_reply(value)
            except GridError as exc:
                return _scored(0.0, f"unparseable: {exc}", policy)
        else:
            return not_executed(f"solve returned a {type(value).__name__}, expected a str (a JSON grid)", policy)
        if predicted == self._answers[task.id]:
            return _scored(1.0, "correct", policy)
        return _scored(0.0, "wrong", policy)

    def aggregate(self, scores: Sequence[TaskScore]) -> float:
        """Fraction of tasks solved exactly, 0..1; 0.0 for no tasks."""
        return sum(s.score for s in scores) / len(scores) if scores else 0.0

    def _make_tasks(self, arc_tasks: Sequence[ArcTask], split: str) -> list[Task]:
        tasks = []
        for arc_task in arc_tasks:
            train = [{"input": pair.input, "output": pair.output} for pair in arc_task.train]
            for index, pair in enumerate(arc_task.test):
                task_id = arc_task.id if len(arc_task.test) == 1 else f"{arc_task.id}-{index}"
                self._answers[task_id] = pair.output
                tasks.append(Task(id=task_id, split=split, inputs={"task": {"train": train, "test_input": pair.input}}))
        return tasks


def _scored(score: float, feedback: str, policy: FeedbackPolicy) -> TaskScore:
    return TaskScore(score=score, passed=score == 1.0, executed=True, feedback=policy.clip(feedback))


def _contract(options: ArcOptions) -> str:
    return (
        f"Write `def {FUNCTION}(task: dict, llm) -> str` in agent.py. It is called once per ARC puzzle with\n"
        '  task = {"train": [{"input": grid, "output": grid}, ...], "test_input": grid}\n'
        "where a grid is a list of rows of ints 0..9 (colours), e.g. [[0, 7, 7], [7, 7, 7], [0, 7, 7]], "
        "1..30 rows and columns. The train pairs demonstrate one hidden rule; apply it to test_input.\n"
        "`llm` asks the run's foundation model: `llm(prompt_or_messages, temperature=None, max_tokens=None, "
        "seed=None) -> str`, where messages are [{'role': 'system'|'user'|'assistant', 'content': str}]. "
        "It raises an exception when this puzzle's FM call or token budget is used up. Context is limited "
        "(about 8k tokens on a local model): keep prompts compact.\n"
        "Return the predicted output grid as a JSON string, e.g. '[[1, 0], [0, 1]]'. The scorer also accepts a "
        "reply with text around it (it takes the last ```fenced``` block, else the last [[...]] array).\n"
        "Example:\n"
        "    import json\n"
        "    def solve(task, llm):\n"
        "        shown = '\\n'.join(f'in {p[\"input\"]} -> out {p[\"output\"]}' for p in task['train'])\n"
        "        reply = llm(f'{shown}\\nin {task[\"test_input\"]} -> out? Answer with JSON only.', max_tokens=1024)\n"
        "        return reply\n"
        "Score: 1 for an exact match of the whole grid (shape and every cell), else 0; the agent's score is the "
        "fraction of puzzles solved. Feedback says only correct, wrong, unparseable (why), or the crash: the "
        "expected grid is never shown.\n"
        "Environment: Python 3 with the standard library plus numpy and scipy (both installed); no network "
        f"except `llm`; {options.timeout_s:g} s wall clock and {options.memory_mb} MiB of memory per puzzle. "
        "Printed output is kept only as a log."
    )
