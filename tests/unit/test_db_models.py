"""The table definitions: prefixed names, and DDL that PostgreSQL accepts too."""

from __future__ import annotations

from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.schema import CreateIndex, CreateTable

from tuner.db.migrate import include_name, include_object
from tuner.db.models import TABLE_PREFIX, VERSION_TABLE, Base

POSTGRES_MAX_IDENTIFIER = 63


def _dialect(url: str) -> Dialect:
    # Only the dialect class is needed to compile DDL; no driver is imported.
    return make_url(url).get_dialect()()


def test_every_table_carries_the_prefix_and_the_hooks_keep_only_those() -> None:
    tables = set(Base.metadata.tables)
    assert tables == {
        "tuner_studies",
        "tuner_trials",
        "tuner_comparisons",
        "tuner_trial_requests",
        "tuner_launches",
    }
    assert all(include_name(t, "table", {}) for t in tables)
    for foreign in ("trials", "studies", "alembic_version", VERSION_TABLE):
        assert not include_name(foreign, "table", {})
        assert not include_object(None, foreign, "table", True, None)
    assert VERSION_TABLE.startswith(TABLE_PREFIX)


def test_constraint_and_index_names_are_explicit_and_fit_postgres() -> None:
    for table in Base.metadata.tables.values():
        names = [c.name for c in table.constraints] + [i.name for i in table.indexes]
        assert all(isinstance(n, str) and n for n in names), table.name
        assert max(len(str(n)) for n in names) <= POSTGRES_MAX_IDENTIFIER


def test_ddl_compiles_for_postgres_and_sqlite_with_portable_types() -> None:
    for dialect in (_dialect("postgresql://"), _dialect("sqlite://")):
        for table in Base.metadata.sorted_tables:
            ddl = str(CreateTable(table).compile(dialect=dialect))
            assert "JSON" in ddl
            # Times are unix-seconds floats wherever a table has them.
            assert "FLOAT" in ddl or table.name == "tuner_trial_requests"
            for index in table.indexes:
                assert str(CreateIndex(index).compile(dialect=dialect)).startswith("CREATE INDEX")
    trials = str(
        CreateTable(Base.metadata.tables["tuner_trials"]).compile(dialect=_dialect("postgresql://"))
    )
    assert "ON DELETE CASCADE" in trials
    assert "JSONB" not in trials  # plain JSON: the same type on both backends
