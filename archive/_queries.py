"""`Queries`: the archive's reads: agents and genomes, lineage (children, ancestors, subtree, best path),
pending work, iterations, task results, descriptors, island migrants and the numpy view of a run.

The per-candidate reads (an agent, a genome, a parent's prompt context, the duplicate gate) run prebuilt Core
statements (`_statements`) on the archive's kept connection; the rest are rarely called, so they keep the ORM
for readability. Each method is one unit of work for `Database.run`, reading in transactions of its own.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import NamedTuple

import numpy as np
from sqlalchemy import Connection, and_, func, literal, or_
from sqlalchemy import select as core_select
from sqlmodel import col, select

from cambrian.archive._database import Database
from cambrian.archive._statements import (
    _AGENT,
    _DESCRIPTOR,
    _EVALUATION,
    _FIND_GENOME,
    _RECENT_INVALID_CHILDREN,
    _SELECT_AGENT,
    _SELECT_GENOME,
    no_agent,
)
from cambrian.archive.errors import GenomeNotFound
from cambrian.archive.models import Agent, AgentStatus, Evaluation, IslandMigrant, detached
from cambrian.archive.view import NO_PARENT, ArchiveView


class AgentContext(NamedTuple):
    """An agent with what a prompt shows of it (`Archive.agent_context`)."""

    agent: Agent
    genome: tuple[dict[str, str], str] | None  # (files, entry); None when known to the caller or never stored
    invalid_children: list[Agent]  # newest first


class Queries:
    """Reads of one archive's `Database` (each in read transactions of its own)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def get_agent(self, agent_id: int) -> Agent:
        with self._db.transaction(write=False) as connection:
            row = _SELECT_AGENT.run(connection, {"agent_id": agent_id}).first()
        if row is None:
            raise no_agent(agent_id)
        return detached(Agent, row._mapping)

    def get_genome(self, hash: str) -> tuple[dict[str, str], str]:
        with self._db.transaction(write=False) as connection:
            return _read_genome(connection, hash)

    def find_genome(self, run_id: int, genome_hash: str) -> Agent | None:
        with self._db.transaction(write=False) as connection:
            row = _FIND_GENOME.run(connection, {"run_id": run_id, "genome_hash": genome_hash}).first()
        return None if row is None else detached(Agent, row._mapping)

    def agent_context(self, agent_id: int, *, invalid_children: int, known_genomes: Container[str]) -> AgentContext:
        with self._db.transaction(write=False) as connection:
            row = _SELECT_AGENT.run(connection, {"agent_id": agent_id}).first()
            if row is None:
                raise no_agent(agent_id)
            genome = None
            if row.genome_hash is not None and row.genome_hash not in known_genomes:
                genome = _read_genome(connection, row.genome_hash)
            params = {"agent_id": agent_id, "n": invalid_children}
            children = _RECENT_INVALID_CHILDREN.run(connection, params).all() if invalid_children > 0 else ()
        return AgentContext(
            detached(Agent, row._mapping), genome, [detached(Agent, child._mapping) for child in children]
        )

    def recent_invalid_children(self, agent_id: int, n: int) -> list[Agent]:
        with self._db.transaction(write=False) as connection:
            rows = _RECENT_INVALID_CHILDREN.run(connection, {"agent_id": agent_id, "n": n}).all()
        return [detached(Agent, row._mapping) for row in rows]

    def agents(self, run_id: int, *, status: AgentStatus | Sequence[AgentStatus] | None = None) -> list[Agent]:
        query = select(Agent).where(Agent.run_id == run_id)
        if status is not None:
            wanted = [status] if isinstance(status, (str, AgentStatus)) else list(status)
            query = query.where(col(Agent.status).in_([AgentStatus(s) for s in wanted]))
        with self._db.read_session() as session:
            return list(session.exec(query.order_by(col(Agent.id))))

    def seeds(self, run_id: int) -> list[Agent]:
        query = select(Agent).where(Agent.run_id == run_id, Agent.iteration == 0, Agent.operator == "seed")
        with self._db.read_session() as session:
            return list(session.exec(query.order_by(col(Agent.id))))

    def children(self, agent_id: int) -> list[Agent]:
        with self._db.read_session() as session:
            return list(session.exec(select(Agent).where(Agent.parent_id == agent_id).order_by(col(Agent.id))))

    def ancestors(self, agent_id: int) -> list[Agent]:
        self.get_agent(agent_id)
        chain = select(Agent.id, Agent.parent_id, literal(0).label("depth")).where(Agent.id == agent_id)
        chain = chain.cte("chain", recursive=True)
        step = select(Agent.id, Agent.parent_id, (chain.c.depth + 1).label("depth")).join(
            chain, Agent.id == chain.c.parent_id
        )
        chain = chain.union_all(step)
        query = select(Agent).join(chain, Agent.id == chain.c.id).where(chain.c.depth > 0).order_by(chain.c.depth)
        with self._db.read_session() as session:
            return list(session.exec(query))

    def subtree(self, agent_id: int) -> list[Agent]:
        self.get_agent(agent_id)
        tree = select(Agent.id).where(Agent.id == agent_id).cte("tree", recursive=True)
        tree = tree.union_all(select(Agent.id).join(tree, Agent.parent_id == tree.c.id))
        with self._db.read_session() as session:
            return list(session.exec(select(Agent).join(tree, Agent.id == tree.c.id).order_by(col(Agent.id))))

    def best(self, run_id: int, n: int = 1) -> list[Agent]:
        query = (
            select(Agent)
            .where(Agent.run_id == run_id, Agent.status == AgentStatus.evaluated)
            .order_by(col(Agent.score).desc(), col(Agent.id))
            .limit(n)
        )
        with self._db.read_session() as session:
            return list(session.exec(query))

    def best_path(self, run_id: int) -> list[Agent]:
        best = self.best(run_id, 1)
        if not best:
            return []
        return [*reversed(self.ancestors(best[0].key)), best[0]]

    def pending(self, run_id: int, *, max_attempts: int) -> list[Agent]:
        query = select(Agent).where(
            Agent.run_id == run_id,
            or_(
                col(Agent.status).in_([AgentStatus.proposed, AgentStatus.evaluating]),
                and_(col(Agent.status) == AgentStatus.failed, col(Agent.eval_attempts) < max_attempts),
            ),
        )
        with self._db.read_session() as session:
            return list(session.exec(query.order_by(col(Agent.id))))

    def iterations_done(self, run_id: int) -> int:
        query = select(func.count(func.distinct(Agent.iteration))).where(Agent.run_id == run_id, Agent.iteration > 0)
        with self._db.read_session() as session:
            return session.exec(query).one()

    def max_iteration(self, run_id: int) -> int:
        with self._db.read_session() as session:
            return session.exec(select(func.max(Agent.iteration)).where(Agent.run_id == run_id)).one() or 0

    def evaluations(self, agent_id: int) -> list[Evaluation]:
        with self._db.read_session() as session:
            return list(session.exec(select(Evaluation).where(Evaluation.agent_id == agent_id).order_by(Evaluation.id)))

    def search_task_results(self, run_id: int) -> list[tuple[int, str, float, bool, bool]]:
        query = (
            core_select(
                _EVALUATION.c.agent_id,
                _EVALUATION.c.task_id,
                _EVALUATION.c.score,
                _EVALUATION.c.passed,
                _EVALUATION.c.executed,
            )
            .join(_AGENT, _AGENT.c.id == _EVALUATION.c.agent_id)
            .where(_AGENT.c.run_id == run_id, _AGENT.c.status == AgentStatus.evaluated, _EVALUATION.c.split == "search")
            .order_by(_EVALUATION.c.agent_id, _EVALUATION.c.id)
        )
        with self._db.transaction(write=False) as connection:
            return [(int(r[0]), str(r[1]), float(r[2]), bool(r[3]), bool(r[4])) for r in connection.execute(query)]

    def island_migrants(self, run_id: int) -> list[IslandMigrant]:
        query = (
            select(IslandMigrant)
            .where(IslandMigrant.run_id == run_id)
            .order_by(col(IslandMigrant.after_proposals), col(IslandMigrant.from_island), col(IslandMigrant.agent_id))
        )
        with self._db.read_session() as session:
            return list(session.exec(query))

    def descriptors(self, run_id: int) -> dict[int, dict[str, float]]:
        query = (
            core_select(_DESCRIPTOR.c.agent_id, _DESCRIPTOR.c.name, _DESCRIPTOR.c.value)
            .join(_AGENT, _AGENT.c.id == _DESCRIPTOR.c.agent_id)
            .where(_AGENT.c.run_id == run_id, _AGENT.c.status == AgentStatus.evaluated)
        )
        features: dict[int, dict[str, float]] = {}
        with self._db.transaction(write=False) as connection:
            for agent_id, name, value in connection.execute(query):
                features.setdefault(int(agent_id), {})[str(name)] = float(value)
        return features

    def view(self, run_id: int) -> ArchiveView:
        # One indexed query; the children are counted in numpy (a self-join in SQL lets SQLite pick a
        # quadratic plan: a minute at 10k agents).
        query = (
            select(Agent.id, Agent.score, Agent.parent_id)
            .where(Agent.run_id == run_id, Agent.status == AgentStatus.evaluated, col(Agent.behaves_as).is_(None))
            .order_by(col(Agent.id))
        )
        with self._db.read_session() as session:
            rows = session.exec(query).all()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        scores = np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))
        parents = np.fromiter((NO_PARENT if r[2] is None else r[2] for r in rows), dtype=np.int64, count=len(rows))
        return ArchiveView.from_arrays(ids, scores, parent_ids=parents)


def _read_genome(connection: Connection, hash: str) -> tuple[dict[str, str], str]:
    """(files, entry) of the stored genome with this hash; GenomeNotFound otherwise."""
    rows = _SELECT_GENOME.run(connection, {"hash": hash}).all()
    if not rows:
        raise GenomeNotFound(
            f"no genome with hash {hash!r}", fix="check the agent's genome_hash (`cambrian show RUN AGENT`)"
        )
    return {row.path: row.text for row in rows if row.path is not None}, rows[0].entry
