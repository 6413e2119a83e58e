"""`Prepared`: a Core statement compiled once per dialect and run straight on the DBAPI cursor.

The per-candidate path runs about ten short statements for every candidate, and SQLAlchemy's
execution machinery (an execution context, the compiled cache lookup, parameter construction,
event dispatch, a result object and its row metadata) costs several times what SQLite takes to run
each one. A `Prepared` keeps SQLAlchemy's part that matters, its compiler and its types' bind and
result processors, worked out once per dialect, and per call only binds the values, runs the SQL
text on the transaction's own DBAPI connection and processes the returned rows. So a statement sees
exactly what `Connection.execute` would send (the same SQL, the same bound values) and returns the
same Python values; a driver error is raised as SQLAlchemy's (`DBAPIError.instance`) and a lost
connection is invalidated, as `Connection.execute` does, so the archive's retry (archive/_retry.py)
works the same.

Only plain statements qualify, which `Prepared` checks when it first compiles (a TypeError otherwise): no
expanding IN lists or other post-compile parameters, and no column defaults left to fill (an INSERT names
every column in `columns`, and every call gives every value: a missing one is a KeyError naming it).
`InsertIgnore` is the INSERT of a whole row that skips a row whose key is stored already, in each dialect's words.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Connection, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError


class Fetched(NamedTuple):
    """What a `Prepared` statement returned: its rows (attribute access, `_mapping`) and the driver's rowcount."""

    rows: list[Any]
    rowcount: int

    def first(self) -> Any:
        return self.rows[0] if self.rows else None

    def all(self) -> list[Any]:
        return self.rows

    def scalar(self) -> Any:
        return self.rows[0][0] if self.rows else None


def _row_class(fields: Sequence[str]) -> type[tuple[Any, ...]]:
    """Rows of these columns: tuples with the columns as attributes and `_mapping`, as SQLAlchemy's Row has."""
    base = namedtuple("Row", fields)  # type: ignore[misc]  # the names come from the statement
    return type("Row", (base,), {"__slots__": (), "_mapping": property(lambda row: dict(zip(row._fields, row)))})


@dataclass
class _Form:
    """A statement as one dialect runs it: SQL text, how to bind a call's values, how to read the rows."""

    sql: str
    positional: bool
    # Per bind, in the SQL text's order (positional; a name may repeat) or once each (named): (name, whether the
    # statement carries the value itself, that value processed, or else the type's bind processor or None).
    plan: tuple[tuple[str, bool, Any], ...]
    returned: tuple[Any, ...]  # the columns the statement returns (none: no rows)
    row_class: type[tuple[Any, ...]] | None
    # (column index, result processor) for the returned columns that have one, from the first run's
    # cursor.description (some processors need the driver's type code); None until then.
    converters: tuple[tuple[int, Callable[[Any], Any]], ...] | None = None

    def bind(self, params: Mapping[str, Any]) -> list[Any] | dict[str, Any]:
        values = []
        for name, fixed, value in self.plan:
            if not fixed:
                given = params[name]
                value = given if value is None or given is None else value(given)
            values.append(value)
        return values if self.positional else dict(zip((name for name, _, _ in self.plan), values))

    def rows(self, cursor: Any, dialect: Dialect) -> list[Any]:
        if self.row_class is None:
            return []
        converters = self.converters
        if converters is None:
            processors = (
                column.type.dialect_impl(dialect).result_processor(dialect, description[1])
                for column, description in zip(self.returned, cursor.description)
            )
            converters = self.converters = tuple((i, p) for i, p in enumerate(processors) if p is not None)
        make = self.row_class._make  # type: ignore[attr-defined]  # a namedtuple class
        rows = []
        for raw in cursor.fetchall():
            if converters:
                raw = list(raw)
                for index, processor in converters:
                    if raw[index] is not None:
                        raw[index] = processor(raw[index])
            rows.append(make(raw))
        return rows


