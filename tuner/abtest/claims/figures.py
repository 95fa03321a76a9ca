"""What a claim says about a metric, and how a measured interval reads against it.

An article states an effect in one of two scales, and the claims file keeps the article's:

- a **ratio** B/A: ``1.411`` (+41.1 %), ``"0.7/1.2"``, a range ``"1.10 to 1.20"`` (also
  ``"1.10-1.20"``), an open range ``">= 1.5"`` (+50 % or more), or a direction only (``"< 1"``:
  less, by any amount);
- a **difference** B - A in a unit of its own: ``"-120 MB"``, ``"<= -500 ms"`` (1.2 s down to
  under 0.7 s), ``"-840 MB"``. Units: MB, GB, MiB, GiB for ``memory_gib``; ms, s for the
  latencies; tok/s and req/s for the throughputs.

:func:`parse_claimed` reads that text; :func:`judge` reads a measured interval (of the same
scale, in the metric's unit) against it. Verdicts:

- ``consistent``: a real effect (the interval excludes no change) that meets the claimed range;
- ``smaller`` / ``larger``: a real effect in the claimed direction, wholly short of / beyond it;
- ``opposite``: a real effect the other way;
- ``no effect``: no significant change, and the interval rules the claimed range out;
- ``inconclusive``: the interval holds both no change and the claimed range: too wide to tell.

A point figure is a range of one value. A direction-only claim can be ``consistent``,
``opposite`` or ``inconclusive``, never ``no effect``: an effect too small to see still agrees.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tuner.scoring import is_inconclusive, t_quantile, welch

CONSISTENT = "consistent"
SMALLER = "smaller"
LARGER = "larger"
OPPOSITE = "opposite"
NO_EFFECT = "no effect"
INCONCLUSIVE = "inconclusive"
EFFECT_VERDICTS = (CONSISTENT, SMALLER, LARGER, OPPOSITE, NO_EFFECT, INCONCLUSIVE)

RATIO = "ratio"
DIFFERENCE = "difference"

_MIB_PER = {"MB": 1e6 / 2**30, "GB": 1e9 / 2**30, "MiB": 1 / 1024, "GiB": 1.0}
# unit written -> (metric it fits, factor to that metric's unit)
UNITS: dict[str, tuple[tuple[str, ...], float]] = {
    **{u: (("memory_gib",), f) for u, f in _MIB_PER.items()},
    "ms": (("ttft_p50_ms", "ttft_p99_ms", "itl_p99_ms", "e2e_p99_ms"), 1.0),
    "s": (("ttft_p50_ms", "ttft_p99_ms", "itl_p99_ms", "e2e_p99_ms"), 1000.0),
    "tok/s": (("output_throughput",), 1.0),
    "req/s": (("request_throughput",), 1.0),
}
_NUM = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_UNIT = r"(?:\s*(?P<unit>[A-Za-z/]+))?"
_POINT = re.compile(rf"^\s*(?P<op>>=|<=|>|<)?\s*(?P<x>{_NUM}){_UNIT}\s*$")
_RANGE = re.compile(rf"^\s*(?P<x>{_NUM})\s*(?:-|to|–)\s*(?P<y>{_NUM}){_UNIT}\s*$")
_QUOTIENT = re.compile(rf"^\s*(?P<x>{_NUM})\s*/\s*(?P<y>{_NUM})\s*$")


@dataclass(frozen=True)
class Claimed:
    """A claimed effect: the range [low, high] of B/A (``scale`` ratio) or of B - A in the
    metric's unit (``scale`` difference); either end may be infinite. ``unit`` and ``factor``
    (written unit -> metric unit) say how to show a difference in the article's unit."""

    text: str
    scale: str
    low: float
    high: float
    unit: str = ""
    factor: float = 1.0

    @property
    def null(self) -> float:
        """The value of "no change" on this scale."""
        return 1.0 if self.scale == RATIO else 0.0

    def shown(self) -> str:
        """The claim as verdicts quote it: "×1.411", "×1.10 to 1.20", "≥ ×1.50", "< ×1",
        "-120 MB", "≤ -500 ms"."""
        if self.scale == DIFFERENCE:
            return f"{self._ends(lambda v: _signed(v / self.factor))} {self.unit}"
        return self._ends(lambda v: f"×{_ratio_num(v)}").replace(" to ×", " to ")

    @property
    def direction_only(self) -> bool:
        return self.low == self.null or self.high == self.null

    def _ends(self, fmt: Callable[[float], str]) -> str:
        lo, hi = self.low, self.high
        if math.isinf(lo) or (self.scale == RATIO and lo == 0.0):
            return f"≤ {fmt(hi)}" if hi != self.null else f"< {fmt(hi)}"
        if math.isinf(hi):
            return f"≥ {fmt(lo)}" if lo != self.null else f"> {fmt(lo)}"
        return fmt(lo) if lo == hi else f"{fmt(lo)} to {fmt(hi)}"

    def measured_text(self, value: float, low: float, high: float) -> str:
        """A measured interval on this claim's scale, in its unit."""
        if self.scale == DIFFERENCE:
            f = self.factor
            return f"{_signed(value / f)} {self.unit} [{_signed(low / f)}, {_signed(high / f)}]"
        return f"×{value:.3f} [{low:.3f}, {high:.3f}]"


