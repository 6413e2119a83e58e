"""`cambrian eval` on the holdout split: stored apart, shown side by side, never seen by selection or prompts.

The runs are made by the real search loop with a scripted FM (exact replies needed: a child that fits
the curve) on the example third-party benchmark, evaluated in the real local sandbox, stored in real
SQLite files. The example package is registered the way pip would (a dist-info folder with its entry
point on the path), without touching the shared virtualenv.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cambrian.archive.models import AgentStatus
from cambrian.archive.selection import SELECTORS
from cambrian.archive.store import Archive
from cambrian.evaluators.base import FeedbackPolicy
from cambrian.evaluators.registry import BENCHMARKS
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.operators import OPERATOR_REGISTRY, PromptContext, make_operator
from cambrian.meta_agent.search import Reporter, loop_from_config
from cambrian.meta_agent.search.holdout import HOLDOUT_FILE, EvalTargetError, evaluate_target
from cambrian.meta_agent.search.session import build_benchmark
from cambrian.meta_agent.testing import ScriptedFM
from cambrian.sandbox.local import LocalSandbox
from tests.conftest import example_dist_info
from tests.meta_agent.search.test_loop_fake_fm import fenced

EXAMPLE_DIR = Path(__file__).resolve().parents[3] / "examples" / "cambrian-example-benchmark"
CAMBRIAN = [sys.executable, "-m", "cambrian"]
RUN = "fit"

GOOD_FIT = """import math


def f(x):
    return 1.5 * math.sin(x) + 0.25 * x * x - 0.5
"""
ROUGH_FIT = "def f(x):\n    return 0.25 * x * x\n"


@pytest.fixture()
def example_registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The example benchmark importable and registered under `cambrian.benchmarks` (here and in subprocesses)."""
    site = example_dist_info(tmp_path / "site")
    monkeypatch.syspath_prepend(str(EXAMPLE_DIR))
    monkeypatch.syspath_prepend(str(site))
    path = os.pathsep.join([str(site), str(EXAMPLE_DIR), os.environ.get("PYTHONPATH", "")])
    registries = (BENCHMARKS, OPERATOR_REGISTRY, SELECTORS)
    for registry in registries:
        registry.refresh()  # entry points are read once per process
    yield {**os.environ, "PYTHONPATH": path, "COLUMNS": "200", "NO_COLOR": "1"}
    for registry in registries:
        registry.refresh()


def _config(runs: Path, **extra: object) -> RunConfig:
    return RunConfig.model_validate(
        {
            "name": RUN,
            "benchmark": "example",
            "runs_dir": str(runs),
            "budget": {"iterations": 2},
            "search": {"strategy": "greedy", "operators": {"rewrite": 1.0}, "inspirations": 1},
            "fm": {"concurrency": 1, "model": "smollm2-135m"},  # the model the tests have; eval records it
            "evaluation": {"sandbox": "local", "concurrency": 1, "agent_fm": False},
            **extra,
        }
    )


@pytest.fixture()
def example_run(tmp_path: Path, example_registered: dict[str, str]) -> tuple[Path, int]:
    """A finished run of the example benchmark: the seed and two children; returns (runs dir, best agent id)."""
    runs = tmp_path / "runs"
    config = _config(runs)
    (runs / RUN).mkdir(parents=True)
    with Archive.at(runs / RUN / "archive.db") as archive:
        run = archive.create_run(name=RUN, benchmark="example", seed=0, config_json=config.to_json())
        loop = loop_from_config(
            archive=archive,
            run=run,
            config=config,
            benchmark=build_benchmark(config),
            sandbox=LocalSandbox(),
            llm=ScriptedFM([fenced(ROUGH_FIT), fenced(GOOD_FIT)]),
            model_label="scripted",
        )
        asyncio.run(loop.run_until_done())
        best = archive.best(int(run.id), n=1)[0]
    return runs, int(best.id)


def _quiet() -> Reporter:
    return Reporter(
        info=lambda m: None,
        warn=lambda m: None,
        event=lambda e: None,
        progress=lambda done, total: contextlib.nullcontext(),
    )


