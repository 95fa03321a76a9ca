"""Data for the study page and the overview: frozen objects computed from repository rows.

Scores are :func:`tuner.study.standings.trial_score`'s (relative to the study's baseline trial),
as every surface shows them. Missing numbers are ``None``, never NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuner.db import ComparisonRow, StudyRow, TrialRow
from tuner.domain import Estimate, Objective, Slo, TrialStatus
from tuner.load.curve import load_points
from tuner.results import costs, energy
from tuner.results.recommend import emulated_memory_warning, gpu_memory_gib
from tuner.scoring import CAPACITY, GIB, NO_DIFFERENCE, WindowFlags, ranking, window_flags
from tuner.scoring import objectives as scoring
from tuner.study import (
    Confirmed,
    choose,
    is_confirmation,
    score_reference,
    study_objective,
    trial_score,
)
from tuner.study.confirm import decision_metric
from tuner.study.standings import pick, standings

# metric -> (label, unit); the order is the order of the comparison table.
METRICS: Mapping[str, tuple[str, str]] = {
    "output_throughput": ("output throughput", "tok/s"),
    "request_throughput": ("request throughput", "req/s"),
    "total_throughput": ("total throughput", "tok/s"),
    "goodput": ("goodput", "req/s"),
    "ttft_p50_ms": ("P50 TTFT", "ms"),
    "ttft_p99_ms": ("P99 TTFT", "ms"),
    "itl_p50_ms": ("P50 ITL", "ms"),
    "itl_p99_ms": ("P99 ITL", "ms"),
    "e2e_p50_ms": ("P50 E2E latency", "ms"),
    "e2e_p90_ms": ("P90 E2E latency", "ms"),
    "e2e_p99_ms": ("P99 E2E latency", "ms"),
    "error_rate": ("error rate", "fraction"),
    "memory_gib": ("peak memory", "GiB"),
    "joules_per_output_token": ("GPU energy per output token", "J"),
    "gpu_power_w": ("GPU power", "W"),
}


def num(x: Any) -> float | None:
    """A finite float or None (the codec stores NaN as the string "nan")."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


@dataclass(frozen=True)
class TrialLine:
    """One row of the trials table; numbers are None when the trial has none."""

    number: int
    phase: str
    is_baseline: bool
    config: Mapping[str, Any]
    config_label: str
    status: str
    failure: str | None
    failure_is_finding: bool
    failure_detail: str
    log_tail: str
    throughput: float | None  # output tok/s, median over windows
    ttft_p99_ms: float | None
    e2e_p99_ms: float | None
    memory_gib: float | None
    score: float | None
    feasible: bool | None
    backend: str | None
    duration_s: float | None
    # Client-bound / disturbed measurement windows of the trial (every load point).
    windows: WindowFlags = field(default_factory=WindowFlags)
    # False when a launch of this configuration failed the canary: never the best.
    recommendable: bool = True
    # The measured GPU's joules per output token and watts (None: not measured, e.g. on CPU).
    joules_per_token: float | None = None
    gpu_power_w: float | None = None
    # $ per 1M output tokens at its SLO throughput and the study's price (None: no price);
    # only an upper bound where that throughput is an open-loop load (costs.usd_at_most).
    usd_per_million: float | None = None
    usd_at_most: bool = False
    gpus: int = 1  # GPUs its memory telemetry saw (a CPU trial: one server)
    # [low, high] over the launch's measurement windows of the metrics shown beside their
    # medians (throughput, ttft_p99_ms, e2e_p99_ms), where measured.
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    # A measured trial's objective values as stored (throughput as its preset reads it,
    # memory GiB, P99 E2E ms); () for any other.
    objective_values: tuple[float, ...] = ()
    # An emulated trial's peak memory above the emulated GPU's, as `tuner best` warns of it
    # (tuner.results.recommend.emulated_memory_warning); None otherwise.
    memory_warning: str | None = None

    @property
    def flags(self) -> str:
        """'2/3 client-bound, 1/3 disturbed' for the trials table; '' when none was flagged."""
        return self.windows.short()


