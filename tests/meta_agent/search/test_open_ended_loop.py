"""Open-ended search through the real loop: new strategies, the baseline operator, the near-duplicate
gate, crossover and diagnose, the bandit, and a resumed run rebuilding exactly what the live run held.

The AST baseline needs no FM, so most of these run the deceptive benchmark with real parts only (real
SQLite archive, real local sandbox). Tests that need exact FM replies use a scripted FM and say `fake_fm`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from cambrian.archive.models import AgentStatus, RunStatus
from cambrian.archive.selection import STRATEGY_NAMES
from cambrian.archive.store import Archive
from cambrian.evaluators.circle_packing import CirclePacking
from cambrian.evaluators.deceptive import DeceptiveTrap
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.errors import ConfigError
from cambrian.meta_agent.search import loop_from_config
from cambrian.meta_agent.search.arms import arm_history
from cambrian.meta_agent.search.bandit import Arm
from cambrian.meta_agent.testing import ScriptedFM
from cambrian.sandbox.local import LocalSandbox
from tests.meta_agent.search.test_loop_fake_fm import VALID, fenced


def _config(tmp_path: Path, **settings) -> RunConfig:
    search = {"strategy": "greedy", "operators": {"ast_mutate": 1.0}, "max_pending": 1, **settings.pop("search", {})}
    return RunConfig.model_validate(
        {
            "name": "t",
            "runs_dir": str(tmp_path),
            "search": search,
            "evaluation": {"concurrency": 1, "timeout_s": 10, "agent_fm": False},
            **settings,
            # One scripted reply per proposal: no redraw or repair round takes the next.
            "fm": {"concurrency": 1, "repair_rounds": 0, "redraws": 0, **settings.get("fm", {})},
        }
    )


def _loop(tmp_path: Path, config: RunConfig, *, benchmark=None, fm=None, archive: Archive | None = None):
    benchmark = benchmark or DeceptiveTrap()
    archive = archive or Archive.at(tmp_path / "archive.db")
    runs = archive.list_runs()
    run = (
        runs[0]
        if runs
        else archive.create_run(name="t", benchmark=benchmark.name, seed=config.seed, config_json=config.to_json())
    )
    loop = loop_from_config(
        archive=archive,
        run=run,
        config=config,
        benchmark=benchmark,
        sandbox=LocalSandbox(),
        llm=fm,
        model_label="scripted" if fm is not None else "",
    )
    return loop, archive


@pytest.mark.parametrize("strategy", ["hgm", "map_elites", "novelty"])
def test_open_ended_strategies_search_the_deceptive_benchmark_with_the_baseline_operator(
    strategy: str, tmp_path: Path
) -> None:
    loop, archive = _loop(tmp_path, _config(tmp_path, search={"strategy": strategy}, budget={"iterations": 12}))
    outcome = asyncio.run(loop.run_until_done())
    assert outcome.status == RunStatus.finished
    children = [a for a in archive.agents(1) if a.iteration > 0]
    assert sorted({a.iteration for a in children}) == list(range(1, 13))
    assert all(a.operator == "ast_mutate" and a.model is None for a in children)
    evaluated = [a for a in archive.agents(1) if a.status == AgentStatus.evaluated]
    assert len(loop.view) == len(evaluated) >= 2
    # Descriptors were stored with every evaluated agent: the benchmark's four, code size and pass rate.
    stored = archive.descriptors(1)
    assert set(stored[int(evaluated[-1].id)]) == {f"ones_block_{i}" for i in range(4)} | {"code_size", "pass_fraction"}


def test_a_resumed_run_rebuilds_the_view_the_live_run_held(tmp_path: Path) -> None:
    """Clade counts, descriptors, embeddings and k-NN distances come back from the archive exactly."""
    config = _config(tmp_path, search={"strategy": "map_elites"}, budget={"iterations": 15})
    loop, archive = _loop(tmp_path, config)
    asyncio.run(loop.run_until_done())
    again, _ = _loop(tmp_path, config, archive=archive)
    live, rebuilt = loop.view, again.view
    assert rebuilt.ids.tolist() == live.ids.tolist()
    for column in (
        "scores",
        "parent_ids",
        "n_children",
        "successes",
        "failures",
        "clade_successes",
        "clade_failures",
        "clade_improved",
        "clade_not_improved",
        "embeddings",
        "knn_distances",
    ):
        np.testing.assert_allclose(getattr(rebuilt, column), getattr(live, column), err_msg=column)
    np.testing.assert_array_equal(np.isnan(rebuilt.descriptors), np.isnan(live.descriptors))
    np.testing.assert_allclose(np.nan_to_num(rebuilt.descriptors), np.nan_to_num(live.descriptors))
    # The same view and the same seeded draws give the same parents.
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    assert loop.selector.select(live, 20, rng_a).tolist() == again.selector.select(rebuilt, 20, rng_b).tolist()


def test_a_seeded_sequential_search_is_reproducible(tmp_path: Path) -> None:
    """max_pending = 1 makes every parent choice see every earlier child: the same seed, the same lineage."""
    lineages = []
    for attempt in ("a", "b"):
        folder = tmp_path / attempt
        folder.mkdir()
        loop, archive = _loop(folder, _config(folder, search={"strategy": "hgm"}, budget={"iterations": 10}))
        asyncio.run(loop.run_until_done())
        lineages.append([(a.parent_id, a.genome_hash, a.score) for a in archive.agents(1)])
    assert lineages[0] == lineages[1]


def test_every_strategy_name_runs_in_the_loop(tmp_path: Path) -> None:
    for strategy in STRATEGY_NAMES:
        folder = tmp_path / strategy
        folder.mkdir()
        loop, _ = _loop(folder, _config(folder, search={"strategy": strategy}, budget={"iterations": 3}))
        assert asyncio.run(loop.run_until_done()).status == RunStatus.finished, strategy


def test_map_elites_dims_must_name_descriptors_the_benchmark_has(tmp_path: Path) -> None:
    config = _config(tmp_path, search={"strategy": "map_elites", "params": {"dims": ["ones_block_9"]}})
    with pytest.raises(ConfigError, match="ones_block_9") as caught:
        _loop(tmp_path, config)
    assert "ones_block_0" in caught.value.fix


def test_self_modify_is_refused_for_a_benchmark_whose_agents_do_not_write_code(tmp_path: Path) -> None:
    config = _config(tmp_path, search={"operators": {"self_modify": 1.0}})
    with pytest.raises(ConfigError, match="self_modify") as caught:
        _loop(tmp_path, config, fm=ScriptedFM(["unused"]))
    assert "humaneval" in caught.value.fix


def test_near_duplicates_are_rejected_recorded_and_reproposed_fake_fm(tmp_path: Path) -> None:
    seed = CirclePacking(start="grid").seed().files["packing.py"]
    near_copy = seed.replace("radius = 0.5 / max(columns, rows)", "radius = 0.4999 / max(columns, rows)")
    fm = ScriptedFM([fenced(near_copy), fenced(near_copy.replace("0.4999", "0.4998")), fenced(VALID)])
    config = _config(
        tmp_path,
        search={"operators": {"rewrite": 1.0}, "novelty": {"duplicate_threshold": 0.999, "max_reproposals": 2}},
        budget={"iterations": 1},
    )
    loop, archive = _loop(tmp_path, config, benchmark=CirclePacking(start="grid"), fm=fm)
    asyncio.run(loop.run_until_done())
    children = [a for a in archive.agents(1) if a.iteration == 1]
    assert [a.status for a in children] == [AgentStatus.invalid, AgentStatus.invalid, AgentStatus.evaluated]
    assert all("near-duplicate of agent 1" in (a.invalid_reason or "") for a in children[:2])
    assert archive.iterations_done(1) == 1
    # One FM call per attempt, each attempt's tokens on the agent it made.
    assert fm.calls == 3 and [a.prompt_tokens + a.completion_tokens for a in children] == [20, 20, 20]


def test_crossover_and_diagnose_through_the_loop_fake_fm(tmp_path: Path) -> None:
    plan = "1. Shrink the radius a little so circles never touch.\n2. Keep the grid."
    fm = ScriptedFM(
        [fenced(VALID), plan, fenced(VALID.replace("0.999", "0.998")), fenced(VALID.replace("0.999", "0.997"))]
    )
    config = _config(tmp_path, search={"operators": {"rewrite": 1.0}}, budget={"iterations": 1})
    loop, archive = _loop(tmp_path, config, benchmark=CirclePacking(start="grid"), fm=fm)
    asyncio.run(loop.run_until_done())  # iteration 1: rewrite, so there are two evaluated agents
    for operator, iteration in (("diagnose", 2), ("crossover", 3)):
        settings = _config(tmp_path, search={"operators": {operator: 1.0}}, budget={"iterations": iteration})
        loop, _ = _loop(tmp_path, settings, benchmark=CirclePacking(start="grid"), fm=fm, archive=archive)
        asyncio.run(loop.run_until_done())
    by_iteration = {a.iteration: a for a in archive.agents(1)}
    diagnosed, crossed = by_iteration[2], by_iteration[3]
    assert diagnosed.operator == "diagnose" and diagnosed.status == AgentStatus.evaluated
    assert fm.log == [("mutate", 1), ("diagnose", 2), ("mutate", 2), ("mutate", 3)]
    assert diagnosed.prompt_tokens == 20  # both calls of the two-step operator
    assert crossed.operator == "crossover" and crossed.second_parent_id is not None
    assert {crossed.parent_id, crossed.second_parent_id} <= {a.id for a in archive.agents(1) if a.score is not None}
    assert crossed.parent_id != crossed.second_parent_id


def test_the_bandit_is_restored_on_resume_and_shown_by_history_fake_fm(tmp_path: Path) -> None:
    fm = ScriptedFM([fenced(VALID), "no code at all", fenced(VALID.replace("0.999", "0.99"))])
    settings = dict(search={"operators": {"rewrite": 1.0, "ast_mutate": 1.0}, "bandit": {"algorithm": "ucb1"}})
    loop, archive = _loop(
        tmp_path, _config(tmp_path, budget={"iterations": 8}, **settings), benchmark=CirclePacking(start="grid"), fm=fm
    )
    asyncio.run(loop.run_until_done())
    live = {s.arm: (s.pulls, s.rewarded, round(s.reward_sum, 12)) for s in loop.mix.bandit.stats()}
    assert set(live) == {Arm("scripted", "rewrite"), Arm("", "ast_mutate")}
    assert sum(pulls for pulls, _, _ in live.values()) == 8
    again, _ = _loop(
        tmp_path,
        _config(tmp_path, budget={"iterations": 8}, **settings),
        benchmark=CirclePacking(start="grid"),
        fm=fm,
        archive=archive,
    )
    restored = {s.arm: (s.pulls, s.rewarded, round(s.reward_sum, 12)) for s in again.mix.bandit.stats()}
    assert restored == live
    history = arm_history(archive.agents(1))
    assert len(history) == 8 and all(reward is not None for _, reward, _ in history)


def test_two_models_are_both_tried_by_the_bandit_and_recorded(tmp_path: Path, local_fm) -> None:
    """Two labelled clients of the real SmolLM2 server stand for two models: UCB1 tries every arm once."""
    import dataclasses

    from cambrian.meta_agent.llm import ArchiveLedger, LLMClient

    config = _config(
        tmp_path,
        search={"operators": {"rewrite": 1.0}, "bandit": {"algorithm": "ucb1"}},
        fm={"concurrency": 1, "max_tokens": 200},
        budget={"iterations": 3},
    )
    archive = Archive.at(tmp_path / "archive.db")
    run = archive.create_run(name="t", benchmark="circle_packing", seed=0, config_json=config.to_json())
    ledger = ArchiveLedger(archive, int(run.id))
    first = local_fm.endpoint()
    second = dataclasses.replace(first, label="smollm2-twin")
    loop = loop_from_config(
        archive=archive,
        run=run,
        config=config,
        benchmark=CirclePacking(start="grid"),
        sandbox=LocalSandbox(),
        llm=LLMClient(first, ledger=ledger, max_tokens=200),
        model_label=first.label,
        more_llms={"smollm2-twin": LLMClient(second, ledger=ledger, max_tokens=200)},
    )
    asyncio.run(loop.run_until_done())
    children = [a for a in archive.agents(1) if a.iteration > 0]
    assert {a.model for a in children[:2]} == {first.label, "smollm2-twin"}
    assert {c.model for c in archive.llm_calls(1) if c.purpose == "mutate"} >= {first.label, "smollm2-twin"}
    assert {s.arm.model for s in loop.mix.bandit.stats() if s.pulls} == {first.label, "smollm2-twin"}


SELF_WRITING_AGENT = '''"""An agent that needs no FM: it returns `pass`-bodied code for HumanEval tasks, and,
when asked to rewrite itself (the self_modify task), returns its own source with one constant changed."""

VERSION = 1


def solve(task, llm):
    if task["task_id"] == "self_modify":
        source = task["prompt"].split("# " + "-" * 10)[0]
        return source.replace("VERSION = 1", "VERSION = 2")
    return task["prompt"] + "    return None\\n"
'''


def test_self_modify_runs_the_parent_agent_in_the_sandbox_and_its_answer_is_the_child(tmp_path: Path) -> None:
    """The parent's own solve writes the child (no FM needed by this scripted agent; the sandbox is real)."""
    from cambrian.evaluators.base import Genome
    from cambrian.evaluators.humaneval import HumanEval

    class SelfWritingHumanEval(HumanEval):
        def seed(self) -> Genome:
            return Genome(files={"agent.py": SELF_WRITING_AGENT}, entry="agent.py")

    benchmark = SelfWritingHumanEval(stage_sizes=[2], thresholds=[0.5])
    config = _config(tmp_path, search={"operators": {"self_modify": 1.0}}, budget={"iterations": 1})
    loop, archive = _loop(tmp_path, config, benchmark=benchmark, fm=ScriptedFM(["the meta-agent's FM is unused"]))
    asyncio.run(loop.run_until_done())
    child = next(a for a in archive.agents(1) if a.iteration == 1)
    assert child.operator == "self_modify" and child.parent_id == 1, child.invalid_reason
    assert child.status == AgentStatus.evaluated, child.invalid_reason
    files, _ = archive.get_genome(str(child.genome_hash))
    assert "VERSION = 2" in files["agent.py"] and "def solve(task, llm)" in files["agent.py"]


def test_a_parent_writing_its_child_is_credited_to_the_model_agents_call(tmp_path: Path) -> None:
    """With evaluation.agent_model set, self_modify's arm (and so its children's model) is that model, not fm.model."""
    from cambrian.evaluators.humaneval import HumanEval

    evaluation = {"concurrency": 1, "timeout_s": 10, "agent_fm": False, "agent_model": "qwen2.5-coder-0.5b"}
    config = _config(tmp_path, search={"operators": {"self_modify": 1.0}}, evaluation=evaluation)
    loop, _ = _loop(tmp_path, config, benchmark=HumanEval(stage_sizes=[2], thresholds=[0.5]), fm=ScriptedFM([]))
    assert [(arm.model, arm.operator) for arm in loop.mix.arms] == [("qwen2.5-coder-0.5b", "self_modify")]
