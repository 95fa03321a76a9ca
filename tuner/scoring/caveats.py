"""What keeps a measurement from being read at face value, defined once for every report.

**Launches that disagree far beyond the noise.** A comparison takes each launch's median as
one value and puts a Welch interval on them (:mod:`tuner.scoring.significance`). That interval
assumes the launches of one configuration scatter like ordinary launch-to-launch noise. When one of
them is off by a factor (another process took the CPU during it: on CPU the defaults gave 462
and 2,363 tok/s in two launches), the interval becomes "+282.5 % [-99.1, +163935.7]": a number
that looks like information and is none. :func:`disagreement` detects it, per arm and metric:

    max/min of the arm's launch values  >  max(DISAGREE_FLOOR, within ** DISAGREE_POWER)

where ``within`` is the typical (median over launches) max/min of one launch's window values.

- ``DISAGREE_FLOOR = 2``: on the H200, launches of one configuration differed by about +-20 %
  (max/min about 1.5) against +-12 % between the windows of one server. A factor 2 is a third
  beyond the widest ordinary launch spread; with a log-scale launch spread of 0.1 (+-20 % at
  two sigma), three launches reach it far less than once in a million.
- ``DISAGREE_POWER = 3`` (in log terms: the launch spread is more than 3 times the window
  spread): on the H200 the launch spread was about 1.7 times the window spread in log terms
  (log 1.5 / log 1.27), so 3 leaves the same margin again. A metric that is noisy within a launch
  (a P99 over a few dozen requests whose windows differ by x1.5) is allowed launches x3.4
  apart before they are called inconsistent, where the floor alone would flag it needlessly.
- The *median* over launches, not the widest launch: a disturbed launch often has scattered
  windows too, and must not excuse itself. A launch with one window, or a metric without
  windows (peak memory), contributes no window spread: the floor alone applies.

Where the machine drifted measurably (:func:`drift` shows) and the verdict's interval took
that trend out (``Drift.in_verdict``), the rule reads each launch's value moved along the
fitted line to the first launch's time (:func:`tuner.abtest.compare.compare`): a steady fall
of 8 % a launch spreads twelve launches x2.6 as measured, though they agree about the line. A
lone disturbed launch on a steady machine moves no line significantly, so it is still judged
on its own value (``bench/README.md``: 0.3 % of x1.2 comparisons inconclusive at 8 % a launch,
against 39.5 % on the launches as measured; a launch at x0.6 on a steady machine as often
flagged as before).

**Windows that were client-bound or disturbed** (:class:`tuner.domain.ClientHealth`): tuner's
own load generator was saturated (the number is the client's floor, not the server's), or it
was short of CPU (the server's own processes or others took it; its timestamps are late) or
another process used the GPU during the window. :class:`WindowFlags` counts them for a
launch or an arm, so that every report says "N of M windows client-bound / disturbed".

**A machine that drifts during a comparison.** Interleaving (A B, B A, ...) shares a slow change
of the machine between the arms, but its launches then scatter more than launch noise (and
where one arm launched earlier on average, it carries less of the change). On an H100
(2026-12-06, ERNIE-0.3B at 256 streams, docs/results/plan-h200.md §13) both arms' output fell
from launch to launch, the defaults 16,624 → 10,880 tok/s over 4 launches, and Welch's interval
could not decide. :func:`drift` fits each launch's value (log) to a straight line over the
time the launch ended (minutes; the time, not the launch's rank, so that the launches of other
arms and failed ones leave no gap) with one level per arm, by least squares; where the line's
slope is significant at 95 % it reports the change a minute and B/A with that trend taken out,
t intervals on the fit's residual degrees of freedom (launches - 3), whose coverage under a
linear drift ``tests/unit/test_caveats.py`` simulates. The same fit (:func:`trend_fit`) gives
the decision design's interval by default (:func:`tuner.scoring.noise.trend_ratio_interval`);
the caveat then says the verdict has the trend taken out (``Drift.in_verdict``), and is
otherwise a caveat, not the verdict.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.domain import WindowMetrics
from tuner.domain.measurements import number
from tuner.scoring.significance import INCONCLUSIVE, RatioInterval, t_interval

DISAGREE_FLOOR = 2.0
DISAGREE_POWER = 3.0

CLIENT_BOUND_MEANS = (
    "tuner's load generator was saturated, so those numbers are the client's floor, "
    "not the server's"
)
DISTURBED_MEANS = (
    "tuner's load generator was short of CPU (the server's own processes or others took it) "
    "or another process used the GPU during them"
)


def noise_bound(within: float) -> float:
    """The largest max/min of one configuration's launches still taken as noise, given the
    typical max/min ``within`` of one launch's windows (see the module docstring)."""
    return max(DISAGREE_FLOOR, float(max(within, 1.0) ** DISAGREE_POWER))


