"""The H200 decision run (docs/results/decide-h200.md): its looks re-derived from the launch
values tuner printed (studies/results/decide-h200/transcribed.json) and the noise profile of
the committed noise study, through the same functions ``tuner compare`` decides with."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench.tables.noise import placement_components
from tuner.catalog.gpus import CATALOG_PRICES
from tuner.scoring.cost import usd_per_million
from tuner.scoring.noise import Components, pooled_ratio_interval
from tuner.scoring.sequential import SequentialPlan, half_width_at, launches_for, next_step
from tuner.scoring.significance import ratio_interval

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "decide-h200" / "transcribed.json"
NOISE_LOG = (
    ROOT / "studies" / "results" / "noise-h200" / "results" / "noise-placement" / "launches.jsonl"
)
REPORT = ROOT / "docs" / "results" / "decide-h200.md"


@pytest.fixture(scope="module")
def run() -> dict[str, Any]:
    return json.loads(DATA.read_text())


@pytest.fixture(scope="module")
def profile() -> Components:
    lines = [json.loads(x) for x in NOISE_LOG.read_text().splitlines() if x.strip()]
    found = placement_components(lines, "output_throughput")["pinned"]
    assert found is not None
    return found


def _fmt(x: float) -> str:
    return f"{x:.3f}"


def looks_table(run: dict[str, Any], profile: Components) -> str:
    """Each look of the sequential design: launches a side, B/A and its interval, the step."""
    launches = run["compare"]["launches"]
    a, b = launches["a"]["output_throughput"], launches["b"]["output_throughput"]
    plan = SequentialPlan.decision(first=2, cap=6)
    rows = [
        "| look | launches a side | B/A output tok/s | interval (per-look level) | df | step |",
        "|---|---|---|---|---|---|",
    ]
    for look, n in enumerate(range(plan.first, len(a) + 1), start=1):
        step = next_step(
            a[:n], b[:n], plan, lambda x, y, c: pooled_ratio_interval(x, y, c, profile)
        )
        iv = step.interval
        assert iv is not None
        verdict = step.verdict + (f" ({step.reason})" if step.reason else "")
        rows.append(
            f"| {look} | {n} | {_fmt(iv.ratio)} | [{_fmt(iv.low)}, {_fmt(iv.high)}] "
            f"({100 * plan.confidence:.2f} %) | {iv.df:.0f} | {verdict} |"
        )
    return "\n".join(rows) + "\n"


def test_the_looks_table_is_derived_from_the_printed_launches(run, profile) -> None:
    assert looks_table(run, profile) in REPORT.read_text()


def test_the_design_decides_what_tuner_printed_after_four_launches_a_side(run, profile) -> None:
    printed = run["compare"]["printed"]
    launches = run["compare"]["launches"]
    a, b = launches["a"]["output_throughput"], launches["b"]["output_throughput"]
    plan = SequentialPlan.decision(first=2, cap=6)
    assert round(plan.confidence, 4) == printed["per_look_confidence"]
    steps = [
        next_step(a[:n], b[:n], plan, lambda x, y, c: pooled_ratio_interval(x, y, c, profile))
        for n in (2, 3, 4)
    ]
    assert [s.verdict for s in steps] == ["continue", "continue", printed["verdict"]]
    final = steps[-1].interval
    assert final is not None and final.method == "pooled"
    out = printed["output_throughput"]
    assert (round(final.ratio, 3), round(final.low, 3), round(final.high, 3)) == (
        out["ratio"], out["low"], out["high"],
    )  # fmt: skip
    assert final.df == out["df"] == profile.df + 2 * 4 - 2
    assert (printed["launches_a"], printed["launches_b"]) == (len(a), len(b)) == (4, 4)


def test_the_decision_does_not_rest_on_the_high_last_launch(run, profile) -> None:
    launches = run["compare"]["launches"]
    a, b = launches["a"]["output_throughput"], list(launches["b"]["output_throughput"])
    b[3] = sorted(b[:3])[1]  # the 27.5k launch replaced by the median of the other three
    step = next_step(
        a, b, SequentialPlan.decision(first=2, cap=6),
        lambda x, y, c: pooled_ratio_interval(x, y, c, profile),
    )  # fmt: skip
    assert step.verdict == "better" and step.interval is not None
    assert round(step.interval.low, 3) == 1.017 and round(step.interval.high, 3) == 1.238


def test_the_fixed_welch_design_could_not_decide_on_the_same_launches(run) -> None:
    launches = run["compare"]["launches"]
    a, b = launches["a"]["output_throughput"], launches["b"]["output_throughput"]
    three = ratio_interval(a[:3], b[:3], 0.95)
    four = ratio_interval(a, b, 0.95)
    assert three is not None and four is not None
    assert three.low < 1 < three.high and four.low < 1 < four.high
    assert (round(three.low, 3), round(three.high, 3)) == (0.965, 1.313)
    assert (round(four.low, 3), round(four.high, 3)) == (0.979, 1.458)


def test_the_self_comparison_it_would_take(profile) -> None:
    sd = math.sqrt(profile.launch_mean_var)
    assert round(sd, 3) == 0.056
    # 5 % at 95 % with the SD known: 11 launches a side; the budget's 6 reach about 6.5 %,
    # 7.9 % at the per-look level of the sequential design.
    assert launches_for(0.05, sd, 0.95) == 11
    assert round(100 * half_width_at(6, sd, 0.95), 1) == 6.5
    plan = SequentialPlan.decision(first=2, cap=6)
    assert round(100 * half_width_at(6, sd, plan.confidence), 1) == 7.9


def test_the_study_figures_quoted(run) -> None:
    trials = run["study"]["trials"]
    defaults, recipe = trials
    assert (
        defaults["config"] == "defaults" and run["study"]["diagnosis"]["regime"] == "frontend-bound"
    )
    assert round(recipe["output_throughput"] / defaults["output_throughput"], 3) == 1.319
    price = CATALOG_PRICES["h200"]
    assert price == 4.0
    text = REPORT.read_text()
    for trial in trials:
        usd = usd_per_million(trial["output_throughput"], price)
        assert f"${usd:.3f}" in text


def cost_table(run: dict[str, Any]) -> str:
    """Per side: the median launch and range, $/1M at the catalog price, GPUs for 1M tok/s."""
    import statistics

    from tuner.results.sizing import gpus_for

    price = CATALOG_PRICES["h200"]
    launches = run["compare"]["launches"]
    rows = [
        "| side | median launch, out tok/s [range] | $/1M output tokens (median; slowest "
        "launch) | GPUs for 1M out tok/s (slowest launch; median) |",
        "|---|---|---|---|",
    ]
    for side in ("a", "b"):
        values = launches[side]["output_throughput"]
        mid, low, high = statistics.median(values), min(values), max(values)
        label = launches[side]["config"].replace(",", ", ")
        rows.append(
            f"| {label} | {mid:,.0f} [{low:,.0f}-{high:,.0f}] | "
            f"${usd_per_million(mid, price):.4f}; ${usd_per_million(low, price):.4f} | "
            f"{gpus_for(1e6, low)}; {gpus_for(1e6, mid)} |"
        )
    return "\n".join(rows) + "\n"


def test_the_cost_table_is_derived_from_the_printed_launches(run) -> None:
    assert cost_table(run) in REPORT.read_text()
