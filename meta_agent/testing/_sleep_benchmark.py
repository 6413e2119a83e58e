"""`SleepBenchmark`: tasks that take a fixed time, for throughput benchmarks and executor tests.

Each task runs the agent's `agent.py TASK_ID SECONDS` in the sandbox; the seed sleeps SECONDS (so the
task's time is the sandbox's, not the CPU's: two cores do not cap how many run at once) and prints
`score 1.0`. A task's score is the last `score X` line the program printed (clipped to 0..1); a program
that exits non-zero or prints none did not execute. Stages: `stage_sizes` leading stages with
`thresholds`, then the rest (like HumanEval's staged plan). The agents' FM client `_cambrian_llm` is
placed beside the program, so an agent may call the FM through the gateway.
"""

from __future__ import annotations

from collections.abc import Sequence

from cambrian.evaluators.base import FeedbackPolicy, Genome, Stage, Task, TaskScore, staged_plan
from cambrian.evaluators.harness.llm_client import LLM_CLIENT_FILE, llm_client_text
from cambrian.sandbox.base import RunResult, RunSpec

SEED_AGENT = """import sys
import time

time.sleep(float(sys.argv[2]))
print("score 1.0")
"""

#: An agent that asks the FM once per task: `score 1.0` when answered, `score 0.5` when its budget refuses.
ASKS_FM_AGENT = """import sys
from _cambrian_llm import LLMBudgetExceeded, llm

try:
    print("fm said:", llm("hello from " + sys.argv[1], max_tokens=8))
    print("score 1.0")
except LLMBudgetExceeded:
    print("score 0.5")
"""


class SleepBenchmark:
    """`tasks` search tasks (and 2 holdout tasks) of `seconds` each; see the module doc.

    seconds: a task's sleep (>= 0); timeout_s: a task's limit; stage_sizes / thresholds: the staged plan.
    """

    name = "sleep"
    description = "tasks that sleep a fixed time (throughput benchmarks, executor tests)"
    contract = "agent.py TASK_ID SECONDS: print `score X` (0..1) as the last score line."

    def __init__(
        self,
        *,
        tasks: int = 8,
        seconds: float = 0.2,
        timeout_s: float = 30.0,
        stage_sizes: Sequence[int] = (),
        thresholds: Sequence[float] = (),
        feedback_policy: FeedbackPolicy | None = None,
    ) -> None:
        if tasks < 1 or seconds < 0:
            raise ValueError(f"need tasks >= 1 and seconds >= 0, got {tasks} and {seconds}")
        self.seconds = seconds
        self.timeout_s = timeout_s
        self.feedback_policy = feedback_policy or FeedbackPolicy()
        self._tasks = {
            "search": [Task(id=f"t{i}", split="search") for i in range(tasks)],
            "holdout": [Task(id=f"h{i}", split="holdout") for i in range(2)],
        }
        self._stages = staged_plan([t.id for t in self._tasks["search"]], stage_sizes, thresholds)

    def seed(self) -> Genome:
        return Genome(files={"agent.py": SEED_AGENT}, entry="agent.py")

    def tasks(self, split: str) -> Sequence[Task]:
        return self._tasks.get(split, [])

    def stages(self) -> Sequence[Stage]:
        return self._stages

    def run_spec(self, genome: Genome, task: Task) -> RunSpec:
        return RunSpec(
            files={**genome.files, LLM_CLIENT_FILE: llm_client_text()},
            # -S: no site-packages scan at start (~60 ms of CPU here): a task's time is its sleep, not the
            # interpreter's start-up. The agent needs only the standard library and `_cambrian_llm` beside it.
            command=("{python}", "-S", genome.entry, task.id, repr(self.seconds)),
            timeout_s=self.timeout_s,
            memory_mb=512,
        )

    def score(self, task: Task, result: RunResult) -> TaskScore:
        lines = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("score ")]
        try:
            value = float(lines[-1]) if lines and result.exit_code == 0 else None
        except ValueError:
            value = None
        if value is None:
            reason = result.failure_reason() or "printed no `score X` line"
            return TaskScore(score=0.0, passed=False, executed=False, feedback=f"{task.id}: {reason}")
        value = min(1.0, max(0.0, value))
        return TaskScore(score=value, passed=value >= 1.0, executed=True, feedback=f"{task.id}: score {value:g}")

    def aggregate(self, scores: Sequence[TaskScore]) -> float:
        return sum(s.score for s in scores) / len(scores) if scores else 0.0
