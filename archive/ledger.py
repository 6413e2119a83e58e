"""The FM ledger half of `Archive`: one row per foundation-model call, plus the response cache.

`LedgerMixin` runs on SQLAlchemy Core over the archive's own connection (see
`Archive._transaction`): the loop records a call or two per candidate, and the ORM's
unit of work would cost more than SQLite does. `detached` turns a row into a model
object the way a closed ORM session would have left it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Connection, RowMapping, bindparam, case, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import class_mapper, make_transient_to_detached
from sqlmodel import SQLModel

from cambrian.archive._prepared import Prepared
from cambrian.archive.models import GreedyAnswer, LLMCall, LLMRequest, LLMResponse
from cambrian.archive.schema import SchemaReport

ModelT = TypeVar("ModelT", bound=SQLModel)

_CALL = LLMCall.__table__  # type: ignore[attr-defined]  # SQLModel sets __table__ at runtime
_RESPONSE = LLMResponse.__table__  # type: ignore[attr-defined]  # as above
_REQUEST = LLMRequest.__table__  # type: ignore[attr-defined]  # as above
_GREEDY = GreedyAnswer.__table__  # type: ignore[attr-defined]  # as above
_CALL_VALUE_COLUMNS = tuple(column.name for column in _CALL.c if column.name != "id")
_RESPONSE_COLUMNS = tuple(column.name for column in _RESPONSE.c)
_REQUEST_COLUMNS = tuple(column.name for column in _REQUEST.c)
_GREEDY_COLUMNS = tuple(column.name for column in _GREEDY.c)
#: The schema versions that added the llmrequest and greedyanswer tables.
_REQUESTS_SINCE = 3
_GREEDY_SINCE = 5

_INSERT_CALL = Prepared(insert(_CALL).returning(_CALL.c.id), columns=_CALL_VALUE_COLUMNS)
_SELECT_RESPONSE = select(_RESPONSE).where(_RESPONSE.c.request_hash == bindparam("request_hash"))
_SELECT_GREEDY = (
    select(_RESPONSE)
    .join(_GREEDY, _GREEDY.c.request_hash == _RESPONSE.c.request_hash)
    .where(_GREEDY.c.answer_key == bindparam("answer_key"))
)
_SELECT_GREEDY_WITHIN = _SELECT_GREEDY.where(_GREEDY.c.completion_tokens <= bindparam("max_tokens"))
_SELECT_RUN_CALLS = select(_CALL).where(_CALL.c.run_id == bindparam("run_id")).order_by(_CALL.c.id)
_SELECT_AGENT_CALLS = select(_CALL).where(_CALL.c.agent_id == bindparam("agent_id")).order_by(_CALL.c.id)
_SELECT_REQUESTS = select(_REQUEST).where(_REQUEST.c.request_hash.in_(bindparam("hashes", expanding=True)))
_SELECT_RESPONSES = select(_RESPONSE).where(_RESPONSE.c.request_hash.in_(bindparam("hashes", expanding=True)))
_LINK_CALLS = Prepared(
    update(_CALL)
    .where(
        # Names apart from the columns': an UPDATE reserves those for its SET clause.
        _CALL.c.run_id == bindparam("b_run_id"),
        _CALL.c.iteration == bindparam("b_iteration"),
        _CALL.c.agent_id.is_(None),
    )
    .values(agent_id=bindparam("b_agent_id"))
)
_COST_BY_MODEL = (
    select(
        _CALL.c.model,
        func.count(),
        func.coalesce(func.sum(case((_CALL.c.cache_hit, 1), else_=0)), 0),
        func.coalesce(func.sum(_CALL.c.prompt_tokens), 0),
        func.coalesce(func.sum(_CALL.c.completion_tokens), 0),
        func.coalesce(func.sum(_CALL.c.cost_usd), 0.0),
    )
    .where(_CALL.c.run_id == bindparam("run_id"))
    .group_by(_CALL.c.model)
    .order_by(_CALL.c.model)
)


def detached(model: type[ModelT], values: Mapping[str, Any] | RowMapping) -> ModelT:
    """A detached `model` instance holding `values` (every column, primary key included).

    Built like the ORM loads rows (no pydantic validation: the values come from the
    database or from a row just written), so it costs microseconds, and behaves like an
    object from a closed session: attributes read and set freely, nothing lazy-loads.
    """
    instance = class_mapper(model).class_manager.new_instance()
    instance.__dict__.update(values)
    make_transient_to_detached(instance)
    return instance


def insert_ignore_statement(table: Any, dialect_name: str) -> Prepared | None:
    """INSERT of a whole row (every column) that skips a row whose primary key exists, or None where the
    dialect has none."""
    columns = [column.name for column in table.c]
    if dialect_name == "sqlite":
        return Prepared(sqlite.insert(table).on_conflict_do_nothing(), columns=columns)
    if dialect_name == "postgresql":
        return Prepared(postgresql.insert(table).on_conflict_do_nothing(), columns=columns)
    return None


def insert_ignore(connection: Connection, statement: Prepared | None, table: Any, row: Mapping[str, Any]) -> bool:
    """Insert `row` (every column of `table`) unless its primary key exists; True if it was inserted.

    `statement` is `insert_ignore_statement(table, ...)`; None falls back to look-then-insert,
    which is race-free only inside a transaction that holds the write lock.
    """
    if statement is not None:
        return statement.run(connection, row).rowcount == 1
    key = table.primary_key.columns
    exists = select(*key).where(*(column == row[column.name] for column in key))
    if connection.execute(exists).first() is not None:
        return False
    connection.execute(insert(table), row)
    return True


@dataclass(frozen=True)
class ModelCost:
    """FM usage of one model (or all models): calls, cache hits, tokens and USD."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class CostSummary(ModelCost):
    """A run's FM ledger summed, with `by_model` holding the same sums per model name."""

    by_model: dict[str, ModelCost] = field(default_factory=dict)


