"""The interval maths behind every "better / worse / no significant difference"."""

from __future__ import annotations

import math
import random

import pytest

from tuner.scoring.significance import (
    BETTER,
    NO_DIFFERENCE,
    WORSE,
    ratio_interval,
    t_quantile,
)


@pytest.mark.parametrize(
    ("df", "q975", "q995"),
    # Published two-sided 95 % / 99 % critical values of Student's t.
    [
        (1, 12.706, 63.657),
        (2, 4.303, 9.925),
        (4, 2.776, 4.604),
        (10, 2.228, 3.169),
        (30, 2.042, 2.750),
    ],
)
def test_t_quantiles_match_tables(df: int, q975: float, q995: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(q975, abs=1e-3)
    assert t_quantile(0.995, df) == pytest.approx(q995, abs=1e-3)


def test_t_quantile_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        t_quantile(0.3, 4)
    with pytest.raises(ValueError):
        t_quantile(0.975, 0)


def _lognormal(rng: random.Random, n: int, median: float, sigma: float) -> list[float]:
    return [median * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]


@pytest.mark.parametrize(
    ("n", "sigma", "true_ratio"), [(3, 0.15, 1.0), (3, 0.2, 1.3), (5, 0.1, 0.8), (8, 0.25, 1.0)]
)
def test_interval_covers_the_true_ratio_95_percent_of_the_time(
    n: int, sigma: float, true_ratio: float
) -> None:
    rng = random.Random(1234)
    trials, covered = 1000, 0
    for _ in range(trials):
        a = _lognormal(rng, n, 100.0, sigma)
        b = _lognormal(rng, n, 100.0 * true_ratio, sigma)
        ci = ratio_interval(a, b, 0.95)
        assert ci is not None
        covered += ci.low <= true_ratio <= ci.high
    # Binomial sd at 1000 draws is ~0.7 %; Welch is close to exact for equal variances.
    assert 0.925 <= covered / trials <= 0.975


def test_unequal_spread_keeps_coverage() -> None:
    rng = random.Random(7)
    trials, covered = 1000, 0
    for _ in range(trials):
        ci = ratio_interval(_lognormal(rng, 4, 50.0, 0.05), _lognormal(rng, 4, 60.0, 0.3))
        assert ci is not None
        covered += ci.low <= 1.2 <= ci.high
    assert 0.92 <= covered / trials <= 0.98


def test_verdicts_follow_the_interval_and_the_direction() -> None:
    up = ratio_interval([100, 102, 98], [150, 149, 152])
    assert up is not None and up.significant and up.low > 1.0
    assert up.verdict(higher_is_better=True) == BETTER
    assert up.verdict(higher_is_better=False) == WORSE
    same = ratio_interval([100, 110, 95], [104, 97, 108])
    assert same is not None and not same.significant
    assert same.verdict(True) == same.verdict(False) == NO_DIFFERENCE
    assert "%" in up.percent() and up.percent().startswith("+")


def test_too_few_or_non_positive_values_give_no_interval() -> None:
    assert ratio_interval([100.0], [120.0, 130.0]) is None
    assert ratio_interval([0.0, 0.0, 100.0], [1.0, 2.0]) is None
    exact = ratio_interval([2.0, 2.0], [4.0, 4.0])
    assert exact is not None and exact.ratio == pytest.approx(2.0) and exact.low == exact.high
