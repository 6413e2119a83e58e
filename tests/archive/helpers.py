"""What the archive tests share besides fixtures: a seed's files, children's files, an evaluation, row counts."""

from __future__ import annotations

from cambrian.archive.models import AgentStatus, Evaluation
from cambrian.archive.store import Archive

SEED_FILES = {"main.py": "def solve():\n    return 1\n"}


def where(url: str) -> str:
    """How an archive names itself in messages: the file for SQLite, the URL (no password) otherwise."""
    return url.removeprefix("sqlite:///")


def count_rows(archive: Archive, table: str) -> int:
    with archive.engine.connect() as connection:
        return int(connection.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() or 0)


def files_with(value: int) -> dict[str, str]:
    return {"main.py": f"def solve():\n    return {value}\n"}


def evaluate(archive: Archive, agent_id: int, score: float) -> None:
    archive.mark_evaluating(agent_id)
    archive.finish_evaluation(
        agent_id,
        status=AgentStatus.evaluated,
        score=score,
        stage_reached=1,
        evaluations=[Evaluation(task_id="t0", score=score, passed=score > 0.5)],
    )
