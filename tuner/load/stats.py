"""Statistics of a load run: percentiles per window, bootstrap intervals across windows.

Pure functions over domain records; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tuner.domain import Estimate, LatencyStats, RequestRecord, Slo, WindowMetrics

# Every key summarize() returns; goodput only when the windows were measured against an SLO.
METRIC_NAMES: tuple[str, ...] = (
    "request_throughput",
    "output_throughput",
    "total_throughput",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p90_ms",
    "e2e_p99_ms",
    "error_rate",
    "goodput",
)

HIGHER_IS_BETTER: dict[str, bool] = {
    name: name.endswith("throughput") or name == "goodput" for name in METRIC_NAMES
}

_NAN = float("nan")


def latency_stats(values_ms: Sequence[float]) -> LatencyStats:
    """Mean, linearly interpolated P50/P90/P99 and max; count 0 and NaN fields when empty."""
    if len(values_ms) == 0:
        return LatencyStats(count=0, mean=_NAN, p50=_NAN, p90=_NAN, p99=_NAN, max=_NAN)
    a = np.asarray(values_ms, dtype=float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99], method="linear")
    return LatencyStats(
        count=int(a.size),
        mean=float(a.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        max=float(a.max()),
    )


def _meets(record: RequestRecord, slo: Slo) -> bool:
    """Whether one ok request met every set SLO field (the P99 bounds, applied per request)."""
    checks = (
        (slo.ttft_p99_ms, record.ttft_s),
        (slo.itl_p99_ms, record.itl_mean_s),
        (slo.e2e_p99_ms, record.e2e_s),
    )
    # A request with no inter-token gap (one output chunk) cannot violate the ITL bound.
    return all(bound is None or value is None or value * 1000.0 <= bound for bound, value in checks)


def window_metrics(
    records: Sequence[RequestRecord], duration_s: float, slo: Slo | None
) -> WindowMetrics:
    """Throughputs and latency percentiles of one window, from its ok requests.

    ITL percentiles are over the per-request mean inter-token latencies. Goodput is the
    ok requests meeting every set SLO field per second; None without an SLO (or an empty one).
    """
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    ok = [r for r in records if r.ok]
    prompt = sum(r.prompt_tokens for r in ok)
    output = sum(r.output_tokens for r in ok)
    goodput = None
    if slo is not None and not slo.is_empty():
        goodput = sum(1 for r in ok if _meets(r, slo)) / duration_s

    def ms(values: Sequence[float | None]) -> list[float]:
        return [v * 1000.0 for v in values if v is not None]

    return WindowMetrics(
        duration_s=duration_s,
        requests_ok=len(ok),
        requests_failed=len(records) - len(ok),
        prompt_tokens=prompt,
        output_tokens=output,
        request_throughput=len(ok) / duration_s,
        output_throughput=output / duration_s,
        total_throughput=(prompt + output) / duration_s,
        ttft_ms=latency_stats(ms([r.ttft_s for r in ok])),
        itl_ms=latency_stats(ms([r.itl_mean_s for r in ok])),
        e2e_ms=latency_stats(ms([r.e2e_s for r in ok])),
        goodput=goodput,
    )


def bootstrap_ci(
    values: Sequence[float],
    statistic: Callable[..., Any] = np.median,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``statistic`` over ``values``.

    ``statistic`` must reduce along an ``axis=`` keyword like numpy's reductions (all
    resamples are computed in one call). A single value gives ``(v, v)``.
    """
    if len(values) == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    a = np.asarray(values, dtype=float)
    if a.size == 1:
        v = float(a[0])
        return v, v
    rng = np.random.default_rng(seed)
    samples = a[rng.integers(0, a.size, size=(n_resamples, a.size))]
    stats = np.asarray(statistic(samples, axis=1), dtype=float)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(stats, [tail, 100.0 - tail])
    return float(low), float(high)


def estimate(values: Sequence[float]) -> Estimate:
    """Median and 95 % bootstrap interval of the finite values; all raw values are kept.

    NaN (a window with no latency samples) is left out of the statistics; with no finite
    value at all the estimate is NaN throughout.
    """
    raw = tuple(float(v) for v in values)
    finite = [v for v in raw if math.isfinite(v)]
    if not finite:
        return Estimate(median=_NAN, low=_NAN, high=_NAN, values=raw)
    low, high = bootstrap_ci(finite)
    return Estimate(median=float(np.median(finite)), low=low, high=high, values=raw)


def _window_values(w: WindowMetrics) -> dict[str, float]:
    return {
        "request_throughput": w.request_throughput,
        "output_throughput": w.output_throughput,
        "total_throughput": w.total_throughput,
        "ttft_p50_ms": w.ttft_ms.p50,
        "ttft_p99_ms": w.ttft_ms.p99,
        "itl_p50_ms": w.itl_ms.p50,
        "itl_p99_ms": w.itl_ms.p99,
        "e2e_p50_ms": w.e2e_ms.p50,
        "e2e_p90_ms": w.e2e_ms.p90,
        "e2e_p99_ms": w.e2e_ms.p99,
        "error_rate": w.error_rate,
    }


def summarize(windows: Sequence[WindowMetrics]) -> dict[str, Estimate]:
    """One :class:`Estimate` per metric name across windows, in :data:`METRIC_NAMES` order.

    ``goodput`` is included when every window carries one.
    """
    if not windows:
        raise ValueError("summarize needs at least one window")
    per_window = [_window_values(w) for w in windows]
    goodputs = [w.goodput for w in windows]
    out: dict[str, Estimate] = {}
    for name in METRIC_NAMES:
        if name == "goodput":
            if all(g is not None for g in goodputs):
                out[name] = estimate([g for g in goodputs if g is not None])
            continue
        out[name] = estimate([v[name] for v in per_window])
    return out