def _ratio_num(v: float) -> str:
    if v == 1.0:
        return "1"
    text = f"{v:.3f}".rstrip("0")
    return text + "0" * max(0, 2 - len(text.partition(".")[2]))


def _signed(v: float) -> str:
    if v == 0:
        return "0"
    digits = 0 if abs(v) >= 10 else (1 if abs(v) >= 1 else 2)
    return f"{v:+.{digits}f}"


def parse_claimed(value: object, metric: str) -> Claimed:
    """The claimed effect as written in a claims file; ValueError with what is wrong."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("claimed must be a number or a text such as '1.10 to 1.20'")
    if not isinstance(value, str):
        return _ratio(str(value), float(value), float(value))
    if m := _QUOTIENT.match(value):
        top, bottom = float(m["x"]), float(m["y"])
        if bottom <= 0:
            raise ValueError(f"claimed {value!r}: the divisor must be above 0")
        return _ratio(value, top / bottom, top / bottom)
    m = _RANGE.match(value) or _POINT.match(value)
    if m is None:
        raise ValueError(f"claimed {value!r} is not a ratio, a range or a difference with a unit")
    x = float(m["x"])
    y = float(m["y"]) if "y" in m.groupdict() else x
    op = m.groupdict().get("op")
    low, high = (min(x, y), max(x, y))
    if op in (">", ">="):
        high = math.inf
    elif op in ("<", "<="):
        low = -math.inf
    unit = m["unit"]
    if not unit:
        return _ratio(value, max(low, 0.0), high)
    if unit not in UNITS:
        raise ValueError(f"claimed {value!r}: unknown unit {unit!r} (known: {', '.join(UNITS)})")
    metrics, factor = UNITS[unit]
    if metric not in metrics:
        raise ValueError(f"claimed {value!r}: {unit} is not a unit of {metric}")
    claimed = Claimed(value, DIFFERENCE, low * factor, high * factor, unit, factor)
    _one_side(claimed)
    return claimed


def _ratio(text: str, low: float, high: float) -> Claimed:
    if high <= 0 or not (math.isfinite(low) or low == 0.0):
        raise ValueError(f"claimed {text!r}: a ratio B/A is above 0")
    claimed = Claimed(text, RATIO, low, high)
    _one_side(claimed)
    return claimed


def _one_side(c: Claimed) -> None:
    if c.low == c.high == c.null or c.low < c.null < c.high:
        what = "1 (no change)" if c.scale == RATIO else "0 (no change)"
        raise ValueError(f"claimed {c.text!r} must lie on one side of {what}")


def _mirror(c: Claimed, low: float, high: float) -> tuple[float, float, float, float]:
    """The claim's range and the interval, turned so that the claim lies above "no change"."""
    if c.low >= c.null:  # already above "no change"
        return c.low, c.high, low, high
    if c.scale == DIFFERENCE:
        return -c.high, -c.low, -high, -low
    return _inv(c.high), _inv(c.low), _inv(high), _inv(low)


def _inv(v: float) -> float:
    return math.inf if v == 0 else 1.0 / v


