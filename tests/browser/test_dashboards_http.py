"""The dashboard pages over HTTP without a browser (always run): status codes, escaping in the
HTML itself, the script-safe JSON, the assets, and Optuna's importances of a real study."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.dashboards import mount_static, router
from api.dashboards.render import script_json
from tests.browser.dashdata import (
    CLIENT_BOUND_CONFIG,
    CURVE_LADDER,
    CURVE_STUDY,
    NO_DEFAULTS_STUDY,
    OLD_STUDY,
    curve_study,
    no_defaults_study,
    old_study,
)
from tests.studykit import (
    budget_free_study,
    make_context,
    make_repo,
    memory_confirmation_context,
    store_claim,
)
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import Objective
from tuner.errors import UsageError
from tuner.results.importance import param_importances
from tuner.study.loop import run_study
from tuner.testing.fake_runner import FakeRunner

HOSTILE = "<script>alert(1)</script>&<img src=x onerror=alert(2)>"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Repository]:
    url = f"sqlite:///{tmp_path_factory.mktemp('http') / 'db.sqlite'}"
    repo = make_repo(url)
    ctx = make_context(url, name="s1", trials=6, enqueue=[{"gpu_memory_utilization": 0.95}])
    run_study(ctx, FakeRunner(max_utilization=0.9), repo)
    ctx = make_context(url, name=HOSTILE, trials=1)
    run_study(ctx, FakeRunner(), repo)
    return url, repo


def _app(repo: Repository, storage_url: str | None) -> FastAPI:
    # The contract the API's create_app fulfils: the repository (and the URL) on app.state.
    app = FastAPI()
    app.state.repo = repo
    app.state.storage_url = storage_url
    app.include_router(router)
    mount_static(app)
    return app


@pytest.fixture()
def client(db: tuple[str, Repository]) -> Iterator[TestClient]:
    with TestClient(_app(db[1], db[0])) as c:
        yield c


def _chart_data(html: str) -> dict[str, Any]:
    start = html.index('<script type="application/json" id="chart-data">')
    block = html[html.index(">", start) + 1 : html.index("</script>", start)]
    data: dict[str, Any] = json.loads(block)
    return data


def test_script_json_cannot_close_its_script_block_and_reads_back() -> None:
    value = {"name": "</script><script>alert(1)</script>", "x": float("nan"), "s": "a&b\u2028"}
    text = script_json(value)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {**value, "x": None}


def test_pages_answer_and_unknown_things_are_404_pages(client: TestClient) -> None:
    for path in ("/ui/", "/ui/studies/s1", f"/ui/studies/{quote(HOSTILE, safe='')}"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert r.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in r.headers["content-security-policy"]
    missing = client.get("/ui/studies/nope")
    assert missing.status_code == 404 and "no study named" in missing.text
    assert "overview lists the studies" in missing.text
    assert client.get("/ui/compare/99").status_code == 404


def test_any_other_ui_address_is_the_html_404_page_and_head_answers(
    client: TestClient, db: tuple[str, Repository]
) -> None:
    # These were JSON answers (422, 404) or, past the storage's integers, a 500.
    odd = (
        "/ui/compare/abc",
        "/ui/compare/9223372036854775808",
        "/ui/compare/0",
        "/ui/nope",
        "/ui/compare/%E2%91%A0",
        "/ui/compare/%C2%B2",
    )  # ① and ² are digits to isdigit()
    for path in odd:
        r = client.get(path)
        assert r.status_code == 404, path
        assert r.headers["content-type"].startswith("text/html"), path
        assert "/ui/" in r.text and "script-src 'self'" in r.headers["content-security-policy"]
    assert client.get("/ui/static/charts.js").status_code == 200  # not taken by the 404 route
    # HEAD answers as GET does (it fell through to the 404 route for every page but /ui/).
    comparison = store_claim(db[1], statement="head")
    for path in ("/ui/", "/ui/studies/s1", f"/ui/compare/{comparison}", "/ui/vendor/plotly.min.js"):
        head = client.head(path)
        assert head.status_code == 200 and head.content == b"", path
    assert client.head("/ui/nope").status_code == 404
    assert client.head("/ui/studies/nope").status_code == 404


def test_hostile_study_name_is_escaped_in_the_html(client: TestClient) -> None:
    html = client.get(f"/ui/studies/{quote(HOSTILE, safe='')}").text
    assert HOSTILE not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;&lt;img src=x onerror=alert(2)&gt;" in html
    overview = client.get("/ui/").text
    assert HOSTILE not in overview
    assert f'href="/ui/studies/{quote(HOSTILE, safe="")}"' in overview


def test_study_page_embeds_chart_data_with_optuna_importances(client: TestClient) -> None:
    html = client.get("/ui/studies/s1").text
    charts = _chart_data(html)
    assert set(charts) == {"history", "pareto", "pareto_cost", "importance", "ttft", "e2e"}
    assert charts["history"]["numbers"][0] == 0 and charts["history"]["scores"][0] == 1.0
    assert set(charts["importance"]["params"]) <= {"gpu_memory_utilization", "max_num_seqs"}
    assert "PED-ANOVA" in html
    assert "memory_exceeded" in html


def test_without_a_storage_url_importances_fall_back(db: tuple[str, Repository]) -> None:
    with TestClient(_app(db[1], None)) as c:
        html = c.get("/ui/studies/s1").text
    assert "PED-ANOVA" not in html and "fallback" in html


def test_assets_are_served_locally(client: TestClient) -> None:
    js = client.get("/ui/vendor/plotly.min.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert len(js.content) > 1_000_000 and b"plotly" in js.content[:2000].lower()
    assert client.get("/ui/static/charts.js").status_code == 200
    assert client.get("/ui/static/dashboard.css").status_code == 200
    for path in ("/ui/", "/ui/studies/s1"):
        assert "http://" not in client.get(path).text.replace("http://127", "")
        assert "https://" not in client.get(path).text


def test_unreadable_database_is_a_503_page_with_a_hint(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")  # never migrated
    try:
        with TestClient(_app(Repository(engine), None)) as c:
            r = c.get("/ui/")
    finally:
        engine.dispose()
    assert r.status_code == 503 and "storage unavailable" in r.text


def test_a_storage_error_behind_the_compare_page_is_the_503_page(
    db: tuple[str, Repository],
) -> None:
    """Looking up the study of a confirmation's comparison failed outside the page's guard:
    a JSON 503, where every other page answers with the HTML one."""
    import dataclasses

    from tuner.errors import StorageError

    url, repo = db
    comparison = store_claim(repo, statement="broken")

    class Broken(Repository):
        def get_comparison(self, comparison_id: int) -> Any:
            row = super().get_comparison(comparison_id)
            return None if row is None else dataclasses.replace(row, study_id=1)

        def list_studies(self, *args: Any, **kwargs: Any) -> Any:
            raise StorageError("the database went away")

    with TestClient(_app(Broken(make_engine(url)), url)) as client:
        r = client.get(f"/ui/compare/{comparison}")
    assert r.status_code == 503 and r.headers["content-type"].startswith("text/html")
    assert "storage unavailable" in r.text


def test_the_cost_chart_says_why_it_is_empty(tmp_path: Path) -> None:
    """With no measured trial it showed the price label ("$4.00/GPU-hour (catalog default...)")
    as its message; with trials and no price, why none is priced."""
    url = f"sqlite:///{tmp_path / 'cost.db'}"
    repo = make_repo(url)
    run_study(make_context(url, name="none", trials=1), FakeRunner(max_utilization=0.0), repo)
    run_study(make_context(url, name="cpu", trials=1, gpu="cpu"), FakeRunner(), repo)
    with TestClient(_app(repo, url)) as client:
        none = _chart_data(client.get("/ui/studies/none").text)["pareto_cost"]
        cpu = _chart_data(client.get("/ui/studies/cpu").text)["pareto_cost"]
    assert none["numbers"] == [] and none["empty"] == "No measured trial yet."
    assert cpu["numbers"] == [] and cpu["empty"].startswith("cost: no price per GPU-hour for cpu")
    # Priced, measured, and no load point met the SLO anywhere: no finite $/1M to draw.
    import sqlite3

    from tests.integration.test_launch_cli import insert_ladder_study

    path = tmp_path / "ladder.db"
    insert_ladder_study(f"sqlite:///{path}", name="missed")
    with sqlite3.connect(path) as db:
        for key in ("capacity_output_throughput", "capacity_load"):
            ends = ", ".join(f"'$.{key}.{end}', 0" for end in ("median", "low", "high"))
            db.execute(f"UPDATE tuner_trials SET metrics = json_set(metrics, {ends})")
    db.close()
    ladder = Repository(make_engine(f"sqlite:///{path}"))
    with TestClient(_app(ladder, None)) as client:
        missed = _chart_data(client.get("/ui/studies/missed").text)["pareto_cost"]
    assert missed["numbers"] == []
    assert missed["empty"] == "No trial has a cost: none served a load within the SLO."


def test_param_importances_of_a_real_study(db: tuple[str, Repository]) -> None:
    url, _ = db
    imp = param_importances(url, "s1", objective=Objective.THROUGHPUT)
    assert imp and set(imp) <= {"gpu_memory_utilization", "max_num_seqs"}
    assert sum(imp.values()) == pytest.approx(1.0)
    assert list(imp.values()) == sorted(imp.values(), reverse=True)
    with pytest.raises(UsageError, match="no Optuna study named 'nope'"):
        param_importances(url, "nope")
    assert param_importances(url, HOSTILE) == {}  # one measured trial: nothing to compare


def test_a_claim_comparison_shows_the_claim_and_what_ran(db: tuple[str, Repository]) -> None:
    repo = db[1]
    comparison_id = store_claim(repo, statement=HOSTILE)
    with TestClient(_app(repo, db[0])) as client:
        html = client.get(f"/ui/compare/{comparison_id}").text
    assert 'id="claim"' in html and "refuted" in html
    assert "measured 0.958 [0.752, 1.221]" in html
    assert HOSTILE not in html and "&lt;script&gt;alert(1)" in html
    assert "FAKE_ATTN × 3" in html  # what the launches ran, per side


def test_a_claim_quoting_its_article_shows_its_figure(db: tuple[str, Repository]) -> None:
    repo = db[1]
    comparison_id = store_claim(
        repo,
        article="vllm-flash-attn",
        figure="2k context: +10-20 % tokens/s",
        claimed={"scale": "ratio", "low": 1.1, "high": 1.2, "unit": "", "text": "×1.10 to 1.20"},
        verdict="inconclusive",
        setting="measured on tiny-ernie / h100; the article's setting was Qwen 14B / RTX 4090",
        measured={"ratio": 1.101, "low": 0.904, "high": 1.341, "text": "×1.101 [0.904, 1.341]"},
    )
    with TestClient(_app(repo, db[0])) as client:
        html = client.get(f"/ui/compare/{comparison_id}").text
    assert "2k context: +10-20 % tokens/s" in html and "(vllm-flash-attn)" in html
    assert "claimed ×1.10 to 1.20, measured ×1.101 [0.904, 1.341]" in html
    assert 'id="claim-setting"' in html and "Qwen 14B / RTX 4090" in html


def test_overview_counts_confirmation_launches_apart_from_the_search(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'confirmed.db'}"
    repo = make_repo(url)
    run_study(memory_confirmation_context(url), FakeRunner(), repo)
    study = repo.get_study("s1")
    assert study is not None and study.n_confirmation_launches == 6
    with TestClient(_app(repo, url)) as client:
        html = client.get("/ui/").text
    row = html.split('id="studies-table"', 1)[1].split("</tr>", 2)[1]
    assert "2 / 2" in row  # the search: 2 trials of 2 requested
    assert "+ 6 confirmation" in row


def test_the_pages_count_the_budget_as_the_study_loop_and_name_the_free_trials(
    tmp_path: Path,
) -> None:
    """A ruled-out first draw and an interrupted trial used no place in the budget: the study
    page said "6 of 4 search trials" and the overview "6 / 4"."""
    url = f"sqlite:///{tmp_path / 'free.db'}"
    repo = budget_free_study(url)
    free = "1 ruled out before launch, 1 interrupted"
    with TestClient(_app(repo, url)) as client:
        page = client.get("/ui/studies/s1").text
        overview = client.get("/ui/").text
    count = page.split('id="trial-count">', 1)[1].split("</span> ·", 1)[0]
    assert (
        " ".join(unescape(re.sub("<[^>]+>", "", count)).split()) == f"4 of 4 search trials + {free}"
    )
    row = overview.split('id="studies-table"', 1)[1].split("</tr>", 2)[1]
    assert "4 / 4" in row and f"+ {free}" in row


@pytest.fixture(scope="module")
def curves_db(tmp_path_factory: pytest.TempPathFactory) -> Repository:
    url = f"sqlite:///{tmp_path_factory.mktemp('curves') / 'db.sqlite'}"
    repo = make_repo(url)
    curve_study(repo, url)
    old_study(repo)
    return repo


def test_an_old_single_point_study_has_no_load_curves(curves_db: Repository) -> None:
    trials = curves_db.list_trials(OLD_STUDY, limit=None)
    assert trials and all(w.concurrency is None for t in trials for w in t.windows)
    with TestClient(_app(curves_db, None)) as client:
        r = client.get(f"/ui/studies/{OLD_STUDY}")
    assert r.status_code == 200
    assert 'id="load-curves"' not in r.text and "Load curves" not in r.text
    assert "capacity tok/s" not in r.text and "client-flag" not in r.text
    assert set(_chart_data(r.text)) == {
        "history",
        "pareto",
        "pareto_cost",
        "importance",
        "ttft",
        "e2e",
    }
    assert r.text.count('<tr id="trial-') == len(trials)


def test_a_curve_study_page_embeds_one_curve_per_trial(curves_db: Repository) -> None:
    trials = curves_db.list_trials(CURVE_STUDY, limit=None)
    with TestClient(_app(curves_db, None)) as client:
        html = client.get(f"/ui/studies/{CURVE_STUDY}").text
    assert 'id="load-curves"' in html
    charts = _chart_data(html)
    curves = charts["curve_throughput"]["trials"]
    assert [c["number"] for c in curves] == [t.number for t in trials]
    assert charts["curve_latency"]["slo"] == {"ttft_p99_ms": 40.0, "e2e_p99_ms": 60.0}
    assert charts["curve_latency"]["x_title"] == "load (concurrent streams)"
    for curve, trial in zip(curves, trials, strict=True):
        assert curve["load"] == [float(c) for c in CURVE_LADDER]
        per_stream = [g / c for g, c in zip(curve["per_gpu"], CURVE_LADDER, strict=True)]
        assert curve["per_stream"] == pytest.approx(per_stream)  # one GPU: per GPU = server
        chosen = trial.metrics["capacity_load"].median
        assert curve["load"][curve["capacity"]] == chosen
        flagged = "client-bound" if trial.config == CLIENT_BOUND_CONFIG else ""
        assert curve["caveats"] == ["", "", flagged]
    assert html.count('class="badge caveat client-flag"') == 1
    assert html.count('<td class="num capacity">') == len(trials)


def test_medians_show_their_window_range_as_the_footer_says(
    client: TestClient, db: tuple[str, Repository]
) -> None:
    """Each median of the trials table and of the overview's recommendation has its range over
    the launch's windows beside it (the footer promises '[ranges] over those windows')."""
    from api.dashboards.render import fmt

    repo = db[1]
    trial = next(t for t in repo.list_trials("s1", limit=None) if t.metrics)
    thr = trial.metrics["output_throughput"]
    assert len(thr.values) > 1 and thr.low < thr.high
    shown = f"[{fmt(thr.low)}, {fmt(thr.high)}]"
    html = client.get("/ui/studies/s1").text
    row = html[html.index(f'id="trial-{trial.number}"') :]
    assert shown in row[: row.index("</tr>")]
    assert "[ranges] over those windows" in html
    overview = client.get("/ui/").text
    table = overview[overview.index('id="best-table"') : overview.index("</table>")]
    assert table.count("range over the launch's measurement windows") >= 2  # thr, E2E


