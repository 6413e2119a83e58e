"""The read-side half of `Archive`: lineage (children, ancestors, subtree, best path), pending work,
iterations, task results, descriptors and the numpy view of a run.

Rarely called, so they keep the ORM for readability (the per-candidate path is Core, in `store`);
each reads in one transaction of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import numpy as np
from sqlalchemy import Connection, and_, func, literal, or_
from sqlalchemy import select as core_select
from sqlmodel import Session, col, select

from cambrian.archive._statements import _AGENT, _DESCRIPTOR, _EVALUATION
from cambrian.archive.models import Agent, AgentStatus, Evaluation
from cambrian.archive.view import NO_PARENT, ArchiveView


class QueriesMixin:
    """Read queries of `Archive` over a run's agents (one read transaction each)."""

    # Provided by Archive: an ORM read session, a Core transaction, and one agent by id.
    _read: Callable[[], AbstractContextManager[Session]]
    _transaction: Callable[..., AbstractContextManager[Connection]]
    get_agent: Callable[[int], Agent]

    def agents(self, run_id: int, *, status: AgentStatus | Sequence[AgentStatus] | None = None) -> list[Agent]:
        """The run's agents ordered by id, optionally only those with `status` (one or several)."""
        query = select(Agent).where(Agent.run_id == run_id)
        if status is not None:
            wanted = [status] if isinstance(status, (str, AgentStatus)) else list(status)
            query = query.where(col(Agent.status).in_([AgentStatus(s) for s in wanted]))
        with self._read() as session:
            return list(session.exec(query.order_by(col(Agent.id))))

    def seeds(self, run_id: int) -> list[Agent]:
        """The run's seed agents (operator "seed", iteration 0), ordered by id: read by index, however large
        the run."""
        query = select(Agent).where(Agent.run_id == run_id, Agent.iteration == 0, Agent.operator == "seed")
        with self._read() as session:
            return list(session.exec(query.order_by(col(Agent.id))))

    def children(self, agent_id: int) -> list[Agent]:
        """Agents whose (first) parent is `agent_id`, ordered by id."""
        with self._read() as session:
            return list(session.exec(select(Agent).where(Agent.parent_id == agent_id).order_by(col(Agent.id))))

    def ancestors(self, agent_id: int) -> list[Agent]:
        """The agent's first-parent chain: its parent first, up to the root (empty for a seed)."""
        self.get_agent(agent_id)
        chain = select(Agent.id, Agent.parent_id, literal(0).label("depth")).where(Agent.id == agent_id)
        chain = chain.cte("chain", recursive=True)
        step = select(Agent.id, Agent.parent_id, (chain.c.depth + 1).label("depth")).join(
            chain, Agent.id == chain.c.parent_id
        )
        chain = chain.union_all(step)
        query = select(Agent).join(chain, Agent.id == chain.c.id).where(chain.c.depth > 0).order_by(chain.c.depth)
        with self._read() as session:
            return list(session.exec(query))

    def subtree(self, agent_id: int) -> list[Agent]:
        """The agent and all its (first-parent) descendants, ordered by id."""
        self.get_agent(agent_id)
        tree = select(Agent.id).where(Agent.id == agent_id).cte("tree", recursive=True)
        tree = tree.union_all(select(Agent.id).join(tree, Agent.parent_id == tree.c.id))
        with self._read() as session:
            return list(session.exec(select(Agent).join(tree, Agent.id == tree.c.id).order_by(col(Agent.id))))

    def best(self, run_id: int, n: int = 1) -> list[Agent]:
        """Up to `n` evaluated agents, best score first; ties go to the lower id."""
        query = (
            select(Agent)
            .where(Agent.run_id == run_id, Agent.status == AgentStatus.evaluated)
            .order_by(col(Agent.score).desc(), col(Agent.id))
            .limit(n)
        )
        with self._read() as session:
            return list(session.exec(query))

    def best_path(self, run_id: int) -> list[Agent]:
        """The lineage root ... the best agent (empty when nothing is evaluated yet)."""
        best = self.best(run_id, 1)
        if not best:
            return []
        return [*reversed(self.ancestors(best[0].key)), best[0]]

    def pending(self, run_id: int, *, max_attempts: int) -> list[Agent]:
        """Agents to (re)evaluate, by id: proposed, evaluating, and failed with attempts left."""
        query = select(Agent).where(
            Agent.run_id == run_id,
            or_(
                col(Agent.status).in_([AgentStatus.proposed, AgentStatus.evaluating]),
                and_(col(Agent.status) == AgentStatus.failed, col(Agent.eval_attempts) < max_attempts),
            ),
        )
        with self._read() as session:
            return list(session.exec(query.order_by(col(Agent.id))))

    def iterations_done(self, run_id: int) -> int:
        """How many iterations the search made a proposal in (iteration > 0), whatever became of it.

        An iteration whose child was rejected as a near-duplicate and re-proposed counts once.
        """
        query = select(func.count(func.distinct(Agent.iteration))).where(Agent.run_id == run_id, Agent.iteration > 0)
        with self._read() as session:
            return session.exec(query).one()

    def max_iteration(self, run_id: int) -> int:
        """The highest iteration number stored for the run (0 with only seeds or nothing)."""
        with self._read() as session:
            return session.exec(select(func.max(Agent.iteration)).where(Agent.run_id == run_id)).one() or 0

    def evaluations(self, agent_id: int) -> list[Evaluation]:
        """The agent's task rows, in the order they were written."""
        with self._read() as session:
            return list(session.exec(select(Evaluation).where(Evaluation.agent_id == agent_id).order_by(Evaluation.id)))

    def search_task_results(self, run_id: int) -> list[tuple[int, str, float, bool, bool]]:
        """(agent_id, task_id, score, passed, executed) of every search-split task run of the run's
        evaluated agents, by agent id: what behaviour vectors and HGM's pooled task counts are built from."""
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
        with self._transaction(write=False) as connection:
            return [(int(r[0]), str(r[1]), float(r[2]), bool(r[3]), bool(r[4])) for r in connection.execute(query)]

    def descriptors(self, run_id: int) -> dict[int, dict[str, float]]:
        """agent id -> its stored behaviour features, for the run's evaluated agents."""
        query = (
            core_select(_DESCRIPTOR.c.agent_id, _DESCRIPTOR.c.name, _DESCRIPTOR.c.value)
            .join(_AGENT, _AGENT.c.id == _DESCRIPTOR.c.agent_id)
            .where(_AGENT.c.run_id == run_id, _AGENT.c.status == AgentStatus.evaluated)
        )
        features: dict[int, dict[str, float]] = {}
        with self._transaction(write=False) as connection:
            for agent_id, name, value in connection.execute(query):
                features.setdefault(int(agent_id), {})[str(name)] = float(value)
        return features

    def view(self, run_id: int) -> ArchiveView:
        """The run's evaluated agents as numpy columns, with evaluated-children counts. A behavioural no-op
        (`behaves_as`: a child that repeats its parent's outputs on every task) is left out: it is its parent.

        One indexed query; the children are counted in numpy (a self-join in SQL lets SQLite pick a
        quadratic plan: a minute at 10k agents).
        """
        query = (
            select(Agent.id, Agent.score, Agent.parent_id)
            .where(Agent.run_id == run_id, Agent.status == AgentStatus.evaluated, col(Agent.behaves_as).is_(None))
            .order_by(col(Agent.id))
        )
        with self._read() as session:
            rows = session.exec(query).all()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        scores = np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))
        parents = np.fromiter((NO_PARENT if r[2] is None else r[2] for r in rows), dtype=np.int64, count=len(rows))
        return ArchiveView.from_arrays(ids, scores, parent_ids=parents)
