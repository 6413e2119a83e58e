"""The ARC-AGI-1 benchmarks: data, splits, stages, host-side scoring, and runs through the real local sandbox."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from cambrian.archive.models import AgentStatus, RunStatus
from cambrian.archive.store import Archive
from cambrian.evaluators.arc import (
    ArcAgentBenchmark,
    ArcOptions,
    ArcProgramBenchmark,
    GridError,
    load_arc1,
    parse_grid_reply,
    split_task_ids,
)
from cambrian.evaluators.arc.agent_benchmark import parse_arc_options
from cambrian.evaluators.arc.program_benchmark import parse_program_options
from cambrian.evaluators.base import BenchmarkError, FeedbackPolicy, Genome, Task
from cambrian.evaluators.harness.run_program import TASK_FILE
from cambrian.evaluators.registry import benchmark_names
from cambrian.evaluators.runner import evaluate_agent
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.search import loop_from_config
from cambrian.meta_agent.testing import ScriptedFM
from cambrian.sandbox.local import LocalSandbox
from tests.conftest import SHORT_REPLIES

SEED_AGENT = Path(__file__).resolve().parents[2] / "evaluators" / "arc" / "seed" / "agent.py"

# a5313dff fills the cells a colour-2 outline encloses with colour 1; cells reached from the border stay.
FLOOD_FILL = """
def transform(grid):
    rows, columns = len(grid), len(grid[0])
    outside = set()
    stack = [(r, c) for r in range(rows) for c in range(columns)
             if (r in (0, rows - 1) or c in (0, columns - 1)) and grid[r][c] == 0]
    while stack:
        r, c = stack.pop()
        if (r, c) in outside or not (0 <= r < rows and 0 <= c < columns) or grid[r][c] != 0:
            continue
        outside.add((r, c))
        stack += [(r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)]
    return [[1 if grid[r][c] == 0 and (r, c) not in outside else grid[r][c] for c in range(columns)]
            for r in range(rows)]
