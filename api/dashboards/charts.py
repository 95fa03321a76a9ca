"""What each chart draws, as plain JSON for ``static/charts.js``: the report objects of
:mod:`tuner.results.report` reshaped into columns, with axis titles and units. No plotly here; the
browser draws (a chart with no data is drawn as a note instead, by the script)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tuner.results import (
    ComparisonReport,
    Distribution,
    ParetoPoint,
    StudyCurves,
    StudyReport,
    TrialCurve,
)


def _distribution(d: Distribution, title: str) -> dict[str, Any]:
    # One box per trial per percentile; every window is one point of it.
    def column(per_trial: tuple[tuple[float, ...], ...]) -> dict[str, list[Any]]:
        x: list[str] = []
        y: list[float] = []
        for number, values in zip(d.numbers, per_trial, strict=True):
            x.extend(f"#{number}" for _ in values)
            y.extend(values)
        return {"x": x, "y": y}

    return {
        "title": title,
        "y_title": f"{title} per window (ms)",
        "series": [{"name": "P50", **column(d.p50)}, {"name": "P99", **column(d.p99)}],
        "categories": [f"#{n}" for n in d.numbers],
    }


def _marks(points: Sequence[ParetoPoint], recommended: int | None) -> dict[str, Any]:
    """Where vLLM's defaults and the recommendation sit among ``points`` (index or None)."""
    numbers = [p.number for p in points]
    base = next((i for i, p in enumerate(points) if p.is_baseline), None)
    return {
        "baseline": base,
        "recommended": numbers.index(recommended) if recommended in numbers else None,
    }


def study_charts(report: StudyReport, curves: StudyCurves | None = None) -> dict[str, Any]:
    """Data of the six study charts, keyed by the ``data-chart`` name of their element, and
    of the two load-curve charts when the study measured curves. Both Pareto charts mark
    vLLM's defaults and the recommendation (``baseline`` / ``recommended``: an index into the
    points, None when not among them)."""
    h = report.history
    points = report.pareto
    front = sorted((p for p in points if p.on_front), key=lambda p: p.per_gpu or 0.0)
    priced = [p for p in points if p.usd_per_million is not None]
    cost_front = sorted(
        (p for p in priced if p.on_cost_front), key=lambda p: p.usd_per_million or 0.0
    )
    recommended = report.recommended
    per = "GPU" if report.memory_label == "GPU memory" else "server"
    imp = report.importances.values
    return {
        "history": {
            "numbers": list(h.numbers),
            "scores": list(h.scores),
            "feasible": list(h.feasible),
            "best": list(h.best_so_far),
            # Without vLLM's defaults measured there are no scores: the values are h.metric's.
            "metric": h.metric,
            "x_title": "trial number",
            "y_title": h.metric or f"{report.study.objective} score (1 = defaults)",
        },
        "pareto": {
            "numbers": [p.number for p in points],
            "throughput": [p.per_gpu for p in points],
            "p99": [p.p99_ms for p in points],
            "memory": [p.memory_gib for p in points],
            "labels": [p.label for p in points],
            "front_throughput": [p.per_gpu for p in front],
            "front_p99": [p.p99_ms for p in front],
            **_marks(points, recommended),
            "x_title": f"output throughput per {per} (tok/s)",
            "y_title": "P99 end-to-end latency (ms)",
            "color_title": f"{report.memory_label} (GiB)",
        },
        "pareto_cost": {
            "numbers": [p.number for p in priced],
            "usd": [p.usd_per_million for p in priced],
            "p99": [p.p99_ms for p in priced],
            "labels": [p.label for p in priced],
            "front_usd": [p.usd_per_million for p in cost_front],
            "front_p99": [p.p99_ms for p in cost_front],
            # Per point: only an upper bound (an open-loop load the server kept up with).
            "at_most": [p.usd_at_most for p in priced],
            **_marks(priced, recommended),
            "x_title": "$ per 1M output tokens at the SLO's throughput"
            + (" (≤: at most, see below)" if any(p.usd_at_most for p in priced) else ""),
            "y_title": "P99 end-to-end latency (ms)",
            # What the chart says where no trial has a cost: none measured, why none is priced,
            # or (priced) that none served a load within the SLO: its $/1M is infinite.
            "empty": "No measured trial yet."
            if not points
            else "No trial has a cost: none served a load within the SLO."
            if report.priced
            else report.price_label,
        },
        "importance": {
            # Least important first: plotly draws horizontal bars bottom-up.
            "params": list(reversed(list(imp))),
            "values": list(reversed(list(imp.values()))),
            "x_title": "importance (share of the score's variation, sums to 1)",
        },
        "ttft": _distribution(report.ttft, "TTFT"),
        "e2e": _distribution(report.e2e, "E2E latency"),
        **(curve_charts(curves) if curves is not None else {}),
    }


