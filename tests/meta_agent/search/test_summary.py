"""The closing summary of a run, read from a real archive: the gain, the edits that made it, or the fix."""

from __future__ import annotations

import json
from pathlib import Path

from cambrian.archive.models import AgentStatus
from cambrian.archive.store import Archive
from cambrian.meta_agent.search import categorize, summarize_run
from cambrian.meta_agent.search._summary import stronger_model

FILES = {"p.py": "x = 1\n"}


def _evaluated(archive: Archive, run_id: int, score: float, **kwargs: object) -> int:
    text = f"x = {score}\n"
    agent = archive.add_agent(run_id, files={"p.py": text}, entry="p.py", **kwargs)  # type: ignore[arg-type]
    archive.mark_evaluating(int(agent.id))
    archive.finish_evaluation(int(agent.id), status=AgentStatus.evaluated, score=score)
    return int(agent.id)


def _invalid(archive: Archive, run_id: int, parent: int, iteration: int, reason: str) -> None:
    archive.add_agent(
        run_id,
        parent_id=parent,
        iteration=iteration,
        operator="diff",
        status=AgentStatus.invalid,
        invalid_reason=reason,
    )


def test_the_summary_names_the_gain_and_the_edits_on_the_best_path(tmp_path: Path) -> None:
    with Archive.at(tmp_path / "a.db") as archive:
        run_id = int(archive.create_run(name="r", benchmark="b", seed=0, config_json="{}").id)
        seed = _evaluated(archive, run_id, 2.0)
        first = _evaluated(archive, run_id, 2.2, parent_id=seed, iteration=1, operator="diff", model="m")
        _evaluated(archive, run_id, 1.9, parent_id=seed, iteration=2, operator="rewrite", model="m")
        _invalid(archive, run_id, seed, 3, "SEARCH block 1 did not match packing.py. The closest lines were ...")
        _invalid(archive, run_id, first, 4, "crashed: NameError: name 'math' is not defined")
        best = _evaluated(archive, run_id, 2.5, parent_id=first, iteration=5, operator="rewrite", model="m")
        summary = summarize_run(archive, run_id)
    assert (summary.seed_id, summary.best_id, summary.best_score) == (seed, best, 2.5)
    assert [(e.agent_id, e.operator, e.parent_score, e.score) for e in summary.path] == [
        (first, "diff", 2.0, 2.2),
        (best, "rewrite", 2.2, 2.5),
    ]
    assert (summary.proposals, summary.valid, summary.improved) == (5, 3, 2)
    assert summary.reasons == {"SEARCH did not match": 1, "crash: NameError": 1}
    text = "\n".join(summary.lines("r"))
    assert "best agent #6 scores 2.5000: +0.5000 (+25.0%) over the seed's 2.0000" in text
    assert f"#{first} diff (m) 2.0000 -> 2.2000; #{best} rewrite (m) 2.2000 -> 2.5000" in text
    assert f"cambrian diff r {seed} {best}" in text and "fix:" not in text


def test_the_hint_to_see_the_change_names_the_store_of_a_run_kept_in_one(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'shared.db'}"
    config = json.dumps({"store": "postgresql+psycopg://ann:s3cret@db.example/runs"})
    with Archive(store) as archive:
        in_store = int(archive.create_run(name="in-store", benchmark="b", seed=0, config_json=config).id)
        own = int(archive.create_run(name="own", benchmark="b", seed=0, config_json=json.dumps({"store": None})).id)
        for run_id in (in_store, own):
            seed = _evaluated(archive, run_id, 1.0)
            _evaluated(archive, run_id, 2.0, parent_id=seed, iteration=1, operator="diff")
        hinted = [line for line in summarize_run(archive, in_store).lines("in-store") if "cambrian diff" in line]
        plain = [line for line in summarize_run(archive, own).lines("own") if "cambrian diff" in line]
    assert hinted == ["see the change: cambrian diff in-store 1 2 --store postgresql+psycopg://ann:***@db.example/runs"]
    assert plain == ["see the change: cambrian diff own 3 4"]


def test_a_run_that_improved_nothing_says_why_and_what_to_do(tmp_path: Path) -> None:
    with Archive.at(tmp_path / "a.db") as archive:
        run_id = int(archive.create_run(name="r", benchmark="b", seed=0, config_json="{}").id)
        seed = _evaluated(archive, run_id, 2.0)
        for i in range(1, 4):
            _invalid(archive, run_id, seed, i, "the reply had no SEARCH/REPLACE block; use the format ...")
        lines = summarize_run(archive, run_id).lines("r")
    assert lines[0] == "no child beat the seed's 2.0000"
    assert (
        "3 proposed, 0/3 (0%) valid, 0 beat their parent; did not count: format: no SEARCH/REPLACE block 3" in lines[1]
    )
    assert lines[2] == "by operator: diff 0/3 valid"
    assert lines[3].startswith(
        "fix: the model's replies could not be used (format: no SEARCH/REPLACE block 3); use a stronger model"
    )


def test_the_stronger_model_suggested_is_stronger_than_the_ones_the_run_used() -> None:
    # A run of qwen2.5-coder-1.5b whose children scored no higher was told to try qwen2.5-coder-1.5b.
    assert stronger_model(()) == "a stronger model (e.g. --model qwen2.5-coder-1.5b or a hosted one)"
    assert stronger_model(("smollm2-135m",)) == "a stronger model (e.g. --model qwen2.5-coder-1.5b or a hosted one)"
    largest = stronger_model(("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"))
    assert largest.startswith("a stronger model than qwen2.5-coder-1.5b, the largest local one (a hosted one")
    assert stronger_model(("qwen2.5-coder-1.5b", "openai/gpt-4o-mini")) == "a stronger model"