class LedgerMixin:
    """FM call ledger and response cache methods of `Archive` (one transaction each)."""

    # Provided by Archive: one transaction on its connection (write=True takes the write lock).
    _transaction: Callable[..., AbstractContextManager[Connection]]
    _insert_response: Prepared | None
    _insert_request: Prepared | None
    _insert_greedy: Prepared | None
    schema: SchemaReport

    def _insert_call(self, connection: Connection, call: LLMCall) -> LLMCall:
        values = {name: getattr(call, name) for name in _CALL_VALUE_COLUMNS}
        key = _INSERT_CALL.run(connection, values).scalar()
        assert key is not None  # a one-row INSERT always returns the key it gave
        return detached(LLMCall, {"id": key, **values})

    def _store_response(self, connection: Connection, response: LLMResponse) -> None:
        row = {name: getattr(response, name) for name in _RESPONSE_COLUMNS}
        insert_ignore(connection, self._insert_response, _RESPONSE, row)

    def record_llm_call(self, call: LLMCall) -> LLMCall:
        """Append one FM call to the ledger; returns the stored copy (with its id). `call` is not changed."""
        with self._transaction(write=True) as connection:
            return self._insert_call(connection, call)

    def record_llm_exchange(
        self,
        call: LLMCall,
        response: LLMResponse | None,
        request: LLMRequest | None = None,
        greedy: GreedyAnswer | None = None,
    ) -> LLMCall:
        """`record_llm_call(call)`, `store_response(response)`, the request's messages and the greedy
        answer's second key (each if given) in ONE transaction; a request, response or answer key already
        stored is left as is (the first answer to a greedy question stays its answer).

        What an FM call needs written: a kill cannot leave a cached response without its
        ledger row, and it costs one commit instead of three.
        """
        with self._transaction(write=True) as connection:
            if request is not None:
                row = {name: getattr(request, name) for name in _REQUEST_COLUMNS}
                insert_ignore(connection, self._insert_request, _REQUEST, row)
            if response is not None:
                self._store_response(connection, response)
            if greedy is not None:
                row = {name: getattr(greedy, name) for name in _GREEDY_COLUMNS}
                insert_ignore(connection, self._insert_greedy, _GREEDY, row)
            return self._insert_call(connection, call)

    def link_llm_calls(self, run_id: int, *, iteration: int, agent_id: int) -> int:
        """Attribute the run's unattributed FM calls of `iteration` to `agent_id`; returns how many.

        The proposer calls the FM before the agent row (and its id) exists.
        """
        with self._transaction(write=True) as connection:
            return self._link_llm_calls(connection, run_id, iteration=iteration, agent_id=agent_id)

    def _link_llm_calls(self, connection: Connection, run_id: int, *, iteration: int, agent_id: int) -> int:
        params = {"b_run_id": run_id, "b_iteration": iteration, "b_agent_id": agent_id}
        return int(_LINK_CALLS.run(connection, params).rowcount)

    def cached_response(self, request_hash: str) -> LLMResponse | None:
        """The cached FM response for this request hash, or None."""
        with self._transaction(write=False) as connection:
            row = connection.execute(_SELECT_RESPONSE, {"request_hash": request_hash}).first()
        return None if row is None else detached(LLMResponse, row._mapping)

    def greedy_response(self, answer_key: str, max_tokens: int | None) -> LLMResponse | None:
        """The cached answer to the greedy question `answer_key` (see GreedyAnswer) if it stopped by itself
        within `max_tokens` (None: no limit), else None."""
        if self.schema.version < _GREEDY_SINCE:
            return None  # a read-only open of an older archive has no table
        statement, params = (
            (_SELECT_GREEDY, {"answer_key": answer_key})
            if max_tokens is None
            else (_SELECT_GREEDY_WITHIN, {"answer_key": answer_key, "max_tokens": max_tokens})
        )
        with self._transaction(write=False) as connection:
            row = connection.execute(statement, params).first()
        return None if row is None else detached(LLMResponse, row._mapping)

    def store_response(self, response: LLMResponse) -> None:
        """Cache an FM response under its request hash; a hash already cached is left as is."""
        with self._transaction(write=True) as connection:
            self._store_response(connection, response)

    def llm_calls(self, run_id: int) -> list[LLMCall]:
        """The run's ledger, oldest call first."""
        with self._transaction(write=False) as connection:
            rows = connection.execute(_SELECT_RUN_CALLS, {"run_id": run_id}).all()
        return [detached(LLMCall, row._mapping) for row in rows]

    def agent_llm_calls(self, agent_id: int) -> list[LLMCall]:
        """The FM calls attributed to one agent (those that made it and those it made), oldest first."""
        with self._transaction(write=False) as connection:
            rows = connection.execute(_SELECT_AGENT_CALLS, {"agent_id": agent_id}).all()
        return [detached(LLMCall, row._mapping) for row in rows]

    def llm_exchanges(self, request_hashes: Iterable[str]) -> tuple[dict[str, LLMRequest], dict[str, LLMResponse]]:
        """The stored requests (messages) and responses of these hashes; a hash with neither is absent.

        A call from an archive older than schema version 3 has no request: its prompt was not recorded.
        """
        hashes = sorted(set(request_hashes))
        if not hashes:
            return {}, {}
        with self._transaction(write=False) as connection:
            kept = self.schema.version >= _REQUESTS_SINCE  # a read-only open of an older archive has no table
            requests = connection.execute(_SELECT_REQUESTS, {"hashes": hashes}).all() if kept else []
            responses = connection.execute(_SELECT_RESPONSES, {"hashes": hashes}).all()
        return (
            {row.request_hash: detached(LLMRequest, row._mapping) for row in requests},
            {row.request_hash: detached(LLMResponse, row._mapping) for row in responses},
        )

    def cost_summary(self, run_id: int) -> CostSummary:
        """The run's FM calls, cache hits, tokens and USD, in total and per model."""
        with self._transaction(write=False) as connection:
            rows = connection.execute(_COST_BY_MODEL, {"run_id": run_id}).all()
        by_model = {
            model: ModelCost(int(calls), int(hits), int(prompt), int(completion), float(cost))
            for model, calls, hits, prompt, completion, cost in rows
        }
        models = by_model.values()
        return CostSummary(
            calls=sum(m.calls for m in models),
            cache_hits=sum(m.cache_hits for m in models),
            prompt_tokens=sum(m.prompt_tokens for m in models),
            completion_tokens=sum(m.completion_tokens for m in models),
            cost_usd=float(sum(m.cost_usd for m in models)),
            by_model=by_model,
        )
