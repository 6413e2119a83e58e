"""Defaults chosen by the model's class: the operator mix, the repair rounds and the redraws, frozen into the run's
config."""

from __future__ import annotations

import pytest

from cambrian.meta_agent.config import (
    OPERATORS_BY_MODEL_CLASS,
    REDRAWS_BY_MODEL_CLASS,
    REPAIR_ROUNDS_BY_MODEL_CLASS,
    RunConfig,
    fm_redraws,
    fm_repair_rounds,
    model_class,
)


@pytest.mark.parametrize(
    ("fm", "expected_class"),
    [
        ({"model": "qwen2.5-coder-1.5b"}, "small"),  # a registry name: served here on the CPU
        ({"model": "openai/gpt-4o-mini"}, "large"),  # hosted
        ({"model": "qwen2.5-coder-1.5b", "api_base": "http://127.0.0.1:8080"}, "large"),  # someone else's server
        ({"model": "openai/gpt-4o-mini", "model_class": "small"}, "small"),  # said outright
    ],
)
def test_unset_operators_repairs_and_redraws_follow_the_model_class(fm: dict[str, str], expected_class: str) -> None:
    config = RunConfig.model_validate({"benchmark": "circle_packing", "fm": fm})
    assert model_class(config.fm) == expected_class
    assert config.search.operators == dict(OPERATORS_BY_MODEL_CLASS[expected_class])
    assert config.fm.repair_rounds == REPAIR_ROUNDS_BY_MODEL_CLASS[expected_class]
    assert config.fm.redraws == REDRAWS_BY_MODEL_CLASS[expected_class]


def test_the_small_class_proposes_without_repairs_and_the_large_with_one_round() -> None:
    # bench/fm_time.py over the generality suite: a 1.5B model on two cores spent a quarter of its FM time on
    # repairs for a tenth of its valid children (docs/results/generality.md).
    assert REPAIR_ROUNDS_BY_MODEL_CLASS == {"small": 0, "large": 1}


def test_the_small_class_draws_a_reply_it_cannot_use_once_more_and_the_large_repairs_it() -> None:
    # The generality suite: a 1.5B model's redraws from its cached prompt made valid children at less FM time
    # each than its fresh proposals (docs/results/generality.md, "Redraws").
    assert REDRAWS_BY_MODEL_CLASS == {"small": 1, "large": 0}


def test_repair_rounds_and_redraws_set_by_the_user_are_kept_whatever_the_class() -> None:
    config = RunConfig.model_validate({"benchmark": "circle_packing", "fm": {"repair_rounds": 2, "redraws": 0}})
    assert config.fm.repair_rounds == 2 and fm_repair_rounds(config.fm) == 2
    assert config.fm.redraws == 0 and fm_redraws(config.fm) == 0


def test_the_chosen_rounds_are_frozen_into_the_stored_config() -> None:
    # A resumed run reads its stored config: the rounds it started with, whatever the default is by then.
    stored = RunConfig.model_validate({"benchmark": "circle_packing"}).to_json()
    assert '"repair_rounds": 0' in stored
    assert RunConfig.from_json(stored).fm.repair_rounds == 0
    older = stored.replace('"repair_rounds": 0', '"repair_rounds": 1')  # a run started when the default was 1
    assert RunConfig.from_json(older).fm.repair_rounds == 1


def test_a_run_stored_before_redraws_existed_resumes_without_them() -> None:
    stored = RunConfig.model_validate({"benchmark": "circle_packing"}).to_json()
    assert '"redraws": 1' in stored and RunConfig.from_json(stored).fm.redraws == 1
    older = stored.replace('    "redraws": 1,\n', "").replace(',\n    "redraws": 1\n', "\n")
    assert "redraws" not in older
    assert RunConfig.from_json(older).fm.redraws == 0