def test_a_run_of_the_largest_local_model_is_not_told_to_try_it(tmp_path: Path) -> None:
    with Archive.at(tmp_path / "a.db") as archive:
        run_id = int(archive.create_run(name="r", benchmark="b", seed=0, config_json="{}").id)
        seed = _evaluated(archive, run_id, 2.0)
        _evaluated(archive, run_id, 1.5, parent_id=seed, iteration=1, operator="lines", model="qwen2.5-coder-1.5b")
        summary = summarize_run(archive, run_id)
    assert summary.models == ("qwen2.5-coder-1.5b",)
    assert "--model qwen2.5-coder-1.5b" not in summary.fix()
    assert "a stronger model than qwen2.5-coder-1.5b, the largest local one" in summary.fix()


def test_a_best_above_the_seed_by_rounding_only_is_no_gain(tmp_path: Path) -> None:
    seed_score = float.fromhex("0x1.177c0f6b7fe55p+0")
    with Archive.at(tmp_path / "a.db") as archive:
        run_id = int(archive.create_run(name="r", benchmark="b", seed=0, config_json="{}").id)
        seed = _evaluated(archive, run_id, seed_score)
        _evaluated(archive, run_id, float.fromhex("0x1.177c0f6b7fe56p+0"), parent_id=seed, iteration=1, operator="knob")
        summary = summarize_run(archive, run_id)
        lines = summary.lines("r")
    assert summary.improved == 0 and not summary.improved_on_the_seed
    assert lines[0] == "no child beat the seed's 1.0917"
    assert "1 proposed, 1/1 (100%) valid, 0 beat their parent" in lines[1]


def test_a_run_whose_children_all_crashed_names_the_crash_not_the_model(tmp_path: Path) -> None:
    with Archive.at(tmp_path / "a.db") as archive:
        run_id = int(archive.create_run(name="r", benchmark="b", seed=0, config_json="{}").id)
        seed = _evaluated(archive, run_id, 2.0)
        for i in range(1, 4):
            _invalid(archive, run_id, seed, i, "crashed: KeyError: 'weights'")
        _invalid(archive, run_id, seed, 4, "the edited p.py is not valid Python: invalid syntax at line 3")
        fix = summarize_run(archive, run_id).fix()
    assert fix.startswith("fix: the children ran and failed (crash: KeyError 3, syntax error 1)")
    assert "stronger model" not in fix


def test_reasons_fall_into_categories() -> None:
    assert categorize("crashed: ZeroDivisionError: division by zero") == "crash: ZeroDivisionError"
    assert categorize("static check of packing.py: undefined name 'foo' at line 3") == "static: undefined name"
    assert categorize("invalid packing: circles 1 and 2 overlap by 0.01") == "invalid packing: overlap"
    assert categorize("SEARCH/REPLACE block 1 is missing its >>>>>>> REPLACE line") == "format: malformed block"
    assert categorize("something new\nsecond line") == "something new"
    assert categorize("invalid packing: returned 52 circles, expected 26") == "invalid packing: wrong number of circles"


def test_a_benchmarks_unusable_results_group_by_what_went_wrong_whatever_the_numbers(tmp_path: Path) -> None:
    """The runner's wrapping of a benchmark's reason is one short prefix and its numbers are N, so one mistake
    made twice is one bucket, and the fix still reads it as the program's failure."""
    reasons = [
        "did not produce a usable result: unusable result: tour returned 59 indices for 60 points",
        "did not produce a usable result: unusable result: tour returned 58 indices for 60 points",
        "did not produce a usable result: unusable result: count_primes(61217) returned 6163, which is not the "
        "number of primes below 61217",
    ]
    assert [categorize(reason) for reason in reasons] == [
        "unusable result: tour returned N indices for N points",
        "unusable result: tour returned N indices for N points",
        "unusable result: count_primes(N) returned N, which is not the number of primes below N",
    ]
    assert categorize("did not produce a usable result: the benchmark could not score this output: x0 was 2") == (
        "unusable result: the benchmark could not score this output: x0 was N"
    )
    with Archive.at(tmp_path / "a.db") as archive:
        run_id = int(archive.create_run(name="r", benchmark="b", seed=0, config_json="{}").id)
        seed = _evaluated(archive, run_id, 2.0)
        for i, reason in enumerate(reasons, start=1):
            _invalid(archive, run_id, seed, i, reason)
        fix = summarize_run(archive, run_id).fix()
    assert fix.startswith("fix: the children ran and failed (unusable result: tour returned N indices for N points 2")
    assert "stronger model" not in fix


def test_a_rewrite_without_code_for_the_region_is_not_called_an_edit_outside_it() -> None:
    from cambrian.meta_agent.search import categorize

    reason = (
        "the rewritten packing.py has no code for the EVOLVE-BLOCK region: every line of the reply already "
        "occurs outside the markers (still failing after 1 repair round(s))"
    )
    assert categorize(reason) == "rewrite: no code for the region"
    assert categorize("packing.py line 3 is outside the EVOLVE-BLOCK markers") == "edit outside EVOLVE-BLOCK"
