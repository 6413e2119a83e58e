"""The run analytics (ui/_analytics.py: budget, runs compared; ui/_search_space.py: the search-space map).

Exact numbers over a small archive written through the real `Archive` API (real SQLite, no FM),
where every sum, bin and step is worked out by hand below; then the same functions over archives
written by real searches (the real CLI, SmolLM2-135M served locally, the local sandbox), checked
against the archive's own ledger summary and lineage queries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from cambrian.archive.models import AgentStatus, Evaluation, LLMCall
from cambrian.archive.store import Archive
from cambrian.ui._analytics import budget, compare_runs
from cambrian.ui._search_space import search_space
from tests.conftest import SHORT_REPLIES

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {"evaluation": {"concurrency": 2}, "fm": {"concurrency": 1}}
SEED_CODE = {"main.py": "def solve():\n    return 1\n"}
CHILD_CODE = {"main.py": "import math\n\n\ndef solve():\n    return math.pi * 2\n"}


def _call(run_id: int, agent_id: int | None, at: datetime, **fields: object) -> LLMCall:
    return LLMCall(run_id=run_id, agent_id=agent_id, created_at=at, request_hash=f"h{at.timestamp()}", **fields)


@pytest.fixture()
def small(tmp_path: Path) -> Iterator[tuple[Archive, int, list[int]]]:
    """(archive opened read-only, run id, agent ids) of a 4-agent run laid out on a 600 s clock from the seed.

    seed (score 1.0) -> child1 (diff, m1, 2.0) -> child2 (rewrite, m2, invalid) and child3 (diff, m1, 1.5,
    the seed's code). Seconds after the seed was stored:
      evaluations (start..end): seed [70, 130] and [125, 155]; child1 [250, 310]; child3 [560, 600]
      FM calls (start..end, tokens in/out, USD): child1 mutate m1 [60, 90] 100/10 $0.5;
        child2 mutate m2 [340, 400] 200/20 $0.25; child2 repair m2 [415, 425] 50/5 $0;
        child3 mutate m1 [480, 500] 1000/100 $1; unattributed mutate m1 [585, 590] 7/3 $0.125
    """
    path = tmp_path / "runs" / "small" / "archive.db"
    with Archive.at(path) as archive:
        run = archive.create_run(name="small", benchmark="circle_packing", seed=0, config_json=json.dumps(CONFIG))
        seed = archive.add_agent(run.key, files=SEED_CODE, entry="main.py")
        t0 = seed.created_at

        def at(seconds: float) -> datetime:
            return t0 + timedelta(seconds=seconds)

        def evaluate(agent_id: int, score: float, runs: list[tuple[float, float]], features: dict[str, float]) -> None:
            archive.mark_evaluating(agent_id)
            rows = [
                Evaluation(task_id=f"t{k}", score=score, duration_s=end - start, created_at=at(end))
                for k, (start, end) in enumerate(runs)
            ]
            archive.finish_evaluation(
                agent_id, status=AgentStatus.evaluated, score=score, evaluations=rows, descriptor=features
            )

        evaluate(seed.key, 1.0, [(70, 130), (125, 155)], {"size": 0.25, "speed": 4.0})
        child1 = archive.add_agent(
            run.key, files=CHILD_CODE, entry="main.py", parent_id=seed.key, operator="diff", model="m1", iteration=1
        )
        evaluate(child1.key, 2.0, [(250, 310)], {"size": 0.5, "speed": 3.0})
        child2 = archive.add_agent(
            run.key,
            parent_id=child1.key,
            operator="rewrite",
            model="m2",
            iteration=2,
            status=AgentStatus.invalid,
            invalid_reason="the reply has no SEARCH/REPLACE block",
        )
        child3 = archive.add_agent(
            run.key, files=SEED_CODE, entry="main.py", parent_id=child1.key, operator="diff", model="m1", iteration=3
        )
        evaluate(child3.key, 1.5, [(560, 600)], {"size": 0.75, "speed": 1.0})
        for agent_id, purpose, model, start, end, tokens_in, tokens_out, usd in [
            (child1.key, "mutate", "m1", 60, 90, 100, 10, 0.5),
            (child2.key, "mutate", "m2", 340, 400, 200, 20, 0.25),
            (child2.key, "repair", "m2", 415, 425, 50, 5, 0.0),
            (child3.key, "mutate", "m1", 480, 500, 1000, 100, 1.0),
            (None, "mutate", "m1", 585, 590, 7, 3, 0.125),
        ]:
            archive.record_llm_call(
                _call(
                    run.key,
                    agent_id,
                    at(end),
                    purpose=purpose,
                    model=model,
                    prompt_tokens=tokens_in,
                    completion_tokens=tokens_out,
                    cost_usd=usd,
                    latency_s=end - start,
                )
            )
        ids = [seed.key, child1.key, child2.key, child3.key]
        run_id = run.key
    with Archive.at(path, readonly=True) as reader:
        yield reader, run_id, ids


def _group(rows: list[dict[str, object]]) -> dict[object, tuple[object, ...]]:
    return {r["name"]: (r["calls"], r["prompt_tokens"], r["completion_tokens"], r["cost_usd"]) for r in rows}


def test_budget_sums_the_ledger_by_model_operator_and_purpose(small: tuple[Archive, int, list[int]]) -> None:
    archive, run_id, _ = small
    out = budget(archive, run_id, bins=10)
    assert out["totals"] == {"calls": 5, "prompt_tokens": 1357, "completion_tokens": 138, "cost_usd": 1.875}
    assert [r["name"] for r in out["by_model"]] == ["m1", "m2"]  # largest cost first
    assert _group(out["by_model"]) == {"m1": (3, 1107, 113, 1.625), "m2": (2, 250, 25, 0.25)}
    assert [r["name"] for r in out["by_operator"]] == ["diff", "rewrite", "unattributed"]
    assert _group(out["by_operator"]) == {
        "diff": (2, 1100, 110, 1.5),
        "rewrite": (2, 250, 25, 0.25),
        "unattributed": (1, 7, 3, 0.125),
    }
    assert _group(out["by_purpose"]) == {"mutate": (4, 1307, 133, 1.875), "repair": (1, 50, 5, 0.0)}


def test_budget_over_time_is_cumulative_at_minute_edges(small: tuple[Archive, int, list[int]]) -> None:
    archive, run_id, _ = small
    out = budget(archive, run_id, bins=10)
    assert out["span_minutes"] == pytest.approx(10.0, abs=1e-4)
    assert out["over_time"]["minutes"] == pytest.approx(list(range(11)), abs=1e-4)
    series = out["over_time"]["by_model"]
    # m1 calls end at 90 s (110 tokens), 500 s (1100) and 590 s (10): counted from the next edge on.
    assert series["m1"]["tokens"] == [0, 0, 110, 110, 110, 110, 110, 110, 110, 1210, 1220]
    assert series["m1"]["cost_usd"] == [0, 0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1.5, 1.625]
    assert series["m2"]["tokens"] == [0, 0, 0, 0, 0, 0, 0, 220, 275, 275, 275]
    assert out["over_time"]["by_operator"]["unattributed"]["tokens"] == [0] * 10 + [10]
    assert out["over_time"]["by_purpose"]["repair"]["cost_usd"] == [0.0] * 11


def test_budget_timeline_shows_busy_slots_and_fm_time(small: tuple[Archive, int, list[int]]) -> None:
    archive, run_id, _ = small
    line = budget(archive, run_id, bins=10)["timeline"]
    assert line["bin_minutes"] == pytest.approx(1.0, abs=1e-5)
    # Finished in (60, 120], (120, 180], ...: ends at 130 and 155, 310, 600.
    assert line["evaluations_per_minute"] == pytest.approx([0, 0, 2, 0, 0, 1, 0, 0, 0, 1], abs=1e-4)
    # Mean evaluations running per minute: [70, 130] gives 50 s to minute 1 and 10 s to minute 2, etc.
    busy = [0, 50, 10 + 30, 0, 50, 10, 0, 0, 0, 40]
    assert line["sandbox_busy"] == pytest.approx([s / 60 for s in busy], abs=1e-4)
    in_flight = [0, 30, 0, 0, 0, 20, 40 + 5, 5, 20, 5]
    assert line["fm_busy"] == pytest.approx([s / 60 for s in in_flight], abs=1e-4)
    assert (line["sandbox_slots"], line["fm_slots"]) == (2, 1)
    assert line["sandbox_utilisation"] == pytest.approx(190 / (2 * 600), abs=1e-5)
    assert line["fm_utilisation"] == pytest.approx(125 / 600, abs=1e-5)


def test_compare_runs_steps_best_score_against_proposals_tokens_and_usd(small: tuple[Archive, int, list[int]]) -> None:
    archive, run_id, ids = small
    (run,) = compare_runs([("dgm / m1", archive, run_id)])["runs"]
    assert (run["label"], run["run_name"], run["benchmark"]) == ("dgm / m1", "small", "circle_packing")
    assert (run["n_agents"], run["n_proposals"], run["n_evaluated"]) == (4, 3, 3)
    assert (run["best_score"], run["best_agent_id"], run["tokens"], run["cost_usd"]) == (2.0, ids[1], 1495, 1.875)
    # The seed (nothing spent) and child1 (its call: 110 tokens, $0.5) raise the best; the run ends
    # after 3 proposals with the whole ledger spent (the unattributed call included).
    assert run["steps"] == {
        "agent_id": [ids[0], ids[1], ids[3]],
        "proposals": [0, 1, 3],
        "tokens": [0.0, 110.0, 1495.0],
        "cost_usd": [0.0, 0.5, 1.875],
        "best": [1.0, 2.0, 2.0],
    }


def test_search_space_uses_two_descriptors_as_axes(small: tuple[Archive, int, list[int]]) -> None:
    archive, run_id, ids = small
    out = search_space(archive, run_id)
    assert (out["projection"], out["axes"], out["explained_variance"]) == ("behaviour", ["size", "speed"], None)
    assert out["points"] == {
        "id": [ids[0], ids[1], ids[3]],
        "x": [0.25, 0.5, 0.75],
        "y": [4.0, 3.0, 1.0],
        "score": [1.0, 2.0, 1.5],
        "status": ["evaluated"] * 3,
        "operator": ["seed", "diff", "diff"],
    }
    assert (out["n_agents"], out["n_points"], out["sampled"]) == (3, 3, False)


def test_search_space_of_code_shares_a_point_per_genome_and_samples_the_best(
    small: tuple[Archive, int, list[int]],
) -> None:
    archive, run_id, ids = small
    out = search_space(archive, run_id, space="code")
    points = out["points"]
    assert (out["projection"], out["n_agents"], out["distinct_genomes"]) == ("code", 3, 2)
    assert points["id"] == [ids[0], ids[1], ids[3]]  # child2 has no code
    # The seed and child3 have the same code, so the same point; child1's differs.
    assert (points["x"][0], points["y"][0]) == (points["x"][2], points["y"][2])
    assert points["x"][0] != pytest.approx(points["x"][1])
    assert out["explained_variance"] == pytest.approx([1.0, 0.0])
    assert out == search_space(archive, run_id, space="code")  # deterministic
    # Above max_points: the best half (child1), then evenly over the rest by id (the seed).
    sampled = search_space(archive, run_id, space="code", max_points=2)
    assert (sampled["points"]["id"], sampled["n_agents"], sampled["sampled"]) == ([ids[0], ids[1]], 3, True)
    capped = search_space(archive, run_id, space="code", max_genomes=1)
    assert (capped["points"]["id"], capped["distinct_genomes"]) == ([ids[1]], 1)


def test_analytics_of_a_run_with_nothing_yet(tmp_path: Path) -> None:
    path = tmp_path / "empty" / "archive.db"
    with Archive.at(path) as archive:
        run_id = archive.create_run(name="empty", benchmark="circle_packing", seed=0, config_json="{}").key
    with Archive.at(path, readonly=True) as archive:
        spent = budget(archive, run_id, bins=4)
        assert spent["totals"] == {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
        assert spent["timeline"]["sandbox_busy"] == [0.0] * 4 and spent["timeline"]["sandbox_slots"] is None
        space = search_space(archive, run_id)
        assert (space["projection"], space["n_points"], space["points"]["id"]) == ("none", 0, [])
        (run,) = compare_runs([("empty", archive, run_id)])["runs"]
        assert (run["n_agents"], run["best_score"], run["steps"]["best"]) == (0, None, [])
        json.dumps([spent, space, run], allow_nan=False)


# ----- over archives written by real searches -----


@pytest.fixture(scope="module")
def second_run(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(runs folder, run name) of a second real search, greedy this time, for compare_runs."""
    folder = tmp_path_factory.mktemp("ui-analytics")
    command = [
        sys.executable,
        "-m",
        "cambrian",
        "run",
        "circle_packing",
        "--model",
        "smollm2-135m",
        "--sandbox",
        "local",
        "--iterations",
        "2",
        "--strategy",
        "greedy",
        "--seed",
        "1",
        "--name",
        "b",
        "--runs-dir",
        str(folder),
        *SHORT_REPLIES,
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800, env={**os.environ})
    assert done.returncode == 0, f"the real run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return folder, "b"


@pytest.mark.slow
@pytest.mark.timeout(2400)  # two real searches first (its fixtures): however slow a busy machine makes them
def test_analytics_of_real_runs_agree_with_the_archive(
    real_run: tuple[Path, str], second_run: tuple[Path, str]
) -> None:
    opened = [Archive.at(folder / name / "archive.db", readonly=True) for folder, name in (real_run, second_run)]
    try:
        runs = [archive.get_run(name) for archive, (_, name) in zip(opened, (real_run, second_run))]
        for archive, run in zip(opened, runs):
            spent = budget(archive, run.key)
            ledger = archive.cost_summary(run.key)
            assert spent["totals"] == {
                "calls": ledger.calls,
                "prompt_tokens": ledger.prompt_tokens,
                "completion_tokens": ledger.completion_tokens,
                "cost_usd": pytest.approx(ledger.cost_usd),
            }
            assert {r["name"]: r["calls"] for r in spent["by_model"]} == {
                name: cost.calls for name, cost in ledger.by_model.items()
            }
            for grouping in ("by_model", "by_operator", "by_purpose"):
                assert sum(r["calls"] for r in spent[grouping]) == ledger.calls
                for row in spent[grouping]:
                    tokens = spent["over_time"][grouping][row["name"]]["tokens"]
                    assert tokens[-1] == row["prompt_tokens"] + row["completion_tokens"]
                    assert tokens == sorted(tokens)
            line = spent["timeline"]
            assert len(line["sandbox_busy"]) == len(line["fm_busy"]) == len(line["minutes"]) - 1 == 120
            assert min(line["sandbox_busy"]) >= 0 and max(line["sandbox_busy"]) > 0
            assert line["sandbox_slots"] == 2 and 0 < line["sandbox_utilisation"] <= 1
            assert max(line["fm_busy"]) > 0  # the proposals called the FM

            space = search_space(archive, run.key)
            agents = {a.key: a for a in archive.agents(run.key)}
            assert space["projection"] in ("behaviour", "code") and space["n_points"] >= 1
            assert set(space["points"]["id"]) <= set(agents)
            for agent_id, score, status in zip(
                space["points"]["id"], space["points"]["score"], space["points"]["status"]
            ):
                assert (score, status) == (agents[agent_id].score, agents[agent_id].status.value)
            json.dumps([spent, space], allow_nan=False)

        compared = compare_runs([("dgm", opened[0], runs[0].key), ("greedy", opened[1], runs[1].key)])["runs"]
        assert [r["label"] for r in compared] == ["dgm", "greedy"]
        for row, archive, run in zip(compared, opened, runs):
            best = archive.best(run.key)[0]
            assert (row["best_score"], row["best_agent_id"]) == (best.score, best.key)
            ledger = archive.cost_summary(run.key)
            assert row["tokens"] == ledger.prompt_tokens + ledger.completion_tokens
            assert row["n_proposals"] == sum(1 for a in archive.agents(run.key) if a.iteration > 0)
            steps = row["steps"]
            for axis in ("proposals", "tokens", "cost_usd", "best"):
                assert steps[axis] == sorted(steps[axis])
            assert steps["tokens"][-1] == row["tokens"] and steps["best"][-1] == row["best_score"]
        json.dumps(compared, allow_nan=False)
    finally:
        for archive in opened:
            archive.close()


def test_sample_keeps_the_best_half_and_a_spread_taking_turns() -> None:
    from cambrian.ui._search_space import _sample

    ids = np.arange(1, 11)
    scores = ids.astype(float)  # agent 10 is the best
    scores[4] = np.nan  # agent 5 has no score: ranked last
    # The best two (10, 9), then two spread evenly over the other eight in id order (1 and 8), in turns.
    assert ids[_sample(ids, scores, 4)].tolist() == [10, 1, 9, 8]
    assert sorted(ids[_sample(ids, scores, 10)].tolist()) == list(range(1, 11))
    assert ids[_sample(ids, scores, 10)].tolist()[:2] == [10, 1]


def test_a_child_above_its_parent_by_rounding_only_is_neither_improved_nor_a_gain() -> None:
    """The operator table's "improved" and "mean gain" read improvement as the search does
    (`archive.lineage.improves`): a knob edit that reorders a packing scores 2.2e-16 above its parent."""
    from cambrian.ui._columns import AgentColumns
    from cambrian.ui._run_stats import outcome_table

    seed = 1.0917
    scores = np.array([seed, seed + 2.2e-16, seed + 0.1, np.nan])
    n = len(scores)
    columns = AgentColumns(
        ids=np.arange(1, n + 1),
        parent_ids=np.array([-1, 1, 1, 1]),
        iterations=np.arange(n),
        scores=scores,
        holdout_scores=np.full(n, np.nan),
        tokens=np.zeros(n, dtype=np.int64),
        cost_usd=np.zeros(n),
        fm_seconds=np.full(n, 60.0),
        updated=np.zeros(n),
        statuses=["evaluated", "evaluated", "evaluated", "invalid"],
        operators=["seed", "knob", "lines", "knob"],
        models=["", "m", "m", "m"],
        reasons=["", "", "", "crashed"],
    )
    rows = {row.key: row for row in outcome_table(columns, ("operator",))}
    knob, lines = rows[("knob",)], rows[("lines",)]
    assert (knob.improved, knob.mean_gain, knob.gain_per_fm_minute) == (0, 0.0, 0.0)
    assert lines.improved == 1
    assert lines.mean_gain == pytest.approx(0.1)
