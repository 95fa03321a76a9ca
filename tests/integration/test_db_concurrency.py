"""Two engines on one SQLite file: WAL lets readers and a writer overlap without
"database is locked", and the busy timeout makes concurrent writers wait their turn."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, select, text, update

from tests.studykit import spec_writers
from tuner.db import migrate
from tuner.db.models import StudyModel
from tuner.db.repository import QUEUE_WORKER, Repository
from tuner.db.session import SQLITE_BUSY_TIMEOUT_MS, make_engine
from tuner.domain import FailureClass, ServingConfig, TrialResult, TrialStatus


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[Engine, Engine]]:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    migrate.upgrade(url)
    a, b = make_engine(url), make_engine(url)
    yield a, b
    a.dispose()
    b.dispose()


def _study(repo: Repository, name: str) -> None:
    repo.create_study(
        name=name,
        optuna_study_name=name,
        model="m",
        model_source=None,
        gpu="cpu",
        workload="chat",
        objective="balanced",
        slo={},
        spec={},
        emulated=True,
        vllm_version="0.32.0",
        n_trials_requested=None,
    )


def _write_trials(repo: Repository, study: str, n: int) -> None:
    for number in range(n):
        config = ServingConfig(max_num_seqs=number + 1)
        trial_id = repo.start_trial(study, number, config)
        result = TrialResult(config, TrialStatus.FAILED, FailureClass.CRASHED, log_tail="x" * 2000)
        repo.finish_trial(trial_id, result, None, None)


def _in_threads(*jobs: Callable[[], None]) -> list[BaseException]:
    errors: list[BaseException] = []

    def guarded(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return errors


def test_connections_get_wal_busy_timeout_and_foreign_keys(
    engines: tuple[Engine, Engine],
) -> None:
    with engines[0].connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == SQLITE_BUSY_TIMEOUT_MS
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_an_open_reader_does_not_block_the_writer(engines: tuple[Engine, Engine]) -> None:
    writer, reader = Repository(engines[0]), engines[1]
    _study(writer, "s")
    with reader.connect() as conn:
        conn.exec_driver_sql("BEGIN")
        count = text("SELECT count(*) FROM tuner_trials")
        assert conn.execute(count).scalar() == 0  # the reader now holds a snapshot
        started = time.monotonic()
        _write_trials(writer, "s", 5)
        # Without WAL the writer would wait for the reader's lock until the busy timeout.
        assert time.monotonic() - started < 5.0
        assert conn.execute(count).scalar() == 0  # still its own snapshot
        conn.rollback()
        assert conn.execute(count).scalar() == 5


def test_one_writes_while_the_other_reads(engines: tuple[Engine, Engine]) -> None:
    writer, reader = Repository(engines[0]), Repository(engines[1])
    _study(writer, "s")
    done, reading = threading.Event(), threading.Event()
    seen: list[int] = []

    def write() -> None:
        # The reader reads before the first write and once more after the last, so that a
        # writer scheduled ahead of it on a busy machine cannot leave it nothing to see.
        reading.wait(timeout=30)
        try:
            _write_trials(writer, "s", 40)
        finally:
            done.set()

    def read() -> None:
        while True:
            finished = done.is_set()
            seen.append(reader.count_trials("s"))
            reader.list_trials("s", limit=10)
            reader.list_studies()
            reading.set()
            if finished:
                return

    assert _in_threads(write, read) == []
    assert reader.count_trials("s", TrialStatus.FAILED) == 40
    assert seen == sorted(seen)  # the reader saw the count grow, never a torn state
    assert len(seen) > 1


def test_two_writers_wait_for_each_other(engines: tuple[Engine, Engine]) -> None:
    a, b = Repository(engines[0]), Repository(engines[1])
    _study(a, "sa")
    _study(b, "sb")
    assert _in_threads(lambda: _write_trials(a, "sa", 30), lambda: _write_trials(b, "sb", 30)) == []
    assert a.count_trials("sb") == 30 and b.count_trials("sa") == 30


def _while_held(
    engines: tuple[Engine, Engine], change: Mapping[str, Any], call: Callable[[], object]
) -> object:
    """What ``call`` (on ``engines[0]``) returns when a writer on ``engines[1]`` has merged
    ``change`` into study s's spec, and commits only once ``call`` is about to write."""
    writing = threading.Event()

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE"):
            writing.set()

    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(call()))
    event.listen(engines[0], "before_cursor_execute", seen)
    try:
        with engines[1].begin() as conn:
            spec = conn.scalar(select(StudyModel.spec).where(StudyModel.name == "s"))
            conn.execute(update(StudyModel).values(spec={**spec, **change}))
            thread.start()
            assert writing.wait(timeout=30)
        thread.join(timeout=60)
    finally:
        event.remove(engines[0], "before_cursor_execute", seen)
    assert out, "the call failed or did not return"
    return out[0]


ME, OTHER = {"host": "h", "pid": 1, "start": 1.0}, {"host": "h", "pid": 2, "start": 1.0}


@pytest.mark.parametrize("write", ["claim_study_step", "set_study_plan", "claim_queued_study"])
def test_a_spec_written_back_keeps_a_concurrent_change(
    engines: tuple[Engine, Engine], write: str
) -> None:
    # Each reads the stored spec and writes back a merged copy: a change another process commits
    # in between is kept (SQLite's driver reads outside a transaction: a write lock comes first).
    repo = Repository(engines[0])
    _study(repo, "s")  # queued
    call, key, value = spec_writers(repo, "s", ME)[write]
    _while_held(engines, {"held": True}, call)
    study = repo.get_study("s")
    assert study is not None and study.spec == {"held": True, key: value}


def test_a_heartbeat_of_a_study_taken_over_meanwhile_does_not_count(
    engines: tuple[Engine, Engine],
) -> None:
    repo = Repository(engines[0])
    _study(repo, "s")
    assert repo.claim_queued_study(worker=ME) is not None
    assert _while_held(engines, {QUEUE_WORKER: OTHER}, lambda: repo.touch_study("s", ME)) is False