def _curve(t: TrialCurve) -> dict[str, Any]:
    # One trace per trial; the script escapes every string (the label is a config label).
    points = t.points
    capacity = next((i for i, p in enumerate(points) if p.is_capacity), None)
    return {
        "number": t.number,
        "name": f"#{t.number} {t.label}" + (" (baseline)" if t.is_baseline else ""),
        "baseline": t.is_baseline,
        "labels": [p.label for p in points],
        "load": [p.load for p in points],
        "windows": [p.windows for p in points],
        "per_stream": [p.per_stream for p in points],
        "per_gpu": [p.per_gpu for p in points],
        "ttft_p99": [p.ttft_p99_ms for p in points],
        "e2e_p99": [p.e2e_p99_ms for p in points],
        "caveats": [p.caveat for p in points],
        "notes": [list(p.notes) for p in points],
        "capacity": capacity,
        # That capacity is only a lower bound (an open-loop load the server kept up with).
        "capacity_at_least": t.capacity_at_least,
    }


def curve_charts(curves: StudyCurves) -> dict[str, Any]:
    """The two load-curve charts (see :mod:`tuner.results.report.curves` for what x and y are):
    throughput per GPU against throughput per stream, and P99 latencies against load."""
    trials = [_curve(t) for t in curves.trials]
    load = {
        True: "load (requests/s)",
        False: "load (concurrent streams)",
        None: "load (concurrent streams, or requests/s)",
    }[curves.open_loop]
    slo = {k: v for k, v in vars(curves.slo).items() if k in ("ttft_p99_ms", "e2e_p99_ms")}
    return {
        "curve_throughput": {
            "trials": trials,
            "x_title": "output tok/s per stream (interactivity)",
            "y_title": "output tok/s per GPU" if curves.per_gpu else "output tok/s per server",
            "unit": "tok/s/GPU" if curves.per_gpu else "tok/s",
        },
        "curve_latency": {
            "trials": trials,
            "x_title": load,
            "ttft_title": "P99 TTFT (ms)",
            "e2e_title": "P99 E2E (ms)",
            "slo": {k: v for k, v in slo.items() if v is not None},
        },
    }


def compare_chart(report: ComparisonReport) -> dict[str, Any]:
    """B/A ratio per metric with its interval; metrics without a ratio are left out."""
    rows = [m for m in report.metrics if m.ratio is not None]
    ratios = [m.ratio for m in rows if m.ratio is not None]
    return {
        "ratio": {
            "labels": [f"{m.label} ({m.unit})" if m.unit else m.label for m in rows],
            "ratio": [r.median for r in ratios],
            "plus": [None if r.high is None else r.high - r.median for r in ratios],
            "minus": [None if r.low is None else r.median - r.low for r in ratios],
            "tones": [m.tone for m in rows],
            # The cards above name A and B; their labels can be longer than the axis.
            "x_title": "B / A (1 = no change)",
        }
    }
