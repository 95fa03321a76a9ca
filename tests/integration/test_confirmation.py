"""The confirmation phase: candidates and defaults re-launched interleaved, and a recommendation
that names a winner only when the interval says so."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.studykit import make_context, make_repo, memory_confirmation_context
from tuner.abtest.profile import record_launch
from tuner.db import Repository
from tuner.domain import Objective, ServingConfig, TrialStatus
from tuner.results.recommend import recommendation
from tuner.scoring.significance import BETTER, NO_DIFFERENCE
from tuner.study.confirm import CONFIRM_NUMBER_BASE, DEFAULTS_LABEL, choose
from tuner.study.loop import run_study
from tuner.study.sampling import open_optuna_study
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

    # Search (2 launches), then D A, A D, D A (counterbalanced).
    assert len(runner.calls) == 2 + 6
    confirm_calls = runner.calls[2:]
    defaults_at = [True, False, False, True, True, False]
    assert [c == ServingConfig() for c in confirm_calls] == defaults_at
    assert all(c.gpu_memory_utilization == 0.5 for c in confirm_calls if c != ServingConfig())
    rows = repo.list_trials(ctx.name, phase="confirm", limit=None)
    assert [r.number for r in rows] == list(range(CONFIRM_NUMBER_BASE, CONFIRM_NUMBER_BASE + 6))
    assert all(r.status is TrialStatus.COMPLETE for r in rows)
    assert [r.is_baseline for r in rows] == defaults_at

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


def _with_stored_confirmation(db_url: str, **row: Any) -> tuple[Repository, str]:
    """A study of two trials whose confirmation is the comparison ``_row(**row)`` stored with
    it (as the H100's was), and its name."""
    from tests.unit.test_confirm_choose import _row

    repo = make_repo(db_url)
    ctx = make_context(db_url, trials=2)  # no confirmation of its own
    run_study(ctx, FakeRunner(), repo)
    c = _row(**row)
    repo.add_comparison(
        model=c.model, gpu=c.gpu, workload=ctx.workload.name, a_config=c.a_config,
        b_config=c.b_config, repeats=3, results=c.results, verdicts=c.verdicts,
        study_name=ctx.name,
    )  # fmt: skip
    return repo, ctx.name


def _pages(repo: Repository, db_url: str, name: str) -> tuple[str, str]:
    """The study page's confirmation card and the overview page, as the dashboards serve them."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from api.dashboards import mount_static, router

    app = FastAPI()
    app.state.repo, app.state.storage_url = repo, db_url
    app.include_router(router)
    mount_static(app)
    with TestClient(app) as client:
        html = client.get(f"/ui/studies/{name}").text
        overview_html = client.get("/ui/").text
    card = html[html.index('id="confirmation"') :]
    return card[: card.index("</section>")], overview_html


def test_a_confirmation_every_candidate_lost_reads_worse(db_url: str) -> None:
    """The H100's Triton attention, confirmed -2.0 % [-3.2, -0.8] in output tok/s: `tuner best`
    and the study page said "no significant difference"; they say worse, with the interval."""
    repo, name = _with_stored_confirmation(db_url, thr="worse", thr_ratio=(0.980, 0.968, 0.992))
    rec = recommendation(repo, name)
    assert rec is not None and rec.is_baseline
    assert (
        "confirmation (fresh launches, interleaved): worse than vLLM's defaults: output tok/s "
        "x0.980 [0.968, 0.992]"
    ) in rec.render()
    assert "no significant difference from defaults" not in rec.render()

    card, overview_html = _pages(repo, db_url, name)
    badge = '<span class="badge verdict bad">every candidate worse than the defaults</span>'
    assert badge in card
    assert "no significant difference" not in card[: card.index("</h2>")]
    assert "decides by (#5: output tok/s ×0.980 [0.968, 0.992]): run vLLM's defaults" in card
    assert "no candidate better than the defaults" in overview_html


def test_an_inconclusive_confirmation_is_headed_as_such_on_the_study_page(db_url: str) -> None:
    """Its heading said "no significant difference" while the verdict was that nothing could
    be said (launches of one configuration disagreed far beyond their noise)."""
    thr = "inconclusive: launches of A disagreed (max/min 2.4)"
    repo, name = _with_stored_confirmation(db_url, thr=thr)
    card, _ = _pages(repo, db_url, name)
    head = card[: card.index("</h2>")]
    assert '<span class="badge verdict finding">inconclusive</span>' in head
    assert "no significant difference" not in head
    assert "inconclusive: launches of one configuration disagreed far beyond their noise" in card


# -- the decision design in a confirmation: known noise on the fake runner -----------------------

LAUNCH_SD, WINDOW_SD = 0.06, 0.06  # log scale, as tests/integration/test_decision_fake.py
BUDGET = 8
CANDIDATE = {"max_num_batched_tokens": 4096}  # not in the fake's performance model


def _decision_study(db_url: str, name: str) -> Any:
    ctx = make_context(
        db_url,
        trials=2,
        enqueue=[CANDIDATE],
        params=("max_num_batched_tokens",),
        choices={"max_num_batched_tokens": (4096,)},
        confirm_launches=3,
        confirm_top=1,
        objective="throughput",
        name=name,
    )
    spec = dataclasses.replace(ctx.spec, confirm_max_launches=BUDGET)
    return dataclasses.replace(ctx, spec=spec)


def _noisy(seed: int, gain: float, ctx: Any) -> FakeRunner:
    candidate = ctx.space.config_from(CANDIDATE)
    return FakeRunner(
        seed=seed,
        launch_sd=LAUNCH_SD,
        window_sd=WINDOW_SD,
        launch_spread=0.0,
        speedup={candidate: gain} if gain != 1.0 else None,
    )


def _calibrate(repo: Any, ctx: Any, seed: int) -> None:
    """Five launches of the defaults on the confirmation's key, as `tuner calibrate` stores."""
    runner = _noisy(seed, 1.0, ctx)
    for _ in range(5):
        result = runner.run(ctx.space.baseline(), ctx.workload)
        assert result.provenance is not None
        record_launch(
            repo,
            result,
            model=ctx.model,
            workload=ctx.workload.name,
            is_defaults=True,
            source="calibrate",
            run="calibrate:test",
        )


def test_a_known_gain_is_confirmed_within_the_launch_budget(db_url: str) -> None:
    repo = make_repo(db_url)
    ctx = _decision_study(db_url, "gain")
    _calibrate(repo, ctx, seed=100)
    run_study(ctx, _noisy(1, 1.2, ctx), repo)
    (row,) = repo.list_comparisons(ctx.name)
    decision = row.results["decision"]
    n = decision["launches"]["a"]
    assert decision["kind"] == "sequential" and decision["max_launches"] == BUDGET
    assert decision["stopped"] == "significant" and 3 <= n <= BUDGET
    assert decision["method"] == "pooled" and row.results["noise"]["launches"] == 5
    assert row.repeats == n and row.results["gpu_minutes"] > 0
    assert len(repo.list_trials(ctx.name, phase="confirm", limit=None)) == 2 * n
    chosen = choose([row], Objective.THROUGHPUT)
    assert chosen is not None and chosen.verdict == BETTER
    assert chosen.config == ctx.space.config_from(CANDIDATE)
    assert 1.0 < chosen.score_low <= 1.2 <= chosen.score_high
    thr = next(m for m in row.results["metrics"] if m["metric"] == "output_throughput")
    assert (chosen.score, chosen.score_low, chosen.score_high) == (
        thr["ratio"],
        thr["low"],
        thr["high"],
    )  # the throughput objective's score is the throughput: its pooled interval


@pytest.mark.parametrize("seed", range(4))
def test_a_candidate_without_gain_is_never_confirmed(db_url: str, seed: int) -> None:
    repo = make_repo(db_url)
    ctx = _decision_study(db_url, f"flat{seed}")
    _calibrate(repo, ctx, seed=200 + seed)
    run_study(ctx, _noisy(seed, 1.0, ctx), repo)
    (row,) = repo.list_comparisons(ctx.name)
    assert row.results["decision"]["launches"]["a"] <= BUDGET
    chosen = choose([row], Objective.THROUGHPUT)
    assert chosen is not None and chosen.verdict != BETTER
    assert chosen.label == DEFAULTS_LABEL and chosen.config == ServingConfig()


def test_without_a_budget_the_confirmation_takes_one_look(db_url: str) -> None:
    repo = make_repo(db_url)
    ctx = _decision_study(db_url, "fixed")
    ctx = dataclasses.replace(ctx, spec=dataclasses.replace(ctx.spec, confirm_max_launches=None))
    runner = _noisy(5, 1.0, ctx)
    run_study(ctx, runner, repo)
    assert len(runner.calls) == 2 + 6  # the search, then D A, A D, D A
    (row,) = repo.list_comparisons(ctx.name)
    assert row.results["decision"]["kind"] == "fixed" and row.repeats == 3


class _FasterThanSearched(dict):  # type: ignore[type-arg]
    """FakeRunner's speedup: x2 for any configuration but the defaults and max_num_seqs=64."""

    def get(self, config: Any, default: Any = None) -> Any:
        return 1.0 if config in (ServingConfig(), ServingConfig(max_num_seqs=64)) else 2.0


def test_a_study_given_more_trials_confirms_its_new_top(db_url: str) -> None:
    """More trials after the confirmation: the search found a better configuration, and the
    study kept the old verdict (the defaults) without a launch ("best: #N score 1.6", then
    "best of study: vLLM's defaults"). Now the new top is confirmed in a round of its own;
    the candidate confirmed before is not launched again."""
    repo = make_repo(db_url)
    first = make_context(
        db_url, trials=2, enqueue=[{"max_num_seqs": 64}], params=("max_num_seqs",),
        choices={"max_num_seqs": (64, 4)}, confirm_launches=2, confirm_top=1,
    )  # fmt: skip
    run_study(first, FakeRunner(), repo)
    (old,) = repo.list_comparisons(first.name)
    # The next search trial is max_num_seqs=4, whatever the sampler would draw.
    fast = ServingConfig(max_num_seqs=4)
    open_optuna_study(first, create=False).enqueue_trial(first.space.params_for(fast))
    more = dataclasses.replace(first, spec=dataclasses.replace(first.spec, trials=3))
    runner = FakeRunner(speedup=_FasterThanSearched())
    run_study(more, runner, repo, resume=True)
    new = [c for c in repo.list_comparisons(first.name) if c.id != old.id]
    assert [c.b_config for c in new] == [ServingConfig(max_num_seqs=4)], runner.calls
    # The new round launched its own defaults, interleaved with the new candidate.
    d, four = ServingConfig(), ServingConfig(max_num_seqs=4)
    assert runner.calls[-4:] == [d, four, four, d]


def test_a_confirmation_that_chose_defaults_missing_the_slo_gives_way(tmp_path: Path) -> None:
    """The defaults missed the SLO (P99 E2E 30.6 ms for 30), three trials met it, and the
    confirmation, which compares scores, found no difference: `tuner best` recommended the
    defaults under "[no trial met the SLO; closest shown]". The best trial that meets it is
    recommended, everywhere the recommendation is read, and the text says why."""
    from tuner.results import recommendation
    from tuner.study import best_across, choose, study_objective

    url = f"sqlite:///{tmp_path / 'slo.db'}"
    repo = make_repo(url)
    sizes = (64, 32, 16)
    ctx = make_context(url, trials=4, name="s", params=("max_num_seqs",),
                       choices={"max_num_seqs": sizes},
                       enqueue=[{"max_num_seqs": v} for v in sizes],
                       slo="e2e_p99=30ms", confirm_launches=3, confirm_top=1,
                       objective="throughput")  # fmt: skip
    run_study(ctx, FakeRunner(seed=2), repo)
    trials = repo.list_trials("s", limit=None)
    search = {t.number: t for t in trials if t.phase == "search"}
    assert search[0].metrics["e2e_p99_ms"].median > 30 > search[2].metrics["e2e_p99_ms"].median
    study = repo.get_study("s")
    assert study is not None
    confirmed = choose(repo.list_comparisons("s"), study_objective(study))
    assert confirmed is not None and confirmed.chose(0, True)  # the defaults, by score
    rec = recommendation(repo, "s")
    assert rec is not None and not rec.is_baseline and rec.feasible
    assert "its choice misses the SLO" in rec.render()
    ((_, top),) = best_across([(study, trials, study_objective(study), confirmed)])
    assert top.number == rec.trial_number  # what `tuner launch` serves
    from fastapi.testclient import TestClient

    from api.app import create_app
    from api.settings import ApiSettings

    with TestClient(create_app(ApiSettings(storage=repo))) as client:  # `tuner launch --api`
        asked = {"model": study.model, "gpu": study.gpu, "workload": study.workload_label}
        body = client.get("/v1/recommendations", params=asked).json()
    assert body["trial"] == rec.trial_number and body["feasible"], body
