"""Repository round trips on a migrated SQLite database, with realistic trial results."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from tuner.db import migrate
from tuner.db.repository import Repository
from tuner.db.rows import StudyStatus, TrialPhase
from tuner.db.session import make_engine
from tuner.domain import (
    Estimate,
    FailureClass,
    LatencyStats,
    MemoryUsage,
    Provenance,
    ServerInfo,
    ServingConfig,
    TrialResult,
    TrialStatus,
    WindowMetrics,
)
from tuner.errors import StorageError, UsageError

FA3 = ServingConfig(attention_backend="FLASH_ATTN", flash_attn_version=3, max_num_seqs=128)
BIG = ServingConfig(max_model_len=131_072, gpu_memory_utilization=0.95)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()


@pytest.fixture
def repo(engine: Engine) -> Repository:
    repo = Repository(engine)
    _study(repo, "s1")
    return repo


def _study(repo: Repository, name: str, gpu: str = "h200", **overrides: Any) -> None:
    args: dict[str, Any] = {
        "name": name,
        "optuna_study_name": name,
        "model": "ernie-0.3b",
        "model_source": "baidu/ERNIE-4.5-0.3B-PT",
        "gpu": gpu,
        "workload": "chat",
        "objective": "balanced",
        "slo": {"ttft_p99_ms": 500.0},
        "spec": {"trials": 20, "search": {"max_num_seqs": [64, 128, 256]}},
        "emulated": False,
        "vllm_version": "0.26.0",
        "n_trials_requested": 20,
    }
    args.update(overrides)
    repo.create_study(**args)


def _latency(p99: float) -> LatencyStats:
    return LatencyStats(count=64, mean=p99 / 3, p50=p99 / 4, p90=p99 / 2, p99=p99, max=p99 * 1.2)


def _window(tok_s: float) -> WindowMetrics:
    return WindowMetrics(
        duration_s=14.2,
        requests_ok=64,
        requests_failed=0,
        prompt_tokens=32_768,
        output_tokens=16_384,
        request_throughput=4.5,
        output_throughput=tok_s,
        total_throughput=tok_s * 3,
        ttft_ms=_latency(180.0),
        itl_ms=_latency(9.5),
        e2e_ms=_latency(2600.0),
        goodput=4.4,
    )


def _provenance(gpu_name: str = "NVIDIA H200", emulated: bool = False) -> Provenance:
    return Provenance(
        gpu_name=gpu_name,
        gpu_uuid="GPU-5c1e",
        driver_version="580.82",
        vllm_version="0.26.0",
        model="ernie-0.3b",
        workload="chat",
        emulated=emulated,
        hostname="h200-node-1",
        tuner_version="0.1.0",
        cuda_version="13.0",
    )


def complete(config: ServingConfig, tok_s: float = 15_000.0, **prov: Any) -> TrialResult:
    windows = tuple(_window(tok_s * f) for f in (0.9, 1.0, 1.1))
    values = tuple(w.output_throughput for w in windows)
    return TrialResult(
        config=config,
        status=TrialStatus.COMPLETE,
        windows=windows,
        metrics={
            "output_throughput": Estimate(tok_s, tok_s * 0.9, tok_s * 1.1, values),
            "ttft_p99_ms": Estimate(180.0, 170.0, 195.0, (170.0, 180.0, 195.0)),
        },
        memory=MemoryUsage(
            gpu_peak_bytes={"GPU-5c1e": 130 * 2**30}, gpu_baseline_bytes={"GPU-5c1e": 2**29}
        ),
        server=ServerInfo(
            argv=("python", "-m", "vllm.entrypoints.openai.api_server", "--port", "8301"),
            env={"CUDA_VISIBLE_DEVICES": "0"},
            port=8301,
            served_model_name="tuner-s1-3",
            vllm_version="0.26.0",
            startup_s=61.5,
            effective_backend="FLASH_ATTN",
            flash_attn_version=3,
            kv_cache_tokens=3_145_728,
            max_concurrency=768.0,
        ),
        server_metrics={"vllm:num_preemptions_total": 0.0, "vllm:gpu_cache_usage_perc": 0.41},
        provenance=_provenance(**prov),
        started_at=1_764_500_000.0,
        finished_at=1_764_500_140.5,
    )


def failed(config: ServingConfig, failure: FailureClass) -> TrialResult:
    return TrialResult(
        config=config,
        status=TrialStatus.FAILED,
        failure=failure,
        failure_detail="max_model_len 131072 needs 24.0 GiB of KV cache, 11.2 GiB available",
        log_tail="INFO ... Loading weights\nValueError: To serve at least one request ...\n",
        provenance=_provenance(),
        started_at=1_764_500_200.0,
        finished_at=1_764_500_260.0,
    )


def test_study_round_trip_and_listing_with_counts(repo: Repository) -> None:
    study = repo.get_study("s1")
    assert study is not None
    assert (study.name, study.status, study.gpu) == ("s1", StudyStatus.QUEUED, "h200")
    assert study.slo == {"ttft_p99_ms": 500.0}
    assert study.spec["search"] == {"max_num_seqs": [64, 128, 256]}
    assert study.n_trials == 0
    _study(repo, "s2")
    for n in range(3):
        repo.start_trial("s2", n, ServingConfig(max_num_seqs=64 * (n + 1)))
    t = repo.start_trial("s2", 3, BIG)
    repo.finish_trial(t, failed(BIG, FailureClass.KV_CACHE_INSUFFICIENT), None, None)
    listed = repo.list_studies()
    assert [s.name for s in listed] == ["s2", "s1"]  # newest first
    assert listed[0].trial_counts[TrialStatus.RUNNING] == 3
    assert listed[0].trial_counts[TrialStatus.FAILED] == 1
    assert listed[0].trial_counts[TrialStatus.COMPLETE] == 0
    assert listed[0].n_trials == 4
    assert repo.get_study("nope") is None


def test_confirmation_launches_are_counted_apart_from_the_search_trials(repo: Repository) -> None:
    for n in range(2):
        repo.start_trial("s1", n, ServingConfig(max_num_seqs=64 * (n + 1)))
    for n in range(2, 5):
        repo.start_trial("s1", n, ServingConfig(), phase=TrialPhase.CONFIRM)
    study = repo.get_study("s1")
    assert study is not None
    assert study.n_trials == 2 and study.trial_counts[TrialStatus.RUNNING] == 2
    assert study.n_confirmation_launches == 3
    assert study.confirmation_counts[TrialStatus.RUNNING] == 3
    assert repo.list_studies()[0].confirmation_counts == study.confirmation_counts


def test_duplicate_study_name_is_a_usage_error(repo: Repository) -> None:
    with pytest.raises(UsageError) as err:
        _study(repo, "s1")
    assert "already exists" in err.value.message
    assert "--resume" in err.value.hint and "--study" in err.value.hint
    with pytest.raises(UsageError):
        _study(repo, " ")


def test_set_study_status(repo: Repository) -> None:
    before = repo.get_study("s1")
    repo.set_study_status("s1", "running")
    repo.set_study_status("s1", StudyStatus.FINISHED)
    after = repo.get_study("s1")
    assert before is not None and after is not None
    assert after.status is StudyStatus.FINISHED
    assert f"{after.status}" == "finished"
    assert after.updated_at >= before.updated_at
    with pytest.raises(ValueError):
        repo.set_study_status("s1", "done")
    with pytest.raises(UsageError, match="no study named 'ghost'"):
        repo.set_study_status("ghost", "running")


def test_complete_trial_round_trip(repo: Repository) -> None:
    trial_id = repo.start_trial("s1", 3, FA3, "search", False)
    running = repo.get_trial("s1", 3)
    assert running is not None
    assert (running.id, running.status, running.config) == (trial_id, TrialStatus.RUNNING, FA3)
    assert running.config_label == FA3.label()
    result = complete(FA3)
    repo.finish_trial(trial_id, result, 0.25, [15_000.0, 180.0, 130.5])
    row = repo.get_trial("s1", 3)
    assert row is not None
    assert row.to_result() == result
    assert row.metrics["output_throughput"] == result.metrics["output_throughput"]
    assert row.failure is None
    assert (row.score, row.objective_values) == (0.25, (15_000.0, 180.0, 130.5))
    assert (row.effective_backend, row.kv_cache_tokens) == ("FLASH_ATTN", 3_145_728)
    assert (row.gpu_name, row.gpu_uuid, row.driver_version) == ("NVIDIA H200", "GPU-5c1e", "580.82")
    assert (row.model, row.workload, row.emulated) == ("ernie-0.3b", "chat", False)
    assert (row.vllm_version, row.hostname) == ("0.26.0", "h200-node-1")
    assert running.gpu_name is None and running.vllm_version is None
    assert row.phase is TrialPhase.SEARCH and not row.is_baseline


def test_failed_trial_round_trip_and_failed_configs(repo: Repository) -> None:
    t0 = repo.start_trial("s1", 0, ServingConfig(), "search", True)
    repo.finish_trial(t0, complete(ServingConfig()), 0.0, [1.0, 1.0, 1.0])
    t1 = repo.start_trial("s1", 1, BIG)
    result = failed(BIG, FailureClass.KV_CACHE_INSUFFICIENT)
    repo.finish_trial(t1, result, None, [-1.0, math.inf, math.inf])
    small = ServingConfig(max_model_len=4096)
    t2 = repo.start_trial("s1", 2, small)
    pruned = TrialResult(small, TrialStatus.PRUNED, FailureClass.INVALID_CONFIG, "fp8 on cpu")
    repo.finish_trial(t2, pruned, None, None)
    row = repo.get_trial("s1", 1)
    assert row is not None
    assert row.to_result() == result
    assert row.failure is FailureClass.KV_CACHE_INSUFFICIENT
    assert "ValueError: To serve" in row.log_tail
    assert row.objective_values == (-1.0, math.inf, math.inf)
    assert row.metrics == {}
    assert repo.failed_configs("s1") == [
        (BIG, FailureClass.KV_CACHE_INSUFFICIENT),
        (small, FailureClass.INVALID_CONFIG),
    ]


def test_interrupted_marking_and_rerun_after_a_crash(repo: Repository) -> None:
    t0 = repo.start_trial("s1", 0, ServingConfig())
    repo.finish_trial(t0, complete(ServingConfig()), 0.0, None)
    repo.start_trial("s1", 1, FA3)
    repo.start_trial("s1", 2, BIG)
    assert repo.mark_running_as_interrupted("s1") == 2
    assert repo.mark_running_as_interrupted("s1") == 0
    rows = repo.list_trials("s1", status=TrialStatus.FAILED)
    assert [(r.number, r.failure) for r in rows] == [
        (1, FailureClass.INTERRUPTED),
        (2, FailureClass.INTERRUPTED),
    ]
    assert all(r.finished_at is not None for r in rows)
    # An interrupted number may run again; a finished one may not.
    again = repo.start_trial("s1", 2, BIG)
    assert repo.count_trials("s1") == 3
    rerun = repo.get_trial("s1", 2)
    assert rerun is not None and rerun.id == again and rerun.status is TrialStatus.RUNNING
    assert rerun.failure is None and rerun.finished_at is None
    with pytest.raises(StorageError, match="already finished"):
        repo.start_trial("s1", 0, ServingConfig())


def test_running_row_is_replaced_by_a_rerun(repo: Repository) -> None:
    first = repo.start_trial("s1", 5, FA3)
    second = repo.start_trial("s1", 5, BIG, TrialPhase.CONFIRM, True)
    assert first == second
    row = repo.get_trial("s1", 5)
    assert row is not None
    assert (row.config, row.phase, row.is_baseline) == (BIG, TrialPhase.CONFIRM, True)
    assert repo.count_trials("s1") == 1


def test_finish_trial_misuse(repo: Repository) -> None:
    trial_id = repo.start_trial("s1", 0, FA3)
    with pytest.raises(ValueError, match="finished result"):
        repo.finish_trial(trial_id, TrialResult(FA3, TrialStatus.RUNNING), None, None)
    with pytest.raises(StorageError, match="no trial with id"):
        repo.finish_trial(9999, complete(FA3), None, None)
    repo.finish_trial(trial_id, complete(FA3), math.nan, None)
    row = repo.get_trial("s1", 0)
    assert row is not None and row.score is None
    with pytest.raises(StorageError, match="already finished"):
        repo.finish_trial(trial_id, complete(FA3), 1.0, None)


def test_pagination_and_filters(repo: Repository) -> None:
    for n in range(25):
        phase = TrialPhase.CONFIRM if n >= 20 else TrialPhase.SEARCH
        trial_id = repo.start_trial("s1", n, ServingConfig(max_num_seqs=n + 1), phase)
        if n % 2 == 0:
            repo.finish_trial(trial_id, complete(ServingConfig(max_num_seqs=n + 1)), n, None)
    page = repo.list_trials("s1", limit=10, offset=20)
    assert [r.number for r in page] == [20, 21, 22, 23, 24]
    assert [r.number for r in repo.list_trials("s1", limit=3)] == [0, 1, 2]
    assert len(repo.list_trials("s1", limit=None)) == 25
    done = repo.list_trials("s1", status=TrialStatus.COMPLETE, limit=5, offset=5)
    assert [r.number for r in done] == [10, 12, 14, 16, 18]
    confirm = repo.list_trials("s1", phase="confirm")
    assert [r.number for r in confirm] == [20, 21, 22, 23, 24]
    assert repo.count_trials("s1") == 25
    assert repo.count_trials("s1", TrialStatus.COMPLETE) == 13
    assert repo.count_trials("s1", TrialStatus.PRUNED) == 0
    with pytest.raises(UsageError):
        repo.list_trials("s1", offset=-1)
    with pytest.raises(UsageError, match="no study named"):
        repo.list_trials("ghost")


def test_comparison_round_trip(repo: Repository) -> None:
    results = {"a": {"output_throughput": Estimate(1.0, 0.9, 1.1, (0.9, 1.0, 1.1))}}
    added = repo.add_comparison(
        model="ernie-0.3b",
        gpu="h200",
        workload="chat",
        a_config=ServingConfig(),
        b_config=FA3,
        repeats=3,
        results=results,
        verdicts={"output_throughput": "no difference"},
        provenance=_provenance(),
        study_name="s1",
    )
    got = repo.get_comparison(added.id)
    assert got == added
    assert got.b_config == FA3 and got.a_config == ServingConfig()
    assert got.results["a"]["output_throughput"]["values"] == [0.9, 1.0, 1.1]
    assert got.provenance == _provenance()
    assert got.study_id == repo.get_study("s1").id  # type: ignore[union-attr]
    assert repo.get_comparison(added.id + 1) is None


def test_delete_study_cascades_to_trials(repo: Repository) -> None:
    repo.start_trial("s1", 0, FA3)
    comparison = repo.add_comparison(
        model="m",
        gpu="h200",
        workload="chat",
        a_config=FA3,
        b_config=BIG,
        repeats=1,
        results={},
        verdicts={},
        study_name="s1",
    )
    assert repo.delete_study("s1") is True
    assert repo.delete_study("s1") is False
    _study(repo, "s1")  # the name is free again, and no orphan trial shows up under it
    assert repo.count_trials("s1") == 0
    kept = repo.get_comparison(comparison.id)
    assert kept is not None and kept.study_id is None


def test_unmigrated_database_says_to_upgrade(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        with pytest.raises(StorageError) as err:
            Repository(engine).get_study("s1")
    finally:
        engine.dispose()
    assert "no such table" in err.value.message
    assert "tuner db upgrade" in err.value.hint