@dataclass(frozen=True)
class Disagreement:
    """An arm's launches on one metric: smallest and largest launch value, the typical window
    spread within a launch (max/min, 1.0 when unknown) and how many launches there were."""

    low: float
    high: float
    within: float
    launches: int

    @property
    def ratio(self) -> float:
        return self.high / self.low

    @property
    def bound(self) -> float:
        return noise_bound(self.within)

    def text(self, unit: str) -> str:
        """'462 … 2,363 tok/s, x5.1'"""
        unit = f" {unit}" if unit else ""
        return f"{number(self.low)} … {number(self.high)}{unit}, x{self.ratio:.1f}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "low": self.low,
            "high": self.high,
            "ratio": self.ratio,
            "within": self.within,
            "bound": self.bound,
            "launches": self.launches,
        }


def disagreement(
    launches: Sequence[float], windows: Iterable[Sequence[float]] = ()
) -> Disagreement | None:
    """The launches of one configuration when they disagree far beyond the noise, else None.

    ``launches``: one value per launch (its median over windows); ``windows``: per launch, its
    window values (any order, any count; empty when unknown). Values that are not positive and
    finite are left out, as :func:`tuner.scoring.significance.ratio_interval` leaves them out; fewer
    than two launches cannot disagree.
    """
    values = [v for v in launches if v > 0 and math.isfinite(v)]
    if len(values) < 2:
        return None
    spreads = []
    for ws in windows:
        pos = [w for w in ws if w > 0 and math.isfinite(w)]
        if len(pos) >= 2:
            spreads.append(max(pos) / min(pos))
    within = statistics.median(spreads) if spreads else 1.0
    found = Disagreement(min(values), max(values), within, len(values))
    return found if found.ratio > found.bound else None


def beyond_disagreement(
    a: Sequence[float], b: Sequence[float], disagreements: Iterable[Disagreement]
) -> bool:
    """Whether every launch of one arm lies beyond every launch of the other by more than the
    widest of ``disagreements`` and of either arm's own spread (max/min): what made an arm's
    launches disagree, x2 say, cannot have made a x10 difference between the closest launches
    of the two (a busy machine's ``max_num_seqs=1`` against the defaults: 23-47 tok/s against
    418-458)."""
    a = [v for v in a if v > 0 and math.isfinite(v)]
    b = [v for v in b if v > 0 and math.isfinite(v)]
    ratios = [d.ratio for d in disagreements]
    if not a or not b or not ratios:
        return False
    # An arm that was not flagged may still spread up to its own bound: its spread counts too.
    widest = max(*ratios, max(a) / min(a), max(b) / min(b))
    return max(min(a) / max(b), min(b) / max(a)) > widest


def disagreement_verdict(unit: str, sides: Mapping[str, tuple[str, Disagreement]]) -> str:
    """The verdict of a metric whose launches disagree: 'inconclusive: launches of A (defaults)
    disagree (462 … 2,363 tok/s, x5.1) far beyond their within-launch noise (x2.0 at most
    expected)'. ``sides``: "a"/"b" -> (arm label, its disagreement), at least one."""
    clauses = [
        f"launches of {arm_name(side, label)} disagree ({d.text(unit)}) far beyond their "
        f"within-launch noise (x{d.bound:.1f} at most expected)"
        for side, (label, d) in sorted(sides.items())
    ]
    return f"{INCONCLUSIVE}: " + "; ".join(clauses)