def judge(claimed: Claimed, low: float, high: float) -> str:
    """The verdict on ``claimed`` given the measured interval [low, high] on its scale."""
    if not low <= high or (claimed.scale == RATIO and low <= 0):
        raise ValueError(f"judge needs low <= high (and above 0 for a ratio), got [{low}, {high}]")
    c_low, c_high, lo, hi = _mirror(claimed, low, high)
    null = claimed.null
    if lo > null:
        if hi < c_low:
            return SMALLER
        if lo > c_high:
            return LARGER
        return CONSISTENT
    if hi < null:
        return OPPOSITE
    return NO_EFFECT if hi < c_low else INCONCLUSIVE


# Why judge said a verdict other than consistent (see explain).
_EXPLAINED = {
    SMALLER: "a real effect in the claimed direction, {measured}, but short of the claimed "
    "{wanted}",
    LARGER: "a real effect, {measured}, larger than the claimed {wanted}",
    OPPOSITE: "a real effect in the opposite direction: {measured} against the claimed {wanted}",
    NO_EFFECT: "no significant change, {measured}, and the interval rules out the claimed {wanted}",
    INCONCLUSIVE: "the interval is too wide to tell: {measured} holds both no change and the "
    "claimed {wanted}",
}


def explain(verdict: str, claimed: Claimed, value: float, low: float, high: float) -> str:
    """Why ``judge`` said ``verdict``, with the measured and the claimed figures."""
    measured, wanted = claimed.measured_text(value, low, high), claimed.shown()
    if verdict == CONSISTENT:
        if claimed.direction_only:
            return f"a real effect in the claimed direction ({wanted}): {measured}"
        if claimed.low == claimed.high:
            return f"a real effect, {measured}; the claimed {wanted} lies within the interval"
        inside = claimed.low <= low and high <= claimed.high
        how = "lies within" if inside else "overlaps"
        return f"a real effect, {measured}; the interval {how} the claimed {wanted}"
    why = _EXPLAINED.get(verdict, _EXPLAINED[INCONCLUSIVE])
    return why.format(measured=measured, wanted=wanted)


def difference_interval(
    a: Sequence[float], b: Sequence[float], confidence: float
) -> tuple[float, float, float] | None:
    """B - A (difference of the launch means) with its Welch interval at ``confidence``; None
    with fewer than two values a side. The ratio's counterpart for claims made in a unit."""
    a = [v for v in a if math.isfinite(v)]
    b = [v for v in b if math.isfinite(v)]
    if len(a) < 2 or len(b) < 2:
        return None
    diff, se, df = welch(a, b)
    if se == 0.0:
        return diff, diff, diff
    t = t_quantile(0.5 + confidence / 2.0, df)
    return diff, diff - t * se, diff + t * se


@dataclass(frozen=True)
class Reading:
    """A claim read against one comparison's launches: the verdict, why, and what was measured
    on the claim's scale (``{"ratio" | "difference": x, "low", "high", "text"}``; None when
    there was too little to measure)."""

    verdict: str
    reason: str
    measured: dict[str, float | str] | None


def read(
    claimed: Claimed,
    *,
    ratio: float | None,
    low: float | None,
    high: float | None,
    a_values: Sequence[float],
    b_values: Sequence[float],
    confidence: float,
    verdict: object = None,
) -> Reading:
    """The verdict on ``claimed`` from a comparison of one metric: its B/A interval (a ratio
    claim) or its launch values (a difference claim, interval by :func:`difference_interval`).
    ``verdict``: the comparison's on the metric; an "inconclusive: ..." one (the launches of a
    side disagree far beyond their noise) makes the interval say nothing."""
    interval: tuple[float, float, float] | None
    if claimed.scale == RATIO:
        interval = None if ratio is None or low is None or high is None else (ratio, low, high)
    else:
        interval = difference_interval(a_values, b_values, confidence)
    if interval is None:
        why = f"not enough complete launches to compare (A {len(a_values)}, B {len(b_values)})"
        return Reading(INCONCLUSIVE, why, None)
    value, lo, hi = interval
    measured: dict[str, float | str] = {
        claimed.scale: value,
        "low": lo,
        "high": hi,
        "text": claimed.measured_text(value, lo, hi),
    }
    if is_inconclusive(verdict):
        return Reading(INCONCLUSIVE, str(verdict).removeprefix(f"{INCONCLUSIVE}: "), measured)
    verdict = judge(claimed, lo, hi)
    return Reading(verdict, explain(verdict, claimed, value, lo, hi), measured)
