"""Every dashboard page in headless Chromium over a database made by a real study: the charts
render with the data the database holds, no JavaScript error, nothing loaded from elsewhere,
and hostile text stays text."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.browser.conftest import Probe, Served
from tests.browser.dashdata import (
    CLIENT_BOUND_CONFIG,
    CLIENT_BOUND_NOTE,
    CURVE_LADDER,
    CURVE_STUDY,
    IMG_PAYLOAD,
    LONG_LABEL,
    NO_DEFAULTS_STUDY,
    SCRIPT_PAYLOAD,
    STUDY,
    XSS_NOTES,
    XSS_STUDY,
    no_defaults_study,
)
from tuner.db.rows import TrialPhase
from tuner.domain import TrialStatus

_TRACES = """id => {
    const gd = document.getElementById(id);
    return (gd.data || []).map(t => ({type: t.type, x: (t.x || []).length, y: (t.y || []).length}));
}"""


def traces(page: Any, chart: str) -> list[dict[str, Any]]:
    """The plotly traces drawn in ``#chart``, after checking that an SVG was drawn there."""
    page.wait_for_selector(f"#{chart} .main-svg", timeout=10_000)
    result: list[dict[str, Any]] = page.evaluate(_TRACES, chart)
    return result


def test_study_page_draws_every_chart_from_the_database(
    probe: Probe, served: Served, screenshots: Path
) -> None:
    repo = served.db.repo
    complete = repo.list_trials(STUDY, status=TrialStatus.COMPLETE, limit=None)
    every = repo.list_trials(STUDY, limit=None)
    windows = sum(len(t.windows) for t in complete)
    assert len(complete) >= 2 and windows >= 2 * len(complete)

    response = probe.goto(f"/ui/studies/{STUDY}")
    assert response.status == 200
    page = probe.page

    history = traces(page, "chart-history")
    assert [t["type"] for t in history] == ["scatter", "scatter"]
    assert history[0]["x"] == history[0]["y"] == len(complete)

    pareto = traces(page, "chart-pareto")
    assert pareto[0]["x"] == len(complete)
    assert 1 <= pareto[1]["x"] <= len(complete)  # the front: non-dominated points only

    importance = traces(page, "chart-importance")
    assert importance[0]["type"] == "bar"
    params = page.evaluate("() => document.getElementById('chart-importance').data[0].y")
    assert params and set(params) <= {"gpu_memory_utilization", "max_num_seqs"}
    assert "PED-ANOVA" in page.inner_text("#chart-importance + .note")

    for chart in ("chart-ttft", "chart-e2e"):
        boxes = traces(page, chart)
        assert [t["type"] for t in boxes] == ["box", "box"]
        assert boxes[0]["y"] == boxes[1]["y"] == windows  # every window of every trial

    rows = page.locator("#trials-table tbody tr")
    assert rows.count() == len(every)
    assert page.locator("#trials-table .badge.finding").first.inner_text() == "memory_exceeded"
    provenance = page.text_content(".provenance") or ""
    for fact in ("tiny-ernie", "h100", "0.32.0", "smoke", "windows per trial"):
        assert fact in provenance
    page.screenshot(path=str(screenshots / "study.png"), full_page=True)
    probe.assert_clean()


def test_overview_links_the_best_configuration_to_its_study(
    probe: Probe, served: Served, screenshots: Path
) -> None:
    assert probe.goto("/ui/").status == 200
    page = probe.page
    best = page.locator("#best-table tbody tr")
    assert best.count() == 2  # the real study and the hostile one
    row = best.filter(has_text="smoke").filter(has=page.locator(f'a:text-is("{STUDY}")'))
    assert row.count() == 1
    page.screenshot(path=str(screenshots / "overview.png"), full_page=True)
    # At 1280 px every table fits its card (the studies table's notes column, even empty, had
    # pushed it into a scroll bar), and a study's name is not broken at its hyphens.
    for table in ("#best-table", "#studies-table"):
        wrap = page.locator(table).locator("xpath=..")
        assert wrap.evaluate("w => w.scrollWidth - w.clientWidth") <= 0, table
    name = page.locator(f'#studies-table a:text-is("{STUDY}")')
    box = name.bounding_box()
    assert box is not None and box["height"] < 24  # one line
    row.locator(f'a:text-is("{STUDY}")').click()
    page.wait_for_load_state("load")
    assert page.inner_text("#study-name") == STUDY
    probe.assert_clean()


