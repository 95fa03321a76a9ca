"""A launch's load curve: its windows grouped by load point, and the capacity read from it.

"Capacity" is what vLLM's ``auto_tune`` and ``bench sweep`` look for: the highest output
throughput among the load points whose P99 latencies (medians over the point's windows) meet
the SLO and whose error rate is at most :data:`tuner.scoring.objectives`'s ceiling. Without an SLO
it is the highest throughput of the curve. A point whose windows were client-bound is never taken as
the capacity: its throughput is the client's floor, not the server's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tuner.domain import SLO_METRICS, Estimate, RequestRecord, Slo, WindowMetrics, Workload
from tuner.load.stats import estimate, summarize, turn_metrics

MAX_ERROR_RATE = 0.01  # at most 1 % of requests may fail
FEASIBLE = -1.0  # the margin of an SLO field that cannot be violated
CAPACITY_METRICS = (
    "capacity_output_throughput",
    "capacity_request_throughput",
    "capacity_load",
)


def slo_margins(metrics: Mapping[str, Estimate], slo: Slo) -> list[float]:
    """``measured - bound`` for the SLO's P99 TTFT, ITL and E2E (medians over windows), then
    ``error rate - MAX_ERROR_RATE``: all <= 0 means the SLO is met. An unset bound, or a
    latency without samples (NaN: one-token outputs have no gap), counts as met
    (:data:`FEASIBLE`). The one SLO rule: load points and trials (the study's Optuna
    constraints, :func:`tuner.scoring.objectives.constraint_values`) are judged by it alike."""
    out = []
    for name in SLO_METRICS:
        bound = getattr(slo, name)
        measured = metrics[name].median
        out.append(FEASIBLE if bound is None or math.isnan(measured) else measured - bound)
    out.append(metrics["error_rate"].median - MAX_ERROR_RATE)
    return out


def point_label(
    concurrency: int | None,
    request_rate: float | None,
    trace_paced: bool = False,
    *,
    trace_poisson: bool = False,
) -> str:
    """``16 streams`` (closed loop) or ``4 req/s`` (Poisson arrivals), or the trace's own
    arrival times (``trace_paced``) or Poisson arrivals at the trace's mean rate
    (``trace_poisson``) with the streams as a cap; windows of an older tuner recorded neither."""
    if request_rate is not None:
        return f"{request_rate:g} req/s"
    if trace_paced:
        return f"the trace's arrival times, at most {concurrency} in flight"
    if trace_poisson:
        return f"Poisson arrivals at the trace's mean rate, at most {concurrency} in flight"
    return "a load level not recorded" if concurrency is None else f"{concurrency} streams"


@dataclass(frozen=True)
class LoadPoint:
    """One point of the curve: its load level and the summary of its windows."""

    concurrency: int | None
    request_rate: float | None
    windows: tuple[WindowMetrics, ...]
    metrics: Mapping[str, Estimate]

    @property
    def load(self) -> float:
        if self.request_rate is not None:
            return self.request_rate
        return float(self.concurrency or 0)

    @property
    def label(self) -> str:
        return point_label(self.concurrency, self.request_rate)

    @property
    def client_bound(self) -> bool:
        return any(w.client_bound for w in self.windows)

    def meets(self, slo: Slo | None) -> bool:
        return all(m <= 0 for m in slo_margins(self.metrics, slo or Slo()))


# What measures a server's capacity: a load it cannot keep up with. chat, rag and code run 8 to
# 16 streams, which a GPU serves with room to spare: their throughput is that load's, not more.
SATURATING = (
    "a load that saturates the server: a closed-loop curve ([workload] concurrency_ladder = "
    '[16, 64, 256]), a closed loop for a trace ([workload] arrival = "closed"), or a workload '
    "of many streams in a closed loop (throughput-256)"
)


def unsaturated(point: LoadPoint, points: Sequence[LoadPoint], timed: bool = False) -> bool:
    """Whether ``point``'s throughput only bounds the server's capacity from below: its load
    was sent open loop (a request rate, or ``timed``: the workload's arrivals were timed, a
    trace's own or Poisson at its mean rate) and no higher load of ``points`` was measured
    that the server, not the client, bounded. A server that keeps up serves what it is sent:
    that throughput is the load offered, not what the GPU can serve. A closed loop keeps the
    server busy; a curve with a higher point (one that missed the SLO or served less) brackets
    the capacity, unless that point was client-bound: what it measured is the client's floor,
    as :func:`capacity` says by never taking it."""
    if point.request_rate is None and not timed:
        return False
    return not any(p.load > point.load and not p.client_bound for p in points)


def load_points(windows: Sequence[WindowMetrics]) -> list[LoadPoint]:
    """The windows grouped by load point, in the order first measured."""
    groups: dict[tuple[int | None, float | None], list[WindowMetrics]] = {}
    for w in windows:
        groups.setdefault((w.concurrency, w.request_rate), []).append(w)
    return [
        LoadPoint(concurrency=c, request_rate=r, windows=tuple(ws), metrics=summarize(ws))
        for (c, r), ws in groups.items()
    ]


def headline_windows(workload: Workload, windows: Sequence[WindowMetrics]) -> list[WindowMetrics]:
    """The windows of the workload's own load point (its ``concurrency`` or ``request_rate``),
    which the fixed-load objectives use; the highest load point when the ladder skips it."""
    points = load_points(windows)
    if len(points) <= 1:
        return list(windows)
    for p in points:
        if workload.request_rate is not None and p.request_rate == workload.request_rate:
            return list(p.windows)
        if workload.rate_ladder == () and p.concurrency == workload.concurrency:
            return list(p.windows)
    return list(max(points, key=lambda p: p.load).windows)


def capacity(points: Sequence[LoadPoint], slo: Slo | None) -> dict[str, Estimate] | None:
    """The capacity metrics of a curve (see the module docstring), or None for a single point.

    ``capacity_load`` is the chosen point's load level; every capacity metric is 0 when no
    point meets the SLO.
    """
    if len(points) < 2:
        return None
    eligible = [p for p in points if p.meets(slo) and not p.client_bound]
    if not eligible:
        return dict.fromkeys(CAPACITY_METRICS, estimate([0.0]))
    best = max(eligible, key=lambda p: p.metrics["output_throughput"].median)
    return {
        "capacity_output_throughput": best.metrics["output_throughput"],
        "capacity_request_throughput": best.metrics["request_throughput"],
        "capacity_load": estimate([best.load]),
    }


def capacity_text(
    metrics: Mapping[str, Estimate], windows: Sequence[WindowMetrics], at_least: bool = False
) -> str | None:
    """A curve's capacity for people: ``1367.5 [1350.2, 1380.0] out tok/s at 4 streams`` (the
    point it was measured at), what capacity studies rank by; None for a trial without a curve.
    ``at_least``: it is only a lower bound (:func:`tuner.results.costs.capacity_at_least`), and
    says so: ``at least 1367.5 [...] out tok/s at 8 req/s``."""
    cap, load = metrics.get("capacity_output_throughput"), metrics.get("capacity_load")
    if cap is None or load is None:
        return None
    if cap.median <= 0:
        return "none: no load point met the SLO"
    point = next((p for p in load_points(windows) if p.load == load.median), None)
    where = point.label if point is not None else f"load {load.median:g}"
    floor = "at least " if at_least else ""
    return f"{floor}{cap.median:.1f} [{cap.low:.1f}, {cap.high:.1f}] out tok/s at {where}"


def trial_metrics(
    workload: Workload,
    windows: Sequence[WindowMetrics],
    slo: Slo | None,
    *,
    records: Sequence[Sequence[RequestRecord]] = (),
    turns: Sequence[Sequence[int]] = (),
) -> dict[str, Estimate]:
    """A trial's metrics: the fixed-load summary of its headline point, plus the capacity
    metrics when it measured a curve.

    Given the run's ``records`` and ``turns`` (:class:`tuner.load.generator.LoadReport`'s, one
    entry per window) of a workload with sessions, the headline point's TTFT per turn joins
    them (:func:`tuner.load.stats.turn_metrics`: ``ttft_turn1_p50_ms``, ...)."""
    headline = headline_windows(workload, windows)
    metrics = summarize(headline)
    cap = capacity(load_points(windows), slo)
    if cap is not None:
        metrics.update(cap)
    if turns and any(t > 0 for window in turns for t in window):
        chosen = [i for i, w in enumerate(windows) if any(w is h for h in headline)]
        metrics.update(turn_metrics([records[i] for i in chosen], [turns[i] for i in chosen]))
    return metrics