class Prepared:
    """A Core statement to run on an open `Connection`'s DBAPI connection, compiled once per dialect."""

    def __init__(self, statement: Any, *, columns: Sequence[str] | None = None) -> None:
        """columns: for an INSERT without its own VALUES, the columns every call gives (compiled into it)."""
        self.statement = statement
        self.columns = None if columns is None else list(columns)
        self._forms: dict[str, _Form] = {}

    def run(self, connection: Connection, params: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Fetched:
        """Run with one set of values (a mapping) or many (a sequence: executemany, no rows returned)."""
        dialect = connection.dialect
        form = self._forms.get(dialect.name) or self._compile(dialect)
        dbapi_connection = connection.connection
        cursor = dbapi_connection.cursor()
        try:
            if isinstance(params, Mapping):
                cursor.execute(form.sql, form.bind(params))
                rows = form.rows(cursor, dialect)
            else:
                cursor.executemany(form.sql, [form.bind(values) for values in params])  # type: ignore[arg-type]  # all one kind
                rows = []
            return Fetched(rows, cursor.rowcount)
        except dialect.loaded_dbapi.Error as error:
            lost = dialect.is_disconnect(error, dbapi_connection, cursor)
            if lost:
                connection.invalidate(error)
            raise DBAPIError.instance(
                form.sql, None, error, dialect.loaded_dbapi.Error, connection_invalidated=lost, dialect=dialect
            ) from error
        finally:
            cursor.close()

    def _compile(self, dialect: Dialect) -> _Form:
        compiled = self.statement.compile(dialect=dialect, column_keys=self.columns)
        if compiled.literal_execute_params or compiled.post_compile_params or compiled.escaped_bind_names:
            raise TypeError(f"Prepared: {compiled.string!r} needs per-call compilation; run it with Connection.execute")
        if compiled.insert_prefetch or compiled.update_prefetch:
            left = ", ".join(column.name for column in [*compiled.insert_prefetch, *compiled.update_prefetch])
            raise TypeError(f"Prepared: {compiled.string!r} leaves column defaults to fill ({left}); give every column")
        binds = {name: bind for bind, name in compiled.bind_names.items()}
        plan = []
        for name in compiled.positiontup if compiled.positional else binds:
            bind = binds[name]
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if bind.required:
                plan.append((name, False, processor))
            else:
                value = bind.effective_value
                plan.append((name, True, processor(value) if processor is not None and value is not None else value))
        returned = tuple(getattr(self.statement, "exported_columns", ()))
        form = _Form(
            sql=compiled.string,
            positional=compiled.positional,
            plan=tuple(plan),
            returned=returned,
            row_class=_row_class([column.key for column in returned]) if returned else None,
        )
        self._forms[dialect.name] = form
        return form


class InsertIgnore:
    """INSERT of a whole row (every column of `table`) that skips a row whose primary key is stored already:
    ON CONFLICT DO NOTHING on SQLite and PostgreSQL, look-then-insert elsewhere (race-free only inside a
    transaction that holds the write lock)."""

    def __init__(self, table: Any) -> None:
        self.table = table
        columns = [column.name for column in table.c]
        self._by_dialect = {
            "sqlite": Prepared(sqlite.insert(table).on_conflict_do_nothing(), columns=columns),
            "postgresql": Prepared(postgresql.insert(table).on_conflict_do_nothing(), columns=columns),
        }

    def run(self, connection: Connection, row: Mapping[str, Any]) -> bool:
        """Insert `row` unless its primary key is stored; True if it was inserted."""
        statement = self._by_dialect.get(connection.dialect.name)
        if statement is not None:
            return statement.run(connection, row).rowcount == 1
        key = self.table.primary_key.columns
        if connection.execute(select(*key).where(*(column == row[column.name] for column in key))).first() is not None:
            return False
        connection.execute(insert(self.table), row)
        return True
