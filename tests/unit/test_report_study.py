"""tuner.results.report.study and .overview: the numbers the study page and the overview draw."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from tuner.db.rows import StudyRow, StudyStatus, TrialPhase, TrialRow
from tuner.domain import (
    Estimate,
    FailureClass,
    LatencyStats,
    MemoryUsage,
    Objective,
    ServingConfig,
    TrialStatus,
    WindowMetrics,
)
from tuner.results.report import fallback_importances, overview, study_report
from tuner.results.report.study import distribution, history, pareto, trial_lines

GIB = 1024**3
DEFAULTS = ServingConfig()
NAN = float("nan")


def _study(name: str = "s", objective: str = "throughput", **kw: Any) -> StudyRow:
    fields: dict[str, Any] = dict(
        id=1,
        name=name,
        optuna_study_name=name,
        created_at=0.0,
        updated_at=0.0,
        status=StudyStatus.FINISHED,
        model="m",
        model_source=None,
        gpu="h100",
        workload="chat",
        objective=objective,
        slo={},
        spec={},
        emulated=False,
        vllm_version="0.32.0",
        notes="",
        n_trials_requested=4,
    )
    fields.update(kw)
    return StudyRow(**fields)


def _lat(p50: float, p99: float) -> LatencyStats:
    return LatencyStats(count=8, mean=p50, p50=p50, p90=p99, p99=p99, max=p99)


def _window(ttft: tuple[float, float], e2e: tuple[float, float]) -> WindowMetrics:
    return WindowMetrics(
        duration_s=1.0,
        requests_ok=8,
        requests_failed=0,
        prompt_tokens=80,
        output_tokens=80,
        request_throughput=8.0,
        output_throughput=80.0,
        total_throughput=160.0,
        ttft_ms=_lat(*ttft),
        itl_ms=_lat(1.0, 2.0),
        e2e_ms=_lat(*e2e),
    )


def _est(v: float) -> Estimate:
    return Estimate(median=v, low=v * 0.9, high=v * 1.1, values=(v, v, v))


def _trial(
    number: int,
    thr: float | None = None,
    p99: float = 100.0,
    mem_gib: float = 10.0,
    config: ServingConfig = DEFAULTS,
    *,
    failure: FailureClass | None = None,
    windows: tuple[WindowMetrics, ...] = (),
    gpu: bool = True,
    **kw: Any,
) -> TrialRow:
    complete = thr is not None
    metrics = (
        {
            "output_throughput": _est(thr),
            "ttft_p99_ms": _est(p99 / 2),
            "e2e_p99_ms": _est(p99),
            "itl_p99_ms": _est(5.0),
            "error_rate": _est(0.0),
        }
        if thr is not None
        else {}
    )
    mem = int(mem_gib * GIB)
    fields: dict[str, Any] = dict(
        id=number + 1,
        study_name="s",
        number=number,
        phase=TrialPhase.SEARCH,
        is_baseline=number == 0,
        config=config,
        config_label=config.label(),
        status=TrialStatus.COMPLETE if complete else TrialStatus.FAILED,
        failure=None if complete else (failure or FailureClass.MEMORY_EXCEEDED),
        failure_detail="" if complete else "does not fit",
        log_tail="",
        metrics=metrics,
        windows=windows,
        memory=MemoryUsage(gpu_peak_bytes={"GPU-1": mem})
        if gpu
        else MemoryUsage(host_peak_rss_bytes=mem),
        server=None,
        server_metrics={},
        provenance=None,
        score=123.0,  # stored scores are not used: they depend on when the baseline finished
        objective_values=(thr, mem_gib, p99) if complete else None,
        started_at=100.0,
        finished_at=160.0,
        gpu_name="NVIDIA H100" if complete else None,
        vllm_version="0.32.0" if complete else None,
    )
    fields.update(kw)
    return TrialRow(**fields)


def test_scores_are_relative_to_the_baseline_and_failures_have_none() -> None:
    trials = [_trial(0, 100.0), _trial(1), _trial(2, 150.0)]
    lines = trial_lines(_study(objective="throughput"), trials)
    assert [t.score for t in lines] == [pytest.approx(1.0), None, pytest.approx(1.5)]
    assert lines[1].failure == "memory_exceeded" and lines[1].failure_is_finding
    assert lines[1].throughput is None and lines[1].memory_gib is None
    assert lines[2].duration_s == 60.0 and lines[2].memory_gib == pytest.approx(10.0)


def test_history_best_so_far_counts_only_trials_that_meet_the_slo() -> None:
    study = _study(objective="throughput", slo={"e2e_p99_ms": 150.0})
    trials = [_trial(0, 100.0), _trial(1, 300.0, p99=200.0), _trial(2), _trial(3, 120.0)]
    h = history(trial_lines(study, trials))
    assert h.numbers == (0, 1, 3)  # the failed trial has no score
    assert h.feasible == (True, False, True)
    assert h.best_so_far == pytest.approx((1.0, 1.0, 1.2))
    report = study_report(study, trials)
    assert report.best is not None and report.best.number == 3  # feasible beats a higher score


def test_without_the_defaults_measured_the_history_is_of_the_primary_metric_raw() -> None:
    # A score is a ratio to the defaults: with their trial failed there is none, and the
    # history shows the preset's primary metric as measured, saying why.
    trials = [_trial(0), _trial(1, 300.0, p99=200.0), _trial(2, 120.0, p99=80.0)]
    slo = {"e2e_p99_ms": 150.0}
    h = study_report(_study(objective="throughput", slo=slo), trials).history
    assert h.numbers == (1, 2) and h.scores == (300.0, 120.0)
    assert h.feasible == (False, True) and h.best_so_far == (None, 120.0)
    assert h.metric == "output throughput (tok/s)"
    assert h.why == "vLLM's defaults did not complete (#0 memory_exceeded)"
    latency = history(trial_lines(_study(objective="latency"), trials), Objective.LATENCY)
    assert latency.metric == "P99 E2E latency (ms)" and latency.best_so_far == (200.0, 80.0)
    excluded = history(trial_lines(_study(), trials[1:]), Objective.THROUGHPUT)
    assert excluded.why == "the study has no trial of vLLM's defaults"
    assert history(trial_lines(_study(), [_trial(0)])) == history(())  # nothing to show
    scored = study_report(_study(), [_trial(0, 100.0), *trials[1:]]).history
    assert scored.metric == scored.why == "" and scored.scores == pytest.approx((1.0, 3.0, 1.2))


def test_pareto_front_keeps_the_non_dominated_trials() -> None:
    trials = [
        _trial(0, 100.0, p99=100.0),
        _trial(1, 200.0, p99=150.0),  # faster but slower tail: on the front
        _trial(2, 90.0, p99=120.0),  # worse on both than trial 0
        _trial(3),
    ]
    points = pareto(trial_lines(_study(), trials))
    assert {p.number: p.on_front for p in points} == {0: True, 1: True, 2: False}
    assert points[1].memory_gib == pytest.approx(10.0)


def test_the_page_s_pareto_front_is_the_search_s_with_or_without_the_defaults() -> None:
    # A confirmation launch is judged by its comparison (it was a point of the front), and a
    # study whose defaults never ran still has its trade-off to show (scores aside).
    confirm = _trial(100_000, 300.0, p99=90.0, phase=TrialPhase.CONFIRM)
    points = pareto(trial_lines(_study(), [_trial(0, 100.0), _trial(1, 200.0), confirm]))
    assert [p.number for p in points] == [0, 1]
    no_defaults = pareto(trial_lines(_study(), [_trial(1, 200.0), _trial(2, 90.0, p99=50.0)]))
    assert {p.number: p.on_front for p in no_defaults} == {1: True, 2: True}


def test_distribution_collects_every_window_and_drops_missing_percentiles() -> None:
    w = (_window((10, 20), (100, 200)), _window((NAN, NAN), (110, 210)))
    trials = [_trial(1, 100.0, windows=w), _trial(0, 100.0, windows=w[:1]), _trial(2)]
    ttft, e2e = distribution("ttft", trials), distribution("e2e", trials)
    assert ttft.numbers == (0, 1) and ttft.p50 == ((10,), (10,)) and ttft.p99 == ((20,), (20,))
    assert e2e.p50 == ((100,), (100, 110)) and e2e.p99 == ((200,), (200, 210))


def test_fallback_importances_credit_the_knob_that_explains_the_score() -> None:
    few, many = ServingConfig(max_num_seqs=8), ServingConfig(max_num_seqs=64)
    trials = [
        _trial(0, 100.0),
        _trial(1, 50.0, config=few),
        _trial(2, 52.0, config=few.replace(enforce_eager=True)),
        _trial(3, 200.0, config=many.replace(enforce_eager=True)),
    ]
    imp = fallback_importances(trial_lines(_study(), trials))
    assert list(imp) == ["max_num_seqs", "enforce_eager"]
    assert sum(imp.values()) == pytest.approx(1.0) and imp["max_num_seqs"] > 0.8
    assert fallback_importances(trial_lines(_study(), trials[:1])) == {}
    constant = [_trial(0, 100.0), _trial(1, 100.0, config=few)]
    assert fallback_importances(trial_lines(_study(), constant)) == {}


def test_study_report_prefers_given_importances_and_says_which_method() -> None:
    trials = [_trial(0, 100.0), _trial(1, 150.0, config=ServingConfig(max_num_seqs=8))]
    given = study_report(_study(), trials, {"max_num_seqs": 1.0})
    assert given.importances.values == {"max_num_seqs": 1.0}
    assert "PED-ANOVA" in given.importances.method
    fallback = study_report(_study(), trials, {})
    assert fallback.importances.values == {"max_num_seqs": pytest.approx(1.0)}
    assert "fallback" in fallback.importances.method
    assert study_report(_study(), trials[:1]).importances.method == ""


def test_provenance_and_memory_label_come_from_what_was_measured() -> None:
    w = (_window((1, 2), (3, 4)),) * 3
    trials = [_trial(0, 100.0, windows=w, gpu=False, hostname="box"), _trial(1)]
    report = study_report(_study(emulated=True), trials)
    assert report.provenance == {
        "model": "m",
        "GPU": "h100, NVIDIA H100",
        "vLLM": "0.32.0",
        "workload": "chat",
        "windows per trial": "3",
        "objective": "throughput",
        "SLO": "none",
        "host": "box",
        "emulated": "yes",
    }
    assert report.memory_label == "host RSS"
    assert study_report(_study(), [_trial(0, 1.0)]).memory_label == "GPU memory"


def test_overview_keeps_the_best_study_per_model_gpu_and_workload() -> None:
    a, b, c = _study("a"), _study("b"), _study("c", workload="rag")
    trials = {
        "a": [_trial(0, 100.0), _trial(1, 120.0, config=ServingConfig(max_num_seqs=8))],
        "b": [_trial(0, 100.0), _trial(1, 180.0, config=ServingConfig(max_num_seqs=64))],
        "c": [_trial(0)],  # nothing measured: not in the overview
    }
    (entry,) = overview([a, b, c], trials)
    assert (entry.model, entry.gpu, entry.workload) == ("m", "NVIDIA H100", "chat")
    assert entry.study == "b" and entry.trial.number == 1
    assert entry.trial.score == pytest.approx(1.8)
    assert entry.other_studies == ("a",) and entry.vllm_version == "0.32.0"


def test_overview_shows_what_the_confirmation_chose() -> None:
    from tuner.scoring.significance import BETTER, NO_DIFFERENCE
    from tuner.study.confirm import DEFAULTS_LABEL, Confirmed

    a = _study("a")
    trials = {"a": [_trial(0, 100.0), _trial(1, 180.0, config=ServingConfig(max_num_seqs=64))]}
    (unconfirmed,) = overview([a], trials)
    assert unconfirmed.trial.number == 1 and unconfirmed.confirmed is None
    # The confirmation found #1 no better: the defaults are what to run.
    defaults = Confirmed(ServingConfig(), DEFAULTS_LABEL, NO_DIFFERENCE, 1.0, 1.0, 1.0, None, ())
    (entry,) = overview([a], trials, {"a": defaults})
    assert entry.trial.number == 0 and entry.trial.is_baseline
    assert entry.confirmed is defaults
    winner = Confirmed(ServingConfig(max_num_seqs=64), "#1", BETTER, 1.5, 1.2, 1.9, 3, ())
    (entry,) = overview([a], trials, {"a": winner})
    assert entry.trial.number == 1 and entry.confirmed is winner


def test_no_nan_reaches_the_report() -> None:
    trials = [_trial(0, 100.0, p99=NAN)]
    (line,) = trial_lines(_study(), trials)
    assert line.e2e_p99_ms is None and line.ttft_p99_ms is None
    assert line.score is not None and not math.isnan(line.score)


def test_a_row_missing_slo_metrics_has_unknown_feasibility() -> None:
    row = _trial(0, 100.0)  # the defaults: a score needs them measured
    row = TrialRow(**{**vars(row), "metrics": {"output_throughput": _est(100.0)}})
    (line,) = trial_lines(_study(slo={"ttft_p99_ms": 10.0}), [row])
    assert line.feasible is None and line.score is not None


def test_the_study_report_names_trials_with_client_bound_or_disturbed_windows() -> None:
    from tuner.domain import ClientHealth

    def flagged(bound: bool, disturbed: bool) -> WindowMetrics:
        health = ClientHealth(0.95, 1.0, 2.0, 1.0, 2, client_bound=bound, disturbed=disturbed)
        return dataclasses.replace(_window((10.0, 20.0), (100.0, 200.0)), client=health)

    clean = _window((10.0, 20.0), (100.0, 200.0))
    trials = [
        _trial(0, 100.0, windows=(clean, clean, clean)),
        _trial(1, 120.0, windows=(flagged(True, False), flagged(True, True), clean)),
    ]
    report = study_report(_study(), trials)
    assert [t.flags for t in report.trials] == ["", "2/3 client-bound, 1/3 disturbed"]
    assert report.window_caveat == (
        "2 of 6 windows client-bound, 1 of 6 disturbed (tuner's load generator was saturated, "
        "so those numbers are the client's floor, not the server's; tuner's load generator was "
        "short of CPU (the server's own processes or others took it) or another process used "
        "the GPU during them): #1 2/3 client-bound, 1/3 disturbed"
    )
    assert study_report(_study(), trials[:1]).window_caveat == ""
