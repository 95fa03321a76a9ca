"""The repository on PostgreSQL: what SQLite accepts must round-trip here too (non-finite floats
in JSON, NUL characters, unique names under a race, cascades the server enforces)."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select, text, update
from sqlalchemy.pool import NullPool

from tests.studykit import TINY_WORKLOAD, spec_writers
from tuner.db import codec, migrate
from tuner.db.models import StudyModel
from tuner.db.repository import QUEUE_WORKER, Repository
from tuner.db.rows import TrialPhase
from tuner.db.session import make_engine
from tuner.domain import (
    Estimate,
    FailureClass,
    ServingConfig,
    TrialResult,
    TrialStatus,
)
from tuner.errors import UsageError
from tuner.testing.fake_runner import FakeRunner

NAN, INF = math.nan, math.inf


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    migrate.upgrade(pg_url)
    engine = make_engine(pg_url)
    yield engine
    engine.dispose()


def _study(repo: Repository, name: str = "s1", gpu: str = "h200") -> None:
    repo.create_study(
        name=name,
        optuna_study_name=name,
        model="tiny-ernie",
        model_source=None,
        gpu=gpu,
        workload="smoke",
        objective="balanced",
        slo={"ttft_p99_ms": 500.0, "e2e_p99_ms": INF},
        spec={"trials": 4, "choices": {"max_num_seqs": [1, 64]}, "notes": "naïve 漢字"},
        emulated=True,
        vllm_version="0.32.0",
        n_trials_requested=4,
    )


def _non_finite(result: TrialResult) -> TrialResult:
    """A fake runner's result with NaN and infinities wherever a float may be one."""
    first = result.windows[0]
    window = dataclasses.replace(
        first,
        ttft_ms=dataclasses.replace(first.ttft_ms, p99=NAN, max=INF),
        itl_ms=dataclasses.replace(first.itl_ms, mean=-INF),
        goodput=NAN,
    )
    return dataclasses.replace(
        result,
        windows=(window, *result.windows[1:]),
        metrics={**result.metrics, "ttft_p99_ms": Estimate(NAN, -INF, INF, (NAN, 1.5, INF))},
        server_metrics={"vllm:gpu_cache_usage_perc": NAN, "vllm:num_preemptions_total": INF},
    )


def _same(a: TrialResult, b: TrialResult) -> bool:
    """Equal, NaN included (NaN != NaN, so compare their encodings, where NaN is "nan")."""
    return bool(codec.encode(a) == codec.encode(b))


def test_trials_round_trip_with_non_finite_floats(engine: Engine, pg_url: str) -> None:
    repo = Repository(engine)
    _study(repo)
    study = repo.get_study("s1")
    assert study is not None and study.slo == {"ttft_p99_ms": 500.0, "e2e_p99_ms": "inf"}
    assert study.spec["notes"] == "naïve 漢字"

    config = ServingConfig(max_num_seqs=8, gpu_memory_utilization=0.5)
    result = _non_finite(FakeRunner().run(config, TINY_WORKLOAD))
    trial_id = repo.start_trial("s1", 0, config, TrialPhase.SEARCH, True)
    repo.finish_trial(trial_id, result, 0.75, [1234.5, INF, -INF])
    big = ServingConfig(gpu_memory_utilization=0.99)
    crashed = FakeRunner().run(big, TINY_WORKLOAD)
    assert crashed.failure is FailureClass.MEMORY_EXCEEDED
    repo.finish_trial(repo.start_trial("s1", 1, big), crashed, NAN, None)

    # Read through another engine: what the server stored, not what the session cached.
    other = make_engine(pg_url)
    try:
        rows = Repository(other).list_trials("s1")
    finally:
        other.dispose()
    assert [r.number for r in rows] == [0, 1]
    row = rows[0]
    assert _same(row.to_result(), result)
    assert math.isnan(row.windows[0].ttft_ms.p99) and row.windows[0].ttft_ms.max == INF
    assert row.metrics["ttft_p99_ms"].high == INF and math.isnan(row.metrics["ttft_p99_ms"].median)
    assert row.objective_values == (1234.5, INF, -INF)
    assert (row.score, row.is_baseline, row.status) == (0.75, True, TrialStatus.COMPLETE)
    assert (row.gpu_name, row.effective_backend) == ("fake GPU", "FAKE_ATTN")
    failed = rows[1]
    assert _same(failed.to_result(), crashed)
    assert failed.score is None and failed.failure is FailureClass.MEMORY_EXCEEDED


