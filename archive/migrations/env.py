"""Alembic's entry for the archive's migrations: on the connection `cambrian.archive.schema` passes, or on a URL.

`cambrian.archive.schema` hands its own connection (config.attributes["connection"]) with a transaction
already begun under the archive's write lock: the migrations run inside it and commit or roll
back with it. Without one (a developer running `alembic` against `sqlalchemy.url`) this opens
the URL and runs them in a transaction of its own; `--sql` writes the SQL instead.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine
from sqlmodel import SQLModel

import cambrian.archive.models  # noqa: F401 - registers the tables on SQLModel.metadata (autogenerate compares them)


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=SQLModel.metadata)
    with context.begin_transaction():  # a no-op inside the caller's transaction
        context.run_migrations()


def _main() -> None:
    config = context.config
    if context.is_offline_mode():
        context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=SQLModel.metadata)
        with context.begin_transaction():
            context.run_migrations()
    elif config.attributes.get("connection") is not None:
        _run(config.attributes["connection"])
    else:
        url = config.get_main_option("sqlalchemy.url")
        if not url:
            raise SystemExit("set sqlalchemy.url (archive.migrations.alembic_config(url=...)) or pass a connection")
        engine = create_engine(url)
        with engine.connect() as connection:
            _run(connection)
            connection.commit()
        engine.dispose()


if hasattr(context, "config"):  # run by Alembic; a plain import (tools that import every module) does nothing
    _main()
