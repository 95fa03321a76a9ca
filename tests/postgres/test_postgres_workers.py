"""Several workers draining one queue in a PostgreSQL database: each queued study is taken by
exactly one of them, and the studies they run land in tuner's tables and Optuna's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import optuna

from api.queue import parse, queue
from tuner.db import migrate
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import TrialStatus

REPO = Path(__file__).resolve().parents[2]


def _body(name: str, trials: int = 2, seed: int = 0) -> dict[str, Any]:
    """A spec as POST /v1/studies receives it: a tiny fake-server study on the CPU."""
    return {
        "study": {
            "name": name,
            "model": "tiny-ernie",
            "gpu": "cpu",
            "workload": "smoke",
            "trials": trials,
            "seed": seed,
        },
        "workload": {
            "requests_per_window": 8,
            "warmup_requests": 2,
            "concurrency": 4,
            "output_tokens": 8,
        },
        "space": {"params": ["max_num_seqs"], "choices": {"max_num_seqs": [4, 16, 64]}},
        "runner": {"startup_timeout_s": 20},
        "confirm": {"launches": 0},
    }


def _queue_studies(url: str, names: list[str], trials: int = 2) -> None:
    """Queue ``names`` the way the API does, oldest first. Only tuner's tables are made: Optuna's
    are left to the workers, which meet on a database they both have to finish setting up."""
    migrate.upgrade(url)
    engine = make_engine(url)
    try:
        repo = Repository(engine)
        for i, name in enumerate(names):
            queue(repo, parse(_body(name, trials, seed=i)))
    finally:
        engine.dispose()


def test_concurrent_claimers_take_every_study_exactly_once(pg_url: str) -> None:
    names = [f"q{i:02d}" for i in range(24)]
    _queue_studies(pg_url, names)
    claimers = 6
    engines = [make_engine(pg_url) for _ in range(claimers)]
    barrier = threading.Barrier(claimers)
    taken: list[list[str]] = [[] for _ in range(claimers)]
    errors: list[BaseException] = []

    def drain(i: int) -> None:
        repo = Repository(engines[i])
        barrier.wait()  # all at once, so that they race for the same oldest row
        try:
            while (row := repo.claim_queued_study()) is not None:
                assert row.status == "running"
                taken[i].append(row.name)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(claimers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    try:
        assert errors == []
        claims = Counter(name for mine in taken for name in mine)
        assert claims == Counter(names), "every study claimed once, none twice, none missed"
        for mine in taken:  # each claimer took its studies oldest first
            assert mine == sorted(mine)
        statuses = {s.name: s.status for s in Repository(engines[0]).list_studies()}
        assert set(statuses.values()) == {"running"} and len(statuses) == len(names)
        assert Repository(engines[0]).claim_queued_study() is None
    finally:
        for e in engines:
            e.dispose()


def test_processes_setting_up_a_fresh_database_at_once(pg_url: str) -> None:
    # Workers started together on a new database: each creates the tables it finds missing.
    # Without the set-up lock the slower one fails ("already exists") and crashes.
    script = "import sys; from tuner.db.migrate import ensure_ready; ensure_ready(sys.argv[1])"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, pg_url],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    assert migrate.current_revision(pg_url) == migrate.head_revision()
    storage = optuna.storages.RDBStorage(pg_url)  # Optuna's schema is complete and stamped
    try:
        assert optuna.get_all_study_names(storage) == []
    finally:
        storage.engine.dispose()


def _worker(url: str, tmp_path: Path, index: int) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TUNER_HOME": str(tmp_path / "home"),
        "TUNER_SERVER_MODULE": "tuner.testing.fake_server",  # compose's seam: no real vLLM
        "TUNER_SERVER_VERSION": "0.32.0",
        "TUNER_FAKE_STARTUP_S": "0.2",
        "COLUMNS": "200",
    }
    workdir = tmp_path / f"worker{index}"
    workdir.mkdir()
    return subprocess.Popen(
        [sys.executable, "-m", "tuner", "worker", "--once", "--storage", url],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_two_worker_processes_share_the_queue(pg_url: str, tmp_path: Path) -> None:
    names = ["w0", "w1", "w2", "w3"]
    _queue_studies(pg_url, names)
    workers = [_worker(pg_url, tmp_path, i) for i in range(2)]
    outputs = []
    try:
        for w in workers:
            outputs.append(w.communicate(timeout=180)[0])
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    assert [w.returncode for w in workers] == [0, 0], outputs
    took = [re.findall(r"worker: took study (\S+)", out) for out in outputs]
    assert Counter(n for mine in took for n in mine) == Counter(names), outputs
    assert all(took), f"both workers should have taken a study: {took}"
    for out, mine in zip(outputs, took, strict=True):
        assert f"worker: {len(mine)} stud" in out

    engine = make_engine(pg_url)
    try:
        repo = Repository(engine)
        for name in names:
            study = repo.get_study(name)
            assert study is not None and study.status == "finished", (name, study)
            rows = repo.list_trials(name, limit=None)
            assert [r.number for r in rows] == [0, 1]
            assert all(r.status is TrialStatus.COMPLETE for r in rows), rows
            assert rows[0].is_baseline
            # Optuna's tables, in the same database, hold the same trials with the same values.
            storage = optuna.storages.RDBStorage(pg_url)
            try:
                trials = optuna.load_study(study_name=name, storage=storage).trials
            finally:
                storage.engine.dispose()
            assert [t.number for t in trials] == [0, 1]
            assert all(t.state is optuna.trial.TrialState.COMPLETE for t in trials)
            assert [tuple(t.values) for t in trials] == [r.objective_values for r in rows]
    finally:
        engine.dispose()
