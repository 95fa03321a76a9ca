"""Alembic environment for tuner's own tables.

The database may also hold Optuna's storage, which has its own Alembic history in the default
``alembic_version`` table. So tuner records its revision in ``tuner_alembic_version`` and
autogenerate only looks at tables named ``tuner_*``.

The URL comes from, in order: a connection handed over by :mod:`tuner.db.migrate`
(``config.attributes["connection"]``), ``sqlalchemy.url`` in the ini file, ``$TUNER_DB_URL``,
``./tuner.db``.
"""

from __future__ import annotations

from logging.config import fileConfig
from typing import Any

from alembic import context
from sqlalchemy import Connection

from tuner.db.migrate import include_name, include_object
from tuner.db.models import VERSION_TABLE, Base
from tuner.db.session import default_url, make_engine

config = context.config
if config.config_file_name is not None and config.file_config.has_section("loggers"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _configure(**kwargs: Any) -> None:
    context.configure(
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        include_name=include_name,
        include_object=include_object,
        **kwargs,
    )


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or default_url()


def run_offline() -> None:
    url = _url()
    _configure(url=url, literal_binds=True, render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


def _run_online(connection: Connection) -> None:
    # SQLite cannot ALTER most things: batch mode rebuilds the table instead.
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    handed_over = config.attributes.get("connection")
    if handed_over is not None:
        _run_online(handed_over)
        return
    engine = make_engine(_url())
    try:
        with engine.connect() as connection:
            _run_online(connection)
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
