"""Statistics of a load run: vLLM's metrics per window, medians and ranges across windows.

Pure functions over domain records; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from tuner.domain import (
    ClientHealth,
    Estimate,
    LatencyStats,
    RequestRecord,
    Slo,
    WindowEnergy,
    WindowMetrics,
)

_NAN = float("nan")

# Each window's value of every metric summarize() returns but goodput.
_PER_WINDOW: dict[str, Callable[[WindowMetrics], float]] = {
    "request_throughput": lambda w: w.request_throughput,
    "output_throughput": lambda w: w.output_throughput,
    "total_throughput": lambda w: w.total_throughput,
    "ttft_p50_ms": lambda w: w.ttft_ms.p50,
    "ttft_p99_ms": lambda w: w.ttft_ms.p99,
    "itl_p50_ms": lambda w: w.itl_ms.p50,
    "itl_p99_ms": lambda w: w.itl_ms.p99,
    "e2e_p50_ms": lambda w: w.e2e_ms.p50,
    "e2e_p90_ms": lambda w: w.e2e_ms.p90,
    "e2e_p99_ms": lambda w: w.e2e_ms.p99,
    "tpot_p50_ms": lambda w: w.tpot_ms.p50 if w.tpot_ms else _NAN,
    "tpot_p99_ms": lambda w: w.tpot_ms.p99 if w.tpot_ms else _NAN,
    "error_rate": lambda w: w.error_rate,
}
# Every key summarize() returns; goodput only when the windows were measured against an SLO.
METRIC_NAMES: tuple[str, ...] = (*_PER_WINDOW, "goodput")

# The measured GPU's energy (tuner.telemetry.energy): summarize() adds these, both lower-is-better,
# when every window measured it, and never on a CPU (nothing there is estimated).
ENERGY_METRICS: tuple[str, ...] = ("joules_per_output_token", "gpu_power_w")

HIGHER_IS_BETTER: dict[str, bool] = {
    name: name.endswith("throughput") or name == "goodput" for name in METRIC_NAMES
}


def latency_stats(values_ms: Sequence[float]) -> LatencyStats:
    """Mean, population std, linearly interpolated P50/P90/P99 and max, as ``vllm bench
    serve`` computes them (numpy's defaults); count 0 and NaN fields when empty."""
    if len(values_ms) == 0:
        return LatencyStats(count=0, mean=_NAN, p50=_NAN, p90=_NAN, p99=_NAN, max=_NAN, std=_NAN)
    a = np.asarray(values_ms, dtype=float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99], method="linear")
    return LatencyStats(
        count=int(a.size),
        mean=float(a.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        max=float(a.max()),
        std=float(a.std()),
    )


def _meets(record: RequestRecord, slo: Slo) -> bool:
    """Whether one ok request is "good" as ``vllm bench serve --goodput`` judges it: TTFT,
    TPOT and E2E each within its bound. The SLO's ITL bound is applied to the request's TPOT
    (its mean gap), as vLLM's goodput does; a request with one output token has TPOT 0."""
    checks = (
        (slo.ttft_p99_ms, record.ttft_s),
        (slo.itl_p99_ms, record.tpot_s or 0.0),
        (slo.e2e_p99_ms, record.e2e_s),
    )
    return all(bound is None or value is None or value * 1000.0 <= bound for bound, value in checks)


def window_metrics(
    records: Sequence[RequestRecord],
    duration_s: float,
    slo: Slo | None,
    *,
    concurrency: int | None = None,
    request_rate: float | None = None,
    client: ClientHealth | None = None,
    energy: WindowEnergy | None = None,
) -> WindowMetrics:
    """Throughputs and latency statistics of one window, from its ok requests, with
    ``vllm bench serve``'s definitions: TTFT and E2E per request, TPOT per request with more
    than one output token, ITL pooled over every chunk gap of every request.

    Goodput is the ok requests meeting every set SLO field per second; None without an SLO.
    ``energy`` (the GPU's, over the window) gains its joules per output token here.
    """
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    ok = [r for r in records if r.ok]
    prompt = sum(r.prompt_tokens for r in ok)
    output = sum(r.output_tokens for r in ok)
    goodput = None
    if slo is not None and not slo.is_empty():
        goodput = sum(1 for r in ok if _meets(r, slo)) / duration_s

    def ms(values: Iterable[float | None]) -> list[float]:
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
        ttft_ms=latency_stats(ms(r.ttft_s for r in ok)),
        itl_ms=latency_stats(ms(gap for r in ok for gap in r.itl_s)),
        e2e_ms=latency_stats(ms(r.e2e_s for r in ok)),
        goodput=goodput,
        tpot_ms=latency_stats(ms(r.tpot_s for r in ok)),
        concurrency=concurrency,
        request_rate=request_rate,
        client=client,
        energy=energy.per_tokens(output) if energy is not None else None,
    )


