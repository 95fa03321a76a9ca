"""`tuner db merge` with PostgreSQL on either side: the committed H200 results (SQLite files
brought back from a machine without network) into a shared PostgreSQL store, and back out into
a new SQLite file, with every study, trial, comparison and Optuna trial intact."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import optuna
import pytest

from tuner.db.merge import merge_databases
from tuner.db.repository import Repository
from tuner.db.session import make_engine

H200 = Path(__file__).resolve().parents[2] / "studies" / "results" / "ernie-0.3b-h200"
FILES = ("tuner-gpu.db", "claims-h200.db", "emulated-a10g.db")
CHAT = "ernie-0.3b-h200-chat"


def _contents(url: str) -> tuple[object, ...]:
    """What a reader of the store sees: studies with their counts, trials, comparisons."""
    engine = make_engine(url)
    try:
        repo = Repository(engine)
        studies = sorted(
            (s.name, s.status, dict(s.trial_counts), dict(s.confirmation_counts))
            for s in repo.list_studies()
        )
        trials = sorted(
            (t.study_name, t.number, t.phase, t.status, t.config_label, dict(t.metrics))
            for s in repo.list_studies()
            for t in repo.list_trials(s.name, limit=None)
        )
        comparisons = sorted(
            (c.created_at, c.workload, repr(c.results)) for c in repo.list_comparisons()
        )
    finally:
        engine.dispose()
    storage = optuna.storages.RDBStorage(url)
    try:
        values = [t.values for t in optuna.load_study(study_name=CHAT, storage=storage).trials]
    finally:
        storage.engine.dispose()
    return studies, trials, comparisons, values


def _n_comparisons(name: str) -> int:
    with sqlite3.connect(f"file:{H200 / name}?mode=ro", uri=True) as con:
        (n,) = con.execute("SELECT count(*) FROM tuner_comparisons").fetchone()
    return int(n)


def test_h200_results_round_trip_through_postgres(pg_url: str, tmp_path: Path) -> None:
    copies = [Path(shutil.copy(H200 / f, tmp_path / f)) for f in FILES]
    local = tmp_path / "local.db"
    for path in copies:
        merge_databases(str(path), pg_url)
        merge_databases(str(path), f"sqlite:///{local}")
    assert not any(merge_databases(str(p), pg_url).changed for p in copies)

    in_postgres = _contents(pg_url)
    studies, trials, comparisons, values = in_postgres
    # Every comparison of the files: the claims and the confirmation.
    assert len(studies) == 2 and len(comparisons) == sum(map(_n_comparisons, FILES)) >= 6
    assert sum(1 for t in trials if t[0] == CHAT) == 26 and len(values) == 20
    assert in_postgres == _contents(f"sqlite:///{local}")

    back = tmp_path / "back.db"
    merge_databases(pg_url, f"sqlite:///{back}")
    assert _contents(f"sqlite:///{back}") == in_postgres


def test_two_merges_at_once_copy_each_comparison_once(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both merges planned before either wrote, and each added the same claim."""
    from tests.integration.test_db_merge import merge_twice_at_once

    summaries = merge_twice_at_once(tmp_path / "gpu-host.db", pg_url, monkeypatch)
    assert sorted(s.comparisons_added for s in summaries) == [0, 1]
    engine = make_engine(pg_url)
    try:
        assert len(Repository(engine).list_comparisons()) == 1
    finally:
        engine.dispose()
