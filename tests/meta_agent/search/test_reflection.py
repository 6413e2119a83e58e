"""The run's notes (`search.reflect_every`): the FM reads the recent edits and their effect, and later prompts
show what it wrote. Exact replies are needed, so the FM is scripted (`_fake_fm`); the sandbox and archive are
real."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cambrian.meta_agent.errors import RunAborted
from cambrian.meta_agent.search._reflection import MAX_NOTES_CHARS, RunNotes, changed_lines, clean_notes, result_text
from cambrian.meta_agent.testing import ScriptedFM
from tests.meta_agent.search.test_loop_fake_fm import VALID, fenced, make_loop


def test_an_outcome_reads_as_the_changed_lines_and_the_score_it_made() -> None:
    before = {"p.py": "a = 1\nb = 2\n", "q.py": "x = 0\n"}
    after = {"p.py": "a = 1\nb = 3\n", "q.py": "x = 0\n"}
    assert changed_lines(before, after) == "-b = 2\n+b = 3"
    assert result_text(1.0, 1.25, None) == "1 -> 1.25 (+0.25)"
    assert result_text(1.0, 1.0, None) == "no change in score (1)"
    # Within rounding, as the archive reads it (archive.lineage.improves):
    assert result_text(1.0917, 1.0917 + 1e-10, None) == "no change in score (1.0917)"
    assert result_text(1.0, None, "crashed: KeyError: 'x'\ntraceback") == "did not count: crashed: KeyError: 'x'"
    many = {"p.py": "\n".join(f"v{i} = {i}" for i in range(20))}
    assert changed_lines({"p.py": ""}, many).endswith("... (14 more changed lines)")


def test_notes_are_prose_cut_to_length() -> None:
    assert clean_notes("Raise the radius.\n```python\nr = 2\n```\n\nKeep rings.") == "Raise the radius.\nKeep rings."
    assert clean_notes("```python\nx = 1\n```") is None
    long = "\n".join(f"line {i} " + "x" * 50 for i in range(40))
    cleaned = clean_notes(long)
    assert cleaned is not None and len(cleaned) <= MAX_NOTES_CHARS and cleaned.endswith("x" * 50)


def test_every_n_proposals_the_fm_writes_notes_that_later_prompts_show_fake_fm(tmp_path: Path) -> None:
    notes = "Smaller radius factors crashed; a larger grid spacing raised the score."
    replies = [fenced(VALID.replace("0.999", f"0.99{k}")) for k in range(1, 3)]
    fm = ScriptedFM([*replies, notes, *[fenced(VALID.replace("0.999", f"0.98{k}")) for k in range(1, 4)]])
    search = {
        "strategy": "greedy",
        "operators": {"rewrite": 1.0},
        "max_pending": 1,
        "reflect_every": 2,
        "bandit": {"algorithm": "off"},
    }
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 4}, search=search)
    asyncio.run(loop.run_until_done())
    purposes = [purpose for purpose, _ in fm.requests]
    assert purposes[:3] == ["mutate", "mutate", "reflect"]
    reflection = fm.requests[2][1][-1]["content"]
    assert "## Recent changes and what they did to the score" in reflection
    assert "1. rewrite: 2.16667 -> " in reflection and "+def pack_circles(n):" in reflection  # score, changed lines
    later = [messages for purpose, messages in fm.requests[3:] if purpose == "mutate"]
    assert later and all(notes in messages[-1]["content"] for messages in later)
    assert "## Notes from this run so far" in later[0][-1]["content"]
    assert notes not in fm.requests[0][1][-1]["content"]  # none before the first reflection
    archive.close()


def test_a_bug_in_the_notes_stops_the_run_by_name_fake_fm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An FM that cannot write notes leaves them as they were (a `note` event); anything else is a bug, which
    # stops the run as RunAborted instead of vanishing with the notes' task.
    def broken(self: RunNotes, contract: str) -> list[dict[str, str]]:
        raise KeyError("outcomes")

    monkeypatch.setattr(RunNotes, "messages", broken)
    fm = ScriptedFM([fenced(VALID.replace("0.999", f"0.99{k}")) for k in range(1, 9)])
    search = {"strategy": "greedy", "operators": {"rewrite": 1.0}, "max_pending": 1, "reflect_every": 2}
    loop, archive = make_loop(tmp_path, fm, budget={"iterations": 6}, search=search)
    with pytest.raises(RunAborted, match="writing the run's notes raised KeyError: 'outcomes'"):
        asyncio.run(loop.run_until_done())
    assert [purpose for purpose, _ in fm.requests][:2] == ["mutate", "mutate"]  # stopped after the notes failed
    archive.close()


def test_a_resumed_run_reads_its_notes_back_from_the_ledger(tmp_path: Path) -> None:
    from cambrian.archive.models import LLMCall, LLMResponse
    from cambrian.archive.store import Archive

    with Archive.at(tmp_path / "a.db") as archive:
        run_id = int(archive.create_run(name="r", benchmark="b", seed=0, config_json="{}").id)
        assert RunNotes.restore(archive, run_id, ScriptedFM([]), every=5).text is None
        archive.record_llm_call(LLMCall(run_id=run_id, purpose="reflect", model="m", request_hash="h1"))
        archive.store_response(LLMResponse(request_hash="h1", model="m", text="Keep the rings; the grid is stuck."))
        assert RunNotes.restore(archive, run_id, ScriptedFM([]), every=5).text == "Keep the rings; the grid is stuck."
