"""B/A intervals that one outlying launch cannot drag: Hodges-Lehmann, and Welch on screened
launches.

**Hodges-Lehmann.**
On the log scale, the shift between the two sides is estimated by the median of all pairwise
differences ``log b_j - log a_i`` (the Hodges-Lehmann estimator), and its interval runs between
order statistics of those differences chosen from the exact null distribution of the
Mann-Whitney U statistic (Lehmann's construction). The coverage is exact for any continuous
noise shaped alike on both sides, so it does not lean on the log-normal assumption that
:func:`tuner.scoring.significance.ratio_interval` (Welch) needs, and a single wild launch moves
the interval by at most one order statistic.

The price: with few launches the interval cannot reach the confidence asked for. Three launches
a side give at best a two-sided 90 % interval (the smallest tail probability of U is 1/20);
four a side reach 97 %. Below that the interval is unbounded (``low = 0``, ``high = inf``): it
decides nothing, and a sequential design takes another launch.

**Screened Welch** (:func:`screened_interval`). A study knows its launch-to-launch spread (the
repeated launches measured it, ``bench.replay``). A launch further than ``k`` such
spreads from the median of its side's other launches is left out (at most one a side, and only
on a side with three launches or more, where the median says which one is odd), and Welch's
interval is taken on the rest. The interval's ``n_a``/``n_b`` count the launches kept.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from functools import cache

from tuner.scoring.sequential import Interval
from tuner.scoring.significance import RatioInterval, ratio_interval


def hodges_lehmann_interval(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95
) -> RatioInterval | None:
    """B/A with a distribution-free interval; None when either side has < 2 positive values."""
    la = [math.log(v) for v in a if v > 0 and math.isfinite(v)]
    lb = [math.log(v) for v in b if v > 0 and math.isfinite(v)]
    if len(la) < 2 or len(lb) < 2:
        return None
    diffs = sorted(y - x for x in la for y in lb)
    mid = statistics.median(diffs)
    k = _order_index(len(la), len(lb), confidence)
    if k == 0:
        return RatioInterval(math.exp(mid), 0.0, math.inf, confidence, len(la), len(lb))
    low, high = diffs[k - 1], diffs[len(diffs) - k]
    return RatioInterval(math.exp(mid), math.exp(low), math.exp(high), confidence, len(la), len(lb))


def _order_index(m: int, n: int, confidence: float) -> int:
    """The largest k with P(U <= k - 1) <= (1 - confidence) / 2 under the null (0: none)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    tail = (1.0 - confidence) / 2.0
    cdf = _u_cdf(m, n)
    k = 0
    while k < len(cdf) and cdf[k] <= tail + 1e-12:
        k += 1
    return k


@cache
def _u_cdf(m: int, n: int) -> tuple[float, ...]:
    """P(U <= u) for u = 0 .. m*n, U the Mann-Whitney statistic of samples of m and n."""
    total = math.comb(m + n, m)
    return tuple(c / total for c in itertools.accumulate(_u_counts(m, n)))


@cache
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many arrangements give each U = 0 .. m*n (the recursion on the largest value)."""
    if m == 0 or n == 0:
        return (1,)
    # The largest of all m + n values belongs to the first sample (adding n to U) or not.
    with_first = _u_counts(m - 1, n)
    without = _u_counts(m, n - 1)
    out = [0] * (m * n + 1)
    for u, c in enumerate(with_first):
        out[u + n] += c
    for u, c in enumerate(without):
        out[u] += c
    return tuple(out)


def screened_interval(sigma: float, k: float = 3.0) -> Interval:
    """Welch's interval after leaving out an outlying launch a side (see the module
    docstring); ``sigma``: the log-scale launch-to-launch spread, ``k``: how many of it."""
    if not sigma > 0 or not k > 0:
        raise ValueError("the spread and k must be positive")

    def interval(
        a: Sequence[float], b: Sequence[float], confidence: float = 0.95
    ) -> RatioInterval | None:
        return ratio_interval(screen(a, sigma, k), screen(b, sigma, k), confidence)

    return interval


def screen(values: Sequence[float], sigma: float, k: float) -> list[float]:
    """``values`` without the one furthest from the median of the others, when it lies more
    than ``k * sigma`` away on the log scale (three values or more; the order kept)."""
    pos = [v for v in values if v > 0 and math.isfinite(v)]
    if len(pos) < 3:
        return pos
    logs = [math.log(v) for v in pos]
    gaps = [abs(x - statistics.median(logs[:i] + logs[i + 1 :])) for i, x in enumerate(logs)]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    if gaps[worst] <= k * sigma:
        return pos
    return pos[:worst] + pos[worst + 1 :]