@dataclass(frozen=True)
class History:
    """Score per measured trial in trial order, and the best feasible score so far. A score is
    a ratio to vLLM's defaults: in a study without their measurement there is none, and the
    values are then the preset's primary metric, raw (``metric`` names it, ``why`` says why
    there are no scores), the best so far by that metric's direction."""

    numbers: tuple[int, ...]
    scores: tuple[float, ...]  # the scores, or the raw values of ``metric``
    feasible: tuple[bool, ...]
    best_so_far: tuple[float | None, ...]
    metric: str = ""  # "output throughput (tok/s)" when the values are raw; "" for scores
    why: str = ""  # why the values are raw ("" for scores)


@dataclass(frozen=True)
class ParetoPoint:
    number: int
    throughput: float
    p99_ms: float
    memory_gib: float | None
    label: str
    on_front: bool
    # Output tok/s over the GPUs the trial's telemetry saw (1 per server: tuner launches no
    # tensor parallelism; a CPU study's is per server).
    per_gpu: float | None = None
    usd_per_million: float | None = None
    usd_at_most: bool = False  # the $/1M is only an upper bound (costs.usd_at_most)
    # Not dominated on ($/1M output tokens down, P99 down); False without a price.
    on_cost_front: bool = False
    is_baseline: bool = False


@dataclass(frozen=True)
class Distribution:
    """Per-window P50 and P99 of one latency, per measured trial (one tuple per trial)."""

    metric: str
    numbers: tuple[int, ...]
    p50: tuple[tuple[float, ...], ...]
    p99: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class Importances:
    values: Mapping[str, float]  # largest first, summing to 1; empty when not computable
    method: str


@dataclass(frozen=True)
class StudyReport:
    study: StudyRow
    provenance: Mapping[str, str]  # label -> value, only what is known
    trials: tuple[TrialLine, ...]
    best: TrialLine | None
    history: History
    pareto: tuple[ParetoPoint, ...]
    memory_label: str  # "GPU memory" or "host RSS" (CPU studies have no GPU telemetry)
    importances: Importances
    ttft: Distribution
    e2e: Distribution
    search_count: int = 0  # rows of the search phase, free ones too (the budget: n_budget_trials)
    confirm_count: int = 0  # launches of the confirmation phase
    # The trial recommended (tuner.study.standings.pick: as `tuner best` and the API name it).
    recommended: int | None = None
    confirmation: ConfirmationSummary | None = None
    # "2 of 30 windows client-bound (...): #3 2/3 client-bound, ..."; "" when none was flagged.
    window_caveat: str = ""
    # Why measured trials have no energy ("energy: not measured on CPU"); "" when all have it.
    energy_note: str = ""
    # The price per GPU-hour the $ figures assume, with its source, or why there are none.
    price_label: str = ""
    priced: bool = False  # a price is known: ``price_label`` is it, not why there is none
    # Which trials' $/1M are only upper bounds, why, and what to measure; "" when none is.
    cost_bound_note: str = ""
    # Why the recommendation's capacity or cost ranking rests on a lower bound; "" if not.
    ranking_caveat: str = ""


@dataclass(frozen=True)
class ConfirmationSummary:
    """What the confirmation phase concluded (:func:`tuner.study.confirm.choose`), and its
    comparisons."""

    confirmed: Confirmed
    comparison_ids: tuple[int, ...]
    # Per candidate whose comparison has no interval (its launches measured nothing to set
    # against the defaults'): "#2 could not be confirmed: WHY".
    unmeasured: tuple[str, ...] = ()

    @property
    def not_confirmed(self) -> str:
        """Why no candidate could be confirmed, where none was measured ("" otherwise): the
        verdict "no significant difference" then rests on no measurement."""
        alone = self.confirmed.verdict == NO_DIFFERENCE
        none = len(self.unmeasured) == len(self.comparison_ids)
        return "; ".join(self.unmeasured) if alone and none and self.unmeasured else ""


