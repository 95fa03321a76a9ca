"""The confirmation phase: candidates and defaults re-launched interleaved, and a recommendation
that names a winner only when the interval says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.studykit import make_context, make_repo, memory_confirmation_context
from tuner.domain import Objective, ServingConfig, TrialStatus
from tuner.results.recommend import recommendation
from tuner.scoring.significance import BETTER, NO_DIFFERENCE
from tuner.study.confirm import CONFIRM_NUMBER_BASE, DEFAULTS_LABEL, choose
from tuner.study.loop import run_study
from tuner.testing.fake_runner import FakeRunner


@pytest.fixture()
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'c.db'}"


def test_confirmation_runs_interleaved_and_finds_a_real_winner(db_url: str) -> None:
    repo = make_repo(db_url)
    # On the fake, utilization 0.5 holds throughput and latency and halves memory: a real,
    # large improvement for the memory objective.
    ctx = memory_confirmation_context(db_url)
    runner = FakeRunner()
    run_study(ctx, runner, repo)

    # Search (2 launches), then D A D A D A.
    assert len(runner.calls) == 2 + 6
    confirm_calls = runner.calls[2:]
    assert confirm_calls[0::2] == [ServingConfig()] * 3
    assert all(c.gpu_memory_utilization == 0.5 for c in confirm_calls[1::2])
    rows = repo.list_trials(ctx.name, phase="confirm", limit=None)
    assert [r.number for r in rows] == list(range(CONFIRM_NUMBER_BASE, CONFIRM_NUMBER_BASE + 6))
    assert all(r.status is TrialStatus.COMPLETE for r in rows)
    assert [r.is_baseline for r in rows] == [True, False] * 3

    comparisons = repo.list_comparisons(ctx.name)
    assert len(comparisons) == 1
    chosen = choose(comparisons, Objective.MEMORY)
    assert chosen is not None and chosen.verdict == BETTER
    assert chosen.config.gpu_memory_utilization == 0.5
    assert chosen.score_low > 1.0

    rec = recommendation(repo, ctx.name)
    assert rec is not None and rec.confirmed is not None
    assert "--gpu-memory-utilization 0.5" in rec.serve_command
    assert "better than vLLM's defaults" in rec.render()


def test_no_winner_when_the_candidate_only_matches_the_defaults(db_url: str) -> None:
    repo = make_repo(db_url)
    # max_num_seqs 64 is the default's behaviour under 4 streams: nothing to gain.
    ctx = make_context(
        db_url,
        trials=2,
        enqueue=[{"max_num_seqs": 64}],
        params=("max_num_seqs",),
        choices={"max_num_seqs": (64,)},
        confirm_launches=3,
        confirm_top=1,
    )
    run_study(ctx, FakeRunner(launch_spread=0.15), repo)
    chosen = choose(repo.list_comparisons(ctx.name), Objective.BALANCED)
    assert chosen is not None
    assert chosen.verdict == NO_DIFFERENCE and chosen.label == DEFAULTS_LABEL
    assert chosen.config == ServingConfig()
    # The evidence for keeping the defaults is the confirmation itself, linked for clients.
    assert chosen.comparison_id == repo.list_comparisons(ctx.name)[0].id
    rec = recommendation(repo, ctx.name)
    assert rec is not None and rec.is_baseline
    assert "no significant difference from defaults" in rec.render()


def test_confirmation_is_not_repeated_on_resume(db_url: str) -> None:
    repo = make_repo(db_url)
    ctx = make_context(
        db_url,
        trials=2,
        enqueue=[{"max_num_seqs": 64}],
        params=("max_num_seqs",),
        choices={"max_num_seqs": (64,)},
        confirm_launches=2,
        confirm_top=1,
    )
    run_study(ctx, FakeRunner(), repo)
    again = FakeRunner()
    run_study(ctx, again, repo, resume=True)
    assert again.calls == []
    assert len(repo.list_comparisons(ctx.name)) == 1


def test_the_study_page_reports_the_confirmation_not_single_launches(db_url: str) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from api.dashboards import mount_static, router
    from tuner.results.report import study_report

    repo = make_repo(db_url)
    ctx = memory_confirmation_context(db_url)
    run_study(ctx, FakeRunner(), repo)
    study = repo.get_study(ctx.name)
    assert study is not None
    report = study_report(
        study, repo.list_trials(ctx.name, limit=None), None, repo.list_comparisons(ctx.name)
    )
    assert (report.search_count, report.confirm_count) == (2, 6)
    # The search's history and best are the search's; confirmation launches are judged together.
    assert report.history.numbers == (0, 1)
    assert report.best is not None and report.best.phase == "search"
    assert report.confirmation is not None
    assert report.confirmation.confirmed.verdict == BETTER
    assert report.confirmation.comparison_ids == tuple(
        c.id for c in repo.list_comparisons(ctx.name)
    )

    app = FastAPI()
    app.state.repo, app.state.storage_url = repo, db_url
    app.include_router(router)
    mount_static(app)
    with TestClient(app) as client:
        html = client.get(f"/ui/studies/{ctx.name}").text
    assert 'id="confirmation"' in html and "better than the defaults" in html
    assert "2 of 2 search trials + 6 confirmation launches" in html
    assert f'href="/ui/compare/{report.confirmation.comparison_ids[0]}"' in html
    assert "Best single launch of the search" in html
    with TestClient(app) as client:
        overview_html = client.get("/ui/").text
    # The overview recommends what the confirmation chose, with its interval.
    assert "better</span> score ×" in overview_html
    assert "gpu_memory_utilization=<b>0.5</b>" in overview_html
