"""Scores that mean what they say: seeded task runs, repeated evaluations where a score varies, a new best
confirmed, and a child that changes no output (a no-op) scored as its parent. Real local sandbox and SQLite
archive; the children come from a scripted FM (exact programs are needed), so the tests say `_fake_fm`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from cambrian.archive.models import AgentStatus
from cambrian.archive.store import Archive
from cambrian.evaluators.base import FeedbackPolicy, Genome, Stage, Task, TaskScore
from cambrian.evaluators.feedback import run_failure
from cambrian.evaluators.harness import HarnessBenchmark
from cambrian.evaluators.harness.run_program import read_outcome
from cambrian.evaluators.runner import Limits, evaluate_agent
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.search import loop_from_config
from cambrian.meta_agent.testing import ScriptedFM
from cambrian.sandbox.base import RunResult
from cambrian.sandbox.local import LocalSandbox

STEADY = "# EVOLVE-BLOCK-START\nBASE = 1.0\n\n\ndef value(x):\n    return BASE * x\n# EVOLVE-BLOCK-END\n"
NOISY = (
    "import os\n\n# EVOLVE-BLOCK-START\nBASE = 1.0\n\n\ndef value(x):\n"
    "    return BASE * x + os.urandom(1)[0] / 2550\n# EVOLVE-BLOCK-END\n"
)
RANDOM = (
    "import numpy as np\nimport random\n\n\ndef value(x):\n"
    "    return x * np.random.default_rng().random() + random.random()\n"
)


class ValueBenchmark(HarnessBenchmark):
    """value(x) on x = 1, 2: the score is the mean of what it returns (a scored number, no answer to hide)."""

    name = "value"
    description = "value(x), scored as returned"
    contract = "def value(x) -> float: higher is better"
    entry_function = "value"

    def __init__(self, seed: str = STEADY) -> None:
        self.feedback_policy = FeedbackPolicy()
        self._seed = seed

        class Options:
            timeout_s = 20.0
            memory_mb = 512

        self.options = Options()

    def seed(self) -> Genome:
        return Genome(files={"v.py": self._seed}, entry="v.py")

    def tasks(self, split: str) -> Sequence[Task]:
        return [Task(id=f"x{x}", split=split, inputs={"x": x}) for x in (1, 2)] if split == "search" else []

    def stages(self) -> Sequence[Stage]:
        return []

    def score(self, task: Task, result: RunResult) -> TaskScore:
        failure = run_failure(result, self.feedback_policy, who="the program")
        if failure is not None:
            return failure
        outcome = read_outcome(result.files)
        assert outcome is not None
        return TaskScore(score=float(outcome.value), passed=True, executed=True, feedback=f"value {outcome.value}")

    def aggregate(self, scores: Sequence[TaskScore]) -> float:
        return sum(s.score for s in scores) / len(scores)


def test_a_program_drawing_random_numbers_scores_the_same_under_the_same_seed() -> None:
    benchmark, sandbox = ValueBenchmark(RANDOM), LocalSandbox()
    try:
        genome = benchmark.seed()
        first, again = (evaluate_agent(benchmark, genome, sandbox, limits=Limits(seed=3)) for _ in range(2))
        other = evaluate_agent(benchmark, genome, sandbox, limits=Limits(seed=4))
    finally:
        sandbox.close()
    assert first.valid and first.score == again.score
    assert [t.output_hash for t in first.task_results] == [t.output_hash for t in again.task_results]
    assert other.score != first.score  # another seed, other draws
    assert first.task_results[0].output_hash != first.task_results[1].output_hash  # each task its own seed


def run_search(tmp_path: Path, benchmark: ValueBenchmark, replies: list[str], **evaluation: object) -> Archive:
    config = RunConfig.model_validate(
        {
            "name": "t",
            "runs_dir": str(tmp_path),
            "budget": {"iterations": len(replies)},
            "search": {"strategy": "greedy", "operators": {"rewrite": 1.0}, "max_pending": 1},
            "fm": {"concurrency": 1, "repair_rounds": 0, "redraws": 0},
            "evaluation": {"concurrency": 1, **evaluation},
        }
    )
    archive = Archive.at(tmp_path / "archive.db")
    run = archive.create_run(name="t", benchmark="value", seed=0, config_json=config.to_json())
    loop = loop_from_config(
        archive=archive,
        run=run,
        config=config,
        benchmark=benchmark,
        sandbox=LocalSandbox(),
        llm=ScriptedFM(replies),
        model_label="scripted",
    )
    asyncio.run(loop.run_until_done())
    return archive


def fenced(code: str) -> str:
    return f"```python\n{code}```\n"


def test_a_seed_whose_score_varies_makes_every_agent_the_mean_of_three_evaluations_fake_fm(tmp_path: Path) -> None:
    better = NOISY.replace("BASE = 1.0", "BASE = 2.0")
    with run_search(tmp_path, ValueBenchmark(NOISY), [fenced(better)]) as archive:
        seed, child = archive.agents(1)
    assert seed.repeats == 3 and seed.score_spread is not None and seed.score_spread > 0
    assert child.status == AgentStatus.evaluated and child.repeats == 3 and child.score_spread is not None


def test_a_steady_program_is_evaluated_once_and_a_new_best_twice_fake_fm(tmp_path: Path) -> None:
    better = STEADY.replace("BASE = 1.0", "BASE = 2.0")
    worse = STEADY.replace("BASE = 1.0", "BASE = 0.5")
    with run_search(tmp_path, ValueBenchmark(), [fenced(worse), fenced(better)]) as archive:
        seed, low, high = archive.agents(1)
    assert (seed.repeats, seed.score_spread, seed.score) == (2, 0.0, 1.5)  # the probe: it does not vary
    assert (low.repeats, low.score_spread) == (1, None)  # below the best: one evaluation
    assert (high.repeats, high.score_spread, high.score) == (2, 0.0, 3.0)  # a new best, confirmed


def test_fixed_repeats_evaluate_every_agent_that_many_times_fake_fm(tmp_path: Path) -> None:
    with run_search(tmp_path, ValueBenchmark(), [fenced(STEADY.replace("1.0", "0.5"))], repeats=2) as archive:
        assert [agent.repeats for agent in archive.agents(1)] == [2, 2]


def test_a_child_that_changes_no_output_is_a_no_op_scored_as_its_parent_fake_fm(tmp_path: Path) -> None:
    dead_code = STEADY.replace("    return BASE * x", "    unused = [BASE] * 3\n    return BASE * x")
    better = STEADY.replace("BASE = 1.0", "BASE = 2.0")
    with run_search(tmp_path, ValueBenchmark(), [fenced(dead_code), fenced(better)]) as archive:
        seed, no_op, improved = archive.agents(1)
        view = archive.view(1)
    assert no_op.status == AgentStatus.evaluated and no_op.behaves_as == seed.key and no_op.score == seed.score
    assert improved.behaves_as is None and improved.score == 3.0
    assert no_op.key not in view.ids.tolist() and {seed.key, improved.key} == set(view.ids.tolist())
