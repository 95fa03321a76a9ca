"""tuner's Alembic history: upgrade, no drift from the models, downgrade, revision checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from tests.studykit import schema_drift as _diffs
from tuner.db import migrate
from tuner.db.models import VERSION_TABLE, Base
from tuner.db.session import make_engine
from tuner.errors import StorageError

TUNER_TABLES = {"tuner_studies", "tuner_trials", "tuner_comparisons"}


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'db' / 'tuner.db'}"


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return set(inspect(conn).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_an_empty_database_to_head(url: str) -> None:
    assert migrate.current_revision(url) is None
    migrate.upgrade(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    assert _tables(url) >= TUNER_TABLES | {VERSION_TABLE}
    assert "alembic_version" not in _tables(url)  # Optuna's name stays free
    migrate.ensure_current(url)


def test_models_and_migrations_do_not_drift(url: str) -> None:
    migrate.upgrade(url)
    assert _diffs(url) == []


def test_drift_check_would_notice_a_missing_index(url: str) -> None:
    migrate.upgrade(url)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX ix_tuner_trials_provenance"))
    engine.dispose()
    diffs = _diffs(url)
    assert len(diffs) == 1
    assert "ix_tuner_trials_provenance" in repr(diffs)


def test_downgrade_to_base_and_up_again(url: str) -> None:
    migrate.upgrade(url)
    migrate.downgrade(url, "base")
    assert migrate.current_revision(url) is None
    assert not (_tables(url) & TUNER_TABLES)
    migrate.upgrade(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    assert _diffs(url) == []


def test_migrations_do_not_depend_on_the_working_directory(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    migrate.upgrade(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    assert list(elsewhere.iterdir()) == []


def test_ensure_current_on_an_empty_database_says_to_upgrade(url: str) -> None:
    with pytest.raises(StorageError) as err:
        migrate.ensure_current(url)
    assert "has no tuner tables" in err.value.message
    assert "tuner db upgrade" in err.value.hint


def test_ensure_current_when_behind_names_both_revisions(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrate.upgrade(url)
    at = migrate.head_revision()
    # Pretend this tuner knows a newer revision than the database is at.
    monkeypatch.setattr(migrate, "head_revision", lambda: "9999")
    with pytest.raises(StorageError) as err:
        migrate.ensure_current(url)
    assert err.value.message.endswith(f"at revision {at}, tuner needs 9999")
    # The command names this database: a bare `tuner db upgrade` migrates the default one.
    assert f"tuner db upgrade --storage {url}" in err.value.hint
    # Not brand-new: ensure_ready must not upgrade it behind the owner's back.
    with pytest.raises(StorageError, match="tuner needs 9999"):
        migrate.ensure_ready(url)


def test_ensure_current_on_a_revision_from_a_newer_tuner(url: str) -> None:
    migrate.upgrade(url)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = 'fffffff'"))
    engine.dispose()
    with pytest.raises(StorageError) as err:
        migrate.ensure_current(url)
    assert "does not know" in err.value.message
    assert "upgrade tuner" in err.value.hint


def test_ensure_ready_creates_tables_in_a_new_database(url: str) -> None:
    migrate.ensure_ready(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    migrate.ensure_ready(url)  # idempotent


def test_ensure_ready_without_auto_upgrade_refuses(url: str) -> None:
    with pytest.raises(StorageError, match="no tuner tables"):
        migrate.ensure_ready(url, auto_upgrade=False)
    assert migrate.current_revision(url) is None


def test_ensure_ready_refuses_unversioned_tuner_tables(url: str) -> None:
    engine = make_engine(url)
    Base.metadata.create_all(engine)
    engine.dispose()
    with pytest.raises(StorageError) as err:
        migrate.ensure_ready(url)
    assert "no revision record" in err.value.message
    assert "tuner_studies" in err.value.message


def test_unknown_revision_is_a_storage_error(url: str) -> None:
    with pytest.raises(StorageError, match="migration failed"):
        migrate.upgrade(url, "nosuchrevision")