def estimate(values: Sequence[float]) -> Estimate:
    """Median and range (smallest and largest value) of the finite values; all raw values are
    kept. With the few windows of one launch a bootstrap "95 %" interval of the median is this
    same range, so it is called what it is.

    NaN (a window with no latency samples) is left out; with no finite value at all the
    estimate is NaN throughout.
    """
    raw = tuple(float(v) for v in values)
    finite = [v for v in raw if math.isfinite(v)]
    if not finite:
        return Estimate(median=_NAN, low=_NAN, high=_NAN, values=raw)
    return Estimate(median=float(np.median(finite)), low=min(finite), high=max(finite), values=raw)


def summarize(windows: Sequence[WindowMetrics]) -> dict[str, Estimate]:
    """One :class:`Estimate` per metric name across windows, in :data:`METRIC_NAMES` order.

    ``goodput`` is included when every window carries one, the :data:`ENERGY_METRICS` when
    every window measured the GPU's energy.
    """
    if not windows:
        raise ValueError("summarize needs at least one window")
    out = {name: estimate([get(w) for w in windows]) for name, get in _PER_WINDOW.items()}
    goodputs = [w.goodput for w in windows if w.goodput is not None]
    if len(goodputs) == len(windows):
        out["goodput"] = estimate(goodputs)
    energies = [w.energy for w in windows]
    if all(e is not None and e.joules_per_output_token is not None for e in energies):
        measured = [e for e in energies if e is not None]
        out["joules_per_output_token"] = estimate(
            [e.joules_per_output_token or _NAN for e in measured]
        )
        out["gpu_power_w"] = estimate([e.watts for e in measured])
    return out


def ttft_s_by_turn(
    records: Sequence[Sequence[RequestRecord]], turns: Sequence[Sequence[int]]
) -> dict[int, list[float]]:
    """TTFT (s) of a multi-turn run's successful requests, pooled over its windows, by turn
    (1 = a conversation's first); empty for a run without sessions. ``turns`` is the planned
    turn of each record (:attr:`tuner.load.generator.LoadReport.turns`)."""
    pooled: dict[int, list[float]] = {}
    for window, window_turns in zip(records, turns, strict=True):
        for record, turn in zip(window, window_turns, strict=True):
            if turn > 0 and record.ok and record.ttft_s is not None:
                pooled.setdefault(turn, []).append(record.ttft_s)
    return {turn: pooled[turn] for turn in sorted(pooled)}


def ttft_by_turn(
    records: Sequence[Sequence[RequestRecord]], turns: Sequence[Sequence[int]]
) -> dict[int, LatencyStats]:
    """The TTFT (ms) statistics of :func:`ttft_s_by_turn`."""
    pooled = ttft_s_by_turn(records, turns)
    return {turn: latency_stats([s * 1000.0 for s in pooled[turn]]) for turn in pooled}


def turn_summary(by_turn: Mapping[int, LatencyStats]) -> dict[str, dict[str, float]]:
    """:func:`ttft_by_turn` as plain JSON: ``{"1": {"count", "mean_ms", "p50_ms", "p90_ms",
    "p99_ms", "max_ms"}, ...}``, turn numbers as strings (JSON object keys)."""
    return {
        str(turn): {
            "count": s.count,
            "mean_ms": s.mean,
            "p50_ms": s.p50,
            "p90_ms": s.p90,
            "p99_ms": s.p99,
            "max_ms": s.max,
        }
        for turn, s in sorted(by_turn.items())
    }


def turn_metrics(
    records: Sequence[Sequence[RequestRecord]], turns: Sequence[Sequence[int]]
) -> dict[str, Estimate]:
    """Per-turn TTFT as trial metrics: ``ttft_turn{k}_p50_ms`` and ``ttft_turn{k}_p99_ms``,
    each the :func:`estimate` over windows of that window's turn-``k`` percentile (a window
    without turn ``k`` gives NaN, which the estimate leaves out). Empty without sessions."""
    per_window = [ttft_by_turn([r], [t]) for r, t in zip(records, turns, strict=True)]
    numbers = sorted({k for window in per_window for k in window})
    out: dict[str, Estimate] = {}
    for k in numbers:
        for q in ("p50", "p99"):
            values = [getattr(w[k], q) if k in w else _NAN for w in per_window]
            out[f"ttft_turn{k}_{q}_ms"] = estimate(values)
    return out