def test_a_plan_with_an_infinite_effect_is_stored_and_read_back(engine: Engine) -> None:
    """A leave-one-out trial that failed gives its knob an infinite effect; the plan was stored
    raw, as JSON's ``Infinity``, which PostgreSQL refuses: the study crashed when its screening
    was judged."""
    repo = Repository(engine)
    _study(repo)
    diagnosis = {"regime": "decode-bound", "evidence": [], "figures": {"streams": 8.0}}
    plan = {"diagnosis": {**diagnosis, "streams": 8}, "knobs": [], "kept": ["kv_cache_dtype"],
            "effects": {"kv_cache_dtype": INF, "attention_backend": 1.2}, "margin": 0.1,
            "recipe": 1.3}  # fmt: skip
    repo.set_study_plan("s1", plan)
    assert repo.study_plan("s1") == plan


def test_nul_characters_are_stored_refused_or_not_found(engine: Engine) -> None:
    # A crashing server's log may hold NUL bytes; PostgreSQL's text type cannot, and the
    # trial must still be recorded rather than fail the study.
    repo = Repository(engine)
    _study(repo)
    config = ServingConfig()
    result = TrialResult(
        config,
        TrialStatus.FAILED,
        FailureClass.CRASHED,
        failure_detail="Segmentation fault\x00",
        log_tail="INFO loading\n\x00\x00\x00core dumped\n",
    )
    repo.finish_trial(repo.start_trial("s1", 0, config), result, None, None)
    row = repo.get_trial("s1", 0)
    assert row is not None and row.status is TrialStatus.FAILED
    assert row.log_tail == "INFO loading\n\ufffd\ufffd\ufffdcore dumped\n"
    assert row.failure_detail == "Segmentation fault\ufffd"
    # JSON escapes NUL (\u0000), which PostgreSQL's json type keeps.
    odd = {"argv": ["--x", "a\x00b"]}
    repo.add_comparison(
        model="m",
        gpu="h200",
        workload="smoke",
        a_config=config,
        b_config=config,
        repeats=1,
        results=odd,
        verdicts={},
    )
    assert repo.list_comparisons()[0].results == odd
    # Names are identifiers: one with NUL is refused, and looking one up finds nothing
    # (instead of a database error, which an API client would see as 503).
    with pytest.raises(UsageError, match="none of them NUL"):
        _study(repo, "a\x00b")
    assert repo.get_study("s1\x00") is None and repo.delete_study("s1\x00") is False
    with pytest.raises(UsageError, match="no study named"):
        repo.list_trials("s1\x00")


def test_comparison_round_trip_and_delete_cascades(engine: Engine) -> None:
    repo = Repository(engine)
    _study(repo)
    repo.start_trial("s1", 0, ServingConfig())
    results = {"a": {"output_throughput": Estimate(1.0, NAN, INF, (0.9, 1.0, 1.1))}}
    added = repo.add_comparison(
        model="tiny-ernie",
        gpu="h200",
        workload="smoke",
        a_config=ServingConfig(),
        b_config=ServingConfig(max_num_seqs=8),
        repeats=3,
        results=results,
        verdicts={"output_throughput": "no difference"},
        study_name="s1",
    )
    got = repo.get_comparison(added.id)
    assert got == added
    assert got.results["a"]["output_throughput"] == {
        "median": 1.0,
        "low": "nan",
        "high": "inf",
        "values": [0.9, 1.0, 1.1],
    }
    assert codec.decode_estimate(got.results["a"]["output_throughput"]).high == INF
    assert repo.delete_study("s1") is True
    _study(repo)  # the name is free again, and the server's cascade left no orphan trial
    assert repo.count_trials("s1") == 0
    kept = repo.get_comparison(added.id)
    assert kept is not None and kept.study_id is None  # ON DELETE SET NULL


def _in_threads(jobs: Sequence[Callable[[], object]]) -> list[object]:
    """Run ``jobs`` at once (a barrier lines them up); each one's return value or exception."""
    barrier = threading.Barrier(len(jobs))
    out: list[object] = [None] * len(jobs)

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = jobs[i]()
        except Exception as e:
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


