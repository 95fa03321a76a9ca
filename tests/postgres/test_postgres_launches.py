"""tuner_launches on PostgreSQL: the round trip of tests/integration/test_db_launches.py."""

from __future__ import annotations

from tests.integration.test_db_launches import check_launches_round_trip
from tuner.db import migrate
from tuner.db.session import make_engine


def test_launches_round_trip_on_postgresql(pg_url: str) -> None:
    migrate.upgrade(pg_url)
    engine = make_engine(pg_url)
    try:
        check_launches_round_trip(engine)
    finally:
        engine.dispose()
