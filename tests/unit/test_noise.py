"""The noise model (tuner.scoring.noise), the Pocock boundary and the decision design
(tuner.scoring.sequential), with their error rates and coverage checked by simulation at a
CI size."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tuner.scoring.noise import (
    POOLED,
    TREND,
    Components,
    Launch,
    components,
    contradicts,
    launch_value,
    pooled_ratio_interval,
    trend_ratio_interval,
    trend_taken_out,
)
from tuner.scoring.sequential import (
    BUDGET,
    PRECISE,
    SIGNIFICANT,
    SequentialPlan,
    next_step,
    pocock_confidence,
    pocock_confidence_own,
)
from tuner.scoring.significance import BETTER, NO_DIFFERENCE, WORSE, ratio_interval


def _launches(
    rng: np.random.Generator, n: int, launch_sd: float, window_sd: float, m: int, mu: float = 0.0
) -> list[tuple[float, ...]]:
    return [tuple(mu + rng.normal(0, launch_sd) + rng.normal(0, window_sd, m)) for _ in range(n)]


def test_the_nested_anova_by_hand() -> None:
    # Two configurations, two launches each, two windows each (log values).
    runs = [
        Launch("a", (0.0, 0.2)),
        Launch("a", (0.4, 0.6)),
        Launch("b", (1.0, 1.0)),
        Launch("b", (1.2, 1.2)),
    ]
    c = components(runs)
    assert c is not None and (c.df, c.window_df, c.windows, c.launches, c.groups) == (2, 4, 2, 4, 2)
    # Launch means 0.1, 0.5 (around 0.3) and 1.0, 1.2 (around 1.1): SS_between = 2 * 0.1.
    assert math.isclose(c.launch_mean_var, 2 * 0.1 / 2 / 2)
    assert math.isclose(c.window_var or 0, 0.04 / 4)  # only config a's windows differ
    assert math.isclose(c.launch_var, (0.1 - 0.01) / 2)
    assert c.sd == pytest.approx(math.sqrt(0.05))


def test_components_need_two_launches_of_one_configuration() -> None:
    assert components([]) is None
    assert components([Launch("a", (1.0, 1.1)), Launch("b", (2.0, 2.1))]) is None
    one = components([Launch("m", (1.0,)), Launch("m", (1.2,))])  # peak memory: no windows
    assert one is not None and one.window_var is None and one.launch_var == one.launch_mean_var
    # Launches with another window count than the key's are left out.
    c = components([Launch("a", (1.0, 1.1, 1.2)), Launch("a", (1.0, 1.1)), Launch("a", (0.9,) * 3)])
    assert c is not None and c.launches == 2 and c.windows == 3


def test_the_components_recover_the_truth() -> None:
    rng = np.random.default_rng(5)
    runs = [
        Launch(g, _launches(rng, 1, 0.08, 0.10, 3, mu)[0])
        for g, mu in (("a", 9.6), ("b", 9.8), ("c", 9.7))
        for _ in range(40)
    ]
    c = components(runs)
    assert c is not None and c.df == 117
    assert c.launch_sd == pytest.approx(0.08, abs=0.015)
    assert c.window_sd == pytest.approx(0.10, abs=0.01)
    assert c.sd == pytest.approx(math.sqrt(0.08**2 + 0.10**2 / 3), abs=0.012)


def test_launch_value_is_the_geometric_mean() -> None:
    assert launch_value([100.0, 400.0]) == pytest.approx(200.0)
    assert launch_value([0.0, -1.0]) is None


def test_pooled_interval_uses_the_profiles_df_and_falls_back_when_contradicted() -> None:
    profile = Components(0.004, 0.01, 0.0073, 20, 60, 3, 25, 4)
    a, b = [100.0, 104.0, 98.0], [120.0, 118.0, 125.0]
    found = pooled_ratio_interval(a, b, 0.95, profile)
    assert found is not None and found.method == POOLED and found.df == 24
    assert found.low > 1.0 and found.verdict(True) == BETTER
    welch = ratio_interval(a, b, 0.95)
    assert welch is not None and welch.df is not None and welch.df < 5
    # Launches ten times noisier than the profile: its interval is not borrowed.
    wild = pooled_ratio_interval([60.0, 140.0, 100.0], [90.0, 170.0, 120.0], 0.95, profile)
    assert wild is not None and wild.method.startswith("welch: own launches spread x")
    assert contradicts(0.0073 * 10, 4, profile) < 0.01 < contradicts(0.0073 * 0.1, 4, profile)
    none = pooled_ratio_interval(a, b, 0.95, None)
    assert none is not None and none.method == "welch: no noise profile for this key"


def test_launches_for_a_half_width() -> None:
    c = Components(0.0064, 0.01, 0.0097, 30, 60, 3, 30, 2)  # the H200's: SD 0.098
    need = c.launches_for(0.05)
    # 2 * (1.96 * 0.098 / log 1.05)^2 = 31 a side
    assert need == math.ceil(2 * (1.959964 * math.sqrt(0.0097) / math.log(1.05)) ** 2)


def test_pocock_confidence_is_the_known_constant() -> None:
    assert pocock_confidence((3,), 0.05) == pytest.approx(0.95)
    # Pocock's constant for two equally spaced looks at 5 %: 2.178 (nominal 2.94 % a look).
    assert pocock_confidence((1, 2), 0.05) == pytest.approx(1 - 0.0294, abs=3e-4)
    # Five equally spaced looks: 2.413 (1.58 % a look).
    assert pocock_confidence((1, 2, 3, 4, 5), 0.05) == pytest.approx(1 - 0.0158, abs=3e-4)
    with pytest.raises(ValueError):
        pocock_confidence((3, 2))


def test_pocock_confidence_matches_the_published_constants_and_an_independent_integral() -> None:
    # Pocock's constants for K equally spaced looks at 5 % two-sided (Jennison and Turnbull,
    # table 2.1): c with P(max_k |Z_k| >= c) = 0.05.
    for k, constant in [(2, 2.178), (3, 2.289), (4, 2.361), (5, 2.413), (10, 2.555)]:
        c = stats.norm.ppf((1 + pocock_confidence(tuple(range(1, k + 1)))) / 2)
        assert c == pytest.approx(constant, abs=6e-4)
    # An uneven schedule (the decision design's), against scipy's multivariate normal.
    looks = (3, 4, 5, 6)
    n = np.asarray(looks, dtype=float)
    c = stats.norm.ppf((1 + pocock_confidence(looks)) / 2)
    cov = np.sqrt(np.minimum.outer(n, n) / np.maximum.outer(n, n))
    inside = stats.multivariate_normal(np.zeros(4), cov).cdf(
        c * np.ones(4), lower_limit=-c * np.ones(4), rng=0
    )
    assert 1 - inside == pytest.approx(0.05, abs=1e-4)
    # Many looks (3 to 20 a side), against a simulated random walk: 200,000 comparisons.
    looks = tuple(range(3, 21))
    c = stats.norm.ppf((1 + pocock_confidence(looks)) / 2)
    walk = np.cumsum(np.random.default_rng(5).standard_normal((200_000, 20)), axis=1)
    z = walk[:, 2:] / np.sqrt(np.arange(3, 21))
    assert (np.abs(z) >= c).any(axis=1).mean() == pytest.approx(0.05, abs=0.0015)  # 3 SD


def test_the_decision_plan_stops_for_precision_and_budget() -> None:
    plan = SequentialPlan.decision(3, 6, alpha=0.05, min_effect=0.05)
    assert plan.margin is None and 0.97 < plan.confidence < 0.99 and plan.looks == 4
    same = [100.0, 100.5, 99.5]
    tight = next_step(same, [100.2, 100.1, 99.9], plan)
    assert (tight.verdict, tight.reason) == (NO_DIFFERENCE, PRECISE)
    assert tight.interval is not None and tight.interval.half_width <= 0.05
    clear = next_step(same, [70.0, 71.0, 69.0], plan)
    assert (clear.verdict, clear.reason) == (WORSE, SIGNIFICANT)
    wide = [80.0, 120.0, 100.0, 90.0, 110.0, 100.0]
    spent = next_step(wide, [100.0, 95.0, 120.0, 85.0, 105.0, 98.0], plan)
    assert (spent.verdict, spent.reason) == (NO_DIFFERENCE, BUDGET)


def _simulate(ratio: float, reps: int, seed: int) -> tuple[float, float, float]:
    """(false-or-better rate, coverage, mean launches a side) of the decision design with a
    calibrated profile, on the H200's noise (launch SD 0.08, window SD 0.08, 3 windows)."""
    rng = np.random.default_rng(seed)
    plan = SequentialPlan.decision(3, 6, alpha=0.05, min_effect=0.05)
    decided = covered = launches = 0
    for _ in range(reps):
        cal = components([Launch("d", w) for w in _launches(rng, 5, 0.08, 0.08, 3)])
        sides = {
            s: [math.exp(sum(w) / 3) for w in _launches(rng, 6, 0.08, 0.08, 3, mu)]
            for s, mu in (("a", 0.0), ("b", math.log(ratio)))
        }

        def interval(a: list[float], b: list[float], conf: float, cal: object = cal) -> object:
            return pooled_ratio_interval(a, b, conf, cal)  # type: ignore[arg-type]

        for n in range(3, 7):
            step = next_step(sides["a"][:n], sides["b"][:n], plan, interval)  # type: ignore[arg-type]
            if step.done:
                break
        assert step.interval is not None
        decided += step.verdict == (BETTER if ratio > 1 else NO_DIFFERENCE)
        covered += step.interval.low <= ratio <= step.interval.high
        launches += step.n_a
    return decided / reps, covered / reps, launches / reps