def confirmation(
    study: StudyRow, trials: Sequence[TrialRow], comparisons: Sequence[ComparisonRow]
) -> ConfirmationSummary | None:
    """The verdict of the study's confirmation (:func:`tuner.study.confirm.choose`), None
    without one or where a launch of its configuration failed the canary among ``trials``
    (never recommended, as the API and `tuner best` leave it out)."""
    objective = study_objective(study)
    confirmed = choose(comparisons, objective)
    if confirmed is None or confirmed.config in ranking.canary_broken(trials):
        return None
    own = [c for c in comparisons if is_confirmation(c)]
    unmeasured = tuple(why for c in own if (why := _unmeasured(c, objective)))
    return ConfirmationSummary(confirmed, tuple(c.id for c in own), unmeasured)


def _unmeasured(row: ComparisonRow, objective: Objective) -> str:
    """Why ``row``'s candidate could not be confirmed ("#2 could not be confirmed: WHY") where
    its deciding metric has no interval (a side measured too little: the decision's stop, else
    the metric's verdict); "" where it has one."""
    from tuner.results.report.compare import decision_facts  # it imports this module

    metrics = {m["metric"]: m for m in row.results.get("metrics") or ()}
    deciding = metrics.get(decision_metric(objective, CAPACITY in metrics), {})
    if deciding.get("low") is not None and deciding.get("high") is not None:
        return ""
    why = decision_facts(row.results).get("stopped") or deciding.get("verdict") or "no interval"
    return f"{row.results.get('b_label') or 'the candidate'} could not be confirmed: {why}"


def median(e: Estimate | None) -> float | None:
    """The median of ``e`` when it is there and finite."""
    return None if e is None else num(e.median)


def _memory_gib(row: TrialRow) -> float | None:
    b = row.memory.headline_bytes
    return None if b is None else b / GIB


def _feasible(row: TrialRow, slo: Slo, objective: Objective) -> bool | None:
    """Whether the trial met the SLO and error budget, as its study's standings judge it (a
    capacity or cost study on its load curve); None when a metric it needs is missing (rows
    written by another tool): unknown, not a page error."""
    try:
        return scoring.is_feasible(scoring.metric_constraints(row.metrics, slo, objective))
    except KeyError:
        return None


def trial_lines(study: StudyRow, trials: Sequence[TrialRow]) -> tuple[TrialLine, ...]:
    """Table rows for ``trials``, scored as :func:`tuner.study.standings.rank` scores them."""
    objective = study_objective(study)
    slo = Slo(**dict(study.slo))
    reference = score_reference(trials)
    broken = ranking.canary_broken(trials)
    price, _ = costs.price_or_why(study.gpu, study.spec, emulated=study.emulated)
    card_gib = gpu_memory_gib(study.gpu)
    out = []
    for t in trials:
        measured = t.status is TrialStatus.COMPLETE and bool(t.objective_values)
        usd = median(costs.usd(t.metrics, price)) if measured else None
        memory = _memory_gib(t) if measured else None
        emulated = study.emulated or t.emulated
        took = None
        if t.started_at is not None and t.finished_at is not None:
            took = t.finished_at - t.started_at
        out.append(
            TrialLine(
                number=t.number,
                phase=t.phase.value,
                is_baseline=t.is_baseline,
                config=t.config.to_dict(),
                config_label=t.config_label,
                status=t.status.value,
                failure=t.failure.value if t.failure else None,
                failure_is_finding=bool(t.failure and t.failure.is_finding),
                failure_detail=t.failure_detail,
                log_tail=t.log_tail,
                throughput=median(t.metrics.get("output_throughput")),
                ttft_p99_ms=median(t.metrics.get("ttft_p99_ms")),
                e2e_p99_ms=median(t.metrics.get("e2e_p99_ms")),
                memory_gib=memory,
                score=trial_score(t, reference, objective),
                feasible=_feasible(t, slo, objective) if measured else None,
                backend=t.effective_backend,
                duration_s=took,
                windows=window_flags(t.windows),
                recommendable=t.config not in broken,
                joules_per_token=median(t.metrics.get(energy.PER_TOKEN)),
                gpu_power_w=median(t.metrics.get(energy.POWER)),
                usd_per_million=usd,
                usd_at_most=usd is not None and costs.usd_at_most(t.metrics, t.windows, study.spec),
                gpus=len(t.memory.gpu_peak_bytes) or 1,
                ranges=_ranges(t),
                objective_values=tuple(t.objective_values or ()) if measured else (),
                memory_warning=emulated_memory_warning(memory, card_gib) if emulated else None,
            )
        )
    return tuple(out)


