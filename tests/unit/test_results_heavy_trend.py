"""The post-hoc reading of §13's and §14's H100 comparisons that bench/README.md quotes beside
the trend-adjusted designs of bench/decision_replay.py: B/A with one straight line over the
launches' end times taken out (the model of tuner.scoring.caveats.drift, fitted whether or not
its slope is significant), re-derived from the committed databases."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tests.studykit import committed_repo, comparison_launches, geomean, launch_trials
from tuner.abtest.compare import HEADLINE, Arm
from tuner.abtest.decide import Design, judge_look
from tuner.domain import TrialResult
from tuner.scoring import BETTER, BUDGET, NO_DIFFERENCE, SIGNIFICANT, drift

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "bench" / "README.md"


def trend_adjusted(folder: str) -> tuple[str, tuple[float, float, float], int, bool]:
    """The launch order (A/B), B/A with its 95 % interval, the residual df, and whether the
    drift caveat shows (its slope significant)."""
    db = ROOT / "studies" / "results" / folder / "2026-12-06" / "tuner-heavy.db"
    launches = sorted(
        comparison_launches(committed_repo(db)),
        key=lambda x: x.created_at,
    )
    minutes = np.array([x.created_at for x in launches]) / 60.0
    side = np.array([0.0 if x.is_defaults else 1.0 for x in launches])
    y = np.log([geomean(x.values["output_throughput"]) for x in launches])
    design = np.column_stack([np.ones(len(y)), side, minutes - minutes.mean()])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    df = len(y) - 3
    resid = y - design @ coef
    se = math.sqrt(float(resid @ resid) / df * float(np.linalg.inv(design.T @ design)[1, 1]))
    q = float(stats.t.ppf(0.975, df))
    ratio = (math.exp(coef[1]), math.exp(coef[1] - q * se), math.exp(coef[1] + q * se))
    at = [(x.created_at, geomean(x.values["output_throughput"])) for x in launches]
    a = [p for p, x in zip(at, launches, strict=True) if x.is_defaults]
    b = [p for p, x in zip(at, launches, strict=True) if not x.is_defaults]
    order = "".join("A" if x.is_defaults else "B" for x in launches)
    return order, ratio, df, drift(a, b) is not None


def test_the_readings_bench_readme_quotes() -> None:
    text = README.read_text()
    order, (ratio, low, high), df, shown = trend_adjusted("heavy-clocks")
    assert order == "ABBAAB" and df == 3 and not shown  # §14: the caveat did not show
    assert (ratio, low, high) == pytest.approx((1.257, 1.097, 1.441), abs=5e-4)
    assert f"x{ratio:.3f} [{low:.3f}, {high:.3f}] ({df} df)" in text
    order, (ratio, low, high), df, shown = trend_adjusted("heavy-h100")
    assert order == "ABABABAB" and df == 5
    assert f"x{ratio:.3f} [{low:.3f},\n{high:.3f}] ({df} df)" in text or (
        f"x{ratio:.3f} [{low:.3f}, {high:.3f}] ({df} df)" in text.replace("\n", " ")
    )


def _results(folder: str) -> tuple[list[TrialResult], list[TrialResult]]:
    """The stored launches of the folder's comparison as the trials tuner compare judged."""
    db = ROOT / "studies" / "results" / folder / "2026-12-06" / "tuner-heavy.db"
    return launch_trials(comparison_launches(committed_repo(db)))


@pytest.mark.parametrize(
    ("folder", "design", "stored", "decides"),
    [
        ("heavy-clocks", Design.fixed_launches(3), (1.247, 1.000, 1.554), True),
        # At the level simulated for t on the fit's own df the lower end is 0.998 (at the
        # normal statistics' Pocock level, 96.65 %, it was 1.008: "better").
        ("heavy-h100", Design.sequential(3, 4), (1.274, 0.746, 2.175), False),
    ],
)
def test_todays_design_on_both_h100_comparisons_that_welch_left_open(
    folder: str, design: Design, stored: tuple[float, float, float], decides: bool
) -> None:
    """Read after the fact (the trend design was chosen after these runs, so this proves what
    it does on them, not that it was right): the design as the runs had it (no trend) gives the
    stored interval and no decision; today's default takes the trend out, which decides §14's
    and leaves §13's lower end at 0.998."""
    a, b = _results(folder)
    arm_a, arm_b = Arm("defaults", a[0].config), Arm("heavy", b[0].config)
    old = judge_look(arm_a, a, arm_b, b, dataclasses.replace(design, trend=False), None)
    head = old.comparison.metric(HEADLINE)
    assert (head.ratio, head.low, head.high) == pytest.approx(stored, abs=5e-4)
    assert old.step.verdict == NO_DIFFERENCE and old.step.reason == BUDGET
    assert design.trend  # the default
    new = judge_look(arm_a, a, arm_b, b, design, None)
    head = new.comparison.metric(HEADLINE)
    assert head.method == "trend taken out: no noise profile for this key"
    assert head.low is not None and head.high is not None and head.ratio is not None
    if decides:
        assert new.step.verdict == BETTER and new.step.reason == SIGNIFICANT
        assert head.low > 1.0
    else:
        assert new.step.verdict == NO_DIFFERENCE and new.step.reason == BUDGET
        assert 0.99 < head.low < 0.999 and head.ratio > 1.3
        # The interval is wider than at the normal statistics' level, and the step is the
        # whole difference: the same launches at that level exclude 1.
        plain = dataclasses.replace(design.plan, own_confidence=None)
        at_normal = judge_look(
            arm_a, a, arm_b, b, dataclasses.replace(design, plan=plain), None
        ).comparison.metric(HEADLINE)
        assert at_normal.low is not None and at_normal.low > 1.0
    if head.drift is not None:  # §13's slope is significant: the caveat says it is taken out
        assert head.drift.in_verdict
        assert "has this straight-line trend taken out" in head.drift.text(head.label)


def test_plan_h200_section_15_is_these_readings() -> None:
    section = (ROOT / "docs" / "results" / "plan-h200.md").read_text(encoding="utf-8")
    section = " ".join(section.split("## 15. ", 1)[1].split())

    def reading(folder: str, design: Design, n: int, trend: bool) -> str:
        a, b = _results(folder)
        look = judge_look(
            Arm("defaults", a[0].config), a[:n], Arm("heavy", b[0].config), b[:n],
            dataclasses.replace(design, trend=trend), None,
        )  # fmt: skip
        h = look.comparison.metric(HEADLINE)
        assert h.ratio is not None and h.low is not None and h.high is not None
        return f"x{h.ratio:.3f} [{h.low:.3f}, {h.high:.3f}]"

    clocks, h100 = Design.fixed_launches(3), Design.sequential(3, 4)
    assert (
        f"output tok/s {reading('heavy-clocks', clocks, 3, True)}, better (3 df), where Welch's "
        f"interval was {reading('heavy-clocks', clocks, 3, False)}, no significant" in section
    )
    assert (
        f"output tok/s {reading('heavy-h100', h100, 4, True)}, no significant difference (5 "
        f"df), where Welch's was "
        f"{reading('heavy-h100', h100, 4, False)}; at its first look (3 + 3) "
        f"{reading('heavy-h100', h100, 3, True)}, which" in section
    )
