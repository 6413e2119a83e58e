"""`Lifecycle`: the archive's runs, and its writes of genomes and agents, as units of work for `Database.run`.

Runs are written rarely, so they keep the ORM for readability; a genome and the agent lifecycle's commands
(archive/commands.py) run prebuilt Core statements on the archive's kept connection, the per-candidate path.
Each public method but `write_batch` is one unit of work: a write transaction, after any reads.
`write_batch` is group commit (archive/commands.py says what a batch promises): the batch as one unit, and
after it rolled back each command as a unit of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy.exc import IntegrityError
from sqlmodel import col, delete, select

from cambrian.archive._database import Database
from cambrian.archive.commands import LifecycleCommand, check_commands, store_genome
from cambrian.archive.errors import AgentNotFound, ArchiveUnreachable, InvalidTransition, RunExists, RunNotFound
from cambrian.archive.models import (
    Agent,
    AgentDescriptor,
    AgentStatus,
    Evaluation,
    IslandMigrant,
    LLMCall,
    Run,
    RunStatus,
    utcnow,
)


class Lifecycle:
    """Runs, genomes and the agent lifecycle of one archive's `Database`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def create_run(self, name: str, benchmark: str, seed: int, config_json: str, cambrian_version: str) -> Run:
        with self._db.write_session() as session:
            if session.exec(select(Run.id).where(Run.name == name)).first() is not None:
                raise _run_exists(name)
            run = Run(
                name=name, benchmark=benchmark, seed=seed, config_json=config_json, cambrian_version=cambrian_version
            )
            session.add(run)
            try:
                session.flush()
            except IntegrityError:  # another process stored the name since our check (no lock up front here)
                raise _run_exists(name) from None
        return run

    def get_run(self, name_or_id: str | int) -> Run:
        with self._db.read_session() as session:
            run = session.exec(select(Run).where(Run.name == str(name_or_id))).first()
            if run is None and str(name_or_id).isdigit():
                run = session.get(Run, int(name_or_id))
        if run is None:
            with self._db.read_session() as session:
                held = list(session.exec(select(Run.name).order_by(col(Run.id)).limit(6)))
            names = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
            raise RunNotFound(
                f"no run named {name_or_id!r} in {self._db.where}"
                + (f" (it holds {names}: was its folder renamed?)" if held else " (it holds no run)"),
                fix="list the stored runs with `cambrian runs`",
            )
        return run

    def list_runs(self) -> list[Run]:
        with self._db.read_session() as session:
            return list(session.exec(select(Run).order_by(col(Run.id))))

    def set_run_status(self, run_id: int, status: RunStatus, error: str | None) -> Run:
        with self._db.write_session() as session:
            run = session.get(Run, run_id)
            if run is None:
                raise _no_run(run_id)
            run.status, run.error, run.updated_at = RunStatus(status), error, utcnow()
            session.add(run)
        return run

    def update_run_config(self, run_id: int, config_json: str) -> Run:
        with self._db.write_session() as session:
            run = session.get(Run, run_id)
            if run is None:
                raise _no_run(run_id)
            run.config_json, run.updated_at = config_json, utcnow()
            session.add(run)
        return run

    def delete_run(self, run_id: int) -> int:
        with self._db.write_session() as session:
            if session.get(Run, run_id) is None:
                raise _no_run(run_id)
            agents = select(Agent.id).where(col(Agent.run_id) == run_id)
            session.exec(delete(Evaluation).where(col(Evaluation.agent_id).in_(agents)))
            session.exec(delete(AgentDescriptor).where(col(AgentDescriptor.agent_id).in_(agents)))
            session.exec(delete(IslandMigrant).where(col(IslandMigrant.run_id) == run_id))
            session.exec(delete(LLMCall).where(col(LLMCall.run_id) == run_id))
            gone = session.exec(delete(Agent).where(col(Agent.run_id) == run_id))
            session.exec(delete(Run).where(col(Run.id) == run_id))
            return int(gone.rowcount or 0)

    def add_island_migrants(self, migrants: Sequence[IslandMigrant]) -> list[IslandMigrant]:
        """Copies of `migrants`, stored in one write transaction once each checks out (else nothing is)."""
        rows = [
            IslandMigrant(
                agent_id=m.agent_id,
                island=m.island,
                run_id=m.run_id,
                from_island=m.from_island,
                after_proposals=m.after_proposals,
                created_at=m.created_at,
            )
            for m in migrants
        ]
        if not rows:
            return []
        ids = {row.agent_id for row in rows}
        with self._db.write_session() as session:
            agents = {a.id: a for a in session.exec(select(Agent).where(col(Agent.id).in_(ids)))}
            joined = session.exec(select(IslandMigrant).where(col(IslandMigrant.agent_id).in_(ids)))
            on_island = {(m.agent_id, m.island) for m in joined}
            for row in rows:
                _check_migrant(row, agents.get(row.agent_id), on_island)
                on_island.add((row.agent_id, row.island))
            session.add_all(rows)
        return rows

    def put_genome(self, files: Mapping[str, str], entry: str) -> str:
        with self._db.transaction(write=True) as connection:
            return store_genome(connection, files, entry)

    def apply(self, command: LifecycleCommand) -> Agent:
        """One command in a write transaction of its own: a unit of work."""
        with self._db.transaction(write=True) as connection:
            return command.apply(connection)

    def apply_together(self, commands: Sequence[LifecycleCommand]) -> list[Agent]:
        """Every command, in order, in one write transaction, all of them or none: a unit of work."""
        with self._db.transaction(write=True) as connection:
            return [command.apply(connection) for command in commands]

    def write_batch(self, commands: Sequence[LifecycleCommand]) -> list[Agent | Exception]:
        """`commands` applied together, or else each alone, each unit run through the retry policy; per command
        its agent or its exception (archive/commands.py). Raises only ArchiveUnreachable or an interrupt."""
        check_commands(commands)
        if len(commands) > 1:
            try:
                return list(self._db.run(self.apply_together, commands))
            except ArchiveUnreachable:
                raise
            except Exception:  # noqa: BLE001 - rolled back: each command runs alone and gets its own outcome
                pass
        return [self._apply_alone(command) for command in commands]

    def _apply_alone(self, command: LifecycleCommand) -> Agent | Exception:
        try:
            return self._db.run(self.apply, command)
        except ArchiveUnreachable:
            raise
        except Exception as error:  # noqa: BLE001 - handed to the caller as its command's outcome
            return error