DRIFT_CONFIDENCE = 0.95  # a caveat's level, whatever the decision's per-look level


@dataclass(frozen=True)
class Drift:
    """A steady change of the machine over a comparison's launches: ``per_minute``, the
    metric's change from one minute to the next on both sides (x0.956: 4.4 % less a minute),
    and ``adjusted``, B/A with that straight-line trend taken out, each with its interval (a
    t interval on ``launches - 3`` degrees of freedom). ``in_verdict``: the comparison's own
    interval took the trend out already (:attr:`tuner.abtest.decide.Design.trend`), so the
    drift is told, not left in the verdict."""

    per_minute: RatioInterval
    adjusted: RatioInterval
    in_verdict: bool = False

    def summary(self, label: str) -> str:
        """'output tok/s x0.956 [0.927, 0.987] a minute on both sides; B/A with it taken out
        x1.377 [1.045, 1.813] (95 %, 5 df; not the verdict)', or where the verdict took it out
        '...; the verdict's interval has it taken out'"""
        p, a = self.per_minute, self.adjusted
        head = f"{label} x{p.ratio:.3f} [{p.low:.3f}, {p.high:.3f}] a minute on both sides"
        if self.in_verdict:
            return f"{head} ({p.confidence * 100:.0f} %); the verdict's interval has it taken out"
        return (
            f"{head}; B/A with it taken out x{a.ratio:.3f} [{a.low:.3f}, {a.high:.3f}] "
            f"({p.confidence * 100:.0f} %, {p.df:.0f} df; not the verdict)"
        )

    def text(self, label: str) -> str:
        """The sentence a comparison's report prints: what drifted, what it does to the
        interval, and what to do."""
        p, a = self.per_minute, self.adjusted
        way = "fell" if p.ratio < 1.0 else "rose"
        level = f"{p.confidence * 100:.0f} %"
        head = (
            f"drift: {label} {way} {abs(p.ratio - 1.0) * 100:.2g} % a minute on both sides "
            f"while the comparison ran (x{p.ratio:.3f} [{p.low:.3f}, {p.high:.3f}], {level})"
        )
        if self.in_verdict:
            return (
                f"{head}: the interval above has this straight-line trend taken out; a change "
                "that was not steady (a step, a curve) is not, so compare again on a steadier "
                "machine where the launches above do not follow a line"
            )
        return (
            f"{head}: the interval above holds the machine's change as well as the "
            "configurations' difference. B/A with a straight-line trend taken out: "
            f"x{a.ratio:.3f} [{a.low:.3f}, {a.high:.3f}] ({level}, {a.df:.0f} df); not the "
            "verdict: compare again on a steadier machine to decide"
        )

    def to_dict(self) -> dict[str, Any]:
        return (
            {
                key: {"ratio": i.ratio, "low": i.low, "high": i.high}
                for key, i in (("per_minute", self.per_minute), ("adjusted", self.adjusted))
            }
            | {"confidence": self.per_minute.confidence, "df": self.per_minute.df}
            | ({"in_verdict": True} if self.in_verdict else {})
        )

    @classmethod
    def from_dict(cls, told: Any) -> Drift | None:
        """A stored :meth:`to_dict`; None where it is not one."""
        try:
            level, df = float(told["confidence"]), float(told["df"])
            per, adjusted = (
                RatioInterval(*_floats(told[k]), level, 0, 0, k, df)
                for k in ("per_minute", "adjusted")
            )
        except (KeyError, TypeError, ValueError):
            return None
        return cls(per, adjusted, told.get("in_verdict") is True)


