"""`Ledger`: the archive's FM ledger, one row per foundation-model call, and the response cache.

It runs on SQLAlchemy Core over the archive's kept connection (`Database.transaction`): the loop records a
call or two per candidate, and the ORM's unit of work would cost more than SQLite does. Each method is one
unit of work for `Database.run`. `CostSummary` and `ModelCost` are what `Archive.cost_summary` returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import Connection, bindparam, case, func, insert, select

from cambrian.archive._database import Database
from cambrian.archive._prepared import InsertIgnore, Prepared
from cambrian.archive._statements import link_llm_calls
from cambrian.archive.models import GreedyAnswer, LLMCall, LLMRequest, LLMResponse, detached

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
_INSERT_RESPONSE = InsertIgnore(_RESPONSE)
_INSERT_REQUEST = InsertIgnore(_REQUEST)
_INSERT_GREEDY = InsertIgnore(_GREEDY)
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


class Ledger:
    """The FM ledger and response cache of one archive's `Database` (one transaction each)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _insert_call(self, connection: Connection, call: LLMCall) -> LLMCall:
        values = {name: getattr(call, name) for name in _CALL_VALUE_COLUMNS}
        key = _INSERT_CALL.run(connection, values).scalar()
        assert key is not None  # a one-row INSERT always returns the key it gave
        return detached(LLMCall, {"id": key, **values})

    def record_llm_call(self, call: LLMCall) -> LLMCall:
        with self._db.transaction(write=True) as connection:
            return self._insert_call(connection, call)

    def record_llm_exchange(
        self, call: LLMCall, response: LLMResponse | None, request: LLMRequest | None, greedy: GreedyAnswer | None
    ) -> LLMCall:
        with self._db.transaction(write=True) as connection:
            if request is not None:
                _INSERT_REQUEST.run(connection, {name: getattr(request, name) for name in _REQUEST_COLUMNS})
            if response is not None:
                _INSERT_RESPONSE.run(connection, {name: getattr(response, name) for name in _RESPONSE_COLUMNS})
            if greedy is not None:
                _INSERT_GREEDY.run(connection, {name: getattr(greedy, name) for name in _GREEDY_COLUMNS})
            return self._insert_call(connection, call)

    def link_llm_calls(self, run_id: int, *, proposal_id: str, agent_id: int) -> int:
        with self._db.transaction(write=True) as connection:
            return link_llm_calls(connection, run_id, proposal_id=proposal_id, agent_id=agent_id)

    def store_response(self, response: LLMResponse) -> None:
        with self._db.transaction(write=True) as connection:
            _INSERT_RESPONSE.run(connection, {name: getattr(response, name) for name in _RESPONSE_COLUMNS})

    def cached_response(self, request_hash: str) -> LLMResponse | None:
        with self._db.transaction(write=False) as connection:
            row = connection.execute(_SELECT_RESPONSE, {"request_hash": request_hash}).first()
        return None if row is None else detached(LLMResponse, row._mapping)

    def greedy_response(self, answer_key: str, max_tokens: int | None) -> LLMResponse | None:
        if self._db.schema.version < _GREEDY_SINCE:
            return None  # a read-only open of an older archive has no table
        statement, params = (
            (_SELECT_GREEDY, {"answer_key": answer_key})
            if max_tokens is None
            else (_SELECT_GREEDY_WITHIN, {"answer_key": answer_key, "max_tokens": max_tokens})
        )
        with self._db.transaction(write=False) as connection:
            row = connection.execute(statement, params).first()
        return None if row is None else detached(LLMResponse, row._mapping)

    def llm_calls(self, run_id: int) -> list[LLMCall]:
        with self._db.transaction(write=False) as connection:
            rows = connection.execute(_SELECT_RUN_CALLS, {"run_id": run_id}).all()
        return [detached(LLMCall, row._mapping) for row in rows]

    def agent_llm_calls(self, agent_id: int) -> list[LLMCall]:
        with self._db.transaction(write=False) as connection:
            rows = connection.execute(_SELECT_AGENT_CALLS, {"agent_id": agent_id}).all()
        return [detached(LLMCall, row._mapping) for row in rows]

    def llm_exchanges(self, request_hashes: Iterable[str]) -> tuple[dict[str, LLMRequest], dict[str, LLMResponse]]:
        hashes = sorted(set(request_hashes))
        if not hashes:
            return {}, {}
        with self._db.transaction(write=False) as connection:
            kept = self._db.schema.version >= _REQUESTS_SINCE  # a read-only open of an older archive has no table
            requests = connection.execute(_SELECT_REQUESTS, {"hashes": hashes}).all() if kept else []
            responses = connection.execute(_SELECT_RESPONSES, {"hashes": hashes}).all()
        return (
            {row.request_hash: detached(LLMRequest, row._mapping) for row in requests},
            {row.request_hash: detached(LLMResponse, row._mapping) for row in responses},
        )

    def cost_summary(self, run_id: int) -> CostSummary:
        with self._db.transaction(write=False) as connection:
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