def test_compare_page_draws_one_ratio_per_metric(
    probe: Probe, served: Served, screenshots: Path
) -> None:
    row = served.db.repo.get_comparison(served.db.comparison_id)
    assert row is not None
    with_ratio = [m for m in row.results["metrics"] if m["ratio"] is not None]
    assert probe.goto(f"/ui/compare/{row.id}").status == 200
    page = probe.page
    (ratio,) = traces(page, "chart-ratio")
    assert ratio["x"] == ratio["y"] == len(with_ratio) >= 5
    assert page.locator("#metrics-table tbody tr").count() == len(row.results["metrics"])
    assert page.inner_text("#overall") == row.verdicts["overall"]
    assert page.inner_text("#b-label") == "max_num_seqs=16"
    page.screenshot(path=str(screenshots / "compare.png"), full_page=True)
    probe.assert_clean()


_OVERFLOW = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"


def test_long_arm_labels_wrap_inside_the_page(
    probe: Probe, served: Served, screenshots: Path
) -> None:
    assert probe.goto(f"/ui/compare/{served.db.long_comparison_id}").status == 200
    page = probe.page
    traces(page, "chart-ratio")
    assert page.inner_text("#b-label") == LONG_LABEL + ",max_num_seqs=16"
    assert page.evaluate(_OVERFLOW) <= 0  # nothing runs off the right edge
    cards = page.locator(".grid > section.card")
    assert cards.count() == 2  # A's and B's
    for i in range(2):
        card, title = cards.nth(i), cards.nth(i).locator("h2")
        card_box, title_box = card.bounding_box(), title.bounding_box()
        assert card_box and title_box
        # The title's text stays within its card (scrollWidth counts text that overflows).
        assert title.evaluate("h => h.scrollWidth <= h.clientWidth")
        assert title_box["x"] + title_box["width"] <= card_box["x"] + card_box["width"]
    page.screenshot(path=str(screenshots / "compare-long-labels.png"), full_page=True)
    probe.assert_clean()


@pytest.mark.parametrize("page_of", ["study", "overview", "compare"])
def test_hostile_text_is_shown_literally_and_never_runs(
    probe: Probe, served: Served, screenshots: Path, page_of: str
) -> None:
    path = {
        "study": f"/ui/studies/{quote(XSS_STUDY, safe='')}",
        "overview": "/ui/",
        "compare": f"/ui/compare/{served.db.xss_comparison_id}",
    }[page_of]
    assert probe.goto(path).status == 200
    page = probe.page
    if page_of == "study":
        traces(page, "chart-history")
        assert page.inner_text("#study-name") == XSS_STUDY
        assert page.inner_text("#study-notes") == XSS_NOTES
        failure = page.locator("#trials-table td.failure").nth(2)
        assert SCRIPT_PAYLOAD in (failure.locator(".detail").text_content() or "")
        assert IMG_PAYLOAD in (failure.locator("pre.log").text_content() or "")
        page.screenshot(path=str(screenshots / "xss-study.png"), full_page=True)
    elif page_of == "overview":
        assert XSS_NOTES in page.inner_text("#studies-table")
        links = page.locator("#studies-table a")
        assert links.all_inner_texts().count(XSS_STUDY) == 1
        links.get_by_text(XSS_STUDY, exact=True).click()  # its link, percent-encoded, works
        page.wait_for_load_state("load")
        assert page.inner_text("#study-name") == XSS_STUDY
    else:
        traces(page, "chart-ratio")
        assert page.inner_text("#a-label") == SCRIPT_PAYLOAD
        assert page.inner_text("#b-label") == IMG_PAYLOAD
    assert page.evaluate("() => window.__xss") is None
    assert page.locator("img").count() == 0  # the payload's <img> never became an element
    probe.assert_clean()


_CURVE_TRACES = """id => document.getElementById(id).data.map(t => ({
    meta: t.meta || "", name: t.name || "", yaxis: t.yaxis || "y",
    x: (t.x || []).filter(v => v !== null).length, y: (t.y || []).filter(v => v !== null).length,
    symbols: Array.isArray((t.marker || {}).symbol) ? t.marker.symbol : [],
}))"""

# Boxes of a chart's parts: every subplot's plot area, the x axis titles and the legend.
_CURVE_BOXES = """id => {
    const box = e => { const r = e.getBoundingClientRect();
        return {x: r.left, y: r.top, w: r.width, h: r.height}; };
    const el = document.getElementById(id);
    return {
        plots: [...el.querySelectorAll(".draglayer .nsewdrag")].map(box),
        xtitles: [...el.querySelectorAll(".g-xtitle, .g-x2title")]
            .filter(e => e.textContent).map(box),
        ytitles: [...el.querySelectorAll(".g-ytitle, .g-y2title")].map(e => e.textContent),
        legend: box(el.querySelector(".legend")),
        chart: box(el),
        points: el.querySelectorAll(".scatterlayer .trace .point").length,
        shapes: el.querySelectorAll(".shapelayer path").length,
    };
}"""


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def _readable(boxes: dict[str, Any]) -> None:
    """The legend covers no plot area and no axis title, and stays inside its chart."""
    legend, chart = boxes["legend"], boxes["chart"]
    for part in boxes["plots"] + boxes["xtitles"]:
        assert not _overlap(legend, part), (legend, part)
    assert legend["y"] + legend["h"] <= chart["y"] + chart["h"] + 1
    assert (
        legend["x"] >= chart["x"] - 1 and legend["x"] + legend["w"] <= chart["x"] + chart["w"] + 1
    )


