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
