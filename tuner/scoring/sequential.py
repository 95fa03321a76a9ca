"""Sequential confirmation: launch A and B in turns until the interval of B/A decides.

Instead of a fixed number of launches a side, the comparison looks at its interval after every
pair of launches, from ``first`` a side on:

- the interval lies above 1 or below 1: B is **better** or **worse** (as the metric's direction
  says), as in :meth:`tuner.scoring.significance.RatioInterval.verdict`;
- the interval lies inside ``[1 / (1 + margin), 1 + margin]``: the two are **equivalent**
  within the stated margin, a decision the fixed design cannot reach with three launches;
- otherwise another pair is launched, until ``cap`` a side; then there is "no significant
  difference".

Looking several times raises the chance of a false decision, so each look's ``confidence`` is
set higher than a fixed design's to keep the same error rate overall (a constant boundary at
every look, as in Pocock's group-sequential design); ``bench/sequential_replay.py`` finds the
level that matches the fixed three-a-side design at 95 % on the recorded noise.

The interval is pluggable: Welch's (:func:`tuner.scoring.significance.ratio_interval`, the
default) or a rank-based one (:func:`tuner.scoring.robust.hodges_lehmann_interval`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tuner.scoring.significance import NO_DIFFERENCE, RatioInterval, ratio_interval

EQUIVALENT = "equivalent"
CONTINUE = "continue"

Interval = Callable[[Sequence[float], Sequence[float], float], RatioInterval | None]


@dataclass(frozen=True)
class SequentialPlan:
    first: int = 2  # launches a side at the first look (an interval needs two)
    cap: int = 6  # launches a side at most
    confidence: float = 0.95  # of the interval at each look
    margin: float = 0.10  # equivalence: B/A within [1 / (1 + margin), 1 + margin]
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        if not 2 <= self.first <= self.cap:
            raise ValueError("need 2 <= first <= cap launches a side")
        if not 0.0 < self.confidence < 1.0 or self.margin < 0:
            raise ValueError("confidence must be in (0, 1) and the margin not negative")


@dataclass(frozen=True)
class Step:
    """The verdict after a look; ``continue`` asks for one more launch of each side."""

    verdict: str
    interval: RatioInterval | None
    n_a: int
    n_b: int

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
        return Step(NO_DIFFERENCE if at_cap else CONTINUE, None, len(a), len(b))
    if found.significant:
        return Step(found.verdict(plan.higher_is_better), found, len(a), len(b))
    if 1.0 / (1.0 + plan.margin) <= found.low and found.high <= 1.0 + plan.margin:
        return Step(EQUIVALENT, found, len(a), len(b))
    return Step(NO_DIFFERENCE if at_cap else CONTINUE, found, len(a), len(b))


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