def test_load_curves_draw_one_line_per_trial_with_capacity_and_client_flags(
    probe: Probe, served: Served, screenshots: Path
) -> None:
    repo = served.db.repo
    trials = [
        t
        for t in repo.list_trials(CURVE_STUDY, status=TrialStatus.COMPLETE, limit=None)
        if t.phase is TrialPhase.SEARCH
    ]
    assert len(trials) == 4
    assert probe.goto(f"/ui/studies/{CURVE_STUDY}").status == 200
    page = probe.page
    n = len(CURVE_LADDER)
    flagged = next(t for t in trials if t.config == CLIENT_BOUND_CONFIG)

    # (a) throughput per GPU against throughput per stream: one line of n points per trial.
    page.wait_for_selector("#chart-curve-throughput .main-svg", timeout=10_000)
    drawn = page.evaluate(_CURVE_TRACES, "chart-curve-throughput")
    lines = [t for t in drawn if t["meta"] == "trial"]
    assert [t["name"] for t in lines] == [
        f"#{t.number} {t.config_label}" + (" (baseline)" if t.is_baseline else "") for t in trials
    ]
    assert lines[0]["name"] == "#0 defaults (baseline)"
    assert all(t["x"] == t["y"] == n for t in lines)
    (rings,) = [t for t in drawn if t["meta"] == "capacity"]
    assert rings["x"] == len(trials)  # every trial met the SLO at some point
    symbols = {t["name"]: t["symbols"] for t in lines}
    assert symbols[f"#{flagged.number} {flagged.config_label}"] == ["circle", "circle", "x"]
    assert symbols["#0 defaults (baseline)"] == ["square"] * n
    boxes = page.evaluate(_CURVE_BOXES, "chart-curve-throughput")
    assert boxes["points"] == len(trials) * n + len(trials)  # the lines' markers and the rings
    assert boxes["ytitles"] == ["output tok/s per GPU"]
    _readable(boxes)

    # (b) P99 TTFT and P99 E2E against load, with the SLO bounds.
    page.wait_for_selector("#chart-curve-latency .main-svg", timeout=10_000)
    drawn = page.evaluate(_CURVE_TRACES, "chart-curve-latency")
    lines = [t for t in drawn if t["meta"] == "trial"]
    assert len(lines) == 2 * len(trials)
    assert sorted(t["yaxis"] for t in lines) == ["y"] * len(trials) + ["y2"] * len(trials)
    assert all(t["x"] == t["y"] == n for t in lines)
    boxes = page.evaluate(_CURVE_BOXES, "chart-curve-latency")
    assert boxes["ytitles"] == ["P99 TTFT (ms)", "P99 E2E (ms)"]
    assert boxes["shapes"] == 2  # the TTFT and E2E bounds of the SLO
    assert boxes["points"] == 2 * (len(trials) * n + len(trials))
    _readable(boxes)
    note = page.inner_text("#load-curves .note")
    assert "Little's law" in note and "client-bound" in note

    # The trials table: the capacity at its load, and the client-bound flag with its notes.
    headers = page.locator("#trials-table thead th").all_inner_texts()
    assert "capacity tok/s" in headers
    row = page.locator(f"#trial-{flagged.number}")
    assert "at 4 streams" in row.locator("td.capacity").inner_text()  # 8 was client-bound
    flag = row.locator(".client-flag")
    windows = len(flagged.windows)
    assert flag.inner_text() == f"client-bound: 1 of {windows} windows"
    assert CLIENT_BOUND_NOTE in (flag.get_attribute("title") or "")
    assert page.locator("#trials-table .client-flag").count() == 1
    assert page.locator("#trials-table td.capacity").count() == len(trials)

    page.screenshot(path=str(screenshots / "study-load-curves.png"), full_page=True)
    page.locator("#load-curves").screenshot(path=str(screenshots / "load-curves.png"))
    probe.assert_clean()


_HISTORY = """() => {
    const gd = document.getElementById("chart-history");
    return {names: gd.data.map(t => t.name), y: gd.data[0].y, ytitle: gd.layout.yaxis.title.text};
}"""


