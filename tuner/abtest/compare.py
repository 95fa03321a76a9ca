"""A/B measurements: interleaved fresh launches of several configurations, and the comparison
of two of them metric by metric with intervals and verdicts (see :mod:`tuner.scoring.significance`).

Interleaving spreads slow drifts of the machine (thermal, caches, other tenants) over every arm
instead of charging them to whichever ran last, and every other round runs the arms in reverse
(A B, B A, A B, ...: counterbalanced), so that no arm always launches first: in A B A B ...
B carries one launch more of a steady drift than A (x0.92 against B on an H100 whose output
fell 8 % a launch, docs/results/plan-h200.md §13), in A B B A it carries none after every
second round. Every run is a fresh
server launch: launch-to-launch spread is part of what a user will see.

The JSON shape stored in ``tuner_comparisons.results`` (what the API and dashboards read)::

    {"confidence": 0.95, "a_label": str, "b_label": str, "launches": {"a": n, "b": n},
     "launch_value": "median" | "geomean",
     "metrics": [{"metric": str, "label": str, "higher_is_better": bool,
                  "a": {"median": x, "values": [...], "at": [...]}, "b": {...},
                  "ratio": r | null, "low": l | null, "high": h | null, "verdict": str,
                  "disagreement": {"a": D | null, "b": D | null}}],
     "failures": {"a": [str], "b": [str]}, "servers": {"a": [SERVER], "b": [SERVER]},
     "windows": {"a": {"windows": n, "client_bound": n, "disturbed": n}, "b": {...}}}

with ``D = {"low", "high", "ratio", "within", "bound", "launches"}`` when that arm's launches
disagree far beyond their noise (:func:`tuner.scoring.caveats.disagreement`; the metric's verdict is
then "inconclusive: ..." unless the arms lie apart by more than that, see :func:`compare`),
a metric's ``"drift": {"per_minute": R, "adjusted": R, "confidence", "df"}`` (``R = {"ratio",
"low", "high"}``) where both arms' launches moved steadily together over time
(:func:`tuner.scoring.caveats.drift`),
``SERVER`` per complete launch as :func:`_servers` gives it, and ``verdicts`` is
``{metric: verdict, ..., "overall": verdict}``. A side's ``values`` are one per launch, each
that launch's ``launch_value`` over its windows (:data:`LAUNCH_VALUES`), and ``at`` when each
of them ended, where every one has a time; a metric's ``"method"`` and ``"df"`` say how a
decision's interval was computed, and ``"drift"`` holds ``"in_verdict": true`` where that
interval took the trend out already.
Rows stored before tuner checked these lack "disagreement" and "windows", before it said so,
"launch_value", and before it fitted trends, "at".
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuner.abtest.guard import finding_of
from tuner.domain import ServingConfig, Slo, TrialResult, TrialStatus, Workload
from tuner.runner import PhaseCallback, TrialRunner
from tuner.scoring import (
    BETTER,
    CAPACITY,
    GIB,
    MIN_EFFECT,
    NO_DIFFERENCE,
    WORSE,
    Disagreement,
    Drift,
    RatioInterval,
    WindowFlags,
    arm_window_note,
    beyond_disagreement,
    disagreement,
    disagreement_verdict,
    drift,
    is_inconclusive,
    launch_value,
    ratio_interval,
    ratio_text,
    trend_taken_out,
    window_flags,
)

Times = tuple[tuple[float, ...], tuple[float, ...]]
"""When each launch of A and of B ended (its last window's end, epoch seconds)."""
MetricInterval = Callable[
    [str, Sequence[float], Sequence[float], float, Times | None], RatioInterval | None
]
"""An interval of B/A for a metric: (metric, A's launch values, B's, confidence, the
launches' times or None where a launch lacks one) -> interval."""

NOT_ENOUGH = "not enough launches"
# Every launch ran, and none gave the metric: the workload does not measure it (the ITL of
# one-token answers), which more launches would not change.
NO_VALUES = "not measured by this workload"

# (metric, label, higher is better). memory_gib is the trial's peak memory headline.
COMPARED: tuple[tuple[str, str, bool], ...] = (
    ("output_throughput", "output tok/s", True),
    ("request_throughput", "requests/s", True),
    ("ttft_p50_ms", "P50 TTFT ms", False),
    ("ttft_p99_ms", "P99 TTFT ms", False),
    ("itl_p99_ms", "P99 ITL ms", False),
    ("e2e_p99_ms", "P99 E2E ms", False),
    ("memory_gib", "memory GiB", False),
)
HEADLINE = "output_throughput"
# Metrics judged against the smallest effect worth acting on as well as against 1. Peak memory
# is one reading per launch, nearly the same on every launch of a configuration, so its interval
# is tight enough to make 40 MB of 141 GB (x1.0003) significant; a difference whose whole
# interval lies within the smallest effect reads "no significant difference", its interval shown.
FLOORED = frozenset({"memory_gib"})


@dataclass(frozen=True)
class Arm:
    label: str
    config: ServingConfig


RunCallback = Callable[[int, int, Arm, TrialResult], None]
"""Called after each launch with (run index, total runs, arm, result)."""


def run_interleaved(
    arms: Sequence[Arm],
    runner: TrialRunner,
    workload: Workload,
    launches: int,
    *,
    slo: Slo | None = None,
    on_run: RunCallback | None = None,
    on_start: Callable[[int, int, Arm], None] | None = None,
    on_phase: PhaseCallback | None = None,
    done: Sequence[Sequence[TrialResult]] | None = None,
    first_canary: Sequence[str] | None = None,
) -> list[list[TrialResult]]:
    """Launch each arm ``launches`` times, interleaved, in reverse every other round (A B, B A,
    A B, ...; with three arms A B C, C B A, ...); results per arm in launch order.

    ``first_canary``: the canary shapes of each arm's first launch (the confirmation asks
    for the full set there); the other launches get the runner's default, the quick set.

    An arm whose launch fails with a *finding* (it cannot start here) is not launched again:
    repeating a configuration that does not fit measures nothing. ``done``: per arm, launches
    an interrupted run already made; they count as that arm's first launches and the rounds
    they fill are skipped for it (so a resumed run keeps the interleaving of the rest).
    """
    if done is not None and len(done) != len(arms):
        raise ValueError("done needs one list of earlier launches per arm")
    results: list[list[TrialResult]] = [list(d) for d in done] if done else [[] for _ in arms]
    hopeless = {i for i, rs in enumerate(results) if finding_of(rs)}
    total = launches * len(arms)
    index = 0
    for round_ in range(launches):
        turn = list(enumerate(arms))
        for i, arm in reversed(turn) if round_ % 2 else turn:
            index += 1
            if i in hopeless or len(results[i]) > round_:
                continue
            if on_start:
                on_start(index, total, arm)
            first = first_canary is not None and not results[i]
            extra: dict[str, Any] = {"canary": first_canary} if first else {}
            result = runner.run(arm.config, workload, slo=slo, on_phase=on_phase, **extra)
            results[i].append(result)
            if result.failure is not None and result.failure.is_finding:
                hopeless.add(i)
            if on_run:
                on_run(index, total, arm, result)
    return results


# What one launch contributes to a comparison, over its measurement windows: their median, or
# (a sequential decision: the scale of tuner.scoring.noise's model) their geometric mean.
LAUNCH_VALUES = {
    "median": "the median of its windows",
    "geomean": "the geometric mean of its windows",
}


# What a metric's ratio B/A is taken from: the sides' geometric means of their launch values
# (the log scale its interval is computed on), not their medians, which the surfaces show
# beside it; with few or spread launches B median / A median differs from it, even in direction.
# Where the interval took a trend over the launches' times out (Design.trend), the ratio is the
# fit's: the sides' geometric means at one time (RATIO_OF_TREND).
RATIO_OF = "geometric means"
RATIO_OF_TREND = "geometric means at one time (a straight-line trend taken out)"


def ratio_of(results: Mapping[str, Any]) -> str:
    """What a stored comparison's ratios are taken from: :data:`RATIO_OF_TREND` where a
    metric's interval took a trend out, else :data:`RATIO_OF`; "" for a shape without a
    metrics list (its stored ratio, else B median / A median)."""
    metrics = results.get("metrics")
    if not isinstance(metrics, list):
        return ""
    methods = (str(m.get("method") or "") for m in metrics if isinstance(m, Mapping))
    return RATIO_OF_TREND if any(map(trend_taken_out, methods)) else RATIO_OF


def launch_values(results: Sequence[TrialResult], metric: str) -> list[float]:
    """One value per complete launch: the metric's median over its windows."""
    return [value for value, _, _ in _launches(results, metric)]


def _ran(results: Sequence[TrialResult]) -> bool:
    """Whether a side has two complete launches: enough for an interval, had they a value."""
    return sum(r.status is TrialStatus.COMPLETE for r in results) >= 2


def _launches(
    results: Sequence[TrialResult], metric: str, geomean: bool = False
) -> list[tuple[float, tuple[float, ...], TrialResult]]:
    """Per complete launch that has the metric: its value (the median of its windows, or with
    ``geomean`` their geometric mean, the value of :mod:`tuner.scoring.noise`'s model), its
    window values (none for peak memory, a single number per launch) and the launch."""
    out: list[tuple[float, tuple[float, ...], TrialResult]] = []
    for r in results:
        if r.status is not TrialStatus.COMPLETE:
            continue
        if metric == "memory_gib":
            mem = r.memory.headline_bytes
            if mem:
                out.append((mem / GIB, (), r))
        elif metric in r.metrics:
            e = r.metrics[metric]
            value = launch_value(e.values) if geomean else e.median
            if value is not None:
                out.append((value, tuple(e.values), r))
    return out


def _times(
    a_runs: Sequence[tuple[float, Any, TrialResult]],
    b_runs: Sequence[tuple[float, Any, TrialResult]],
) -> Times | None:
    """When each launch ended (its measurement's last window), where every launch has it."""
    a = tuple(r.finished_at for _, _, r in a_runs if r.finished_at is not None)
    b = tuple(r.finished_at for _, _, r in b_runs if r.finished_at is not None)
    return (a, b) if len(a) + len(b) == len(a_runs) + len(b_runs) else None


def _steady(
    av: Sequence[float], bv: Sequence[float], at: Times | None, found: Drift | None
) -> tuple[list[float], list[float]]:
    """The launch values as the disagreement guard reads them: where the machine drifted
    measurably and the interval took that trend out (``found.in_verdict``), each value moved
    to the first launch's time along the fitted line, so that a steady drift is not taken
    for launches that disagree; otherwise as measured (a lone disturbed launch, which moves
    no line significantly, is still judged on its own value)."""
    if at is None or found is None or not found.in_verdict:
        return list(av), list(bv)
    t0, per_minute = min((*at[0], *at[1])), found.per_minute.ratio

    def back(times: Sequence[float], values: Sequence[float]) -> list[float]:
        return [v / per_minute ** ((t - t0) / 60.0) for t, v in zip(times, values, strict=True)]

    return back(at[0], av), back(at[1], bv)


def _drift(
    av: Sequence[float], bv: Sequence[float], at: Times | None, interval: RatioInterval | None
) -> Drift | None:
    """The machine's drift over the launches (:func:`tuner.scoring.caveats.drift`), marked
    ``in_verdict`` where ``interval`` (the metric's) took the trend out already."""
    if at is None:
        return None
    found = drift(list(zip(at[0], av, strict=True)), list(zip(at[1], bv, strict=True)))
    if found is None or interval is None or not trend_taken_out(interval.method):
        return found
    return dataclasses.replace(found, in_verdict=True)


@dataclass(frozen=True)
class MetricComparison:
    metric: str
    label: str
    higher_is_better: bool
    a_values: tuple[float, ...]
    b_values: tuple[float, ...]
    ratio: float | None
    low: float | None
    high: float | None
    verdict: str
    # Set when that arm's launches disagree far beyond their noise: the verdict is then
    # "inconclusive: ...", unless the interval decides and the two arms' launches lie apart by
    # more than any arm's spread (tuner.scoring.caveats.beyond_disagreement).
    a_disagreement: Disagreement | None = None
    b_disagreement: Disagreement | None = None
    # How the interval was computed ("welch", "pooled", "welch: why not pooled", "pooled,
    # trend taken out", "trend taken out: ...") and its df.
    method: str = ""
    df: float | None = None
    # Both arms' launches moved steadily together over time (the machine drifted).
    drift: Drift | None = None
    times: Times | None = None  # when each launch ended, where every one has it

    @property
    def inconclusive(self) -> bool:
        return is_inconclusive(self.verdict)

    def describe(self) -> str:
        shown = ratio_text(self.ratio, self.low, self.high)
        if self.verdict == NO_VALUES:
            return f"{self.label}: {NO_VALUES} (no launch gave a value)"
        if shown is None or self.ratio is None:
            return f"{self.label}: not enough launches to compare"
        if self.inconclusive:
            return f"{self.label}: {self.verdict} (B/A {shown} is not a measurement of B against A)"
        return f"{self.label}: B/A {shown} ({(self.ratio - 1.0) * 100:+.1f} %) -> {self.verdict}"


@dataclass(frozen=True)
class Comparison:
    a: Arm
    b: Arm
    confidence: float
    metrics: tuple[MetricComparison, ...]
    a_failures: tuple[str, ...]
    b_failures: tuple[str, ...]
    # What each complete launch's server reported about itself, in launch order.
    a_servers: tuple[dict[str, Any], ...] = ()
    b_servers: tuple[dict[str, Any], ...] = ()
    # Client-bound / disturbed windows over each arm's complete launches.
    a_windows: WindowFlags = field(default_factory=WindowFlags)
    b_windows: WindowFlags = field(default_factory=WindowFlags)
    launch_value: str = "median"  # a key of LAUNCH_VALUES

    def metric(self, name: str) -> MetricComparison:
        return next(m for m in self.metrics if m.metric == name)

    @property
    def overall(self) -> str:
        """The headline verdict: output throughput, B relative to A ("inconclusive: ..." when
        the launches of a side disagree far beyond their noise)."""
        return self.metric(HEADLINE).verdict

    @property
    def window_note(self) -> str:
        """'A (defaults): 2 of 9 windows disturbed; ...'; '' when no window was flagged."""
        return arm_window_note(
            {"a": self.a_windows, "b": self.b_windows}, {"a": self.a.label, "b": self.b.label}
        )

    def overall_text(self) -> str:
        """The overall verdict as a sentence for people: with the flagged windows, if any."""
        note = self.window_note
        return f"{self.overall} ({note})" if note else self.overall

    def to_results(self) -> dict[str, Any]:
        return {
            "confidence": self.confidence,
            "a_label": self.a.label,
            "b_label": self.b.label,
            "launches": {
                "a": len(self.metric(HEADLINE).a_values),
                "b": len(self.metric(HEADLINE).b_values),
            },
            "launch_value": self.launch_value,
            "metrics": [
                {
                    "metric": m.metric,
                    "label": m.label,
                    "higher_is_better": m.higher_is_better,
                    "a": _side(m.a_values, m.times[0] if m.times else None),
                    "b": _side(m.b_values, m.times[1] if m.times else None),
                    "ratio": m.ratio,
                    "low": m.low,
                    "high": m.high,
                    "verdict": m.verdict,
                    "disagreement": {
                        "a": m.a_disagreement.to_dict() if m.a_disagreement else None,
                        "b": m.b_disagreement.to_dict() if m.b_disagreement else None,
                    },
                    **({"method": m.method, "df": m.df} if m.method else {}),
                    **({"drift": m.drift.to_dict()} if m.drift else {}),
                }
                for m in self.metrics
            ],
            "failures": {"a": list(self.a_failures), "b": list(self.b_failures)},
            "servers": {"a": list(self.a_servers), "b": list(self.b_servers)},
            "windows": {"a": self.a_windows.to_dict(), "b": self.b_windows.to_dict()},
        }

    def to_verdicts(self) -> dict[str, str]:
        return {**{m.metric: m.verdict for m in self.metrics}, "overall": self.overall}


_TURN_P50 = re.compile(r"ttft_turn(\d+)_p50_ms")


def curve_metrics(*results: TrialResult) -> tuple[tuple[str, str, bool], ...]:
    """The capacity (:data:`CAPACITY`) where every complete launch of ``results`` measured a
    load curve: what a capacity or cost study ranks by, so what its confirmation decides on."""
    complete = [r for r in results if r.status is TrialStatus.COMPLETE]
    if complete and all(CAPACITY in r.metrics for r in complete):
        return ((CAPACITY, "capacity out tok/s", True),)
    return ()


def turn_metrics(*results: TrialResult) -> tuple[tuple[str, str, bool], ...]:
    """The per-turn median TTFT metrics (``ttft_turn{k}_p50_ms``, multi-turn workloads) that
    every complete launch of ``results`` has, in turn order, as :data:`COMPARED` lists them:
    with sessions, whether later turns find their conversation cached shows there first."""
    common: set[int] | None = None
    for r in results:
        if r.status is not TrialStatus.COMPLETE:
            continue
        turns = {int(m.group(1)) for m in map(_TURN_P50.fullmatch, r.metrics) if m}
        common = turns if common is None else common & turns
    return tuple(
        (f"ttft_turn{k}_p50_ms", f"turn {k} P50 TTFT ms", False) for k in sorted(common or ())
    )


def _side(values: Sequence[float], at: Sequence[float] | None) -> dict[str, Any]:
    """A side's launch values, their median and, where every launch has one, when each ended
    (``at``, epoch seconds: what a trend over the launches' times is fitted on)."""
    side = {"median": statistics.median(values) if values else None, "values": list(values)}
    return side | ({"at": list(at)} if at is not None else {})


def compare(
    a: Arm,
    a_results: Sequence[TrialResult],
    b: Arm,
    b_results: Sequence[TrialResult],
    confidence: float = 0.95,
    *,
    interval_of: MetricInterval | None = None,
    geomean: bool = False,
    min_effect: float = MIN_EFFECT,
) -> Comparison:
    """B against A on every compared metric, from their launches.

    A metric on which either arm's launches disagree far beyond their noise gets the verdict
    "inconclusive: ..." (see :mod:`tuner.scoring.caveats`) instead of better / worse / no
    difference, unless its interval decides and every launch of one arm lies beyond every
    launch of the other by more than that disagreement (which is still reported).
    ``interval_of`` gives each metric's interval (default: Welch's); ``geomean`` takes a
    launch's geometric mean of windows as its value instead of their median. A metric of
    :data:`FLOORED` (peak memory) is better or worse only by more than ``min_effect`` (the
    smallest effect worth acting on: 0.05, a change of 5 %).
    """
    metrics = []
    both = (*a_results, *b_results)
    for name, label, higher in (*COMPARED, *curve_metrics(*both), *turn_metrics(*both)):
        a_runs, b_runs = _launches(a_results, name, geomean), _launches(b_results, name, geomean)
        av, bv = [v for v, _, _ in a_runs], [v for v, _, _ in b_runs]
        at = _times(a_runs, b_runs)
        if interval_of is None:
            interval = ratio_interval(av, bv, confidence)
        else:
            interval = interval_of(name, av, bv, confidence, at)
        drifted = _drift(av, bv, at, interval)
        ga, gb = _steady(av, bv, at, drifted)
        a_off = disagreement(ga, [w for _, w, _ in a_runs])
        b_off = disagreement(gb, [w for _, w, _ in b_runs])
        verdict = interval.verdict(higher) if interval else NOT_ENOUGH
        if not av and not bv and all(_ran(side) for side in (a_results, b_results)):
            verdict = NO_VALUES
        if interval and name in FLOORED and interval.within(min_effect):
            verdict = NO_DIFFERENCE
        sides = (("a", a, a_off), ("b", b, b_off))
        off = {side: (arm.label, d) for side, arm, d in sides if d is not None}
        decided = verdict in (BETTER, WORSE)
        outweighed = decided and beyond_disagreement(ga, gb, [d for _, d in off.values()])
        if interval and off and not outweighed:
            verdict = disagreement_verdict(label.rsplit(" ", 1)[-1], off)  # "tok/s", "ms"
        metrics.append(
            MetricComparison(
                metric=name,
                label=label,
                higher_is_better=higher,
                a_values=tuple(av),
                b_values=tuple(bv),
                ratio=interval.ratio if interval else None,
                low=interval.low if interval else None,
                high=interval.high if interval else None,
                verdict=verdict,
                a_disagreement=a_off,
                b_disagreement=b_off,
                method=interval.method if interval and interval_of is not None else "",
                df=interval.df if interval and interval_of is not None else None,
                drift=drifted,
                times=at,
            )
        )
    return Comparison(
        a=a,
        b=b,
        confidence=confidence,
        metrics=tuple(metrics),
        a_failures=failure_texts(a_results),
        b_failures=failure_texts(b_results),
        a_servers=_servers(a_results),
        b_servers=_servers(b_results),
        a_windows=_windows(a_results),
        b_windows=_windows(b_results),
        launch_value="geomean" if geomean else "median",
    )


def _windows(results: Sequence[TrialResult]) -> WindowFlags:
    return window_flags(w for r in results if r.status is TrialStatus.COMPLETE for w in r.windows)


def _servers(results: Sequence[TrialResult]) -> tuple[dict[str, Any], ...]:
    """Per complete launch: the attention backend vLLM used (and FlashAttention version), its
    KV-cache capacity, start-up time and the share of prompt tokens its prefix cache served
    while measured (vLLM's counters; None where it exposes none), so a comparison says what
    really ran."""
    return tuple(
        {
            "effective_backend": r.server.effective_backend,
            "flash_attn_version": r.server.flash_attn_version,
            "kv_cache_tokens": r.server.kv_cache_tokens,
            "startup_s": r.server.startup_s,
            "prefix_cache_hit_rate": (r.server_metrics or {}).get("prefix_cache_hit_rate"),
        }
        for r in results
        if r.status is TrialStatus.COMPLETE and r.server is not None
    )


def failure_texts(results: Sequence[TrialResult]) -> tuple[str, ...]:
    return tuple(f"{r.failure.value}: {r.failure_detail}" for r in results if r.failure is not None)