# TrialLine's field -> the metric whose window range is shown beside it.
_RANGED = {
    "throughput": "output_throughput",
    "ttft_p99_ms": "ttft_p99_ms",
    "e2e_p99_ms": "e2e_p99_ms",
}


def _ranges(row: TrialRow) -> dict[str, tuple[float, float]]:
    out = {}
    for key, name in _RANGED.items():
        e = row.metrics.get(name)
        bounds = (num(e.low), num(e.high)) if e is not None and len(e.values) > 1 else None
        if bounds is not None and bounds[0] is not None and bounds[1] is not None:
            out[key] = (bounds[0], bounds[1])
    return out


def energy_note(trials: Sequence[TrialRow]) -> str:
    """Why the measured trials that have no energy have none, in one line; "" when none lacks it."""
    reasons = {
        energy.absent(t.metrics, on_gpu=t.gpu_uuid is not None)
        for t in trials
        if t.status is TrialStatus.COMPLETE and t.metrics
    }
    return "; ".join(sorted(r for r in reasons if r))


def window_caveat(lines: Sequence[TrialLine]) -> str:
    """The client-bound / disturbed windows of ``lines`` in one sentence, naming the trials;
    "" when no window was flagged."""
    flagged = [t for t in lines if t.windows.any]
    if not flagged:
        return ""
    total = sum((t.windows for t in lines), WindowFlags())
    trials = ", ".join(f"#{t.number} {t.flags}" for t in flagged)
    return f"{total.explained()}: {trials}"


def cost_bound_note(lines: Sequence[TrialLine]) -> str:
    """The trials of ``lines`` whose $/1M is only an upper bound, in one sentence with why and
    what to measure instead (as `tuner best` says it); "" when none is."""
    bounded = [t.number for t in lines if t.usd_at_most]
    return costs.bound_note(bounded, "≤: the $/1M of {} is at most that")


def best_line(
    study: StudyRow, trials: Sequence[TrialRow], lines: Sequence[TrialLine]
) -> TrialLine | None:
    """The line of the search trial the study's standings put first
    (:func:`tuner.study.standings.standings`: a capacity or cost study's SLO judged on the load
    curve, as `tuner best` judges it)."""
    ranked = standings(trials, study_objective(study), Slo(**study.slo))
    top = ranked[0].number if ranked else None
    return next((line for line in lines if line.number == top), None)


# What the throughput objective value of these presets is (the others': the fixed load's).
_THROUGHPUT_AS = {
    Objective.CAPACITY: "capacity under the SLO",
    Objective.COST: "output throughput within the SLO",
}


def history(lines: Sequence[TrialLine], objective: Objective = Objective.BALANCED) -> History:
    """The search's scores in trial order and the best so far (confirmation launches, numbered
    from :data:`tuner.study.confirm.CONFIRM_NUMBER_BASE`, are not part of the search's history).
    Without vLLM's defaults measured, no trial has a score: the history is then of the primary
    metric of ``objective`` (the study's preset, :func:`decision_metric`), raw."""
    search = sorted((t for t in lines if t.phase == "search"), key=lambda t: t.number)
    scored = [(t, t.score) for t in search if t.score is not None]
    metric = why = ""
    better = max
    if not scored:
        name = decision_metric(objective)
        at = scoring.OBJECTIVE_NAMES.index(name)
        scored = [(t, t.objective_values[at]) for t in search if len(t.objective_values) == 3]
        label, unit = METRICS[name]
        metric = f"{_THROUGHPUT_AS.get(objective, label) if at == 0 else label} ({unit})"
        why = _no_score(search) if scored else ""
        better = max if scoring.DIRECTIONS[at] == "maximize" else min
    best: float | None = None
    best_so_far: list[float | None] = []
    for t, value in scored:
        if t.feasible:
            best = value if best is None else better(best, value)
        best_so_far.append(best)
    return History(
        numbers=tuple(t.number for t, _ in scored),
        scores=tuple(value for _, value in scored),
        feasible=tuple(bool(t.feasible) for t, _ in scored),
        best_so_far=tuple(best_so_far),
        metric=metric if scored else "",
        why=why,
    )