"""
CRASH = "def transform(grid):\n    return grid[99]\n"
ALL_ONES = "def transform(grid):\n    return [[1 for _ in row] for row in grid]\n"


def small_arc(**options: object) -> ArcAgentBenchmark:
    return ArcAgentBenchmark(ArcOptions(**{"n_search": 6, "n_holdout": 4, **options}))


def agent_returning(text_expression: str) -> Genome:
    """An agent-level genome whose solve(task, llm) returns `text_expression` without calling the FM."""
    code = f"import json\n\n\ndef solve(task, llm):\n    return {text_expression}\n"
    return Genome(files={"agent.py": code}, entry="agent.py")


def run_agent(bench: ArcAgentBenchmark, genome: Genome, task: Task):
    return bench.score(task, LocalSandbox().run(bench.run_spec(genome, task)))


# ---- data and splits ----


def test_arc1_data_loads_400_training_and_400_evaluation_tasks() -> None:
    training = load_arc1("training")
    assert len(training) == 400 and len(load_arc1("evaluation")) == 400
    task = training["a5313dff"]
    assert len(task.train) == 3 and len(task.test) == 1
    assert all(pair.input and pair.output for t in training.values() for pair in t.train + t.test)


def test_split_is_stable_disjoint_and_seeded() -> None:
    first, again = ArcAgentBenchmark(), ArcAgentBenchmark()
    ids = {split: [t.id for t in first.tasks(split)] for split in ("search", "holdout")}
    assert ids == {split: [t.id for t in again.tasks(split)] for split in ("search", "holdout")}
    base = lambda task_id: task_id.split("-")[0]  # noqa: E731 - "<arc id>-<k>" for several test inputs
    search, holdout = {base(i) for i in ids["search"]}, {base(i) for i in ids["holdout"]}
    assert (len(search), len(holdout)) == (40, 20) and not search & holdout
    # The split ignores the order ids come in, and another seed gives another split.
    training = list(load_arc1("training"))
    assert split_task_ids(training, n_search=40, n_holdout=20) == split_task_ids(
        list(reversed(training)), n_search=40, n_holdout=20
    )
    assert split_task_ids(training, n_search=40, n_holdout=20, seed=1)[0] != sorted(search)
    assert set(split_task_ids(training, n_search=40, n_holdout=20)[0]) == search


def test_stages_default_and_configured() -> None:
    bench = ArcAgentBenchmark()
    first, rest = bench.stages()
    assert (len(first.task_ids), first.threshold) == (5, 0.2)
    assert rest.threshold is None and len(first.task_ids) + len(rest.task_ids) == len(bench.tasks("search"))
    custom = small_arc(n_search=10, stage_sizes=(2, 3), thresholds=(0.5, 0.1))
    assert [(len(s.task_ids), s.threshold) for s in custom.stages()][:2] == [(2, 0.5), (3, 0.1)]
    # Stages that would run past the search tasks are cut; the last stage gates nothing.
    tiny = small_arc(n_search=3, stage_sizes=(5,), thresholds=(0.2,))
    assert [s.threshold for s in tiny.stages()] == [None]


@pytest.mark.parametrize(
    "options, named",
    [
        ({"stage_sizes": [5, 10], "thresholds": [0.2]}, "thresholds"),
        ({"n_search": 300, "n_holdout": 200}, "400"),
        ({"bogus": 1}, "bogus"),
        ({"thresholds": [1.5]}, "0..1"),
    ],
)
def test_bad_arc_options_name_the_problem_and_fix(options: dict, named: str) -> None:
    with pytest.raises(BenchmarkError, match=named) as caught:
        parse_arc_options(options)
    assert "n_search" in caught.value.fix


def test_bad_arc_program_task_id() -> None:
    with pytest.raises(BenchmarkError, match="not an ARC task id") as caught:
        parse_program_options({"task": "../etc"})
    assert "a5313dff" in caught.value.fix
    with pytest.raises(BenchmarkError, match="no ARC-AGI-1 task"):
        ArcProgramBenchmark.from_options({"task": "00000000"})


# ---- arc (agent level): what the agent sees, how replies score ----


def test_answer_never_enters_the_agents_run_spec() -> None:
    bench = ArcAgentBenchmark()
    arc = load_arc1("training")
    seed = bench.seed()
    checked = 0
    for split in ("search", "holdout"):
        for task in bench.tasks(split):
            files = bench.run_spec(seed, task).files
            sent = json.loads(files[TASK_FILE])
            assert sent["llm"] is True and sent["function"] == "solve"
            assert set(sent["kwargs"]["task"]) == {"train", "test_input"}
            answer = bench._answers[task.id]
            visible = [p["output"] for p in sent["kwargs"]["task"]["train"]] + [sent["kwargs"]["task"]["test_input"]]
            arc_id = task.id.split("-")[0]
            assert sent["kwargs"]["task"]["train"] == [
                {"input": p.input, "output": p.output} for p in arc[arc_id].train
            ]
            if answer not in visible and len(answer) * len(answer[0]) >= 4:
                assert all(json.dumps(answer) not in text for text in files.values())
                checked += 1
    assert checked >= 50


def test_arc_scores_exact_wrong_unparseable_and_crash() -> None:
    bench = small_arc()
    task = bench.tasks("search")[0]
    answer = bench._answers[task.id]
    wrong = [[(cell + 1) % 10 for cell in row] for row in answer]

    exact = run_agent(bench, agent_returning(repr(json.dumps(answer))), task)
    assert (exact.score, exact.passed, exact.executed, exact.feedback) == (1.0, True, True, "correct")
    chatty = run_agent(bench, agent_returning(repr(f"Sure!\n```json\n{json.dumps(answer)}\n```\nDone.")), task)
    assert chatty.score == 1.0
    direct = run_agent(bench, agent_returning(repr(answer)), task)  # a list returned as is also counts
    assert direct.score == 1.0

    missed = run_agent(bench, agent_returning(repr(json.dumps(wrong))), task)
    assert (missed.score, missed.passed, missed.executed, missed.feedback) == (0.0, False, True, "wrong")

    garbled = run_agent(bench, agent_returning("'I think the answer is blue.'"), task)
    assert garbled.score == 0.0 and garbled.executed
    assert garbled.feedback.startswith("unparseable: ") and "no JSON grid" in garbled.feedback

    crashed = run_agent(bench, agent_returning("task['test_output']"), task)
    assert (crashed.score, crashed.executed) == (0.0, False)
    assert crashed.feedback == "the agent crashed: KeyError: 'test_output'"
    for score in (missed, garbled, crashed):
        assert json.dumps(answer) not in score.feedback


def test_feedback_policy_hides_the_error_message() -> None:
    bench = ArcAgentBenchmark(ArcOptions(n_search=6, n_holdout=4), feedback_policy=FeedbackPolicy(error_message=False))
    crashed = run_agent(bench, agent_returning("task['secret_key_name']"), bench.tasks("search")[0])
    assert crashed.feedback == "the agent crashed: KeyError"


@pytest.mark.parametrize(
    "reply, grid",
    [
        ("[[1, 2], [3, 4]]", [[1, 2], [3, 4]]),
        ("Here:\n```\n[[0,0],[0,5]]\n```", [[0, 0], [0, 5]]),
        ("first [[1]] then, better: [[2, 2], [2, 2]] final.", [[2, 2], [2, 2]]),
        ("[[[9]]]", [[9]]),
    ],
)
def test_grid_reply_parsing(reply: str, grid: list[list[int]]) -> None:
    assert parse_grid_reply(reply) == grid


@pytest.mark.parametrize(
    "reply, why",
    [("", "empty"), ("[[1, 2], [3]]", "row 1 has 1 cells"), ("[[10]]", "not an int 0..9"), ("[[1, 2", "not valid")],
)
def test_unparseable_replies_say_why(reply: str, why: str) -> None:
    with pytest.raises(GridError, match=why):
        parse_grid_reply(reply)


def _seed_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("arc_seed_agent", SEED_AGENT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_seed_agent_parses_the_reply_or_guesses_the_input_fake_fm() -> None:
    seed = _seed_module()
    task = {"train": [{"input": [[1, 0]], "output": [[0, 1]]}], "test_input": [[2, 0], [0, 0]]}
    prompts: list[str] = []

    def replying(text: str):
        def llm(prompt: str, **_: object) -> str:
            prompts.append(prompt)
            return text

        return llm

    assert json.loads(seed.solve(task, replying("The output is [[0, 2], [0, 0]]."))) == [[0, 2], [0, 0]]
    assert json.loads(seed.solve(task, replying("Output:\n02\n00\n"))) == [[0, 2], [0, 0]]
    assert json.loads(seed.solve(task, replying("no idea"))) == task["test_input"]
    assert "Example 1\nInput:\n10\nOutput:\n01" in prompts[0] and "Test input:\n20\n00" in prompts[0]


def test_seed_agent_prompts_fit_a_small_context() -> None:
    seed = _seed_module()
    sizes = []
    for arc_task in load_arc1("training").values():
        train = [{"input": p.input, "output": p.output} for p in arc_task.train]
        prompt = seed.build_prompt({"train": train, "test_input": arc_task.test[0].input})
        assert "Example 1" in prompt
        sizes.append(len(prompt))
    # Past the cap only where a single example and the test input alone are larger (30 x 30 grids).
    assert sorted(sizes)[len(sizes) // 2] <= seed.MAX_PROMPT_CHARS and max(sizes) < 3 * seed.MAX_PROMPT_CHARS


# ---- arc-program: one task, train pairs select, test pairs are held out ----


def program(code: str) -> Genome:
    return Genome(files={"transform.py": textwrap.dedent(code)}, entry="transform.py")


def test_identity_seed_scores_as_counted_by_hand() -> None:
    bench = ArcProgramBenchmark()  # a5313dff: the identity misses exactly the cells that become 1
    search = evaluate_agent(bench, bench.seed(), LocalSandbox(), split="search")
    by_pair = {t.task_id: t.score for t in search.task_results}
    # train-0: 8 of 64 cells become 1; train-1: 8 of 64; train-2: 22 of 144; test-0: 14 of 81.
    assert by_pair == pytest.approx({"train-0": 56 / 64, "train-1": 56 / 64, "train-2": 122 / 144})
    assert search.score == pytest.approx((56 / 64 + 56 / 64 + 122 / 144) / 3)
    assert not any(t.passed for t in search.task_results)
    assert "(2, 2) is 0, expected 1" in search.task_results[0].feedback
    holdout = evaluate_agent(bench, bench.seed(), LocalSandbox(), split="holdout")
    [test_pair] = holdout.task_results
    assert test_pair.score == pytest.approx(67 / 81)
    assert test_pair.feedback == "0.827 of the cells right"  # no expected cell of a held-out pair


def test_correct_transform_scores_one_on_train_and_test_pairs() -> None:
    bench = ArcProgramBenchmark()
    for split in ("search", "holdout"):
        result = evaluate_agent(bench, program(FLOOD_FILL), LocalSandbox(), split=split)
        assert result.valid and result.score == 1.0
        assert all(t.passed and t.feedback == "exact match" for t in result.task_results)


def test_wrong_shapes_and_non_grids() -> None:
    bench = ArcProgramBenchmark()
    shrink = "def transform(grid):\n    return grid[:2]\n"
    search = evaluate_agent(bench, program(shrink), LocalSandbox(), split="search")
    assert search.valid and search.score == 0.0
    assert search.task_results[0].feedback == "wrong shape: returned 2x8, expected 8x8"
    holdout = evaluate_agent(bench, program(shrink), LocalSandbox(), split="holdout")
    assert holdout.task_results[0].feedback == "wrong shape"
    junk = evaluate_agent(bench, program("def transform(grid):\n    return 'no'\n"), LocalSandbox())
    assert junk.score == 0.0 and junk.task_results[0].feedback.startswith("not a grid")
    assert not junk.valid and not any(task.executed for task in junk.task_results)  # unusable, like a crash


# ---- a search on arc-program through the loop ----


def test_arc_program_search_runs_end_to_end_fake_fm(tmp_path: Path) -> None:
    seed_text = ArcProgramBenchmark().seed().files["transform.py"]
    head, rest = seed_text.split("# EVOLVE-BLOCK-START\n")
    tail = rest.split("# EVOLVE-BLOCK-END")[1]
    fenced = [
        f"Here is the program.\n```python\n{head}# EVOLVE-BLOCK-START\n{code}# EVOLVE-BLOCK-END{tail}```\n"
        for code in (ALL_ONES, CRASH, FLOOD_FILL)
    ]
    config = RunConfig.model_validate(
        {
            "name": "arc",
            "runs_dir": str(tmp_path),
            "benchmark": "arc-program",
            "search": {"strategy": "greedy", "operators": {"rewrite": 1.0}},
            "fm": {"concurrency": 1, "repair_rounds": 0, "redraws": 0},  # one scripted reply per iteration
            "evaluation": {"concurrency": 1, "timeout_s": 10},
            "budget": {"iterations": 3},
        }
    )
    archive = Archive.at(tmp_path / "archive.db")
    run = archive.create_run(name="arc", benchmark="arc-program", seed=0, config_json=config.to_json())
    loop = loop_from_config(
        archive=archive,
        run=run,
        config=config,
        benchmark=ArcProgramBenchmark(),
        sandbox=LocalSandbox(),
        llm=ScriptedFM(fenced),
        model_label="scripted",
    )
    outcome = asyncio.run(loop.run_until_done())
    assert outcome.status == RunStatus.finished
    agents = archive.agents(int(run.id))
    statuses = {a.iteration: a.status for a in agents}
    assert statuses == {
        0: AgentStatus.evaluated,
        1: AgentStatus.evaluated,
        2: AgentStatus.invalid,
        3: AgentStatus.evaluated,
    }
    assert agents[1].score < agents[0].score < agents[3].score == 1.0
    assert archive.best(int(run.id))[0].iteration == 3


@pytest.mark.slow
def test_arc_program_search_through_the_cli(tmp_path: Path, smollm2_path: Path) -> None:
    if "arc-program" not in benchmark_names():
        pytest.skip("arc-program is not registered in evaluators/registry.py yet (the lead adds the built-in)")
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cambrian",
            "run",
            "arc-program",
            "--name",
            "arcp",
            "--iterations",
            "2",
            "--model",
            "smollm2-135m",
            "--seed",
            "1",
            *SHORT_REPLIES,
            "--runs-dir",
            str(runs),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    with Archive.at(runs / "arcp" / "archive.db") as archive:
        run = archive.get_run("arcp")
        assert run.status == RunStatus.finished
        agents = archive.agents(int(run.id))
        assert agents[0].operator == "seed" and agents[0].status == AgentStatus.evaluated
        assert agents[0].score == pytest.approx((56 / 64 + 56 / 64 + 122 / 144) / 3)
        assert {a.iteration for a in agents if a.iteration > 0} == {1, 2}  # and the repairs of failed runs


@pytest.mark.slow
def test_arc_agent_search_through_the_cli_records_agent_llm_calls(tmp_path: Path, smollm2_path: Path) -> None:
    if "arc" not in benchmark_names():
        pytest.skip("arc is not registered in evaluators/registry.py yet (the lead adds the built-in)")
    runs = tmp_path / "runs"
    options = ["n_search=2", "n_holdout=1", "stage_sizes=[1]", "thresholds=[0.0]"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cambrian",
            "run",
            "arc",
            "--name",
            "arca",
            "--iterations",
            "1",
            "--model",
            "smollm2-135m",
            "--seed",
            "1",
            *SHORT_REPLIES,
            *[arg for option in options for arg in ("--set", f"benchmark_options.{option}")],
            "--runs-dir",
            str(runs),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    with Archive.at(runs / "arca" / "archive.db") as archive:
        run = archive.get_run("arca")
        seed = archive.agents(int(run.id))[0]
        # The seed always answers (its identity guess at worst), so it is evaluated, on both search tasks.
        assert seed.operator == "seed" and seed.status == AgentStatus.evaluated
        assert 0.0 <= seed.score <= 1.0
        assert len(archive.evaluations(int(seed.id))) == 2
    # Every FM call of the seed agent went through the gateway and is recorded with its agent id.
    with sqlite3.connect(runs / "arca" / "archive.db") as db:
        [(agent_calls,)] = db.execute(
            "SELECT count(*) FROM llmcall WHERE purpose = 'agent' AND agent_id = ?", (int(seed.id),)
        ).fetchall()
    assert agent_calls >= 2  # one per task
