"""Sequential confirmation: launch A and B in turns until the interval of B/A decides.

After every pair of launches, from ``first`` a side on, the comparison looks at its interval
(Welch's by default; any :data:`Interval`, such as
:func:`bench.robust.hodges_lehmann_interval` or
:func:`tuner.scoring.noise.pooled_ratio_interval`):

- above or below 1: B is **better** or **worse**, as the metric's direction says;
- inside ``[1 / (1 + margin), 1 + margin]``: the two are **equivalent** within the margin;
- a half-width of at most ``min_effect``, the smallest difference worth acting on: "no
  significant difference", stated with its tight interval (reason ``precise``);
- otherwise another pair, until ``cap`` a side: "no significant difference" (``budget``).

The decision design of ``tuner compare``, ``tuner verify-claims`` and a study's confirmation
(:meth:`SequentialPlan.decision`) is this without the equivalence margin.

*Why a Pocock boundary.* Looking several times raises the chance of a false decision, so each
look's confidence is set above a fixed design's. Of an alpha-spending boundary
(O'Brien-Fleming-like: strict early, lenient late), a constant one (Pocock) and an anytime-valid
interval: a comparison of vLLM configurations is worth stopping early when the effect is large,
and the looks are few (2-8). Pocock's boundary spends the error evenly and gives the best
expected number of launches for large effects at a small maximum, where O'Brien-Fleming would
almost never stop at the first looks; anytime-valid intervals are 1.3-1.6 times wider at these
sizes. :func:`pocock_confidence` computes it for the actual schedule ``first, ..., cap``: the
standardised differences at the looks are jointly normal with correlation ``sqrt(n_j / n_k)``,
and ``P(max_k |Z_k| < c) = 1 - alpha`` is solved by integrating the running sum's density
from look to look (Armitage, McPherson and Rowe's recursion, as group-sequential software does);
each look's interval is a t interval at ``2 Phi(c) - 1`` (the usual group-sequential approximation),
where its variance borrows a noise profile's many degrees of freedom. An interval on the
comparison's own few launches alone (t at 3-9 df) has heavier tails, so the decision design
takes it at the level simulated for those statistics (:func:`pocock_confidence_own`).
Stopping for precision depends on the variance only, so it adds no false decisions, and fewer
looks than planned only lower the error. ``bench/decision_replay.py`` checks the
false-decision rate and the coverage by simulation on the H200 launches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy import integrate, optimize, stats

from tuner.scoring.significance import NO_DIFFERENCE, RatioInterval, ratio_interval

EQUIVALENT = "equivalent"
CONTINUE = "continue"
# Why a comparison stopped (Step.reason).
SIGNIFICANT = "significant"  # the interval excludes 1
PRECISE = "precise"  # the half-width reached the smallest effect worth acting on
BUDGET = "budget"  # the launches a side were spent
MIN_EFFECT = 0.05  # the default smallest difference worth acting on: 5 %
# A sequential design's launch budget a side, at most: its bounds are simulated before the
# first launch, and at 100 a side that took 50 s and half a GB, for a design of GPU-hours.
MAX_LAUNCHES = 40

Interval = Callable[[Sequence[float], Sequence[float], float], RatioInterval | None]


@dataclass(frozen=True)
class SequentialPlan:
    first: int = 2  # launches a side at the first look (an interval needs two)
    cap: int = 6  # launches a side at most
    confidence: float = 0.95  # of the interval at each look
    # equivalence: B/A within [1 / (1 + margin), 1 + margin]; None: no such stop
    margin: float | None = 0.10
    higher_is_better: bool = True
    # Precision: stop with "no significant difference" once the half-width is at most this.
    min_effect: float | None = None
    # The overall error rate the per-look confidence was set for (None: not set for looks).
    alpha: float | None = None
    # The per-look confidence of an interval that rests on the comparison's own launches alone
    # (t at the trend fit's few df: :func:`pocock_confidence_own`); None: ``confidence``.
    own_confidence: float | None = None

    def __post_init__(self) -> None:
        if not 2 <= self.first <= self.cap:
            raise ValueError("need 2 <= first <= cap launches a side")
        if not 0.0 < self.confidence < 1.0 or (self.margin is not None and self.margin < 0):
            raise ValueError("confidence must be in (0, 1) and the margin not negative")
        if self.min_effect is not None and not self.min_effect > 0:
            raise ValueError("the smallest effect worth acting on must be positive")

    @classmethod
    def decision(
        cls,
        first: int = 3,
        cap: int = 6,
        *,
        alpha: float = 0.05,
        min_effect: float | None = MIN_EFFECT,
        own: bool = True,
    ) -> SequentialPlan:
        """The decision design (module docstring): looks from ``first`` to ``cap`` a side with
        a Pocock boundary for an overall false-decision rate of ``alpha``; ``own``: with the
        level of an interval on the comparison's own launches alone (0.3 s to simulate; only a
        trend fit reads it)."""
        if not 0.0 < alpha < 1.0:
            raise ValueError("alpha must be in (0, 1)")
        if not 2 <= first <= cap:
            raise ValueError("need 2 <= first <= cap launches a side")
        looks = tuple(range(first, cap + 1))
        return cls(
            first=first,
            cap=cap,
            confidence=pocock_confidence(looks, alpha),
            margin=None,
            min_effect=min_effect,
            alpha=alpha,
            own_confidence=pocock_confidence_own(looks, alpha) if own else None,
        )

    @property
    def looks(self) -> int:
        return self.cap - self.first + 1


@cache
def pocock_confidence(looks: tuple[int, ...], alpha: float = 0.05) -> float:
    """The per-look confidence of a constant (Pocock) boundary for looks at ``looks`` launches
    a side, so that the chance of any look's interval excluding a true ratio is ``alpha``
    (standardised differences jointly normal with correlation sqrt(n_j / n_k)). To about 1e-9
    in milliseconds for schedules of up to 20 looks or so (:func:`_inside_pocock`; looks far
    apart in number, such as 1000 and 1001, lose digits)."""
    if not looks or any(n < 1 for n in looks) or list(looks) != sorted(set(looks)):
        raise ValueError("looks must be increasing launch counts")
    if len(looks) == 1:
        return 1.0 - alpha
    z = float(stats.norm.ppf(1.0 - alpha / 2.0))
    c = optimize.brentq(lambda c: 1.0 - _inside_pocock(c, looks) - alpha, z, z + 3.0, xtol=1e-10)
    return 2.0 * float(stats.norm.cdf(c)) - 1.0


def _inside_pocock(c: float, looks: tuple[int, ...], points: int = 401) -> float:
    """``P(|Z_k| < c at every look)``: the sum of ``n`` standard normal differences is a random
    walk, so its density at a look is the density at the one before, kept inside that look's
    bounds ``|S| < c sqrt(n)``, convolved with a normal step of the launches in between;
    Simpson's rule (:func:`scipy.integrate.simpson`) on ``points`` (odd) points a look. 401
    points agree with 801 to 1e-9 up to 20 looks."""
    before: tuple[int, np.ndarray, np.ndarray] | None = None  # the last look's n, grid, density
    for n in looks:
        s = np.linspace(-c * math.sqrt(n), c * math.sqrt(n), points)
        if before is None:
            density = np.exp(-0.5 * s**2 / n) / math.sqrt(2.0 * math.pi * n)
        else:
            m, grid, inside = before
            kernel = np.exp(-0.5 * (s[:, None] - grid[None, :]) ** 2 / (n - m))
            step = integrate.simpson(kernel * inside, x=grid, axis=1)
            density = step / math.sqrt(2.0 * math.pi * (n - m))
        before = (n, s, density)
    assert before is not None  # looks is not empty
    return float(integrate.simpson(before[2], x=before[1]))


@cache
def pocock_confidence_own(looks: tuple[int, ...], alpha: float = 0.05) -> float:
    """The per-look confidence of the same constant boundary for intervals whose variance is the
    comparison's own alone: a straight-line trend fitted over the launches (a level a side and
    one slope: :func:`tuner.scoring.noise.trend_ratio_interval` without a profile, or with one
    its residuals contradict), t at ``2n - 3`` df at ``n`` launches a side.
    :func:`pocock_confidence` takes the looks' statistics as normal; with 3-9 df their tails
    are heavier, and that level lets through 5.8 % of no-differences for looks at 3-6 a side
    (5.5 % at 3-4) where 5 % was asked. Each t statistic is exactly t-distributed whatever the
    launch times; how the looks' statistics go together depends on the order and times a
    little, so it is simulated for the decision's order (A B, B A, A B, ...:
    :func:`tuner.abtest.compare.run_interleaved`) at even times: 1,000,000 comparisons with no
    difference, seeded (one level for one schedule, every call; its Monte Carlo SD is about
    0.015 points at two looks, 0.005 at four), and the nominal level at which ``alpha`` of
    them exclude 1 at some look: the ``alpha`` quantile of each comparison's smallest p-value
    over its looks."""
    if not looks or looks[0] < 2 or list(looks) != sorted(set(looks)):
        raise ValueError("looks must be increasing launch counts from two a side")
    if len(looks) == 1:
        return 1.0 - alpha
    cap = looks[-1]
    side = np.array([(r + i) % 2 for r in range(cap) for i in range(2)], dtype=float)
    minutes = np.arange(2.0 * cap)
    rng = np.random.default_rng(0)
    smallest = []  # per comparison: its smallest two-sided p-value of B - A over the looks
    for _ in range(10):  # in chunks of 100,000, to keep the memory small
        noise = rng.standard_normal((100_000, 2 * cap))
        p = np.ones(len(noise))
        for n in looks:
            m = 2 * n
            x = np.column_stack([np.ones(m), side[:m], minutes[:m]])
            inverse = np.linalg.inv(x.T @ x)
            y, basis = noise[:, :m], np.linalg.qr(x)[0]
            fitted = y @ basis  # the residual sum of squares is |y|^2 less its fitted part's
            rss = np.einsum("ij,ij->i", y, y) - np.einsum("ij,ij->i", fitted, fitted)
            t = np.abs(y @ (inverse @ x.T)[1]) / np.sqrt(rss / (m - 3) * inverse[1, 1])
            near = t > stats.t.isf(alpha / 2.0, m - 3)  # p below alpha: all the quantile reads
            p[near] = np.minimum(p[near], 2.0 * stats.t.sf(t[near], m - 3))
        smallest.append(p)
    return 1.0 - float(np.quantile(np.concatenate(smallest), alpha))


@dataclass(frozen=True)
class Step:
    """The verdict after a look; ``continue`` asks for one more launch of each side."""

    verdict: str
    interval: RatioInterval | None
    n_a: int
    n_b: int
    reason: str = ""  # significant / precise / equivalent / budget; "" while continuing

    @property
    def done(self) -> bool:
        return self.verdict != CONTINUE


def next_step(
    a: Sequence[float],
    b: Sequence[float],
    plan: SequentialPlan,
    interval: Interval = ratio_interval,
) -> Step:
    """The verdict on launches ``a`` (reference) and ``b`` so far (see the module docstring)."""
    n = min(len(a), len(b))
    if n < plan.first:
        return Step(CONTINUE, None, len(a), len(b))
    found = interval(a, b, plan.confidence)
    at_cap = n >= plan.cap
    if found is None:
        return _budget(at_cap, None, a, b)
    if found.significant:
        return Step(found.verdict(plan.higher_is_better), found, len(a), len(b), SIGNIFICANT)
    if plan.margin is not None and found.within(plan.margin):
        return Step(EQUIVALENT, found, len(a), len(b), EQUIVALENT)
    if plan.min_effect is not None and found.half_width <= plan.min_effect:
        return Step(NO_DIFFERENCE, found, len(a), len(b), PRECISE)
    return _budget(at_cap, found, a, b)


def _budget(
    at_cap: bool, found: RatioInterval | None, a: Sequence[float], b: Sequence[float]
) -> Step:
    if at_cap:
        return Step(NO_DIFFERENCE, found, len(a), len(b), BUDGET)
    return Step(CONTINUE, found, len(a), len(b))


def launches_for(half_width: float, sd: float, confidence: float) -> int:
    """Launches a side for a B/A interval no wider than ``x(1 + half_width)`` either way at
    ``confidence``, when a launch's value has SD ``sd`` on the log scale (taken as known)."""
    if not half_width > 0 or not sd >= 0:
        raise ValueError("the half-width must be positive and the SD not negative")
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    return max(2, math.ceil(2.0 * (z * sd / math.log1p(half_width)) ** 2))


def half_width_at(per_side: int, sd: float, confidence: float) -> float:
    """The inverse of :func:`launches_for`: the half-width (``x(1 + h)`` either way) of a B/A
    interval with ``per_side`` launches a side when a launch's value has SD ``sd`` (known)."""
    if per_side < 1 or not sd >= 0:
        raise ValueError("need a launch a side at least and an SD not negative")
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    return math.expm1(z * sd * math.sqrt(2.0 / per_side))


def run_sequential(
    launch: Callable[[str], float],
    plan: SequentialPlan,
    interval: Interval = ratio_interval,
) -> Step:
    """Launch ``"a"`` and ``"b"`` in turns (``launch`` returns one launch's value) until
    :func:`next_step` decides; the step says how many launches each side took."""
    a: list[float] = []
    b: list[float] = []
    while True:
        a.append(launch("a"))
        b.append(launch("b"))
        step = next_step(a, b, plan, interval)
        if step.done:
            return step