def _no_score(search: Sequence[TrialLine]) -> str:
    """Why the search trials ``search`` have no score: what became of vLLM's defaults."""
    defaults = [t for t in search if t.is_baseline]
    if not defaults:
        return "the study has no trial of vLLM's defaults"
    numbers = ", ".join(f"#{t.number}" for t in defaults)
    if any(t.status == TrialStatus.RUNNING for t in defaults):
        return f"vLLM's defaults ({numbers}) are still being measured"
    outcomes = ", ".join(f"#{t.number} {t.failure or t.status}" for t in defaults)
    return f"vLLM's defaults did not complete ({outcomes})"


def pareto(lines: Sequence[TrialLine]) -> tuple[ParetoPoint, ...]:
    """The search's measured trials as (throughput up, P99 down) points (confirmation
    launches are judged by their comparison, as for the API's Pareto set); ``on_front`` marks
    the non-dominated ones, ``on_cost_front`` those not dominated on ($/1M down, P99 down).
    Ties: equal points are all on the front."""
    measured = [
        t
        for t in lines
        if t.phase == "search"
        and t.status == "complete"
        and t.throughput is not None
        and t.e2e_p99_ms is not None
    ]

    speed = non_dominated([(-(t.throughput or 0.0), t.e2e_p99_ms or 0.0) for t in measured])
    priced = [t for t in measured if t.usd_per_million is not None]
    cheap = dict(
        zip(
            (t.number for t in priced),
            non_dominated([(t.usd_per_million or 0.0, t.e2e_p99_ms or 0.0) for t in priced]),
            strict=True,
        )
    )
    return tuple(
        ParetoPoint(
            t.number,
            t.throughput or 0.0,
            t.e2e_p99_ms or 0.0,
            t.memory_gib,
            t.config_label,
            on,
            per_gpu=(t.throughput or 0.0) / t.gpus,
            usd_per_million=t.usd_per_million,
            usd_at_most=t.usd_at_most,
            on_cost_front=cheap.get(t.number, False),
            is_baseline=t.is_baseline,
        )
        for t, on in zip(measured, speed, strict=True)
    )


def non_dominated(points: Sequence[tuple[float, ...]]) -> list[bool]:
    """Which ``points`` (every coordinate to minimise) no other dominates: no worse on every
    coordinate and better on one. Equal points are all on the front."""
    return [
        not any(
            all(o <= p for o, p in zip(other, point, strict=True)) and other != point
            for other in points
        )
        for point in points
    ]


def distribution(metric: str, trials: Sequence[TrialRow]) -> Distribution:
    """Per-window P50/P99 of ``metric`` ("ttft" or "e2e") for each trial that has windows."""
    numbers, p50, p99 = [], [], []
    for t in sorted(trials, key=lambda t: t.number):
        if t.status is not TrialStatus.COMPLETE or not t.windows:
            continue
        stats = [getattr(w, f"{metric}_ms") for w in t.windows]
        numbers.append(t.number)
        p50.append(tuple(v for s in stats if (v := num(s.p50)) is not None))
        p99.append(tuple(v for s in stats if (v := num(s.p99)) is not None))
    return Distribution(metric, tuple(numbers), tuple(p50), tuple(p99))


