"""The post-hoc reading of §13's and §14's H100 comparisons that bench/README.md quotes beside
the trend-adjusted designs of bench/decision_replay.py: B/A with one straight line over the
launches' end times taken out (the model of tuner.scoring.caveats.drift, fitted whether or not
its slope is significant), re-derived from the committed databases."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tests.studykit import comparison_launches, geomean
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.scoring import drift

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "bench" / "README.md"


def trend_adjusted(folder: str) -> tuple[str, tuple[float, float, float], int, bool]:
    """The launch order (A/B), B/A with its 95 % interval, the residual df, and whether the
    drift caveat shows (its slope significant)."""
    db = ROOT / "studies" / "results" / folder / "2026-12-06" / "tuner-heavy.db"
    launches = sorted(
        comparison_launches(Repository(make_engine(f"sqlite:///{db}"))),
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