def test_racing_creates_of_one_name_give_one_study_and_usage_errors(pg_url: str) -> None:
    migrate.upgrade(pg_url)
    engines = [make_engine(pg_url) for _ in range(4)]

    def create(engine: Engine) -> Callable[[], str]:
        def job() -> str:
            _study(Repository(engine), "contested")
            return "created"

        return job

    try:
        # Each sees no such name, then inserts: the unique index makes one wait for the other's
        # commit and fail, which must read as "already exists", not as a database error.
        outcomes = _in_threads([create(e) for e in engines])
        assert outcomes.count("created") == 1, outcomes
        errors = [o for o in outcomes if o != "created"]
        assert all(isinstance(e, UsageError) and "already exists" in e.message for e in errors)
        assert [s.name for s in Repository(engines[0]).list_studies()] == ["contested"]
    finally:
        for e in engines:
            e.dispose()


def test_two_writers_and_a_reader_on_one_study(pg_url: str) -> None:
    migrate.upgrade(pg_url)
    engines = [make_engine(pg_url) for _ in range(3)]
    a, b, reader = (Repository(e) for e in engines)
    _study(a)
    done = threading.Event()
    seen: list[int] = []

    first_read = threading.Event()

    def write(repo: Repository, numbers: range) -> None:
        # The writers start once the reader has read: on a busy machine its first query (a new
        # connection) once returned only after all 40 writes.
        assert first_read.wait(timeout=60)
        for n in numbers:
            config = ServingConfig(max_num_seqs=n + 1)
            result = TrialResult(config, TrialStatus.FAILED, FailureClass.CRASHED, "x")
            repo.finish_trial(repo.start_trial("s1", n, config), result, None, None)

    def read() -> None:
        while True:
            finished = done.is_set()  # one more read after the writers finished
            seen.append(reader.count_trials("s1", TrialStatus.FAILED))
            reader.list_studies()
            first_read.set()
            if finished:
                return

    reading = threading.Thread(target=read)
    reading.start()
    try:
        errors = _in_threads([lambda: write(a, range(0, 20)), lambda: write(b, range(20, 40))])
    finally:
        done.set()
        reading.join(timeout=60)
    try:
        assert errors == [None, None]
        assert reader.count_trials("s1", TrialStatus.FAILED) == 40
        assert seen == sorted(seen) and len(seen) > 1  # counts only grew: no torn reads
        study = reader.get_study("s1")
        assert study is not None and study.trial_counts[TrialStatus.FAILED] == 40
    finally:
        for e in engines:
            e.dispose()


def _while_held(pg_url: str, change: Mapping[str, Any], call: Callable[[], object]) -> object:
    """What ``call`` returns when another transaction holds study s1's row (SELECT ... FOR
    UPDATE), merges ``change`` into its spec, and commits only once ``call`` waits for it."""
    holder = make_engine(pg_url)
    watcher = create_engine(pg_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(_outcome(call)))
    try:
        with holder.begin() as conn:
            s1 = StudyModel.name == "s1"
            spec = conn.scalar(select(StudyModel.spec).where(s1).with_for_update())
            conn.execute(update(StudyModel).where(s1).values(spec={**spec, **change}))
            thread.start()
            deadline = time.monotonic() + 30
            with watcher.connect() as watching:
                while not watching.scalar(waiting):
                    assert time.monotonic() < deadline, "the call never waited for the lock"
                    time.sleep(0.02)
        thread.join(timeout=60)
    finally:
        holder.dispose()
        watcher.dispose()
    assert out, "the call did not return"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def _outcome(call: Callable[[], object]) -> object:
    try:
        return call()
    except BaseException as e:
        return e


@pytest.mark.parametrize("write", ["claim_study_step", "set_study_plan", "claim_queued_study"])
def test_a_spec_written_back_keeps_a_concurrent_change(
    engine: Engine, pg_url: str, write: str
) -> None:
    # Each reads the stored spec and writes back a merged copy: a change another process commits
    # in between (another worker's claim, a plan, a runner's record) is kept, and so is this one.
    repo = Repository(engine)
    _study(repo)  # queued
    call, key, value = spec_writers(repo, "s1", {"host": "h", "pid": 1, "start": 1.0})[write]
    _while_held(pg_url, {"held": True}, call)
    study = repo.get_study("s1")
    assert study is not None and study.spec["held"] is True and study.spec["trials"] == 4
    assert study.spec[key] == value  # and so each claim took its study


def test_a_heartbeat_of_a_study_taken_over_meanwhile_does_not_count(
    engine: Engine, pg_url: str
) -> None:
    repo = Repository(engine)
    _study(repo)
    me, other = {"host": "h", "pid": 1, "start": 1.0}, {"host": "h", "pid": 2, "start": 1.0}
    assert repo.claim_queued_study(worker=me) is not None
    assert _while_held(pg_url, {QUEUE_WORKER: other}, lambda: repo.touch_study("s1", me)) is False
