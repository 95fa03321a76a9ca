"""What a study's measurements cost: its price per GPU-hour (the spec's ``gpu_price`` or
``--gpu-price``, else the catalog's labelled default) and each trial's $ per 1M output tokens at
its SLO throughput (:mod:`tuner.scoring.cost`), an upper bound where that throughput is only the
load an open-loop workload offered (:func:`tuner.load.curve.unsaturated`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from tuner.catalog import GpuPrice, gpu_price
from tuner.db import TrialPhase, TrialRow
from tuner.domain import Estimate, Objective, TrialStatus, WindowMetrics
from tuner.errors import UsageError
from tuner.load import SATURATING, LoadPoint, load_points, point_label, unsaturated
from tuner.scoring import trial_cost
from tuner.spec import FINGERPRINT

# Said wherever a throughput is only the load an open-loop workload offered.
OPEN_LOOP = (
    "the server kept up with an open-loop load (arrivals timed, no higher load measured): "
    "its throughput is the load it was sent, not what the GPU can serve"
)
MEASURE_CAPACITY = f"for a capacity, measure {SATURATING}"


def study_price(
    gpu: str,
    spec: Mapping[str, Any] | None,
    given: float | None = None,
    *,
    emulated: bool = False,
) -> GpuPrice | None:
    """The price of a study on GPU profile ``gpu`` with stored ``spec``: ``given`` (a reading
    command's ``--gpu-price``), else the spec's own ``gpu_price`` (``tuner run --gpu-price``
    lands there), else the catalog default; None without any. An ``emulated`` study's price
    says that the throughput it divides was measured on another GPU: priced at the emulated
    profile's rate, an H200's throughput read as an A100's cost, three times too cheap."""
    price = _price(gpu, spec, given)
    if price is None or not emulated:
        return price
    return dataclasses.replace(
        price,
        source=f"{price.source}; the throughput was measured in emulation on another GPU, so "
        f"this is not the cost on {gpu}",
    )


def price_or_why(
    gpu: str,
    spec: Mapping[str, Any] | None,
    given: float | None = None,
    *,
    emulated: bool = False,
    option: str = "",
) -> tuple[GpuPrice | None, str]:
    """:func:`study_price`, and "" ; or None and why there is no cost where the study's stored
    price is none (one an older tuner stored): the flags, metrics and pages still answer.
    ``option``: what gives a price instead (``--gpu-price``), named in the why."""
    try:
        return study_price(gpu, spec, given, emulated=emulated), ""
    except UsageError as exc:
        return None, f"no cost: {exc.message}" + (f"; give one with {option}" if option else "")


def _price(gpu: str, spec: Mapping[str, Any] | None, given: float | None) -> GpuPrice | None:
    stored = (spec or {}).get("gpu_price")
    if given is not None or stored is None:
        return gpu_price(gpu, given)
    try:
        value = float(stored)
    except (TypeError, ValueError):
        value = math.nan
    # Not the input cap (price_problem): a study stored by an older tuner may be dearer.
    if not (math.isfinite(value) and value >= 0):
        raise UsageError(
            f"the study's stored gpu_price {stored!r} is no price per GPU-hour",
            hint="`tuner best` and `tuner size` take one with --gpu-price, before the study's",
        )
    return GpuPrice(value, "the study's price")


def arrivals(spec: Mapping[str, Any] | None) -> str | None:
    """How the study's arrivals were timed, as the workload fingerprint stored with its spec
    says: "trace" (the trace's own times) or "poisson"; None for a closed loop and for a study
    stored without a fingerprint (its windows still record a Poisson request rate)."""
    fingerprint = (spec or {}).get(FINGERPRINT)
    if not isinstance(fingerprint, Mapping) or fingerprint.get("mean_rate") is None:
        return None
    return str(fingerprint.get("arrival"))


def load_label(point: LoadPoint, timed: str | None) -> str:
    """:func:`tuner.load.point_label` of ``point``, its arrivals timed as ``timed`` says
    (:func:`arrivals`)."""
    return point_label(
        point.concurrency, point.request_rate, timed == "trace", trace_poisson=timed == "poisson"
    )


def usd_at_most(
    metrics: Mapping[str, Estimate], windows: Sequence[WindowMetrics], spec: Mapping[str, Any]
) -> bool:
    """Whether a trial's $ per 1M output tokens (:func:`usd`) is only an upper bound: the
    throughput it is read at (its curve's capacity, else its one load point's) is the load an
    open-loop workload offered (:func:`tuner.load.curve.unsaturated`)."""
    points = load_points(windows)
    load = metrics.get("capacity_load")
    if load is None:
        point = points[0] if len(points) == 1 else None
    else:
        point = next((p for p in points if p.load == load.median), None)
    return point is not None and unsaturated(point, points, arrivals(spec) is not None)


def capacity_at_least(
    metrics: Mapping[str, Estimate],
    windows: Sequence[WindowMetrics],
    spec: Mapping[str, Any] | None,
) -> bool:
    """Whether a trial's capacity (its load curve's ``capacity_output_throughput``, what
    :func:`tuner.load.capacity_text` shows) is only a lower bound: read at an open-loop load the
    server kept up with, :func:`usd_at_most`'s rule; False for a trial without a curve."""
    return "capacity_output_throughput" in metrics and usd_at_most(metrics, windows, spec or {})


def bound_note(numbers: Sequence[int], figure: str) -> str:
    """Under a table: ``figure`` of the trials ``numbers`` (a format whose ``{}`` takes "#0,
    #2"), why it is only a bound (:func:`usd_at_most`'s rule) and what to measure instead; ""
    when no trial is."""
    if not numbers:
        return ""
    return f"{figure.format(', '.join(f'#{n}' for n in numbers))}: {OPEN_LOOP}; {MEASURE_CAPACITY}"


def capacity_bound_note(numbers: Sequence[int]) -> str:
    """Which trials' (``numbers``) capacities are only lower bounds (:func:`capacity_at_least`),
    in :func:`bound_note`'s words. Each surface puts its mark before it ("at least: ", "≥: ")."""
    return bound_note(numbers, "the capacity of {} is only a lower bound")


def ranked_on_a_bound(
    objective: Objective, trial: TrialRow, rows: Sequence[TrialRow], spec: Mapping[str, Any] | None
) -> str:
    """Why a capacity or cost ranking whose pick is ``trial`` (of the study's ``rows``) rests on
    a lower bound, with what to measure instead: the throughput it ranks by was read at an
    open-loop load the server kept up with (:func:`usd_at_most`): the top rate of a rate ladder
    whose every rung was served, or the workload's one open-loop load. The configurations that
    kept up all serve that load: their order is noise. "" otherwise."""
    if objective not in (Objective.CAPACITY, Objective.COST):
        return ""
    if not usd_at_most(trial.metrics, trial.windows, spec or {}):
        return ""
    measured = [
        r for r in rows if r.status is TrialStatus.COMPLETE and r.phase is TrialPhase.SEARCH
    ]
    kept = sum(usd_at_most(r.metrics, r.windows, spec or {}) for r in measured)
    points = load_points(trial.windows)
    top = max(points, key=lambda p: p.load)
    label = load_label(top, arrivals(spec))
    ladder = len(points) > 1 and top.request_rate is not None
    where = f"the rate_ladder's top rate, {label}" if ladder else f"its one open-loop load, {label}"
    fix = (
        f"add rates above {top.load:g} req/s to the rate_ladder until its top one misses the "
        f"SLO; or {MEASURE_CAPACITY}"
        if ladder
        else MEASURE_CAPACITY
    )
    trials = f"{len(measured)} measured trial{'' if len(measured) == 1 else 's'}"
    return (
        f"the {objective.value} ranking rests on a lower bound: trial #{trial.number}'s "
        f"throughput within the SLO was read at {where}, and the server kept up with it "
        f"({kept} of {trials} did): a server that keeps up serves the load it is sent, not "
        f"what the GPU can serve, so the configurations that kept up rank by noise; {fix}"
    )


def no_price(gpu: str) -> str:
    return (
        f"cost: no price per GPU-hour for {gpu} (the catalog has none): give one with "
        "--gpu-price (tuner best, tuner size; tuner run stores it with the study)"
    )


def usd(metrics: Mapping[str, Estimate], price: GpuPrice | None) -> Estimate | None:
    """$ per 1M output tokens of a trial's ``metrics`` at ``price``; None without either."""
    return None if price is None else trial_cost(metrics, price.usd_per_hour)
