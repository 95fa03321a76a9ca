"""The early-stopping rule (tuner.scoring.early_stop): when a trial stops after its first load
point, and how often a configuration as good as the best is stopped by chance."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics

import pytest

from tuner.domain import Slo
from tuner.scoring.early_stop import StopPolicy, early_stop, meets_slo_within_noise
from tuner.scoring.ranking import Standing

POLICY = StopPolicy(launch_sigma=0.10, window_sigma=0.05, z=2.0)
BEST = Standing(True, 1.30)


def test_the_margin_is_z_spreads_of_a_difference_of_two_single_points() -> None:
    assert math.isclose(POLICY.margin, 2.0 * math.sqrt(2 * (0.10**2 + 0.05**2)))
    assert StopPolicy(0.0).margin == 0.0
    with pytest.raises(ValueError):
        StopPolicy(-0.1)
    with pytest.raises(ValueError):
        StopPolicy(0.1, z=0)


def test_nothing_to_compare_with_goes_on() -> None:
    assert not early_stop(Standing(True, 0.1), None, POLICY).stop
    # The best so far misses the SLO (or has no score): the rule cannot say the trial is worse.
    assert not early_stop(Standing(True, 0.1), Standing(False, 2.0), POLICY).stop
    assert not early_stop(Standing(True, 0.1), Standing(True, None), POLICY).stop
    assert not early_stop(Standing(True, 0.1), Standing(True, math.nan), POLICY).stop


def test_a_first_point_within_the_noise_goes_on_and_one_beyond_it_stops() -> None:
    edge = BEST.score * math.exp(-POLICY.margin)  # type: ignore[operator]
    inside = early_stop(Standing(True, edge * 1.001), BEST, POLICY)
    beyond = early_stop(Standing(True, edge * 0.999), BEST, POLICY)
    assert not inside.stop and beyond.stop
    assert beyond.ratio is not None and math.isclose(beyond.ratio, edge * 0.999 / 1.30)
    assert "below the noise allowance" in beyond.reason
    # Better than the best so far never stops.
    assert not early_stop(Standing(True, 2.0), BEST, POLICY).stop


def test_a_first_point_that_produced_nothing_or_misses_the_slo_stops() -> None:
    for score in (0.0, None, math.nan, -1.0):
        decision = early_stop(Standing(True, score), BEST, POLICY)
        assert decision.stop and decision.ratio == 0.0
    # Missing the SLO beyond the noise stops even a high score: it ranks below any feasible one.
    missed = early_stop(Standing(False, 1.5), BEST, POLICY)
    assert missed.stop and "misses the SLO" in missed.reason


def test_slo_judged_with_the_noise_allowed_for() -> None:
    slo = Slo(ttft_p99_ms=500.0, e2e_p99_ms=10_000.0)
    margin = 0.2
    ok = {"ttft_p99_ms": 500.0 * math.exp(margin) * 0.999, "e2e_p99_ms": 9000.0, "error_rate": 0}
    assert meets_slo_within_noise(ok, slo, margin)
    assert not meets_slo_within_noise(ok | {"ttft_p99_ms": 500.0 * math.exp(0.2) * 1.001}, slo, 0.2)
    # An unset bound, and a latency without samples, do not count against the point.
    assert meets_slo_within_noise(ok | {"itl_p99_ms": 1e9}, slo, margin)
    assert meets_slo_within_noise(ok | {"e2e_p99_ms": math.nan}, slo, margin)
    # The error-rate ceiling has no allowance.
    assert not meets_slo_within_noise(ok | {"error_rate": 0.02}, slo, margin)


def test_an_equal_configuration_is_stopped_by_chance_at_the_one_sided_rate() -> None:
    """Reference and candidate of the same true score, each a single first point of its own
    launch: the rule stops the candidate when the log difference exceeds z standard deviations
    of that difference, one-sided 2.3 % for z = 2."""
    rng = random.Random(7)
    sd = math.sqrt(POLICY.launch_sigma**2 + POLICY.window_sigma**2)
    n, stopped = 20_000, 0
    for _ in range(n):
        ref = Standing(True, math.exp(rng.gauss(0.0, sd)))
        cand = Standing(True, math.exp(rng.gauss(0.0, sd)))
        stopped += early_stop(cand, ref, POLICY).stop
    assert 0.015 < stopped / n < 0.031


def test_the_window_spread_is_the_first_load_points_not_the_curves() -> None:
    """On a ladder the spread was taken over every point's windows: the curve's x30 rise made
    it 1.48 (log), a margin of 4.2 and a stop only below x0.015, so nothing ever stopped."""
    from tuner.domain import LatencyStats, WindowMetrics, Workload
    from tuner.study.early import point_spread

    stats = LatencyStats(1, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0)

    def window(tok_s: float, streams: int) -> WindowMetrics:
        return WindowMetrics(1.0, 4, 0, 4, 4, 4.0, tok_s, tok_s, stats, stats, stats,
                             concurrency=streams)  # fmt: skip

    values = [(100, 4), (102, 4), (98, 4), (700, 16), (710, 16), (690, 16), (3000, 64)]
    windows = [window(v, c) for v, c in values]
    ladder = Workload(name="l", prompt_tokens=8, output_tokens=8, windows=3,
                      concurrency_ladder=(4, 16, 64))  # fmt: skip
    first = statistics.stdev(math.log(v) for v in (100, 102, 98))
    assert point_spread(windows, ladder) == pytest.approx(first)
    one = Workload(name="o", prompt_tokens=8, output_tokens=8, windows=3)
    assert point_spread(windows[:3], one) == pytest.approx(first)  # its windows, all of them


def test_a_latency_studys_early_stop_rests_on_the_p99_noise() -> None:
    """Early stopping's margin was output throughput's noise whatever the objective scored: a
    latency study's P99, twice as noisy on the H200, was judged by throughput's steadier
    spread, so a configuration as fast as the best was stopped by chance. It now takes the
    lever plan's screening's SD of a launch's score (tuner.study.planning.score_sd)."""
    from tuner.domain import (
        Estimate,
        LatencyStats,
        Objective,
        ServingConfig,
        TrialResult,
        TrialStatus,
        WindowMetrics,
        Workload,
    )
    from tuner.study.early import DEFAULT_LAUNCH_SIGMA, launch_sigma, point_spread

    def est(v: float) -> Estimate:
        return Estimate(v, v, v, (v,))

    thr = {1: (100.0, 101.0, 99.0), 2: (200.0, 198.0, 202.0)}
    p99 = {1: (100.0, 130.0, 80.0), 2: (50.0, 40.0, 62.0)}
    rows = [
        TrialResult(ServingConfig(max_num_seqs=n), TrialStatus.COMPLETE,
                    metrics={"output_throughput": est(t), "e2e_p99_ms": est(p)})
        for n in (1, 2) for t, p in zip(thr[n], p99[n], strict=True)
    ]  # fmt: skip

    def pooled(by_config: dict[int, tuple[float, ...]]) -> float:
        var = [statistics.variance(math.log(v) for v in vs) for vs in by_config.values()]
        return math.sqrt(sum(var) / len(var))

    assert launch_sigma(rows, Objective.LATENCY) == pytest.approx(pooled(p99))
    assert launch_sigma(rows, Objective.THROUGHPUT) == pytest.approx(pooled(thr))
    assert launch_sigma(rows, Objective.CAPACITY) == pytest.approx(pooled(thr))  # by points
    # Launches that measured throughput's spread but not P99's: a latency study took
    # throughput's (0.01 here), which stops far more than the default margin.
    no_p99 = [dataclasses.replace(r, metrics={"output_throughput": r.metrics["output_throughput"]})
              for r in rows]  # fmt: skip
    assert launch_sigma(no_p99, Objective.LATENCY) == DEFAULT_LAUNCH_SIGMA
    assert launch_sigma(no_p99, Objective.THROUGHPUT) == pytest.approx(pooled(thr))

    stats = LatencyStats(1, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0)

    def window(tok_s: float, p99_ms: float) -> WindowMetrics:
        e2e = LatencyStats(1, p99_ms, p99_ms, p99_ms, p99_ms, p99_ms, 0.0)
        return WindowMetrics(1.0, 4, 0, 4, 4, 4.0, tok_s, tok_s, stats, stats, e2e)

    windows = [window(100, 100), window(101, 125), window(99, 85)]
    one = Workload(name="o", prompt_tokens=8, output_tokens=8, windows=3)
    spread = point_spread(windows, one, Objective.LATENCY)
    assert spread == pytest.approx(statistics.stdev(math.log(v) for v in (100, 125, 85)))
    # A first point at x0.75 of the best's P99 score is within the P99 noise; by throughput's
    # it was stopped.
    latency = StopPolicy(launch_sigma(rows, Objective.LATENCY), spread)
    throughput = StopPolicy(pooled(thr), point_spread(windows, one))
    assert not early_stop(Standing(True, 0.75), Standing(True, 1.0), latency).stop
    assert early_stop(Standing(True, 0.75), Standing(True, 1.0), throughput).stop
