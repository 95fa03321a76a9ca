"""The study page's two Pareto fronts in headless Chromium: throughput per GPU and $ per 1M
output tokens, each against P99 latency, with vLLM's defaults and the recommendation marked
where the database puts them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import Probe, Served
from tests.browser.dashdata import STUDY
from tuner.catalog.gpus import CATALOG_PRICES
from tuner.results.recommend import recommendation
from tuner.scoring.cost import usd_per_million

_TRACES = """id => (document.getElementById(id).data || []).map(
    t => ({name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || [])}))"""


def _traces(page: Any, chart: str) -> dict[str, dict[str, list[float]]]:
    page.wait_for_selector(f"#{chart} .main-svg", timeout=10_000)
    return {t["name"]: t for t in page.evaluate(_TRACES, chart)}


def test_both_pareto_fronts_mark_the_defaults_and_the_recommendation(
    probe: Probe, served: Served, screenshots: Path
) -> None:
    repo = served.db.repo
    rec = recommendation(repo, STUDY)
    assert rec is not None
    base = next(t for t in repo.list_trials(STUDY, limit=None) if t.is_baseline)
    best = repo.get_trial(STUDY, rec.trial_number)
    assert best is not None
    price = CATALOG_PRICES["h100"]  # the study's GPU: the catalog's default price

    assert probe.goto(f"/ui/studies/{STUDY}").status == 200
    page = probe.page
    speed = _traces(page, "chart-pareto")
    assert list(speed)[:2] == ["measured trials", "Pareto front"]
    thr = best.metrics["output_throughput"].median
    assert speed["recommended"]["x"] == pytest.approx([thr])  # one server, one GPU or CPU
    assert speed["recommended"]["y"] == pytest.approx([best.metrics["e2e_p99_ms"].median])
    assert speed["vLLM's defaults"]["x"] == pytest.approx(
        [base.metrics["output_throughput"].median]
    )

    cost = _traces(page, "chart-pareto-cost")
    assert list(cost)[:2] == ["measured trials", "Pareto front"]
    assert cost["recommended"]["x"] == pytest.approx([usd_per_million(thr, price)])
    assert cost["vLLM's defaults"]["x"] == pytest.approx(
        [usd_per_million(base.metrics["output_throughput"].median, price)]
    )
    assert len(cost["measured trials"]["x"]) == len(speed["measured trials"]["x"])
    note = page.inner_text("#price-note")
    assert f"${price:.2f}/GPU-hour" in note and "catalog default" in note

    page.set_viewport_size({"width": 1280, "height": 900})
    page.locator("#chart-pareto").scroll_into_view_if_needed()
    grid = page.locator(".grid")
    grid.screenshot(path=str(screenshots / "pareto.png"))
    probe.assert_clean()


_HOVER = """id => (document.getElementById(id).data || []).map(t => ({
    name: t.name, template: t.hovertemplate || "", custom: Array.from(t.customdata || [])}))"""


def test_an_open_loop_cost_chart_says_at_most_per_trial(
    probe: Probe, served: Served, screenshots: Path
) -> None:
    """Poisson arrivals the server kept up with: each trial's $/1M is only an upper bound, and
    the chart showed it as the cost."""
    from tests.integration.test_launch_cli import insert_measured_study
    from tuner.domain import ServingConfig

    configs = [ServingConfig(), ServingConfig(max_num_seqs=64)]
    insert_measured_study(
        served.db.url, configs, name="poisson-h100", gpu="h100", workload="chat-heavy"
    )
    assert probe.goto("/ui/studies/poisson-h100").status == 200
    page = probe.page
    _traces(page, "chart-pareto-cost")
    traces = {t["name"]: t for t in page.evaluate(_HOVER, "chart-pareto-cost")}
    for name in ("measured trials", "recommended", "vLLM's defaults"):
        assert traces[name]["custom"] and set(traces[name]["custom"]) == {"≤ "}, traces[name]
        assert traces[name]["template"].count("%{customdata}$") == 1
    title = page.text_content("#chart-pareto-cost .xtitle") or ""
    assert "at most" in title
    note = page.inner_text("#cost-bound-note")
    assert "≤: the $/1M of #0, #1 is at most that" in note
    page.locator("#chart-pareto-cost").scroll_into_view_if_needed()
    star = page.locator("#chart-pareto-cost .scatterlayer .trace .point").last.bounding_box()
    assert star is not None  # plotly's drag layer takes the pointer: move the mouse there
    page.mouse.move(star["x"] + star["width"] / 2, star["y"] + star["height"] / 2)
    hover = page.locator("#chart-pareto-cost .hoverlayer .hovertext")
    hover.wait_for(timeout=5_000)
    assert "≤ $" in (hover.text_content() or "")
    card = page.locator("section.card", has=page.locator("#chart-pareto-cost"))
    card.screenshot(path=str(screenshots / "pareto-cost-open-loop.png"))
    probe.assert_clean()
