"""Early stopping in a study (tuner.study.early): a trial far worse than the best at its first
window stops there, is recorded PRUNED/stopped_early with its partial numbers, is told to Optuna
as a measurement, and is never ranked; a trial as good as the best runs all its windows."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest

from tests.studykit import make_context, make_repo
from tuner.domain import FailureClass, ServingConfig, TrialStatus
from tuner.study.loop import rank, run_study
from tuner.study.sampling import open_optuna_study
from tuner.testing.fake_runner import FakeRunner


@pytest.fixture()
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'study.db'}"


def test_a_far_worse_trial_stops_after_its_first_window(db_url: str) -> None:
    repo = make_repo(db_url)
    # max_num_seqs=1 under several streams queues every request behind one: several times
    # slower than the defaults (trial 0), the best so far when it runs (trial 1).
    ctx = make_context(
        db_url, trials=4, params=("max_num_seqs",), choices={"max_num_seqs": (1, 256)},
        enqueue=[{"max_num_seqs": 1}, {"max_num_seqs": 256}],
    )  # fmt: skip
    ctx = dataclasses.replace(ctx, spec=ctx.spec.with_overrides(early_stop=True))
    runner = FakeRunner(max_utilization=0.9)
    run_study(ctx, runner, repo)
    rows = repo.list_trials(ctx.name, limit=None)
    stopped = [r for r in rows if r.failure is FailureClass.STOPPED_EARLY]
    whole = [r for r in rows if r.status is TrialStatus.COMPLETE]
    assert stopped, [(r.number, r.config.label(), r.status) for r in rows]
    windows = ctx.workload.windows
    for r in stopped:
        assert r.status is TrialStatus.PRUNED and r.config.max_num_seqs == 1
        assert len(r.windows) == 1 < windows, "partial: the first window only"
        assert r.metrics["output_throughput"].median > 0 and r.objective_values is not None
        assert "first point" in r.failure_detail
    assert all(len(r.windows) == windows for r in whole)
    assert any(r.config.max_num_seqs == 256 for r in whole), "as good as the best: not stopped"
    ranked_numbers = {x.number for x in rank(repo, ctx.name, ctx.spec.objective)}
    assert ranked_numbers.isdisjoint({r.number for r in stopped})
    study = open_optuna_study(ctx, create=False)
    told = {t.number: t for t in study.get_trials(deepcopy=False)}
    for r in stopped:  # Optuna learned the numbers: COMPLETE, counting towards the budget
        assert told[r.number].state is optuna.trial.TrialState.COMPLETE
    assert len(rows) == 4


def test_without_early_stop_every_trial_runs_all_its_windows(db_url: str) -> None:
    repo = make_repo(db_url)
    ctx = make_context(
        db_url, trials=3, params=("max_num_seqs",), choices={"max_num_seqs": (1, 256)},
        enqueue=[{"max_num_seqs": 1}, {"max_num_seqs": 256}],  # three trials, three launches
    )  # fmt: skip
    run_study(ctx, FakeRunner(max_utilization=0.9), repo)
    rows = repo.list_trials(ctx.name, limit=None)
    assert all(r.failure is not FailureClass.STOPPED_EARLY for r in rows)
    assert all(len(r.windows) == ctx.workload.windows for r in rows)
    assert ServingConfig(max_num_seqs=1) in {r.config for r in rows}