def test_importances_from_few_trials_say_so(client: TestClient) -> None:
    html = client.get("/ui/studies/s1").text
    charts = _chart_data(html)
    scored = len(charts["history"]["numbers"])
    assert 2 <= scored < 10
    assert f"From {scored} scored trials: with fewer than ten, a rough guide" in html


def test_a_study_without_the_defaults_shows_its_raw_history_and_why_it_has_no_scores(
    tmp_path: Path,
) -> None:
    """A score is a ratio to vLLM's defaults: where their trial failed the page had no history
    at all; it shows the objective's main metric as measured, and says why."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    repo = make_repo(url)
    no_defaults_study(repo)
    trials = repo.list_trials(NO_DEFAULTS_STUDY, limit=None)
    assert [t.status.value for t in trials] == ["failed", "complete", "complete"]
    with TestClient(_app(repo, None)) as client:
        html = client.get(f"/ui/studies/{NO_DEFAULTS_STUDY}").text
    history = _chart_data(html)["history"]
    assert history["numbers"] == [1, 2]
    thr = [t.metrics["output_throughput"].median for t in trials[1:]]
    assert history["scores"] == pytest.approx(thr)
    assert history["y_title"] == history["metric"] == "output throughput (tok/s)"
    note = unescape(html[html.index('id="no-score-note"') :])
    note = note[: note.index("</p>")]
    assert "a score is a ratio to the defaults' measurement" in note
    assert "vLLM's defaults did not complete (#0 start_failed)" in note
    assert "output throughput (tok/s)" in note and "tuner compare --a defaults" in note
    # A study with its defaults measured has scores, and no such note.
    scored = make_context(url, name="scored", trials=2)
    run_study(scored, FakeRunner(), repo)
    with TestClient(_app(repo, None)) as client:
        html = client.get("/ui/studies/scored").text
    assert "no-score-note" not in html and _chart_data(html)["history"]["metric"] == ""


def _contradicting_metric() -> dict[str, Any]:
    """Output tok/s whose medians go down (A 11.0, B 10.9) while the ratio of the launches'
    geometric means, the one tuner compare records, goes up."""
    from tuner.scoring.significance import ratio_interval

    a, b = [8.0, 11.0, 12.0], [10.9, 10.9, 11.0]
    interval = ratio_interval(a, b)
    assert interval is not None and interval.ratio > 1.0
    return {
        "metric": "output_throughput", "label": "output tok/s", "higher_is_better": True,
        "a": {"median": 11.0, "values": a}, "b": {"median": 10.9, "values": b},
        "ratio": interval.ratio, "low": interval.low, "high": interval.high,
        "verdict": "no significant difference",
    }  # fmt: skip


def test_the_compare_page_says_its_sides_are_medians_and_its_ratio_of_geometric_means(
    db: tuple[str, Repository],
) -> None:
    """Columns "A" 11.0 and "B" 10.9 beside "B / A" 1.025 (+2.5 %) read as a contradiction:
    the sides were medians, the ratio one of geometric means, and nothing said so."""
    from tuner.domain import ServingConfig

    repo = db[1]
    metric = _contradicting_metric()
    row = repo.add_comparison(
        model="tiny-ernie", gpu="h100", workload="w", a_config=ServingConfig(),
        b_config=ServingConfig(max_num_seqs=8), repeats=3,
        results={"confidence": 0.95, "a_label": "defaults", "b_label": "b", "metrics": [metric]},
        verdicts={"output_throughput": metric["verdict"], "overall": metric["verdict"]},
    )  # fmt: skip
    plain = repo.add_comparison(
        model="tiny-ernie", gpu="h100", workload="w", a_config=ServingConfig(),
        b_config=ServingConfig(max_num_seqs=8), repeats=3,
        results={"a": {"goodput": {"median": 2.0}}, "b": {"goodput": {"median": 3.0}}},
        verdicts={},
    )  # fmt: skip
    with TestClient(_app(repo, db[0])) as client:
        html = client.get(f"/ui/compare/{row.id}").text
        other = client.get(f"/ui/compare/{plain.id}").text
    head = html[html.index('id="metrics-table"') : html.index("</thead>")]
    assert '"num">A median<' in head and '"num">B median<' in head
    assert "B / A of geometric means" in head
    assert f"{metric['ratio']:.3f}" in html and "11.0" in html and "10.9" in html
    note = " ".join(unescape(html[html.index('id="ratio-note"') :]).split("</p>")[0].split())
    assert "the ratio of the sides' geometric means" in note
    assert "not B median / A median" in note
    # A comparison stored as a plain map has no such ratio: the page says what it shows.
    plain_head = other[other.index('id="metrics-table"') : other.index("</thead>")]
    assert "B / A<" in plain_head and "geometric" not in plain_head
    assert "or B median / A median where it stored none" in other


def test_an_open_loop_cost_is_labelled_an_upper_bound_on_the_study_page(tmp_path: Path) -> None:
    """`tuner best` says "at most" of a $/1M read at an open-loop load the server kept up with;
    the study page drew the same figures as the cost, and ranked a ladder on them unsaid."""
    from tests.integration.test_launch_cli import insert_ladder_study, insert_measured_study
    from tuner.domain import ServingConfig

    url = f"sqlite:///{tmp_path / 'open.db'}"
    configs = [ServingConfig(), ServingConfig(max_num_seqs=64)]
    insert_measured_study(url, configs, name="poisson", gpu="h100", workload="chat-heavy")
    insert_measured_study(url, configs, name="closed", gpu="h100", workload="chat")
    repo = insert_ladder_study(url, gpu="h100")
    with TestClient(_app(repo, None)) as c:
        poisson, closed, ladder = (
            c.get(f"/ui/studies/{n}").text for n in ("poisson", "closed", "ladder")
        )
    cost = _chart_data(poisson)["pareto_cost"]
    assert cost["at_most"] == [True, True] and "at most" in cost["x_title"]
    note = unescape(poisson[poisson.index('id="cost-bound-note"') :].split("</p>")[0])
    assert "≤: the $/1M of #0, #1 is at most that" in note
    assert "the server kept up with an open-loop load" in note and "concurrency_ladder" in note
    assert "(upper bounds)" in poisson and 'id="ranking-caveat"' not in poisson
    assert _chart_data(closed)["pareto_cost"]["at_most"] == [False, False]
    assert "cost-bound-note" not in closed and "(upper bounds)" not in closed
    caveat = unescape(ladder[ladder.index('id="ranking-caveat"') :].split("</p>")[0])
    assert "the capacity ranking rests on a lower bound" in caveat
    assert "add rates above 2 req/s to the rate_ladder" in caveat


def test_an_open_loop_capacity_is_labelled_a_lower_bound_on_the_study_page(
    tmp_path: Path, curves_db: Repository
) -> None:
    """`tuner size` says "at least" of a capacity read at the top rate of a rate ladder the
    server kept up with; the study page showed it as the capacity (the best configuration's
    card, the trials table, the load curves' hover)."""
    from tests.integration.test_launch_cli import insert_ladder_study

    repo = insert_ladder_study(f"sqlite:///{tmp_path / 'ladder.db'}", gpu="h100")
    with TestClient(_app(repo, None)) as c:
        ladder = c.get("/ui/studies/ladder").text
    with TestClient(_app(curves_db, None)) as c:
        closed = c.get(f"/ui/studies/{CURVE_STUDY}").text
    # #0 (the defaults, the best) kept up with 2 req/s; #1's capacity, at 1 req/s, is bracketed.
    best = ladder[ladder.index('id="best-capacity"') :].split("</div>")[0]
    assert "≥ " in best and "at least" in best
    row = {n: ladder[ladder.index(f'id="trial-{n}"') :].split("</tr>")[0] for n in (0, 1)}
    assert 'class="at-least"' in row[0] and "at-least" not in row[1]
    note = unescape(ladder[ladder.index('id="capacity-bound-note"') :].split("</p>")[0])
    assert "≥: the capacity of #0 is only a lower bound" in note
    assert "the server kept up with an open-loop load" in note and "concurrency_ladder" in note
    assert 'id="curve-bound-note"' in ladder
    curves = _chart_data(ladder)["curve_throughput"]["trials"]
    assert [t["capacity_at_least"] for t in curves] == [True, False]
    assert "at-least" not in closed and "capacity-bound-note" not in closed
    assert not any(t["capacity_at_least"] for t in _chart_data(closed)["curve_latency"]["trials"])


def _text(html: str) -> str:
    """The page's words, tags and spacing taken out."""
    return " ".join(unescape(re.sub("<[^>]+>", " ", html)).split())


def _best_rows(overview: str) -> dict[str, str]:
    """The overview's recommendations as words, by the study they are from."""
    table = overview.split('id="best-table"', 1)[1].split("</table>", 1)[0]
    rows = [_text(r) for r in table.split("<tbody>", 1)[1].split("</tr>")[:-1]]
    return {r.rsplit(" #", 1)[0].rsplit(" ", 1)[1]: r for r in rows}


def test_a_confirmation_verdict_the_full_canary_broke_is_not_recommended_on_the_pages(
    tmp_path: Path,
) -> None:
    """The confirmation kept vLLM's defaults and its full canary then broke them: the API and
    `tuner best` recommend #2 (tuner.scoring.canary_broken), while the overview (it read only
    complete trials) and the study page's headline recommended the defaults."""
    from tuner.load.canary import FULL, QUICK
    from tuner.results import recommendation

    url = f"sqlite:///{tmp_path / 'canary.db'}"
    repo = make_repo(url)
    shape = next(s for s in FULL if s not in QUICK)  # only the confirmation's full canary
    ctx = make_context(
        url,
        name="s",
        trials=3,
        confirm_launches=2,
        confirm_top=1,
        params=("max_num_seqs",),
        choices={"max_num_seqs": (1, 2)},
    )
    run_study(ctx, FakeRunner(canary_breaks={ctx.space.baseline(): shape}), repo)
    best = recommendation(repo, "s")
    assert best is not None and not best.is_baseline  # `tuner best`'s pick
    with TestClient(_app(repo, url)) as client:
        page = client.get("/ui/studies/s").text
        row = _best_rows(client.get("/ui/").text)["s"]
    assert "Recommendation after confirmation" not in page
    assert f"Best measured configuration: trial #{best.trial_number}" in _text(page)
    assert f'"recommended":{best.trial_number}' in page  # the charts' star
    assert row.endswith(f"s #{best.trial_number}") and "vLLM defaults" not in row
    assert "no candidate better than the defaults" not in row


def test_an_emulated_peak_above_the_emulated_gpu_is_warned_of_on_the_pages(
    tmp_path: Path,
) -> None:
    """The API, `tuner best` and `tuner size` warn that a peak above the emulated GPU's memory
    may not start on the real one; the study page and the overview showed the number alone."""
    import dataclasses

    from api.app import create_app
    from api.settings import ApiSettings

    url = f"sqlite:///{tmp_path / 'emu.db'}"
    repo = make_repo(url)
    emulated = make_context(url, trials=1, name="emu", gpu="a10g")
    run_study(dataclasses.replace(emulated, emulated=True), FakeRunner(memory_gib=26.0), repo)
    real = make_context(url, trials=1, name="real", gpu="a10g")
    run_study(
        dataclasses.replace(real, workload=real.workload.replace(name="chat")),
        FakeRunner(memory_gib=26.0),
        repo,
    )
    with TestClient(create_app(ApiSettings(storage=url))) as api:
        query = "/v1/recommendations?model=tiny-ernie&gpu=a10g&workload=smoke&emulated=true"
        best = api.get(query).json()
    (warning,) = best["warnings"]  # the API's
    with TestClient(_app(repo, url)) as client:
        page = _text(client.get("/ui/studies/emu").text)
        measured = _text(client.get("/ui/studies/real").text)
        overview = client.get("/ui/").text
    assert f"Caution: {warning}." in page
    assert f"{best['memory_gib']:.2f}" in page and "above the emulated GPU's 22.5 GiB" in page
    rows = _best_rows(overview)
    assert warning in rows["emu"] and "may not start" not in rows["real"]
    assert "may not start" not in measured  # a real A10G's own measurement: no such warning
    from tuner.results.recommend import recommendation

    # `tuner best` asked the trial alone whether it was emulated; the API asks the study too.
    best_here = recommendation(repo, "emu")
    assert best_here is not None and best_here.emulation_warning() == warning


def test_the_cost_texts_without_a_price_say_why_and_never_at(tmp_path: Path) -> None:
    """ "At cost: no price per GPU-hour for l4 …", and for a stored price that is none
    "At no cost: …" (read as free) while the cost chart said none served a load in the SLO."""
    url = f"sqlite:///{tmp_path / 'price.db'}"
    repo = make_repo(url)
    run_study(make_context(url, name="l4", trials=1, gpu="l4"), FakeRunner(), repo)
    run_study(make_context(url, name="odd", trials=1), FakeRunner(), repo)
    repo._update_study("odd", {"gpu_price": -5})
    with TestClient(_app(repo, url)) as client:
        l4, odd = (client.get(f"/ui/studies/{n}").text for n in ("l4", "odd"))
    why = "no cost: the study's stored gpu_price -5 is no price per GPU-hour"
    for html, said in ((l4, "cost: no price per GPU-hour for l4"), (odd, why)):
        note = _text(html.split('id="price-note">', 1)[1].split("</p>", 1)[0])
        assert note.startswith(said) and "At " not in note and "paid for" not in note
        assert _chart_data(html)["pareto_cost"]["empty"].startswith(said)


def test_a_confirmation_whose_candidate_never_measured_says_it_could_not_be_confirmed(
    tmp_path: Path,
) -> None:
    """Both launches of the candidate failed to start: its comparison has no interval, and the
    study page and the overview said no candidate was significantly better than the defaults,
    as if it had been measured and tied."""
    import dataclasses

    from tuner.domain import FailureClass, ServingConfig, TrialStatus

    class FailCandidate(FakeRunner):
        def run(self, config, workload, **kw):  # type: ignore[no-untyped-def]
            done = len(self.calls)
            result = super().run(config, workload, **kw)
            if done < 3 or config == ServingConfig():  # the search, and the defaults after it
                return result
            return dataclasses.replace(
                result,
                status=TrialStatus.FAILED,
                failure=FailureClass.START_FAILED,
                failure_detail="boom",
                metrics={},
                windows=(),
            )

    url = f"sqlite:///{tmp_path / 'unmeasured.db'}"
    repo = make_repo(url)
    ctx = make_context(
        url,
        name="s",
        trials=3,
        confirm_launches=2,
        confirm_top=1,
        params=("max_num_seqs",),
        choices={"max_num_seqs": (8, 64)},
        enqueue=[{"max_num_seqs": 64}, {"max_num_seqs": 8}],
    )
    run_study(ctx, FailCandidate(), repo)
    with TestClient(_app(repo, url)) as client:
        page = _text(client.get("/ui/studies/s").text)
        row = _best_rows(client.get("/ui/").text)["s"]
    why = "could not be confirmed: a side could not be measured: B (start_failed ×2)"
    headline = page.split("Recommendation after confirmation:", 1)[1].split(" per metric:")[0]
    assert "vLLM's defaults no candidate measured" in headline and why in headline
    assert "significantly better" not in headline and "no significant difference" not in headline
    assert "no candidate measured" in row and why in row
    assert "no candidate better than the defaults" not in row