def test_by_simulation_false_decisions_stay_within_alpha_and_intervals_cover() -> None:
    # 600 comparisons at B/A = 1: the design's false decisions (better or worse) are <= 5 %
    # in expectation; 8 % is 3 binomial SDs above it. Coverage 95 % nominal, >= 92 % here.
    no_difference, coverage, launches = _simulate(1.0, 600, seed=11)
    assert 1.0 - no_difference <= 0.08
    assert coverage >= 0.92
    assert 5.5 <= launches <= 6.0  # at this noise +-5 % is out of reach: the budget ends it
    power, coverage_up, launches_up = _simulate(1.2, 300, seed=12)
    assert power >= 0.7 and coverage_up >= 0.9 and launches_up < 5.5


def _drifting(
    rng: np.random.Generator, n: int, ratio: float, drift: float, sd: float
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """n launches a side, A B, B A, ... 100 s apart, each moved by ``drift`` (log) a launch."""
    a, b = [], []
    for i in range(2 * n):
        side = (i // 2 + i) % 2  # A B, B A, ...: B at positions 1, 2, 5, 6, ...
        at = 1.8e9 + 100.0 * i
        value = math.exp(drift * i + (math.log(ratio) if side else 0.0) + rng.normal(0, sd))
        (b if side else a).append((at, 15000.0 * value))
    return a, b


def test_the_trend_interval_takes_a_steady_drift_out_and_pools_the_profile() -> None:
    rng = np.random.default_rng(3)
    profile = Components(0.0064, 0.0059, 0.0084, 9, 28, 3, 14, 5)  # the H200's, 9 df
    a, b = _drifting(rng, 4, 1.2, -0.08, 0.0)  # no noise: the fit is exact
    a[0] = (a[0][0], a[0][1] * 1.01)  # a residual, so that there is an interval
    found = trend_ratio_interval(a, b, 0.95, profile)
    assert found is not None and found.method == f"{POOLED}, {TREND}" and found.df == 9 + 5
    assert trend_taken_out(found.method) and found.verdict(True) == BETTER
    assert found.ratio == pytest.approx(1.2, rel=0.01)
    # The untrended interval on the same launches takes the drift for noise.
    untrended = pooled_ratio_interval([v for _, v in a], [v for _, v in b], 0.95, profile)
    assert untrended is not None and not trend_taken_out(untrended.method)
    assert untrended.half_width > 3 * found.half_width
    alone = trend_ratio_interval(a, b, 0.95, None)
    assert alone is not None and alone.df == 5 and alone.method.startswith(f"{TREND}: no noise")
    # Launches within a minute (fakes) or too few: no trend to fit, the caller falls back.
    assert trend_ratio_interval([(t / 100.0, v) for t, v in a], b[:1], 0.95, profile) is None
    quick = [(1.8e9 + i, v) for i, (_, v) in enumerate(a + b)]
    assert trend_ratio_interval(quick[:4], quick[4:], 0.95, profile) is None


def test_the_trend_interval_drops_a_profile_its_residuals_contradict() -> None:
    profile = Components(0.0001, 0.0001, 0.0001, 20, 60, 3, 25, 4)  # SD 0.01
    a, b = _drifting(np.random.default_rng(5), 4, 1.0, -0.04, 0.2)
    found = trend_ratio_interval(a, b, 0.95, profile)
    assert found is not None and found.df == 5
    assert found.method.startswith(f"{TREND}: residuals spread x")
    assert found.method.endswith("the profile is not used")


@pytest.mark.parametrize("drift", [0.0, -0.08])
def test_the_trend_interval_covers_as_stated_whatever_the_steady_drift(drift: float) -> None:
    rng = np.random.default_rng(11)
    profile = Components(0.0064, 0.0059, 0.0084, 9, 28, 3, 14, 5)
    covered = trials = 0
    for _ in range(2000):
        a, b = _drifting(rng, 3, 1.1, drift, math.sqrt(0.0084))
        for p in (None, profile):
            found = trend_ratio_interval(a, b, 0.95, p)
            assert found is not None
            covered += found.low <= 1.1 <= found.high
            trials += 1
    # 4,000 intervals: the binomial SD of the coverage is 0.34 points.
    assert covered / trials == pytest.approx(0.95, abs=0.012)


def test_the_own_launches_level_is_set_for_t_at_the_fits_df() -> None:
    looks = (3, 4, 5, 6)
    assert pocock_confidence_own((3,)) == pytest.approx(0.95)
    own, normal = pocock_confidence_own(looks), pocock_confidence(looks)
    assert normal < own < 0.99  # heavier tails: a higher level a look
    assert pocock_confidence_own.__wrapped__(looks) == own  # seeded: one level a schedule
    assert SequentialPlan.decision(3, 6).own_confidence == own
    with pytest.raises(ValueError):
        pocock_confidence_own((1, 2))  # a fit needs two launches a side


def _false_decisions(level: float, reps: int, seed: int) -> float:
    """Of ``reps`` comparisons with no difference, looks at 3-6 a side in the design's order
    (A B, B A, ...) at uneven times (each launch 90-150 s after the one before), the share
    whose trend-fitted t interval on its own launches excludes 1 at some look at ``level``;
    vectorised, and apart from tuner's simulation (another seed, other times)."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    side = np.array([(i // 2 + i) % 2 for i in range(12)], dtype=float)
    minutes = np.cumsum(rng.uniform(1.5, 2.5, size=(reps, 12)), axis=1)
    y = rng.standard_normal((reps, 12))
    out = np.zeros(reps, dtype=bool)
    for n in (3, 4, 5, 6):
        m = 2 * n
        x = np.stack([np.ones((reps, m)), np.broadcast_to(side[:m], (reps, m)), minutes[:, :m]], 2)
        xtx_inv = np.linalg.inv(np.einsum("rmi,rmj->rij", x, x))
        coef = np.einsum("rij,rmj,rm->ri", xtx_inv, x, y[:, :m])
        rss = ((y[:, :m] - np.einsum("rmi,ri->rm", x, coef)) ** 2).sum(axis=1)
        t = np.abs(coef[:, 1]) / np.sqrt(rss / (m - 3) * xtx_inv[:, 1, 1])
        out |= t > stats.t.ppf(0.5 + level / 2.0, m - 3)
    return float(out.mean())


def test_by_simulation_the_own_level_holds_five_percent_where_the_normal_one_does_not() -> None:
    # 40,000 comparisons: the binomial SD of a 5 % rate is 0.11 points.
    looks = (3, 4, 5, 6)
    assert _false_decisions(pocock_confidence_own(looks), 40_000, 21) == pytest.approx(
        0.05, abs=0.004
    )
    assert _false_decisions(pocock_confidence(looks), 40_000, 21) > 0.055


def test_only_an_interval_on_the_own_launches_alone_takes_the_own_level() -> None:
    a, b = _drifting(np.random.default_rng(5), 4, 1.0, -0.04, 0.08)
    alone = trend_ratio_interval(a, b, 0.97, None, 0.98)
    assert alone is not None and alone.confidence == 0.98
    plain = trend_ratio_interval(a, b, 0.97, None)
    assert plain is not None and plain.confidence == 0.97 and plain.ratio == alone.ratio
    assert plain.half_width < alone.half_width
    profile = Components(0.0064, 0.0059, 0.0084, 9, 28, 3, 14, 5)
    pooled = trend_ratio_interval(a, b, 0.97, profile, 0.98)
    assert pooled is not None and pooled.method.startswith(POOLED) and pooled.confidence == 0.97
    quiet = Components(0.0001, 0.0001, 0.0001, 20, 60, 3, 25, 4)  # contradicted: SD 0.01
    dropped = trend_ratio_interval(a, b, 0.97, quiet, 0.98)
    assert dropped is not None and "the profile is not used" in dropped.method
    assert dropped.confidence == 0.98


def test_one_window_a_launch_says_the_spread_is_launch_and_window_together() -> None:
    """With one window a launch, window noise cannot be told from launch noise: `tuner
    calibrate` printed their sum as the 'launch SD' without a word."""
    from tuner.scoring.noise import Launch, components

    launches = [Launch("g", (math.log(v),)) for v in (100.0, 104.0, 97.0)]
    one = components(launches)
    assert one is not None and one.windows == 1
    text = one.text()
    assert text.startswith("launch and window SD together") and "cannot be told apart" in text
    assert "window SD" not in text.replace("launch and window SD together", "")
    peak = one.text(windowed=False)  # peak memory: once a launch, no window noise to mix
    assert peak.startswith("launch SD ") and "cannot be told apart" not in peak
    three = [Launch("g", tuple(math.log(v + d) for d in (0, 1, 2))) for v in (100.0, 104.0)]
    many = components(three)
    assert many is not None and many.text().startswith("launch SD ")