def _run_exists(name: str) -> RunExists:
    return RunExists(
        f"a run named {name!r} already exists",
        fix=f"continue it with `cambrian resume {name}`, or pick another --name",
    )


def _check_migrant(row: IslandMigrant, agent: Agent | None, on_island: set[tuple[int, int]]) -> None:
    """A migrant must be an evaluated agent of its run with a home island, joining an island (>= 0) it is not on."""
    if agent is None or agent.run_id != row.run_id:
        raise AgentNotFound(
            f"agent {row.agent_id} is not an agent of run {row.run_id}", fix="migrate agents of the run's archive"
        )
    if agent.status != AgentStatus.evaluated:
        raise InvalidTransition(
            f"agent {row.agent_id} is {agent.status.value}: only evaluated agents migrate",
            fix="choose migrants among the island's evaluated members",
        )
    if min(row.island, row.from_island, row.after_proposals) < 0:
        raise ValueError(f"a migrant's islands and round are integers >= 0, got {row!r}")
    if agent.island is None:
        raise InvalidTransition(
            f"agent {row.agent_id} is on every island already (a seed, or an agent of a run without islands)",
            fix="migrate an agent that has a home island",
        )
    if agent.island == row.island or (row.agent_id, row.island) in on_island:
        raise InvalidTransition(
            f"agent {row.agent_id} is on island {row.island} already", fix="migrate an agent the island lacks"
        )


def _no_run(run_id: int) -> RunNotFound:
    return RunNotFound(f"no run with id {run_id}", fix="list the stored runs with `cambrian runs`")