def _floats(stored: Any) -> tuple[float, float, float]:
    """A stored interval's ratio, low and high."""
    return float(stored["ratio"]), float(stored["low"]), float(stored["high"])


@dataclass(frozen=True)
class TrendFit:
    """The drift model fitted to a comparison's launches: each launch's log value on one level
    a side and one straight line over time, by least squares. ``coef`` is (A's level, log B/A,
    the change a minute), ``unscaled`` the inverse of X'X (the coefficients' covariance is
    ``rss / df`` times it), ``df`` the residual degrees of freedom (launches - 3)."""

    coef: tuple[float, float, float]
    unscaled: tuple[float, float, float]  # the diagonal of inv(X'X)
    rss: float
    df: int
    n_a: int
    n_b: int

    def interval(
        self, i: int, var: float, df: float, confidence: float, method: str
    ) -> RatioInterval:
        """Coefficient ``i`` (1: B/A, 2: a minute's change) as a ratio with its t interval, for
        a residual variance ``var`` on ``df`` degrees of freedom (the fit's own, or pooled)."""
        se = math.sqrt(max(var * self.unscaled[i], 0.0))
        return t_interval(self.coef[i], se, df, confidence, self.n_a, self.n_b, method)


def trend_fit(
    a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]
) -> TrendFit | None:
    """The drift model (:class:`TrendFit`) on ``a`` and ``b``, (time in seconds, value) per
    launch; values that are not positive and finite are left out. None where it cannot be
    fitted: fewer than four launches or two a side, launches within a minute (fakes, not a
    GPU: no trend over time to tell), or a fit that leaves no residual (values exactly
    constant per side)."""
    points = sorted(
        (at, side, math.log(v))
        for side, launches in ((0.0, a), (1.0, b))
        for at, v in launches
        if v > 0 and math.isfinite(v)
    )
    n_b = sum(1 for _, side, _ in points if side)
    n_a = len(points) - n_b
    if len(points) < 4 or min(n_a, n_b) < 2:
        return None
    minutes = [(at - points[0][0]) / 60.0 for at, _, _ in points]
    if minutes[-1] < 1.0:
        return None
    x = np.column_stack([np.ones(len(points)), [p[1] for p in points], minutes])
    y = np.array([p[2] for p in points])
    coef, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ coef
    rss = float(residual @ residual)
    if rank < 3 or rss <= 1e-12 * len(points):
        return None
    unscaled = np.diag(np.linalg.inv(x.T @ x))
    return TrendFit(
        (float(coef[0]), float(coef[1]), float(coef[2])),
        (float(unscaled[0]), float(unscaled[1]), float(unscaled[2])),
        rss,
        len(points) - 3,
        n_a,
        n_b,
    )