def _cli(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([*CAMBRIAN, *args], capture_output=True, text=True, timeout=300, env=env)
    if check:
        assert proc.returncode == 0, f"cambrian {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_holdout_score_is_stored_apart_fake_fm(example_run: tuple[Path, int]) -> None:
    runs, best_id = example_run
    with Archive.at(runs / RUN / "archive.db") as archive:
        before = archive.get_agent(best_id)
        search_rows = [(e.task_id, e.score) for e in archive.evaluations(best_id)]
    assert before.status == AgentStatus.evaluated and before.score > 0.99  # the exact fit
    assert before.holdout_score is None

    outcome = evaluate_target(f"{RUN}:{best_id}", split="holdout", runs_dir=runs, reporter=_quiet())

    assert [t.task_id for t in outcome.result.task_results] == ["holdout-0", "holdout-1"]
    assert outcome.score > 0.99 and outcome.search_score == before.score
    with Archive.at(runs / RUN / "archive.db") as archive:
        after = archive.get_agent(best_id)
        rows = archive.evaluations(best_id)
    assert after.score == before.score and after.feedback == before.feedback  # selection's view unchanged
    assert after.holdout_score == pytest.approx(outcome.score)
    assert sorted(e.task_id for e in rows if e.split == "holdout") == ["holdout-0", "holdout-1"]
    assert [(e.task_id, e.score) for e in rows if e.split == "search"] == search_rows


def test_search_split_eval_is_printed_only_fake_fm(example_run: tuple[Path, int]) -> None:
    runs, best_id = example_run
    outcome = evaluate_target(f"{RUN}:1", split="search", runs_dir=runs, reporter=_quiet())
    assert outcome.stored_at is None and outcome.split == "search"
    with Archive.at(runs / RUN / "archive.db") as archive:
        seed = archive.get_agent(1)
        assert seed.holdout_score is None
        assert all(e.split == "search" for e in archive.evaluations(1))
        assert len(archive.evaluations(1)) == 3


def test_selection_and_prompts_never_see_holdout_scores_fake_fm(example_run: tuple[Path, int]) -> None:
    runs, best_id = example_run
    marker = 0.123456  # a value no search score has, easy to spot in any text
    with Archive.at(runs / RUN / "archive.db") as archive:
        run = archive.get_run(RUN)
        view_before = sorted(zip(archive.view(int(run.id)).ids.tolist(), archive.view(int(run.id)).scores.tolist()))
        archive.set_holdout_score(best_id, marker)
        archive.set_holdout_score(1, marker)
        view = archive.view(int(run.id))
        assert sorted(zip(view.ids.tolist(), view.scores.tolist())) == view_before
        assert marker not in view.scores.tolist()

        config = RunConfig.from_json(run.config_json)
        loop = loop_from_config(
            archive=archive,
            run=run,
            config=config,
            benchmark=build_benchmark(config),
            sandbox=LocalSandbox(),
            llm=ScriptedFM(["unused"]),
            model_label="scripted",
        )
        # The prompt the loop would build for this parent, with the other holdout-scored agent as inspiration.
        ctx = PromptContext(
            contract=loop.benchmark.contract,
            benchmark=loop.benchmark.name,
            parent=loop.memory.parent_info(best_id),
            inspirations=loop.memory.inspirations(loop.view, exclude=best_id),
        )
        assert ctx.inspirations, "the seed should be shown as an inspiration"
        for name in ("rewrite", "diff"):
            text = "\n".join(m["content"] for m in make_operator(name).messages(ctx))
            assert "0.1234" not in text and "holdout" not in text.lower()


def test_benchmark_without_holdout_tasks_is_a_clear_error(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    config = RunConfig.model_validate({"name": "cp", "runs_dir": str(runs), "evaluation": {"sandbox": "local"}})
    (runs / "cp").mkdir(parents=True)
    with Archive.at(runs / "cp" / "archive.db") as archive:
        run = archive.create_run(name="cp", benchmark="circle_packing", seed=0, config_json=config.to_json())
        seed = build_benchmark(config).seed()
        archive.add_agent(int(run.id), files=dict(seed.files), entry=seed.entry, operator="seed")
    with pytest.raises(EvalTargetError, match="has no holdout tasks") as caught:
        evaluate_target("cp:1", split="holdout", runs_dir=runs, reporter=_quiet())
    assert "--split search" in caught.value.fix


@pytest.mark.parametrize(
    ("target", "message"),
    [("not a target", "neither RUN:AGENT nor an existing folder"), ("nosuchrun:3", "no run named")],
)
def test_bad_targets_name_the_cause_and_fix(tmp_path: Path, target: str, message: str) -> None:
    with pytest.raises(Exception, match=message) as caught:
        evaluate_target(target, split="holdout", runs_dir=tmp_path, reporter=_quiet())
    assert caught.value.fix  # type: ignore[attr-defined]


def test_feedback_policy_from_config_reaches_the_benchmark(example_registered: dict[str, str]) -> None:
    config = _config(Path("runs"))
    config.evaluation.feedback.traceback = True
    config.evaluation.feedback.max_chars = 300
    benchmark = build_benchmark(config)
    assert benchmark.feedback_policy == FeedbackPolicy(max_chars=300, traceback=True)  # type: ignore[attr-defined]


def test_cli_eval_show_tree_export_and_exported_dir_fake_fm(
    example_run: tuple[Path, int], example_registered: dict[str, str], tmp_path: Path
) -> None:
    runs, best_id = example_run
    env = example_registered
    flags = ["--runs-dir", str(runs)]

    out = _cli("eval", f"{RUN}:{best_id}", "--split", "holdout", "--sandbox", "local", *flags, env=env).stdout
    assert "holdout-0" in out and "stored in archive" in out
    assert "search 1.0000 | holdout 1.0000" in out

    show = _cli("show", RUN, str(best_id), "--no-code", *flags, env=env).stdout
    assert "search 1.0000 | holdout 1.0000" in show
    tree = _cli("tree", RUN, *flags, env=env).stdout
    assert f"#{best_id} 1.0000 | holdout 1.0000" in tree

    exported = tmp_path / "exported"
    out = _cli("export", RUN, "--agent", str(best_id), "--to", str(exported), *flags, env=env).stdout
    assert "search 1.0000 | holdout 1.0000" in out
    folder = exported / f"agent-{best_id}"
    assert json.loads((folder / "manifest.json").read_text())["holdout_score"] == pytest.approx(1.0)

    out = _cli(
        "eval", str(folder), "--split", "holdout", "--sandbox", "local", "--model", "smollm2-135m", env=env
    ).stdout
    assert f"stored in {folder / HOLDOUT_FILE}" in out
    record = json.loads((folder / HOLDOUT_FILE).read_text())
    assert record["split"] == "holdout" and record["score"] == pytest.approx(1.0)
    assert [t["task_id"] for t in record["tasks"]] == ["holdout-0", "holdout-1"]
    assert record["benchmark"] == "example" and record["model"] == "smollm2-135m" and record["evaluated_at"]

    missing = _cli("eval", str(tmp_path), "--split", "holdout", env=env, check=False)
    assert missing.returncode == 2 and "manifest.json" in missing.stderr and "fix:" in missing.stderr


# ----- an exported folder someone sent you (hostile manifest) ----------------------------------------


def test_a_folders_manifest_cannot_choose_the_fm_endpoint_key_or_sandbox() -> None:
    from cambrian.meta_agent.search.holdout import folder_config

    hostile = {
        "benchmark": "circle_packing",
        "benchmark_options": {"n": 7},
        "seed": 3,
        "fm": {
            "model": "openai/gpt-4o",
            "api_base": "http://attacker.example:8080/v1",
            "api_key_env": "OPENAI_API_KEY",
        },
        "evaluation": {
            "sandbox": "local",
            "image": "attacker/image:latest",
            "agent_fm": True,
            "timeout_s": 3600,
            "agent_fm_tokens": 10_000_000,
        },
    }
    mine = RunConfig.model_validate({"evaluation": {"sandbox": "docker"}, "fm": {"model": "smollm2-135m"}})
    config = folder_config(hostile, mine, {}, source="manifest.json")
    assert config.fm.api_base is None and config.fm.api_key_env is None and config.fm.model == "smollm2-135m"
    assert config.evaluation.sandbox == "docker" and config.evaluation.image == RunConfig().evaluation.image
    assert config.evaluation.agent_fm_tokens == RunConfig().evaluation.agent_fm_tokens
    assert config.evaluation.timeout_s == RunConfig().evaluation.timeout_s
    # What the folder does decide: its benchmark, options, seed, and that its agent calls an FM.
    assert (config.benchmark, config.benchmark_options, config.seed) == ("circle_packing", {"n": 7}, 3)
    assert config.evaluation.agent_fm is True
    # The user's flags win over everything.
    assert folder_config(hostile, mine, {"evaluation.agent_fm": False}, source="m").evaluation.agent_fm is False


def test_a_folder_with_a_linked_or_changed_file_is_refused(
    example_run: tuple[Path, int], example_registered: dict[str, str], tmp_path: Path
) -> None:
    runs, best_id = example_run
    exported = tmp_path / "exported"
    _cli("export", RUN, "--agent", str(best_id), "--to", str(exported), "--runs-dir", str(runs), env=example_registered)
    folder = exported / f"agent-{best_id}"
    manifest = json.loads((folder / "manifest.json").read_text())
    entry = folder / manifest["entry"]
    original = entry.read_text()

    entry.write_text(original + "\n# changed\n")
    changed = _cli("eval", str(folder), "--split", "holdout", "--sandbox", "local", env=example_registered, check=False)
    assert changed.returncode == 2 and "genome_hash" in changed.stderr and "--allow-modified" in changed.stderr
    allowed = _cli(
        "eval", str(folder), "--split", "holdout", "--sandbox", "local", "--allow-modified", env=example_registered
    )
    assert "differ from the exported agent" in allowed.stdout + allowed.stderr

    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret")
    entry.unlink()
    entry.symlink_to(secret)
    linked = _cli(
        "eval",
        str(folder),
        "--split",
        "holdout",
        "--sandbox",
        "local",
        "--allow-modified",
        env=example_registered,
        check=False,
    )
    assert linked.returncode == 2 and "symbolic link" in linked.stderr

    manifest["files"] = ["../host-secret.txt"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    escaping = _cli("eval", str(folder), "--split", "holdout", "--allow-modified", env=example_registered, check=False)
    assert escaping.returncode == 2 and "not a plain relative path" in escaping.stderr
