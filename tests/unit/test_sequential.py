"""Sequential confirmation (tuner.scoring.sequential) and the robust intervals it can use
(bench.robust): verdicts, launch counts, and coverage by simulation."""

from __future__ import annotations

import math
import random

import pytest

from bench import robust
from bench.robust import hodges_lehmann_interval, screen, screened_interval
from tuner.scoring.sequential import (
    CONTINUE,
    EQUIVALENT,
    SequentialPlan,
    next_step,
    run_sequential,
)
from tuner.scoring.significance import BETTER, NO_DIFFERENCE, WORSE, ratio_interval

PLAN = SequentialPlan(first=2, cap=5, confidence=0.95, margin=0.10)


def test_the_plan_is_checked() -> None:
    for bad in ({"first": 1}, {"first": 4, "cap": 3}, {"confidence": 1.0}, {"margin": -0.1}):
        with pytest.raises(ValueError):
            SequentialPlan(**bad)  # type: ignore[arg-type]


def test_verdicts_at_a_look() -> None:
    a = [100.0, 101.0, 99.0]
    assert next_step(a[:1], [120.0], PLAN).verdict == CONTINUE  # before the first look
    assert next_step(a, [130.0, 131.0, 129.0], PLAN).verdict == BETTER
    assert next_step(a, [70.0, 71.0, 69.0], PLAN).verdict == WORSE
    lower = SequentialPlan(first=2, cap=5, higher_is_better=False)  # a latency: lower is better
    assert next_step(a, [70.0, 71.0, 69.0], lower).verdict == BETTER
    tight = next_step(a, [100.5, 100.0, 99.5], PLAN)
    assert tight.verdict == EQUIVALENT and tight.interval is not None
    assert tight.interval.low >= 1 / 1.1 and tight.interval.high <= 1.1
    wide = [80.0, 120.0, 100.0]
    assert next_step(a, wide, PLAN).verdict == CONTINUE
    assert next_step(a * 2, wide * 2, PLAN).verdict == NO_DIFFERENCE  # the cap: 5 a side


def test_launches_alternate_and_stop_at_the_decision() -> None:
    calls: list[str] = []
    values = {"a": iter([100.0, 101.0, 99.0, 100.0]), "b": iter([150.0, 152.0, 149.0, 151.0])}

    def launch(side: str) -> float:
        calls.append(side)
        return next(values[side])

    step = run_sequential(launch, PLAN)
    assert step.verdict == BETTER and (step.n_a, step.n_b) == (2, 2)
    assert calls == ["a", "b", "a", "b"]


def test_an_undecided_comparison_stops_at_the_cap() -> None:
    rng = random.Random(3)
    step = run_sequential(lambda side: math.exp(rng.gauss(0, 0.5)), PLAN)
    assert step.n_a == step.n_b <= PLAN.cap
    if step.verdict == NO_DIFFERENCE:
        assert step.n_a == PLAN.cap


def test_mann_whitney_counts() -> None:
    assert robust._u_counts(2, 2) == (1, 1, 2, 1, 1)
    for m, n in ((3, 3), (4, 6), (5, 2)):
        counts = robust._u_counts(m, n)
        assert sum(counts) == math.comb(m + n, m) and counts == counts[::-1]


def test_hodges_lehmann_needs_four_a_side_for_95_percent() -> None:
    a, b = [1.0, 1.1, 0.9], [2.0, 2.1, 1.9]
    three = hodges_lehmann_interval(a, b, 0.95)
    assert three is not None and three.low == 0.0 and three.high == math.inf
    assert not three.significant
    assert math.isclose(three.ratio, 2.0 / 1.0, rel_tol=0.1)
    at_90 = hodges_lehmann_interval(a, b, 0.90)  # 1 - 2/20: the best three a side can do
    assert at_90 is not None and at_90.low > 1.0
    four = hodges_lehmann_interval([*a, 1.05], [*b, 2.05], 0.95)
    assert four is not None and four.low > 1.0 and math.isfinite(four.high)
    # The extreme pairwise differences: the smallest and largest b/a.
    assert math.isclose(four.low, 1.9 / 1.1) and math.isclose(four.high, 2.1 / 0.9)
    assert hodges_lehmann_interval([1.0], b) is None


def test_one_outlier_takes_the_decision_from_welch_and_hodges_lehmann_not_from_the_screen() -> None:
    a = [100.0, 102.0, 98.0, 101.0, 99.0]
    b = [120.0, 122.0, 118.0, 121.0, 119.0]
    assert all(
        iv is not None and iv.low > 1.0
        for iv in (ratio_interval(a, b), hodges_lehmann_interval(a, b))
    )
    hit = [*b[:-1], 119.0 * 0.5]  # one launch disturbed to half its speed
    welch, hl = ratio_interval(a, hit), hodges_lehmann_interval(a, hit)
    assert welch is not None and not welch.significant  # the variance it adds hides +20 %
    # The outlier makes 5 of the 25 pairwise differences the smallest ones, and the lower
    # bound at five a side is the third smallest: ranks alone do not save it either.
    assert hl is not None and not hl.significant
    kept = screened_interval(0.05)(a, hit, 0.95)
    assert kept is not None and kept.low > 1.0 and kept.n_b == 4


def test_hodges_lehmann_covers_at_its_level() -> None:
    rng = random.Random(11)
    n, covered = 600, 0
    for _ in range(n):
        a = [math.exp(rng.gauss(0, 0.2)) for _ in range(5)]
        b = [1.2 * math.exp(rng.gauss(0, 0.2)) for _ in range(5)]
        iv = hodges_lehmann_interval(a, b, 0.90)
        assert iv is not None
        covered += iv.low <= 1.2 <= iv.high
    assert covered / n > 0.86  # exact: at least 90 %, less Monte Carlo error


def test_the_screen_drops_one_launch_far_beyond_the_known_spread() -> None:
    assert screen([100.0, 101.0, 60.0], sigma=0.05, k=3.0) == [100.0, 101.0]
    assert screen([100.0, 60.0, 101.0, 99.0], sigma=0.05, k=3.0) == [100.0, 101.0, 99.0]
    assert screen([100.0, 101.0, 95.0], sigma=0.05, k=3.0) == [100.0, 101.0, 95.0]
    assert screen([100.0, 60.0], sigma=0.05, k=3.0) == [100.0, 60.0]  # which one is odd?
    iv = screened_interval(0.05)([100.0, 101.0, 99.0], [120.0, 121.0, 60.0], 0.95)
    assert iv is not None and (iv.n_a, iv.n_b) == (3, 2) and iv.low > 1.0
    with pytest.raises(ValueError):
        screened_interval(0.0)


def test_sequential_designs_take_the_interval_they_are_given() -> None:
    plan = SequentialPlan(first=3, cap=3)
    a, b = [1.0, 1.1, 0.9], [2.0, 2.1, 1.9]
    assert next_step(a, b, plan).verdict == BETTER
    # Hodges-Lehmann cannot reach 95 % with three a side: no decision at the cap.
    assert next_step(a, b, plan, hodges_lehmann_interval).verdict == NO_DIFFERENCE