def drift(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> Drift | None:
    """The drift of a comparison (see the module docstring), or None where none shows: the
    slope's interval at :data:`DRIFT_CONFIDENCE` holds no change, fewer than five launches, or
    no fit (:func:`trend_fit`). ``a``, ``b``: (time in seconds, value) per launch. The time
    axis, not the launches' ranks, so that the launches of other arms (a confirmation's several
    candidates) and failed ones leave no gap in it."""
    fit = trend_fit(a, b)
    if fit is None or fit.df < 2:
        return None
    var = fit.rss / fit.df
    trend = fit.interval(
        2, var, fit.df, DRIFT_CONFIDENCE, "straight-line trend over the launches' times"
    )
    if not trend.significant:
        return None
    return Drift(
        trend, fit.interval(1, var, fit.df, DRIFT_CONFIDENCE, "B/A with the trend taken out")
    )


@dataclass(frozen=True)
class WindowFlags:
    """How many of ``windows`` measurement windows were client-bound, and how many disturbed
    (a window may be both)."""

    windows: int = 0
    client_bound: int = 0
    disturbed: int = 0

    @property
    def any(self) -> bool:
        return bool(self.client_bound or self.disturbed)

    def __add__(self, other: WindowFlags) -> WindowFlags:
        return WindowFlags(
            self.windows + other.windows,
            self.client_bound + other.client_bound,
            self.disturbed + other.disturbed,
        )

    def text(self) -> str:
        """'2 of 9 windows client-bound, 1 of 9 disturbed'; '' when none was either."""
        parts = []
        if self.client_bound:
            parts.append(f"{self.client_bound} of {self.windows} windows client-bound")
        if self.disturbed:
            noun = "" if parts else " windows"
            parts.append(f"{self.disturbed} of {self.windows}{noun} disturbed")
        return ", ".join(parts)

    def explained(self) -> str:
        """:meth:`text` with what it means; '' when none was either."""
        if not self.any:
            return ""
        means = [CLIENT_BOUND_MEANS] if self.client_bound else []
        means += [DISTURBED_MEANS] if self.disturbed else []
        return f"{self.text()} ({'; '.join(means)})"

    def short(self) -> str:
        """'2/3 client-bound, 1/3 disturbed' for a table cell; '' when none was either."""
        counts = (("client-bound", self.client_bound), ("disturbed", self.disturbed))
        return ", ".join(f"{n}/{self.windows} {what}" for what, n in counts if n)

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> WindowFlags:
        """The stored counts back; zeros for anything missing or malformed (older rows)."""
        if not isinstance(data, Mapping):
            return cls()

        def count(key: str) -> int:
            v = data.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0

        return cls(count("windows"), count("client_bound"), count("disturbed"))


def window_flags(windows: Iterable[WindowMetrics]) -> WindowFlags:
    """The counts over ``windows`` (every load point's windows of a launch, or several)."""
    ws = list(windows)
    return WindowFlags(len(ws), sum(w.client_bound for w in ws), sum(w.disturbed for w in ws))


def arm_window_note(flags: Mapping[str, WindowFlags], labels: Mapping[str, str]) -> str:
    """'A (defaults): 2 of 9 windows disturbed; B (#3): ...' for the arms with flagged windows
    (``flags`` and ``labels`` keyed "a"/"b"); '' when none has any."""
    return "; ".join(
        f"{arm_name(side, labels.get(side, ''))}: {f.text()}"
        for side in ("a", "b")
        if (f := flags.get(side)) is not None and f.any
    )


def stored_window_note(results: Any) -> str:
    """:func:`arm_window_note` of a stored comparison's ``results`` JSON ('' for rows stored
    before tuner counted windows, or without flagged windows)."""
    stored = results.get("windows") if isinstance(results, Mapping) else None
    if not isinstance(stored, Mapping):
        return ""
    flags = {side: WindowFlags.from_dict(stored.get(side)) for side in ("a", "b")}
    labels = {side: str(results.get(f"{side}_label") or "") for side in ("a", "b")}
    return arm_window_note(flags, labels)


def stored_drift(results: Any) -> tuple[str, Drift] | None:
    """The drift a stored comparison's ``results`` JSON told for the metric its decision
    stopped on (the output throughput where it names none), with that metric's label; None
    where it told none (rows stored before tuner looked for one)."""
    if not isinstance(results, Mapping):
        return None
    decision = results.get("decision")
    metric = decision.get("metric") if isinstance(decision, Mapping) else None
    for e in results.get("metrics") or ():
        if isinstance(e, Mapping) and e.get("metric") == (metric or "output_throughput"):
            found = Drift.from_dict(e.get("drift"))
            return None if found is None else (str(e.get("label") or e["metric"]), found)
    return None


def stored_drift_note(results: Any) -> str:
    """:func:`stored_drift` as a note: 'the machine drifted: output tok/s x0.956 ... a minute
    ...'; '' where there is none."""
    found = stored_drift(results)
    return "" if found is None else f"the machine drifted: {found[1].summary(found[0])}"


def arm_name(side: str, label: str) -> str:
    """'A (defaults)', or just 'A' when the label says nothing more."""
    letter = side.upper()
    return f"{letter} ({label})" if label and label != letter else letter
