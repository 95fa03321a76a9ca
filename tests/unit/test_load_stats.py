"""Percentiles, window metrics and summaries with known answers."""

from __future__ import annotations

import math

import pytest

from tuner.domain import RequestRecord, Slo
from tuner.load.stats import (
    HIGHER_IS_BETTER,
    METRIC_NAMES,
    estimate,
    latency_stats,
    summarize,
    window_metrics,
)


def test_percentiles_of_1_to_100() -> None:
    s = latency_stats([float(v) for v in range(100, 0, -1)])
    assert s.count == 100
    assert s.mean == pytest.approx(50.5)
    assert s.p50 == pytest.approx(50.5)
    assert s.p90 == pytest.approx(90.1)
    assert s.p99 == pytest.approx(99.01)
    assert s.max == 100.0


def test_empty_latencies_are_nan() -> None:
    s = latency_stats([])
    assert s.count == 0
    assert all(math.isnan(v) for v in (s.mean, s.p50, s.p90, s.p99, s.max))


def _ok(ttft: float, itl: float | None, e2e: float | None = None, out: int = 10) -> RequestRecord:
    """An ok request whose ``out - 1`` chunk gaps are all ``itl`` (E2E follows unless given)."""
    gaps = () if itl is None else (itl,) * (out - 1)
    end = e2e if e2e is not None else ttft + sum(gaps)
    return RequestRecord(True, 100, out, 0.0, ttft, end, gaps)


def test_window_metrics_counts_only_ok_requests() -> None:
    records = [
        _ok(0.1, 0.01, 1.0),
        _ok(0.3, 0.03, 2.0),
        _ok(0.2, None, 1.5, out=1),  # a single output token has no gap
        RequestRecord(False, 100, 0, 0.0, None, None, error="HTTP 500: boom"),
    ]
    m = window_metrics(records, duration_s=2.0, slo=None)
    assert (m.requests_ok, m.requests_failed) == (3, 1)
    assert (m.prompt_tokens, m.output_tokens) == (300, 21)
    assert m.request_throughput == pytest.approx(1.5)
    assert m.output_throughput == pytest.approx(10.5)
    assert m.total_throughput == pytest.approx(160.5)
    assert m.ttft_ms.p50 == pytest.approx(200.0)
    # ITL pooled over all 18 gaps (vLLM's definition), TPOT per request with > 1 token.
    assert m.itl_ms.count == 18 and m.itl_ms.mean == pytest.approx(20.0)
    assert m.itl_ms.std == pytest.approx(10.0)
    assert m.tpot_ms is not None and m.tpot_ms.count == 2
    assert m.tpot_ms.p50 == pytest.approx(((900 / 9) + (1700 / 9)) / 2)
    assert m.e2e_ms.max == pytest.approx(2000.0)
    assert m.error_rate == pytest.approx(0.25)
    assert m.goodput is None
    assert window_metrics(records, 2.0, Slo()).goodput is None


def test_goodput_counts_requests_meeting_every_set_bound() -> None:
    # The ITL bound judges each request's TPOT, as vLLM's goodput does; one token: TPOT 0.
    records = [_ok(0.1, 0.01), _ok(0.3, 0.01), _ok(0.1, 0.05), _ok(0.1, None, 3.0, out=1)]
    assert window_metrics(records, 2.0, Slo(ttft_p99_ms=200)).goodput == pytest.approx(1.5)
    both = Slo(ttft_p99_ms=200, itl_p99_ms=20)
    assert window_metrics(records, 2.0, both).goodput == pytest.approx(1.0)
    all3 = Slo(ttft_p99_ms=200, itl_p99_ms=20, e2e_p99_ms=2000)
    assert window_metrics(records, 2.0, all3).goodput == pytest.approx(0.5)
    with pytest.raises(ValueError, match="duration_s"):
        window_metrics(records, 0.0, None)


def test_estimate_ignores_nan_but_keeps_raw_values() -> None:
    e = estimate([1.0, float("nan"), 3.0, 2.0])
    assert e.median == 2.0 and e.low <= 2.0 <= e.high
    assert len(e.values) == 4 and math.isnan(e.values[1])
    assert math.isnan(estimate([float("nan")]).median)


def test_summarize_has_exactly_the_metric_names() -> None:
    windows = [
        window_metrics([_ok(0.1 * k, 0.01, 1.0 * k)] * 4, duration_s=float(k), slo=None)
        for k in (1, 2, 3)
    ]
    s = summarize(windows)
    assert tuple(s) == tuple(n for n in METRIC_NAMES if n != "goodput")
    assert s["request_throughput"].median == pytest.approx(2.0)
    assert s["request_throughput"].values == pytest.approx((4.0, 2.0, 4 / 3))
    assert s["e2e_p99_ms"].median == pytest.approx(2000.0)
    assert s["error_rate"].median == 0.0
    with_slo = [window_metrics([_ok(0.1, 0.01, 1.0)], 1.0, Slo(ttft_p99_ms=500))] * 3
    assert "goodput" in summarize(with_slo)
    assert set(HIGHER_IS_BETTER) == set(METRIC_NAMES)
    assert HIGHER_IS_BETTER["goodput"] and HIGHER_IS_BETTER["output_throughput"]
    assert not HIGHER_IS_BETTER["ttft_p99_ms"] and not HIGHER_IS_BETTER["error_rate"]
