"""tuner's tables and Optuna's storage in one SQLite database, each with its own history."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from sqlalchemy import inspect, text

from tuner.db import migrate
from tuner.db.models import VERSION_TABLE
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import ServingConfig, TrialStatus
from tuner.errors import StorageError


@pytest.fixture(autouse=True)
def _quiet_optuna() -> Iterator[None]:
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    yield
    optuna.logging.set_verbosity(before)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'shared.db'}"


def _run_optuna(url: str, name: str, n_trials: int = 3) -> None:
    storage = optuna.storages.RDBStorage(url)
    try:
        study = optuna.create_study(study_name=name, storage=storage)
        study.optimize(lambda t: (t.suggest_float("x", -1.0, 1.0)) ** 2, n_trials=n_trials)
    finally:
        storage.engine.dispose()


def _optuna_trials(url: str, name: str) -> int:
    storage = optuna.storages.RDBStorage(url)
    try:
        return len(optuna.load_study(study_name=name, storage=storage).trials)
    finally:
        storage.engine.dispose()


def _snapshot(url: str) -> tuple[set[str], str | None, int]:
    """Table names, Optuna's alembic revision, rows in Optuna's trials table."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            trials = conn.execute(text("SELECT count(*) FROM trials")).scalar_one()
            return tables, revision, trials
    finally:
        engine.dispose()


def test_optuna_first_then_tuner(url: str) -> None:
    _run_optuna(url, "opt-first")
    optuna_rev = _snapshot(url)[1]
    assert optuna_rev is not None
    migrate.ensure_ready(url)  # a database with only Optuna's tables counts as new for tuner
    tables, revision, trials = _snapshot(url)
    assert {"alembic_version", VERSION_TABLE, "studies", "trials", "tuner_trials"} <= tables
    assert revision == optuna_rev
    assert trials == 3
    migrate.ensure_current(url)


def test_tuner_first_then_optuna_and_both_keep_working(url: str) -> None:
    migrate.upgrade(url)
    _run_optuna(url, "tuner-first")
    optuna_rev = _snapshot(url)[1]
    assert optuna_rev is not None
    migrate.ensure_current(url)
    engine = make_engine(url)
    try:
        repo = Repository(engine)
        repo.create_study(
            name="s",
            optuna_study_name="tuner-first",
            model="m",
            model_source=None,
            gpu="cpu",
            workload="chat",
            objective="balanced",
            slo={},
            spec={},
            emulated=True,
            vllm_version="0.32.0",
            n_trials_requested=3,
        )
        repo.start_trial("s", 0, ServingConfig(), "search", True)
        assert repo.count_trials("s", TrialStatus.RUNNING) == 1
    finally:
        engine.dispose()
    assert _optuna_trials(url, "tuner-first") == 3  # Optuna's compatibility check passes too
    assert _snapshot(url)[1] == optuna_rev


def test_tuner_downgrade_leaves_optuna_alone(url: str) -> None:
    _run_optuna(url, "keep-me")
    migrate.upgrade(url)
    before_tables, before_rev, before_trials = _snapshot(url)
    migrate.downgrade(url, "base")
    after_tables, after_rev, after_trials = _snapshot(url)
    assert before_tables - after_tables == {
        "tuner_studies",
        "tuner_trials",
        "tuner_comparisons",
        "tuner_trial_requests",
        "tuner_launches",
    }
    assert (after_rev, after_trials) == (before_rev, before_trials)
    assert _optuna_trials(url, "keep-me") == 3
    migrate.upgrade(url)
    migrate.ensure_current(url)


def _another_apps_database(url: str, revision: str | None = "1a2b3c4d5e6f") -> None:
    """A database where another application keeps its Alembic history in alembic_version."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)"))
            if revision is not None:
                conn.execute(text("INSERT INTO alembic_version VALUES (:r)"), {"r": revision})
            conn.execute(text("CREATE TABLE users (id INTEGER PRIMARY KEY)"))
    finally:
        engine.dispose()


@pytest.mark.parametrize("revision", ["1a2b3c4d5e6f", None])
def test_another_applications_alembic_version_is_refused_before_anything_is_created(
    url: str, revision: str | None
) -> None:
    """`tuner run` (ensure_ready), `db upgrade`, `db current` and the worker's check all
    refuse it with one message, and leave the database as it was: Optuna would have created
    its tables, then refused (or stamped) the other application's alembic_version."""
    _another_apps_database(url, revision)
    before = set(_tables(url))
    for step in (
        lambda: migrate.ensure_ready(url),
        lambda: migrate.ensure_ready(url, auto_upgrade=False),
        lambda: migrate.upgrade(url),
        lambda: migrate.current_revision(url),
    ):
        with pytest.raises(StorageError) as err:
            step()
        assert "belongs to another application" in err.value.message
        assert "database of its own" in err.value.hint
    assert set(_tables(url)) == before == {"alembic_version", "users"}


def test_a_newer_optunas_revision_keeps_optunas_own_message(url: str) -> None:
    """Optuna's revisions, a newer Optuna's included, are not another application's: the
    tables Optuna is missing are set up through optuna_rdb, which says which Optuna to use."""
    _run_optuna(url, "newer")
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'v9.0.0.a'"))
        conn.execute(text("DROP TABLE version_info"))  # so that tuner sets Optuna's tables up
    engine.dispose()
    with pytest.raises(StorageError) as err:  # not Optuna's RuntimeError and its traceback
        migrate.ensure_ready(url)
    assert "belongs to another application" not in err.value.message
    assert "another Optuna" in err.value.hint


def _tables(url: str) -> list[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return inspect(conn).get_table_names()
    finally:
        engine.dispose()