def fallback_importances(lines: Sequence[TrialLine]) -> dict[str, float]:
    """Share of the score's variance explained by each knob (one-way ANOVA's eta squared),
    normalised to sum 1. Used when Optuna's importances cannot be had (no Optuna study, or
    too few trials for it); ``{}`` with fewer than 2 measured trials or a constant score."""
    scored = [t for t in lines if t.score is not None]
    if len(scored) < 2:
        return {}
    scores = [t.score for t in scored if t.score is not None]
    mean = sum(scores) / len(scores)
    total = sum((s - mean) ** 2 for s in scores)
    if total <= 0:
        return {}
    knobs = sorted({k for t in scored for k in t.config})
    raw: dict[str, float] = {}
    for knob in knobs:
        groups: dict[str, list[float]] = {}
        for t, s in zip(scored, scores, strict=True):
            groups.setdefault(repr(t.config.get(knob)), []).append(s)
        if len(groups) < 2:
            continue
        between = sum(len(g) * (sum(g) / len(g) - mean) ** 2 for g in groups.values())
        raw[knob] = between / total
    norm = sum(raw.values())
    if norm <= 0:
        return {}
    return dict(sorted(((k, v / norm) for k, v in raw.items()), key=lambda kv: -kv[1]))


def _provenance(study: StudyRow, trials: Sequence[TrialRow]) -> dict[str, str]:
    measured = [t for t in trials if t.status is TrialStatus.COMPLETE]

    def seen(values: Iterable[Any]) -> str:
        return ", ".join(dict.fromkeys(str(v) for v in values if v not in (None, "")))

    def count(t: TrialRow) -> str:  # a curve's: "9 (3 load points of 3)", as tuner best counts
        points = len(load_points(t.windows))
        if points <= 1:
            return str(len(t.windows))
        each = f" of {len(t.windows) // points}" if len(t.windows) % points == 0 else ""
        return f"{len(t.windows)} ({points} load points{each})"

    windows = seen(count(t) for t in measured)
    out = {
        "model": study.model,
        "GPU": seen([study.gpu, *(t.gpu_name for t in measured)]),
        "vLLM": seen([*(t.vllm_version for t in measured)] or [study.vllm_version]),
        "workload": study.workload_label,
        "windows per trial": windows,
        "objective": study.objective,
        "SLO": ", ".join(f"{k} ≤ {v:g}" for k, v in study.slo.items()) or "none",
        "driver": seen(t.driver_version for t in measured),
        "host": seen(t.hostname for t in measured),
        "emulated": "yes" if study.emulated else "",
    }
    return {k: v for k, v in out.items() if v}


def study_report(
    study: StudyRow,
    trials: Sequence[TrialRow],
    importances: Mapping[str, float] | None = None,
    comparisons: Sequence[ComparisonRow] = (),
) -> StudyReport:
    """Everything the study page shows. ``importances`` are Optuna's (see
    :mod:`tuner.results.importance`); when None or empty, :func:`fallback_importances` is used.
    ``comparisons``: the study's own (its confirmation phase)."""
    lines = trial_lines(study, trials)
    price, no_cost = costs.price_or_why(study.gpu, study.spec, emulated=study.emulated)
    if importances:
        imp = Importances(dict(importances), "PED-ANOVA (Optuna)")
    else:
        fb = fallback_importances(lines)
        imp = Importances(fb, "variance of the score explained per knob (fallback)" if fb else "")
    has_gpu = any(t.memory.gpu_peak_bytes for t in trials if t.status is TrialStatus.COMPLETE)
    summary = confirmation(study, trials, comparisons)  # the page's and the pick's
    ranked = pick(study, trials, None if summary is None else summary.confirmed)
    return StudyReport(
        study=study,
        provenance=_provenance(study, trials),
        trials=lines,
        best=best_line(study, trials, lines),
        history=history(lines, study_objective(study)),
        pareto=pareto(lines),
        memory_label="GPU memory" if has_gpu else "host RSS",
        importances=imp,
        ttft=distribution("ttft", trials),
        e2e=distribution("e2e", trials),
        search_count=sum(t.phase == "search" for t in lines),
        confirm_count=sum(t.phase == "confirm" for t in lines),
        confirmation=summary,
        recommended=None if ranked is None else ranked.number,
        window_caveat=window_caveat(lines),
        energy_note=energy_note(trials),
        price_label=price.label() if price is not None else no_cost or costs.no_price(study.gpu),
        priced=price is not None,
        cost_bound_note=cost_bound_note(lines),
        ranking_caveat=""
        if ranked is None
        else costs.ranked_on_a_bound(study_objective(study), ranked.row, trials, study.spec),
    )
