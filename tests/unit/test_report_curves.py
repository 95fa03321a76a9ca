"""tuner.results.report.curves: what the study page's load-curve charts and capacity column show."""

from __future__ import annotations

import dataclasses

import pytest

from tuner.db.rows import StudyRow, StudyStatus, TrialPhase, TrialRow
from tuner.domain import (
    ClientHealth,
    MemoryUsage,
    RequestRecord,
    ServingConfig,
    Slo,
    TrialStatus,
    WindowMetrics,
)
from tuner.load.curve import trial_metrics
from tuner.load.stats import window_metrics
from tuner.load.workloads import WORKLOADS
from tuner.results.report.curves import any_capacity, study_curves, trial_capacities

GIB = 1024**3
SLO = {"e2e_p99_ms": 500.0}


def _study(slo: dict[str, float] | None = None) -> StudyRow:
    return StudyRow(
        id=1,
        name="s",
        optuna_study_name="s",
        created_at=0.0,
        updated_at=0.0,
        status=StudyStatus.FINISHED,
        model="m",
        model_source=None,
        gpu="h100",
        workload="chat",
        objective="capacity",
        slo=SLO if slo is None else slo,
        spec={},
        emulated=False,
        vllm_version="0.32.0",
        notes="",
        n_trials_requested=2,
    )


def _window(
    e2e_s: float,
    *,
    concurrency: int | None = None,
    rate: float | None = None,
    n: int = 10,
    duration_s: float = 1.0,
    client: ClientHealth | None = None,
) -> WindowMetrics:
    """``n`` requests of 10 output tokens in ``duration_s``, each taking ``e2e_s``."""
    records = [
        RequestRecord(
            ok=True,
            prompt_tokens=20,
            output_tokens=10,
            start_s=0.0,
            ttft_s=e2e_s / 10,
            e2e_s=e2e_s,
            itl_s=(e2e_s / 10,) * 9,
        )
        for _ in range(n)
    ]
    return window_metrics(
        records, duration_s, None, concurrency=concurrency, request_rate=rate, client=client
    )


def _trial(
    number: int,
    windows: list[WindowMetrics],
    *,
    gpus: int = 1,
    phase: TrialPhase = TrialPhase.SEARCH,
    config: ServingConfig | None = None,
) -> TrialRow:
    config = config or (ServingConfig() if number == 0 else ServingConfig(max_num_seqs=number))
    workload = WORKLOADS["chat"].replace(concurrency_ladder=(2, 4))
    return TrialRow(
        id=number + 1,
        study_name="s",
        number=number,
        phase=phase,
        is_baseline=number == 0,
        config=config,
        config_label=config.label(),
        status=TrialStatus.COMPLETE,
        failure=None,
        failure_detail="",
        log_tail="",
        metrics=trial_metrics(workload, windows, Slo(**SLO)),
        windows=tuple(windows),
        memory=MemoryUsage(gpu_peak_bytes={f"GPU-{i}": GIB for i in range(gpus)}),
        server=None,
        server_metrics={},
        provenance=None,
        score=None,
        objective_values=None,
        started_at=None,
        finished_at=None,
    )


def _curve(*points: tuple[int, float]) -> list[WindowMetrics]:
    """Two windows per (concurrency, e2e_s) point, ``concurrency * 10`` requests per second."""
    return [_window(e2e, concurrency=c, n=10 * c) for c, e2e in points for _ in range(2)]


def test_closed_loop_curve_per_stream_per_gpu_and_the_capacity_point() -> None:
    # 4 streams meet the SLO (0.4 s), 8 do not (0.6 s): capacity is read at 4.
    trial = _trial(1, _curve((2, 0.2), (4, 0.4), (8, 0.6)), gpus=2)
    curves = study_curves(_study(), [trial])
    assert curves is not None and curves.per_gpu and curves.open_loop is False
    (curve,) = curves.trials
    assert [p.label for p in curve.points] == ["2 streams", "4 streams", "8 streams"]
    assert [p.output_throughput for p in curve.points] == [200.0, 400.0, 800.0]
    assert [p.per_gpu for p in curve.points] == [100.0, 200.0, 400.0]
    assert [p.per_stream for p in curve.points] == [100.0, 100.0, 100.0]
    assert curve.capacity_point is curve.points[1]
    assert [p.is_capacity for p in curve.points] == [False, True, False]


def test_rate_points_take_streams_from_littles_law() -> None:
    # 20 req/s at a 0.5 s E2E: 10 requests in flight; 1 req/s at 0.5 s: at least one stream.
    windows = [_window(0.5, rate=20.0, n=20), _window(0.5, rate=1.0, n=1)]
    curves = study_curves(_study(), [_trial(0, windows)])
    assert curves is not None and curves.open_loop is True
    high, low = curves.trials[0].points
    assert high.label == "20 req/s" and high.per_stream == pytest.approx(200.0 / 10)
    assert low.per_stream == pytest.approx(10.0)


def test_a_client_bound_point_is_flagged_with_its_notes_and_never_the_capacity() -> None:
    health = ClientHealth(
        client_cpu=0.97,
        loop_lag_p99_ms=40.0,
        loop_lag_max_ms=90.0,
        host_cpu=1.0,
        host_cores=2,
        client_bound=True,
        notes=("client used 97% of a core",),
    )
    windows = _curve((2, 0.2), (4, 0.3))
    windows[-1] = dataclasses.replace(windows[-1], client=health)
    trial = _trial(0, windows, gpus=0)
    curves = study_curves(_study(), [trial])
    assert curves is not None and not curves.per_gpu and curves.flagged
    two, four = curves.trials[0].points
    assert four.caveat == "client-bound" and four.notes == ("client used 97% of a core",)
    assert two.is_capacity and not four.is_capacity
    assert four.per_gpu == four.output_throughput  # no GPU telemetry: per server
    cap = trial_capacities([trial])[0]
    assert cap.met and cap.load_label == "2 streams"
    assert cap.flag == "client-bound: 1 of 4 windows"
    assert cap.notes == ("client used 97% of a core",)


def test_single_point_studies_have_no_curves_and_no_capacity() -> None:
    old = [_window(0.2), _window(0.2)]  # stored before load points were tagged
    trials = [_trial(0, old), _trial(1, [_window(0.2, concurrency=4)])]
    assert study_curves(_study(), trials) is None
    capacities = trial_capacities(trials)
    assert not any_capacity(capacities)
    assert all(c.flag == "" and c.output_throughput is None for c in capacities.values())


def test_only_complete_search_trials_are_drawn_and_no_point_meeting_the_slo_is_no_capacity() -> (
    None
):
    slow = _trial(0, _curve((2, 0.6), (4, 0.7)))
    confirm = _trial(5, _curve((2, 0.2), (4, 0.3)), phase=TrialPhase.CONFIRM)
    curves = study_curves(_study(), [confirm, slow])
    assert curves is not None and [t.number for t in curves.trials] == [0]
    assert curves.trials[0].capacity_point is None
    cap = trial_capacities([slow])[0]
    assert cap.output_throughput == 0.0 and not cap.met and cap.load_label == ""
    assert any_capacity({0: cap})