def test_a_study_without_the_defaults_draws_its_raw_history_and_says_why(
    probe: Probe, served: Served, screenshots: Path
) -> None:
    """Its history chart was the empty note 'No measured trial yet.' over measured trials.
    (Last in the module: the study it adds would be one more on the overview.)"""
    no_defaults_study(served.db.repo)
    measured = served.db.repo.list_trials(
        NO_DEFAULTS_STUDY, status=TrialStatus.COMPLETE, limit=None
    )
    assert probe.goto(f"/ui/studies/{quote(NO_DEFAULTS_STUDY, safe='')}").status == 200
    page = probe.page
    assert [t["x"] for t in traces(page, "chart-history")] == [len(measured)] * 2
    drawn = page.evaluate(_HISTORY)
    assert drawn["names"] == ["output throughput (tok/s)", "best so far (SLO met)"]
    assert drawn["y"] == [t.metrics["output_throughput"].median for t in measured]
    assert drawn["ytitle"] == "output throughput (tok/s)"
    note = page.inner_text("#no-score-note")
    assert "a score is a ratio to the defaults' measurement" in note
    assert "did not complete (#0 start_failed)" in note
    page.locator("#chart-history").screenshot(path=str(screenshots / "history-no-defaults.png"))
    probe.assert_clean()


_CURVE_HOVERS = """id => document.getElementById(id).data
    .filter(t => t.meta === "trial").map(t => ({name: t.name, text: Array.from(t.text || [])}))"""


def test_an_open_loop_capacity_reads_at_least_on_the_study_page(
    probe: Probe, served: Served, screenshots: Path
) -> None:
    """A rate ladder whose top rate the server kept up with: `tuner size` says "at least" of
    the capacity read there, and the study page showed it as the capacity. (Adds a study: it
    runs after the overview's test.)"""
    from tests.integration.test_launch_cli import insert_ladder_study

    insert_ladder_study(served.db.url, name="ladder-h100", gpu="h100")
    assert probe.goto("/ui/studies/ladder-h100").status == 200
    page = probe.page
    # #0 (the defaults, the best) kept up with 2 req/s; #1's capacity, at 1 req/s, is bracketed.
    card = page.inner_text("#best-capacity")
    assert card.startswith("≥ ") and "at 2 req/s (at least: a lower bound)" in card
    assert page.inner_text("#trial-0 td.capacity").startswith("≥ ")
    assert "≥" not in page.inner_text("#trial-1 td.capacity")
    note = page.inner_text("#capacity-bound-note")
    assert note.startswith("≥: the capacity of #0 is only a lower bound: the server kept up")
    assert "under the trials table" in page.inner_text("#curve-bound-note")
    traces(page, "chart-curve-throughput")
    hovers = {t["name"]: t["text"] for t in page.evaluate(_CURVE_HOVERS, "chart-curve-throughput")}
    top, other = hovers["#0 defaults (baseline)"], hovers["#1 max_num_seqs=64"]
    assert "<b>capacity</b>" in top[1] and "<b>at least</b>: the server kept up" in top[1]
    assert "<b>capacity</b>" in other[0] and "at least" not in " ".join(other)
    page.locator("#chart-curve-throughput").scroll_into_view_if_needed()
    ring = page.locator("#chart-curve-throughput .scatterlayer .trace").nth(0).locator(".point")
    box = ring.nth(1).bounding_box()
    assert box is not None  # plotly's drag layer takes the pointer: move the mouse there
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    hover = page.locator("#chart-curve-throughput .hoverlayer .hovertext")
    hover.wait_for(timeout=5_000)
    assert "at least" in (hover.text_content() or "")
    page.locator("#load-curves").screenshot(path=str(screenshots / "load-curves-at-least.png"))
    page.locator("section.card.best").screenshot(path=str(screenshots / "best-at-least.png"))
    page.locator("#trials-table").scroll_into_view_if_needed()
    page.locator("section.card", has=page.locator("#trials-table")).screenshot(
        path=str(screenshots / "trials-at-least.png")
    )
    probe.assert_clean()


def test_a_study_with_nothing_measured_says_so_on_its_cost_chart(
    probe: Probe, served: Served
) -> None:
    """The cost chart's empty note was the price label ("$4.00/GPU-hour (catalog default...)").
    (Last in the module: the study it adds would be one more on the overview.)"""
    from tuner.domain import FailureClass, ServingConfig, TrialResult

    repo, name = served.db.repo, "nothing-measured"
    repo.create_study(name=name, optuna_study_name=name, model="tiny-ernie", model_source=None,
                      gpu="h100", workload="smoke", objective="balanced", slo={}, spec={},
                      emulated=False, vllm_version="0.32.0", n_trials_requested=1)  # fmt: skip
    failed = TrialResult(ServingConfig(), TrialStatus.FAILED, failure=FailureClass.START_FAILED)
    repo.finish_trial(
        repo.start_trial(name, 0, failed.config, is_baseline=True), failed, None, None
    )
    assert probe.goto(f"/ui/studies/{name}").status == 200
    assert probe.page.inner_text("#chart-pareto-cost") == "No measured trial yet."
    probe.assert_clean()
