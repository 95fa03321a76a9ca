"""Optuna's storage in the same PostgreSQL database: a study resumed through fresh engines (as
`tuner run --resume` in another process has) continues from the trials stored before."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import optuna
import pytest

from tests.studykit import make_context
from tuner.db import migrate
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import FailureClass, ServingConfig, TrialStatus
from tuner.study.loop import run_study
from tuner.testing.fake_runner import FakeRunner

NAME = "resumable"


@pytest.fixture(autouse=True)
def _quiet_optuna() -> Iterator[None]:
    before = optuna.logging.get_verbosity()
    yield
    optuna.logging.set_verbosity(before)


def _optuna_trials(url: str) -> list[tuple[int, str, dict[str, Any], Any]]:
    """Number, state, params and values of the study's trials, read by a new storage."""
    storage = optuna.storages.RDBStorage(url)
    try:
        trials = optuna.load_study(study_name=NAME, storage=storage).trials
        return [(t.number, t.state.name, t.params, t.values) for t in trials]
    finally:
        storage.engine.dispose()


def test_a_study_resumed_through_new_engines_continues_where_it_stopped(pg_url: str) -> None:
    migrate.ensure_ready(pg_url)
    first = make_engine(pg_url)
    try:
        repo = Repository(first)
        run_study(make_context(pg_url, trials=2, name=NAME), FakeRunner(), repo)
        done = _optuna_trials(pg_url)
        # Then the tuner dies in its next trial: Optuna and tuner both hold it as running.
        storage = optuna.storages.RDBStorage(pg_url)
        try:
            loaded = optuna.load_study(study_name=NAME, storage=storage)
            crashed = loaded.ask()
            # The resume's two trials, queued: two configurations not measured yet, since one
            # the sampler drew again would not be launched again.
            space = make_context(pg_url, trials=4, name=NAME).space
            measured = {r.config for r in repo.list_trials(NAME, limit=None)}
            fresh = [ServingConfig(max_num_seqs=n) for n in (1, 64)]
            fresh += [ServingConfig(gpu_memory_utilization=0.5, max_num_seqs=n) for n in (1, 64)]
            for config in [c for c in fresh if c not in measured][:2]:
                loaded.enqueue_trial(space.params_for(config))
        finally:
            storage.engine.dispose()
        repo.start_trial(NAME, crashed.number, ServingConfig(max_num_seqs=7))
    finally:
        first.dispose()
    assert [(n, state) for n, state, _, _ in done] == [(0, "COMPLETE"), (1, "COMPLETE")]
    assert crashed.number == 2

    second = make_engine(pg_url)  # what `tuner run --resume --trials 4` elsewhere would open
    try:
        repo = Repository(second)
        ranked = run_study(
            make_context(pg_url, trials=4, name=NAME), FakeRunner(), repo, resume=True
        )
        rows = repo.list_trials(NAME, limit=None)
        study = repo.get_study(NAME)
    finally:
        second.dispose()

    after = _optuna_trials(pg_url)
    assert after[:2] == done, "the first run's trials are kept as they were"
    # The interruption is no result (and, asked without parameters, nothing to retry): trials
    # 3 and 4 make the four the resume asks for.
    assert [(n, state) for n, state, _, _ in after[2:]] == [
        (2, "FAIL"), (3, "COMPLETE"), (4, "COMPLETE")
    ]  # fmt: skip
    assert [r.number for r in rows] == [0, 1, 2, 3, 4]
    assert [r.number for r in rows if r.is_baseline] == [0]  # not enqueued a second time
    assert (rows[2].status, rows[2].failure) == (TrialStatus.FAILED, FailureClass.INTERRUPTED)
    assert [r.objective_values for r in rows if r.number != 2] == [
        tuple(values) for n, _, _, values in after if n != 2
    ]
    assert study is not None and (study.status, study.n_trials_requested) == ("finished", 4)
    assert sorted(r.number for r in ranked) == [0, 1, 3, 4]
    # run_study closed Optuna's connections: none is left to be collected open (psycopg would
    # warn, and warnings are errors here).
    gc.collect()
