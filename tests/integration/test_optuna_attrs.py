"""What a study leaves in Optuna's own storage for optuna-dashboard: the objectives' names and, on
every trial, tuner's headline numbers, the effective attention backend and the failure class; and
that ``tuner db merge`` and ``--resume`` carry the names (``tuner.study.attrs``)."""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
from pathlib import Path

import optuna
import pytest

from tests.studykit import make_context, make_repo
from tuner.compose import StudyContext
from tuner.db.merge import merge_databases
from tuner.domain import Objective, ServingConfig
from tuner.study.attrs import metric_names, trial_attrs
from tuner.study.loop import run_study
from tuner.study.sampling import open_optuna_study
from tuner.testing.fake_runner import GIB, FakeRunner

NAMES = ["output_throughput_tok_s ↑", "peak_memory_gib ↓", "e2e_p99_ms ↓"]
METRIC_NAMES_KEY = "study:metric_names"  # where Optuna keeps them: a study system attribute


def url(path: Path) -> str:
    return f"sqlite:///{path}"


def study_of(ctx: StudyContext) -> optuna.Study:
    return open_optuna_study(ctx, create=False)


def fake_study(path: Path, *, trials: int = 4) -> StudyContext:
    """The defaults, then gpu_memory_utilization=0.95, which does not fit (a finding)."""
    ctx = make_context(url(path), trials=trials, enqueue=[{"gpu_memory_utilization": 0.95}])
    run_study(ctx, FakeRunner(max_utilization=0.9), make_repo(url(path)))
    return ctx


def forget_metric_names(path: Path) -> None:
    """Make the study look like one written before tuner named its objectives."""
    with sqlite3.connect(path) as con:
        con.execute("DELETE FROM study_system_attributes WHERE key = ?", (METRIC_NAMES_KEY,))
    con.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StudyContext]:
    path = tmp_path_factory.mktemp("attrs") / "study.db"
    return path, fake_study(path)


def test_the_study_names_its_objectives(store: tuple[Path, StudyContext]) -> None:
    _, ctx = store
    study = study_of(ctx)
    assert study.metric_names == NAMES
    assert len(NAMES) == len(study.directions)


def test_every_trial_carries_tuner_numbers_as_user_attrs(store: tuple[Path, StudyContext]) -> None:
    _, ctx = store
    frozen = {t.number: t for t in study_of(ctx).get_trials()}
    rows = {r.number: r for r in make_repo(ctx.storage_url).list_trials(ctx.name, limit=None)}
    assert set(frozen) == set(rows) and len(rows) == 4

    baseline = frozen[0].user_attrs
    metrics = rows[0].metrics
    assert baseline["baseline"] is True and baseline["tuner_status"] == "complete"
    assert "failure_class" not in baseline
    for attr, key in [
        ("output_throughput_tok_s", "output_throughput"),
        ("ttft_p99_ms", "ttft_p99_ms"),
        ("itl_p99_ms", "itl_p99_ms"),
        ("e2e_p99_ms", "e2e_p99_ms"),
    ]:
        assert baseline[attr] == pytest.approx(metrics[key].median, rel=1e-5)
    assert baseline["output_throughput_tok_s"] == pytest.approx(frozen[0].values[0], rel=1e-5)
    assert baseline["gpu_memory_gib"] == pytest.approx(frozen[0].values[1], rel=1e-5)
    assert baseline["attention_backend"] == "FAKE_ATTN"

    finding = frozen[1].user_attrs
    assert finding["tuner_status"] == "failed" and finding["failure_class"] == "memory_exceeded"
    assert "output_throughput_tok_s" not in finding

    for trial in frozen.values():
        json.dumps(trial.user_attrs, allow_nan=False)  # JSON-safe: no NaN, no infinity


def test_a_number_without_samples_is_none() -> None:
    result = FakeRunner().run(ServingConfig(), make_context("sqlite://").workload)
    nan = dataclasses.replace(result.metrics["itl_p99_ms"], median=math.nan)
    inf = dataclasses.replace(result.metrics["ttft_p99_ms"], median=math.inf)
    metrics = {**result.metrics, "itl_p99_ms": nan, "ttft_p99_ms": inf}
    attrs = trial_attrs(dataclasses.replace(result, metrics=metrics))
    assert attrs["itl_p99_ms"] is None and attrs["ttft_p99_ms"] is None
    assert attrs["gpu_memory_gib"] == pytest.approx(0.9 * 24.0)
    json.dumps(attrs, allow_nan=False)


def test_capacity_studies_name_what_they_optimise_and_rss_is_told_apart() -> None:
    assert metric_names(Objective.CAPACITY)[0] == "capacity_output_throughput_tok_s ↑"
    assert metric_names(Objective.CAPACITY)[1:] == NAMES[1:]
    result = FakeRunner().run(ServingConfig(), make_context("sqlite://").workload)
    rss = dataclasses.replace(result.memory, host_peak_rss_bytes=3 * GIB)
    assert trial_attrs(dataclasses.replace(result, memory=rss))["host_rss_gib"] == 3.0


def test_a_resumed_older_study_gets_its_names(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    ctx = fake_study(path, trials=2)
    forget_metric_names(path)
    assert study_of(ctx).metric_names is None
    more = dataclasses.replace(ctx, spec=dataclasses.replace(ctx.spec, trials=3))
    run_study(more, FakeRunner(max_utilization=0.9), make_repo(url(path)), resume=True)
    assert study_of(ctx).metric_names == NAMES


def test_merge_carries_names_and_user_attrs(
    store: tuple[Path, StudyContext], tmp_path: Path
) -> None:
    source, ctx = store
    copied = tmp_path / "central.db"
    assert merge_databases(str(source), url(copied)).studies[0].optuna.action == "copied"
    theirs = study_of(ctx)
    here = study_of(dataclasses.replace(ctx, storage_url=url(copied)))
    assert here.metric_names == NAMES
    assert [t.user_attrs for t in here.get_trials()] == [t.user_attrs for t in theirs.get_trials()]

    # A target whose copy of the study predates the names gets them on the next merge.
    forget_metric_names(copied)
    assert merge_databases(str(source), url(copied)).studies[0].optuna.action == "merged"
    assert study_of(dataclasses.replace(ctx, storage_url=url(copied))).metric_names == NAMES
