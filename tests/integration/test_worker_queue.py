"""Queued studies: taken once by one worker, then run as a fresh study."""

from __future__ import annotations

from pathlib import Path

from tests.studykit import make_context, make_repo
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import TrialStatus
from tuner.spec import StudySpec
from tuner.study import run_study
from tuner.testing.fake_runner import FakeRunner


def _queue(repo: Repository, name: str, spec: StudySpec) -> None:
    repo.create_study(
        name=name,
        optuna_study_name=name,
        model=spec.model,
        model_source=spec.model,
        gpu=spec.gpu,
        workload=spec.workload,
        objective=spec.objective.value,
        slo={},
        spec=spec.to_dict(),
        emulated=False,
        vllm_version="",
        n_trials_requested=spec.trials,
        status="queued",
    )


def test_a_queued_study_is_claimed_once_and_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=3, name="queued-1")
    _queue(repo, "queued-1", ctx.spec)
    other = Repository(make_engine(url))  # a second worker on the same database

    first = repo.claim_queued_study()
    assert first is not None and first.name == "queued-1" and first.status == "running"
    assert other.claim_queued_study() is None, "a study must be taken by one worker only"

    # The stored spec round-trips, and the claimed row runs as a fresh study.
    assert StudySpec.from_dict(first.spec) == ctx.spec
    ranked = run_study(ctx, FakeRunner(), repo, claimed=True)
    assert ranked
    rows = repo.list_trials("queued-1", limit=None)
    assert len(rows) == 3 and rows[0].is_baseline
    assert rows[0].status is TrialStatus.COMPLETE
    assert all(r.status is not TrialStatus.RUNNING for r in rows)
    assert repo.get_study("queued-1").status == "finished"


def test_claims_follow_queue_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    repo = make_repo(url)
    for name in ("a", "b"):
        _queue(repo, name, make_context(url, name=name).spec)
    assert [repo.claim_queued_study().name, repo.claim_queued_study().name] == ["a", "b"]  # type: ignore[union-attr]
    assert repo.claim_queued_study() is None
