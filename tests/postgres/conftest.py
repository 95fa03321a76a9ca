"""A fresh database per test on a real PostgreSQL server.

The server comes from ``$TUNER_TEST_POSTGRES_URL`` (``scripts/test.sh`` starts a throwaway one
with ``scripts/postgres.sh``). Without it the tests skip, unless ``TUNER_REQUIRE_POSTGRES=1``
(the default in scripts/test.sh and CI) turns the skip into a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

SERVER_ENV = "TUNER_TEST_POSTGRES_URL"
REQUIRE_ENV = "TUNER_REQUIRE_POSTGRES"


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1 makes this a failure)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[Engine]:
    """An AUTOCOMMIT engine on the server's maintenance database (CREATE/DROP DATABASE)."""
    url = os.environ.get(SERVER_ENV, "").strip()
    if not url:
        _unavailable(
            f"no PostgreSQL server: run scripts/test.sh, or start one with "
            f"`bash scripts/postgres.sh start DIR` and set {SERVER_ENV} to the URL it prints"
        )
    try:
        import psycopg  # noqa: F401 - only to say what is missing
    except ImportError:
        _unavailable("the PostgreSQL driver is missing: pip install -e '.[dev,postgres]'")
    engine = create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with engine.connect():
            pass
    except OperationalError as e:
        engine.dispose()
        first = str(e.orig or e).strip().splitlines()[0]
        pytest.fail(
            f"cannot reach the PostgreSQL server at {SERVER_ENV}={url}: {first}; is it still "
            "running? (bash scripts/postgres.sh start DIR prints a fresh URL)",
            pytrace=False,
        )
    yield engine
    engine.dispose()


@pytest.fixture
def pg_url(postgres_admin: Engine) -> Iterator[str]:
    """The URL of a new, empty database, dropped after the test (connections and all)."""
    name = f"tuner_test_{uuid.uuid4().hex[:16]}"
    with postgres_admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(postgres_admin.url).set(database=name).render_as_string(hide_password=False)
    finally:
        with postgres_admin.connect() as conn:
            # FORCE: an engine a failed test left open must not keep the database alive.
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
