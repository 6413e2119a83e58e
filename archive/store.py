"""`Archive`: the lineage store over any SQLAlchemy URL (SQLite in WAL mode by default).

Every state change is one transaction, so a kill at any instant loses only what was not yet committed
and never leaves half a change; `write_batch` commits several lifecycle changes in one, each still
whole. Returned rows are detached copies: read their attributes freely after the call.

`Archive` is a face over collaborators, one idea each, that all work through one `Database`
(`_database`: the engine, the kept connection, transactions and sessions, the retry policy):
`Lifecycle` (`_lifecycle`: runs, genomes, and the agent lifecycle's writes, which are typed commands:
`commands`), `Queries` (`_queries`: agents, genomes, lineage, results, the numpy view) and `Ledger`
(`ledger`: the FM calls and the response cache). Each public method that reads or writes is one unit of
work of a collaborator, run through the retry policy where it is written (`self._db.run(...)`), save
`write_batch`, whose batch and, after a rollback, each command run as units of their own
(`Lifecycle.write_batch`). On PostgreSQL a unit rides out a server restart: archive/_retry.py says how,
and why a repeated unit can neither lose nor double a write.

The per-candidate path (the lifecycle commands, get_agent, agent_context, the FM ledger) runs prebuilt
SQLAlchemy Core statements (`_statements`), compiled once per dialect and run on the DBAPI cursor of the
archive's own connection (`_prepared`): the ORM's session and unit of work, and even Core's per-call
execution machinery, cost several times what SQLite does, and the loop pays them for every candidate.

Opening runs no DDL unless the schema is missing or older than this code: archive/schema.py creates or
upgrades it in one guarded transaction (Alembic revisions, archive/migrations). `readonly=True` opens for
browsing an archive a search may be writing: no DDL, no write lock, no write at all.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from sqlalchemy import Engine

from cambrian.archive._database import Database
from cambrian.archive._engine import parse_store_url
from cambrian.archive._lifecycle import Lifecycle
from cambrian.archive._queries import AgentContext, Queries
from cambrian.archive._retry import RECONNECT_S
from cambrian.archive._statements import TRANSITIONS
from cambrian.archive.commands import (
    AddAgent,
    FinishEvaluation,
    LifecycleCommand,
    MarkEvaluating,
    MarkFailed,
    SetHoldoutScore,
)
from cambrian.archive.genomes import check_genome_paths, genome_hash
from cambrian.archive.ledger import CostSummary, Ledger, ModelCost
from cambrian.archive.models import (
    Agent,
    AgentStatus,
    Evaluation,
    GreedyAnswer,
    IslandMigrant,
    LLMCall,
    LLMRequest,
    LLMResponse,
    Run,
    RunStatus,
)
from cambrian.archive.schema import SchemaReport
from cambrian.archive.view import ArchiveView

__all__ = [
    "TRANSITIONS",
    "AgentContext",
    "Archive",
    "CostSummary",
    "ModelCost",
    "check_genome_paths",
    "genome_hash",
    "parse_store_url",
]


class Archive:
    """The lineage store of runs, agents, genomes, evaluations and the FM ledger."""

    def __init__(self, url: str, *, readonly: bool = False, reconnect_s: float = RECONNECT_S) -> None:
        """Open the database at SQLAlchemy `url`; a writable open creates or upgrades its schema.

        The schema step (archive/schema.py) runs no DDL on an archive at the current version;
        `schema` says what it found and did. ArchiveTooNew for an archive newer than this code.
        readonly: for browsing an archive a search may be writing: no DDL, no write lock, and
        every write raises ArchiveReadOnly; ArchiveNotFound when the file does not exist (it
        is not created), ArchiveOutdated when its schema is older (`cambrian db upgrade RUN`).
        For SQLite a writable open creates the parent folder, and its connections get WAL
        journaling, synchronous=NORMAL and foreign keys on; every connection a 10 s busy timeout.
        For a database server (PostgreSQL), ArchiveUnreachable when it cannot be reached now; once
        open, a call that meets a disconnect reconnects and runs again for up to `reconnect_s` seconds.
        """
        self.url = url
        self._db = Database(url, readonly=readonly, reconnect_s=reconnect_s)
        self.schema: SchemaReport = self._db.schema
        self._lifecycle = Lifecycle(self._db)
        self._queries = Queries(self._db)
        self._ledger = Ledger(self._db)

    @classmethod
    def at(cls, path: Path, *, readonly: bool = False) -> Archive:
        """Open the SQLite archive file at `path` (e.g. runs/<name>/archive.db); readonly as in `Archive(...)`."""
        return cls(f"sqlite:///{Path(path).expanduser().resolve()}", readonly=readonly)

    @property
    def readonly(self) -> bool:
        """True when opened with readonly=True: every write raises ArchiveReadOnly."""
        return self._db.readonly

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, for bulk tools (benchmarks, migrations); everything else uses the methods."""
        return self._db.engine

    def close(self) -> None:
        """Close every connection (a later call would open new ones)."""
        self._db.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Archive({self._db.engine.url.render_as_string(hide_password=True)!r})"

    # ----- runs -----

    def create_run(self, *, name: str, benchmark: str, seed: int, config_json: str, cambrian_version: str = "") -> Run:
        """Store a new run (status running). RunExists if `name` is taken."""
        return self._db.run(self._lifecycle.create_run, name, benchmark, seed, config_json, cambrian_version)

    def get_run(self, name_or_id: str | int) -> Run:
        """The run with this name, or else with this numeric id. RunNotFound otherwise."""
        return self._db.run(self._lifecycle.get_run, name_or_id)

    def list_runs(self) -> list[Run]:
        """Every run, oldest first."""
        return self._db.run(self._lifecycle.list_runs)

    def set_run_status(self, run_id: int, status: RunStatus, error: str | None = None) -> Run:
        """Set a run's status (and error text, None to clear it)."""
        return self._db.run(self._lifecycle.set_run_status, run_id, status, error)

    def delete_run(self, run_id: int) -> int:
        """Delete a run: its agents, their evaluations and descriptors, its FM ledger rows and the run row, in one
        transaction; returns how many agents went. Genomes and cached FM replies are content-addressed and may
        be shared with other runs of the store: they stay (a later run reuses them)."""
        return self._db.run(self._lifecycle.delete_run, run_id)

    def update_run_config(self, run_id: int, config_json: str) -> Run:
        """Replace a run's frozen config (e.g. `cambrian resume` with a larger budget)."""
        return self._db.run(self._lifecycle.update_run_config, run_id, config_json)

    # ----- genomes -----

    def put_genome(self, files: Mapping[str, str], entry: str) -> str:
        """Store a genome and return its hash; storing an existing genome changes nothing."""
        return self._db.run(self._lifecycle.put_genome, files, entry)

    def get_genome(self, hash: str) -> tuple[dict[str, str], str]:
        """(files: path -> text, entry path) of the genome with this hash."""
        return self._db.run(self._queries.get_genome, hash)

    # ----- agents: lifecycle (one transaction per status change; the arguments are the command's) -----

    def add_agent(
        self,
        run_id: int,
        *,
        files: Mapping[str, str] | None = None,
        entry: str | None = None,
        parent_id: int | None = None,
        second_parent_id: int | None = None,
        operator: str = "seed",
        model: str | None = None,
        iteration: int = 0,
        status: AgentStatus = AgentStatus.proposed,
        invalid_reason: str | None = None,
        feedback: str | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cost_usd: float = 0.0,
        proposal_id: str | None = None,
        repair_note: str | None = None,
        fm_seconds: float = 0.0,
        island: int | None = None,
    ) -> Agent:
        """Store an agent and its genome (if `files`) in one transaction: `AddAgent` says what each argument means."""
        command = AddAgent(
            run_id,
            files=files,
            entry=entry,
            parent_id=parent_id,
            second_parent_id=second_parent_id,
            operator=operator,
            model=model,
            iteration=iteration,
            status=status,
            invalid_reason=invalid_reason,
            feedback=feedback,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=cost_usd,
            proposal_id=proposal_id,
            repair_note=repair_note,
            fm_seconds=fm_seconds,
            island=island,
        )
        return self._db.run(self._lifecycle.apply, command)

    def mark_evaluating(self, agent_id: int) -> Agent:
        """proposed/failed/evaluating -> evaluating; counts one more evaluation attempt."""
        return self._db.run(self._lifecycle.apply, MarkEvaluating(agent_id))

    def finish_evaluation(
        self,
        agent_id: int,
        *,
        status: AgentStatus,
        score: float | None = None,
        stage_reached: int = 0,
        invalid_reason: str | None = None,
        feedback: str | None = None,
        eval_seconds: float | None = None,
        evaluations: Sequence[Evaluation] = (),
        descriptor: Mapping[str, float] | None = None,
        repeats: int = 1,
        score_spread: float | None = None,
        behaves_as: int | None = None,
    ) -> Agent:
        """evaluating -> evaluated | invalid | failed, with the task rows, in one transaction: `FinishEvaluation`
        says what each argument means."""
        command = FinishEvaluation(
            agent_id,
            status=status,
            score=score,
            stage_reached=stage_reached,
            invalid_reason=invalid_reason,
            feedback=feedback,
            eval_seconds=eval_seconds,
            evaluations=evaluations,
            descriptor=descriptor,
            repeats=repeats,
            score_spread=score_spread,
            behaves_as=behaves_as,
        )
        return self._db.run(self._lifecycle.apply, command)

    def mark_failed(self, agent_id: int, reason: str) -> Agent:
        """evaluating -> failed (an infrastructure fault; retried). `reason` goes to invalid_reason."""
        return self._db.run(self._lifecycle.apply, MarkFailed(agent_id, reason))

    def set_holdout_score(self, agent_id: int, score: float, *, evaluations: Sequence[Evaluation] = ()) -> Agent:
        """Record an agent's holdout score (never read by selection), with its holdout task rows, which replace
        those of an earlier holdout evaluation (the rows always explain the score)."""
        return self._db.run(self._lifecycle.apply, SetHoldoutScore(agent_id, score, evaluations=evaluations))

    def write_batch(self, commands: Sequence[LifecycleCommand]) -> list[Agent | Exception]:
        """Apply lifecycle `commands` (archive/commands.py) in one transaction, in order; per command, the agent
        it returned or the exception it raised alone: all or nothing for the database, never for the callers.
        TypeError for anything else in `commands`. Raises only what no single command could get past either:
        ArchiveUnreachable when the database stays away, or an interrupt."""
        return self._lifecycle.write_batch(commands)

    # ----- islands -----

    def add_island_migrants(self, migrants: Sequence[IslandMigrant]) -> list[IslandMigrant]:
        """Store one migration round's migrants (each an agent joining an island) in one transaction; returns the
        stored copies. Each agent must be an evaluated agent of the migrant's run, and joins an island at most once
        (AgentNotFound, InvalidTransition otherwise: nothing is stored)."""
        return self._db.run(self._lifecycle.add_island_migrants, migrants)

    def island_migrants(self, run_id: int) -> list[IslandMigrant]:
        """The run's migrants, in the order they migrated (round, then the island they left, then agent id)."""
        return self._db.run(self._queries.island_migrants, run_id)

    # ----- agents: reads -----

    def get_agent(self, agent_id: int) -> Agent:
        """The agent with this id; AgentNotFound otherwise."""
        return self._db.run(self._queries.get_agent, agent_id)

    def find_genome(self, run_id: int, genome_hash: str) -> Agent | None:
        """The earliest agent of the run with this genome, or None (the duplicate gate)."""
        return self._db.run(self._queries.find_genome, run_id, genome_hash)

    def agent_context(
        self, agent_id: int, *, invalid_children: int = 0, known_genomes: Container[str] = ()
    ) -> AgentContext:
        """An agent, its genome (unless its hash is in `known_genomes`) and up to `invalid_children` of its
        newest invalid children, in one read transaction: what a prompt shows of a parent, for one read
        instead of three."""
        context = self._queries.agent_context
        return self._db.run(context, agent_id, invalid_children=invalid_children, known_genomes=known_genomes)

    def recent_invalid_children(self, agent_id: int, n: int) -> list[Agent]:
        """Up to `n` invalid children of the agent, newest first (what recent edits got wrong)."""
        return self._db.run(self._queries.recent_invalid_children, agent_id, n)

    def agents(self, run_id: int, *, status: AgentStatus | Sequence[AgentStatus] | None = None) -> list[Agent]:
        """The run's agents ordered by id, optionally only those with `status` (one or several)."""
        return self._db.run(self._queries.agents, run_id, status=status)

    def seeds(self, run_id: int) -> list[Agent]:
        """The run's seed agents (operator "seed", iteration 0), ordered by id: read by index, however large
        the run."""
        return self._db.run(self._queries.seeds, run_id)

    def children(self, agent_id: int) -> list[Agent]:
        """Agents whose (first) parent is `agent_id`, ordered by id."""
        return self._db.run(self._queries.children, agent_id)

    def ancestors(self, agent_id: int) -> list[Agent]:
        """The agent's first-parent chain: its parent first, up to the root (empty for a seed)."""
        return self._db.run(self._queries.ancestors, agent_id)

    def subtree(self, agent_id: int) -> list[Agent]:
        """The agent and all its (first-parent) descendants, ordered by id."""
        return self._db.run(self._queries.subtree, agent_id)

    def best(self, run_id: int, n: int = 1) -> list[Agent]:
        """Up to `n` evaluated agents, best score first; ties go to the lower id."""
        return self._db.run(self._queries.best, run_id, n)

    def best_path(self, run_id: int) -> list[Agent]:
        """The lineage root ... the best agent (empty when nothing is evaluated yet)."""
        return self._db.run(self._queries.best_path, run_id)

    def pending(self, run_id: int, *, max_attempts: int) -> list[Agent]:
        """Agents to (re)evaluate, by id: proposed, evaluating, and failed with attempts left."""
        return self._db.run(self._queries.pending, run_id, max_attempts=max_attempts)

    def iterations_done(self, run_id: int) -> int:
        """How many iterations the search made a proposal in (iteration > 0), whatever became of it; an
        iteration whose child was rejected as a near-duplicate and re-proposed counts once."""
        return self._db.run(self._queries.iterations_done, run_id)

    def max_iteration(self, run_id: int) -> int:
        """The highest iteration number stored for the run (0 with only seeds or nothing)."""
        return self._db.run(self._queries.max_iteration, run_id)

    def evaluations(self, agent_id: int) -> list[Evaluation]:
        """The agent's task rows, in the order they were written."""
        return self._db.run(self._queries.evaluations, agent_id)

    def search_task_results(self, run_id: int) -> list[tuple[int, str, float, bool, bool]]:
        """(agent_id, task_id, score, passed, executed) of every search-split task run of the run's
        evaluated agents, by agent id: what behaviour vectors and HGM's pooled task counts are built from."""
        return self._db.run(self._queries.search_task_results, run_id)

    def descriptors(self, run_id: int) -> dict[int, dict[str, float]]:
        """agent id -> its stored behaviour features, for the run's evaluated agents."""
        return self._db.run(self._queries.descriptors, run_id)

    def view(self, run_id: int) -> ArchiveView:
        """The run's evaluated agents as numpy columns, with evaluated-children counts. A behavioural no-op
        (`behaves_as`: a child that repeats its parent's outputs on every task) is left out: it is its parent."""
        return self._db.run(self._queries.view, run_id)

    # ----- the FM ledger and response cache -----

    def record_llm_call(self, call: LLMCall) -> LLMCall:
        """Append one FM call to the ledger; returns the stored copy (with its id). `call` is not changed."""
        return self._db.run(self._ledger.record_llm_call, call)

    def record_llm_exchange(
        self,
        call: LLMCall,
        response: LLMResponse | None,
        request: LLMRequest | None = None,
        greedy: GreedyAnswer | None = None,
    ) -> LLMCall:
        """`record_llm_call(call)`, `store_response(response)`, the request's messages and the greedy answer's
        second key (each if given) in ONE transaction, so a kill cannot leave a cached response without its ledger
        row; a request, response or answer key already stored is left as is (a greedy question keeps its first)."""
        return self._db.run(self._ledger.record_llm_exchange, call, response, request, greedy)

    def link_llm_calls(self, run_id: int, *, proposal_id: str, agent_id: int) -> int:
        """Attribute the run's unattributed FM calls of proposal `proposal_id` to `agent_id`; returns how many.
        The proposer calls the FM before the agent row (and its id) exists (`add_agent(proposal_id=...)` links
        them in the same transaction)."""
        return self._db.run(self._ledger.link_llm_calls, run_id, proposal_id=proposal_id, agent_id=agent_id)

    def store_response(self, response: LLMResponse) -> None:
        """Cache an FM response under its request hash; a hash already cached is left as is."""
        self._db.run(self._ledger.store_response, response)

    def cached_response(self, request_hash: str) -> LLMResponse | None:
        """The cached FM response for this request hash, or None."""
        return self._db.run(self._ledger.cached_response, request_hash)

    def greedy_response(self, answer_key: str, max_tokens: int | None) -> LLMResponse | None:
        """The cached answer to the greedy question `answer_key` (see GreedyAnswer) if it stopped by itself
        within `max_tokens` (None: no limit), else None."""
        return self._db.run(self._ledger.greedy_response, answer_key, max_tokens)

    def llm_calls(self, run_id: int) -> list[LLMCall]:
        """The run's ledger, oldest call first."""
        return self._db.run(self._ledger.llm_calls, run_id)

    def agent_llm_calls(self, agent_id: int) -> list[LLMCall]:
        """The FM calls attributed to one agent (those that made it and those it made), oldest first."""
        return self._db.run(self._ledger.agent_llm_calls, agent_id)

    def llm_exchanges(self, request_hashes: Iterable[str]) -> tuple[dict[str, LLMRequest], dict[str, LLMResponse]]:
        """The stored requests (messages) and responses of these hashes; a hash with neither is absent. A call
        from an archive older than schema version 3 has no request: its prompt was not recorded."""
        return self._db.run(self._ledger.llm_exchanges, request_hashes)

    def cost_summary(self, run_id: int) -> CostSummary:
        """The run's FM calls, cache hits, tokens and USD, in total and per model."""
        return self._db.run(self._ledger.cost_summary, run_id)
