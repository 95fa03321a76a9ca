"""Is B different from A? Ratios of metrics across server launches, with intervals.

Each launch of a configuration gives one value per metric (the median over its measurement
windows). Launch-to-launch spread is the noise that matters (the H200 showed +-20 % across
launches against +-12 % within one server), so launches, not windows, are the unit of
replication here.

The ratio B/A is estimated on the log scale: ``exp(mean(log b) - mean(log a))`` (a ratio of
geometric means), with a Welch t interval on the difference of log means. Welch's interval keeps
close to its nominal coverage with as few as three launches a side for log-normal noise, where a
bootstrap of three values would be far too narrow; tests check its coverage by simulation.

When the launches of one side disagree far beyond their noise
(:func:`tuner.scoring.caveats.disagreement`), the interval means nothing and the verdict is a
sentence beginning "inconclusive" instead (:func:`is_inconclusive`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

BETTER = "better"
WORSE = "worse"
NO_DIFFERENCE = "no significant difference"
# The first word of a verdict whose launches disagree (the rest of the sentence says how).
INCONCLUSIVE = "inconclusive"


def is_inconclusive(verdict: object) -> bool:
    """Whether a (stored) verdict text is an "inconclusive: ..." one."""
    return isinstance(verdict, str) and verdict.startswith(INCONCLUSIVE)


@dataclass(frozen=True)
class RatioInterval:
    """B/A with its interval at ``confidence``; ``n_a``/``n_b`` launches went into it."""

    ratio: float
    low: float
    high: float
    confidence: float
    n_a: int
    n_b: int
    # How it was computed ("welch", "pooled", "welch: why the profile was not used", ...) and
    # the degrees of freedom of its t quantile (None: not a t interval).
    method: str = "welch"
    df: float | None = None

    @property
    def significant(self) -> bool:
        return self.low > 1.0 or self.high < 1.0

    def verdict(self, higher_is_better: bool) -> str:
        """Better or worse only when the whole interval lies on one side of 1."""
        if not self.significant:
            return NO_DIFFERENCE
        up = self.low > 1.0
        return BETTER if up == higher_is_better else WORSE

    def within(self, effect: float) -> bool:
        """Whether the whole interval lies within a change of ``effect`` either way, in
        ``[1 / (1 + effect), 1 + effect]``: any difference it allows is smaller than that."""
        return 1.0 / (1.0 + effect) <= self.low and self.high <= 1.0 + effect

    def percent(self) -> str:
        """'+12.3 % [+4.0, +21.2]' style text of the change."""

        def pct(x: float) -> str:
            return f"{(x - 1.0) * 100:+.1f}"

        return f"{pct(self.ratio)} % [{pct(self.low)}, {pct(self.high)}]"

    @property
    def half_width(self) -> float:
        """Half the interval's width on the log scale, as a factor minus one: 0.05 means the
        interval runs from ratio / 1.05 to ratio * 1.05."""
        if self.low <= 0 or not math.isfinite(self.high):
            return math.inf
        return math.expm1((math.log(self.high) - math.log(self.low)) / 2.0)


def logs(values: Sequence[float]) -> list[float]:
    """The logs of the positive, finite values (the others cannot be put on the log scale)."""
    return [math.log(v) for v in values if v > 0 and math.isfinite(v)]


def ratio_interval(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95
) -> RatioInterval | None:
    """Welch interval of B/A on the log scale; None when either side has < 2 positive values.

    Values that are not positive (a metric that was zero) cannot be put on the log scale and
    are dropped; with fewer than two left there is no interval to give.
    """
    la, lb = logs(a), logs(b)
    if len(la) < 2 or len(lb) < 2:
        return None
    diff, se, df = welch(la, lb)
    if se == 0.0:
        ratio = math.exp(diff)
        return RatioInterval(ratio, ratio, ratio, confidence, len(la), len(lb))
    return t_interval(diff, se, df, confidence, len(la), len(lb))


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """``mean(b) - mean(a)``, its standard error and its Welch-Satterthwaite degrees of freedom
    (two values a side at least)."""
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    den = (va**2 / (len(a) - 1) if va else 0.0) + (vb**2 / (len(b) - 1) if vb else 0.0)
    df = (va + vb) ** 2 / den if den else float(len(a) + len(b) - 2)
    return mb - ma, math.sqrt(va + vb), df


def t_interval(
    diff: float, se: float, df: float, confidence: float, n_a: int, n_b: int, method: str = "welch"
) -> RatioInterval:
    """B/A = ``exp(diff)`` with the t interval ``diff -+ t * se`` (log scale) on ``df``
    degrees of freedom."""
    t = t_quantile(0.5 + confidence / 2.0, df)
    return RatioInterval(
        math.exp(diff),
        math.exp(diff - t * se),
        math.exp(diff + t * se),
        confidence,
        n_a,
        n_b,
        method,
        df,
    )


def t_quantile(p: float, df: float) -> float:
    """Quantile of Student's t distribution (p in (0.5, 1)): ``scipy.stats.t.ppf``."""
    if not 0.5 < p < 1.0 or df <= 0:
        raise ValueError("t_quantile needs 0.5 < p < 1 and df > 0")
    return float(stats.t.ppf(p, df))


def ratio_text(ratio: float | None, low: float | None, high: float | None) -> str | None:
    """A B/A ratio with its interval as "0.958 [0.752, 1.221]"; None when any part is missing."""
    if ratio is None or low is None or high is None:
        return None
    return f"{ratio:.3f} [{low:.3f}, {high:.3f}]"
