"""The load curves of a study page: per measured trial, its load points (grouped by
:func:`tuner.load.curve.load_points`) reduced to the numbers the two curve charts draw, the
point :func:`tuner.load.curve.capacity` chooses, and the caveats of the trial's windows.

Only studies whose trials measured more than one load point get curves (:func:`study_curves`
is None otherwise): a trial of an older, single-point study keeps its one unlabelled point.

*Output tokens/s per stream* (the x of the throughput-vs-interactivity chart) is the point's
output throughput over the number of requests in flight: the concurrency of a closed-loop point;
for an open-loop (request-rate) point, Little's law's ``request throughput x median E2E`` (at
least 1), since a rate point has no fixed number of streams. *Per GPU* divides by the GPUs the
trial's server was measured on (its peak-memory telemetry); a trial without GPU telemetry (a
CPU study) is drawn per server, and the axis says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.db import StudyRow, TrialPhase, TrialRow
from tuner.domain import Slo, TrialStatus, WindowMetrics
from tuner.load import LoadPoint, capacity, load_points
from tuner.results import costs
from tuner.results.report.study import median
from tuner.scoring import WindowFlags, window_flags


@dataclass(frozen=True)
class CurvePoint:
    """One load point of a trial's curve; numbers are medians over the point's windows."""

    label: str  # "8 streams", "2.5 req/s"
    load: float  # concurrency, or requests/s for an open-loop point
    open_loop: bool
    windows: int
    output_throughput: float | None  # tok/s of the whole server
    per_gpu: float | None  # output tok/s per GPU (per server without GPU telemetry)
    per_stream: float | None  # output tok/s per stream (see the module docstring)
    ttft_p99_ms: float | None
    e2e_p99_ms: float | None
    client_bound: bool
    disturbed: bool
    notes: tuple[str, ...]  # the self-check notes of its flagged windows, each once
    is_capacity: bool  # the point capacity() chose

    @property
    def flagged(self) -> bool:
        return self.client_bound or self.disturbed

    @property
    def caveat(self) -> str:
        """'client-bound, disturbed' or ''."""
        return ", ".join(
            n
            for n, on in (("client-bound", self.client_bound), ("disturbed", self.disturbed))
            if on
        )


@dataclass(frozen=True)
class TrialCurve:
    number: int
    label: str  # the trial's config label ("defaults" for the baseline)
    is_baseline: bool
    gpus: int  # GPUs measured; 0 without GPU telemetry
    points: tuple[CurvePoint, ...]  # in the order measured (lowest load first)
    # Its capacity is only a lower bound: an open-loop load the server kept up with
    # (costs.capacity_at_least).
    capacity_at_least: bool = False

    @property
    def capacity_point(self) -> CurvePoint | None:
        return next((p for p in self.points if p.is_capacity), None)


@dataclass(frozen=True)
class TrialCapacity:
    """The trials-table view of one trial: its capacity (from its stored metrics) and the
    caveats of its windows."""

    output_throughput: float | None  # capacity_output_throughput, median; None: no curve
    load: float | None  # capacity_load
    load_label: str  # "8 streams", "" when unknown or when no point met the SLO
    windows: WindowFlags
    notes: tuple[str, ...]
    # Only a lower bound: an open-loop load the server kept up with (costs.capacity_at_least).
    at_least: bool = False

    @property
    def met(self) -> bool:
        """Some load point met the SLO (a capacity of 0 says none did)."""
        return bool(self.output_throughput)

    @property
    def flag_parts(self) -> tuple[tuple[str, str], ...]:
        """(("client-bound", "1 of 9 windows"), ("disturbed", "2 of 9 windows")), or ()."""
        w = self.windows
        return tuple(
            (name, f"{n} of {w.windows} windows")
            for name, n in (("client-bound", w.client_bound), ("disturbed", w.disturbed))
            if n
        )

    @property
    def flag(self) -> str:
        """'client-bound: 1 of 9 windows, disturbed: 2 of 9 windows' or ''."""
        return ", ".join(f"{name}: {count}" for name, count in self.flag_parts)


@dataclass(frozen=True)
class StudyCurves:
    trials: tuple[TrialCurve, ...]  # complete search trials, by number
    slo: Slo
    per_gpu: bool  # every drawn trial had GPU telemetry
    open_loop: bool | None  # every point is a rate point (True), none is (False), mixed (None)

    @property
    def flagged(self) -> bool:
        return any(p.flagged for t in self.trials for p in t.points)


def _notes(windows: Sequence[WindowMetrics]) -> tuple[str, ...]:
    """The self-check notes of the flagged windows, each once."""
    seen: dict[str, None] = {}
    for w in windows:
        if w.client is not None and (w.client_bound or w.disturbed):
            seen.update(dict.fromkeys(w.client.notes))
    return tuple(seen)


def _per_stream(point: LoadPoint) -> float | None:
    out = median(point.metrics.get("output_throughput"))
    if out is None:
        return None
    if point.request_rate is None:
        return out / point.concurrency if point.concurrency else None
    rate = median(point.metrics.get("request_throughput"))
    e2e_ms = median(point.metrics.get("e2e_p50_ms"))
    if rate is None or e2e_ms is None:
        return None
    return out / max(1.0, rate * e2e_ms / 1000.0)


def chosen_point(points: Sequence[LoadPoint], slo: Slo) -> LoadPoint | None:
    """The point :func:`~tuner.load.curve.capacity` chose (at its capacity_load, with its
    throughput); None for a single point."""
    cap = capacity(points, slo)
    if cap is None:
        return None
    load, best = cap["capacity_load"].median, cap["capacity_output_throughput"].median
    return next(
        (p for p in points if p.load == load and p.metrics["output_throughput"].median == best),
        None,
    )


def trial_curve(row: TrialRow, slo: Slo, spec: Mapping[str, Any] | None = None) -> TrialCurve:
    """``spec``: the study's (how its arrivals were timed), to tell a capacity that is only a
    lower bound."""
    points = load_points(row.windows)
    chosen = chosen_point(points, slo)
    gpus = len(row.memory.gpu_peak_bytes)
    out = []
    for p in points:
        thr = median(p.metrics.get("output_throughput"))
        out.append(
            CurvePoint(
                label=p.label,
                load=p.load,
                open_loop=p.request_rate is not None,
                windows=len(p.windows),
                output_throughput=thr,
                per_gpu=None if thr is None else thr / max(gpus, 1),
                per_stream=_per_stream(p),
                ttft_p99_ms=median(p.metrics.get("ttft_p99_ms")),
                e2e_p99_ms=median(p.metrics.get("e2e_p99_ms")),
                client_bound=p.client_bound,
                disturbed=any(w.disturbed for w in p.windows),
                notes=_notes(p.windows),
                is_capacity=p is chosen and bool(thr),  # a capacity of 0: none met the SLO
            )
        )
    return TrialCurve(
        row.number,
        row.config_label,
        row.is_baseline,
        gpus,
        tuple(out),
        capacity_at_least=costs.capacity_at_least(row.metrics, row.windows, spec),
    )


def study_curves(study: StudyRow, trials: Sequence[TrialRow]) -> StudyCurves | None:
    """The curves of the complete search trials, or None when no trial measured a curve."""
    if not any(
        t.status is TrialStatus.COMPLETE and t.windows and len(load_points(t.windows)) > 1
        for t in trials
    ):
        return None
    slo = Slo(**dict(study.slo))
    drawn = sorted(
        (
            t
            for t in trials
            if t.status is TrialStatus.COMPLETE and t.phase is TrialPhase.SEARCH and t.windows
        ),
        key=lambda t: t.number,
    )
    curves = tuple(trial_curve(t, slo, study.spec) for t in drawn)
    kinds = {p.open_loop for c in curves for p in c.points}
    return StudyCurves(
        trials=curves,
        slo=slo,
        per_gpu=all(c.gpus for c in curves),
        open_loop=kinds.pop() if len(kinds) == 1 else None,
    )


def trial_capacities(
    trials: Sequence[TrialRow], spec: Mapping[str, Any] | None = None
) -> dict[int, TrialCapacity]:
    """Per trial number, its capacity and window caveats (every trial, measured or not);
    ``spec``: the study's, to tell a capacity that is only a lower bound."""
    out: dict[int, TrialCapacity] = {}
    for t in trials:
        cap = median(t.metrics.get("capacity_output_throughput"))
        load = median(t.metrics.get("capacity_load"))
        label = ""
        if cap and load is not None and t.windows:
            label = next((p.label for p in load_points(t.windows) if p.load == load), "")
        out[t.number] = TrialCapacity(
            cap,
            load,
            label,
            window_flags(t.windows),
            _notes(t.windows),
            at_least=costs.capacity_at_least(t.metrics, t.windows, spec),
        )
    return out


def any_capacity(capacities: Mapping[int, TrialCapacity]) -> bool:
    return any(c.output_throughput is not None for c in capacities.values())


def capacity_bound_note(capacities: Mapping[int, TrialCapacity]) -> str:
    """Which trials' capacities are only lower bounds, why, and what to measure instead
    (:func:`tuner.results.costs.capacity_bound_note`); "" when none is."""
    return costs.capacity_bound_note(sorted(n for n, c in capacities.items() if c.at_least))
