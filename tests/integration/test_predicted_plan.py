"""A planned study whose regime arithmetic predicts (tuner.study.plan.predict) measures that
regime's recipe first and the defaults second; the defaults' diagnosis then decides whether the
recipe counts as the screening's first trial (the prediction held) or stays a trial of the
search (it did not). FakeRunner's launches carry the telemetry a diagnosis reads."""

from __future__ import annotations

import dataclasses
import math
import re
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.studykit import make_repo
from tuner.abtest import noise_key
from tuner.catalog.gpus import get_gpu
from tuner.catalog.models import resolve_model
from tuner.compose import StudyContext
from tuner.domain import (
    Estimate,
    FailureClass,
    Objective,
    ServingConfig,
    TrialResult,
    TrialStatus,
    Workload,
)
from tuner.domain.workload import parse_slo
from tuner.load.workloads import get_workload
from tuner.space import SearchSpace
from tuner.spec.study import StudySpec
from tuner.study.loop import rank, run_study
from tuner.study.plan import PREDICTED, RECIPE, SCREEN, Plan, make_plan, predict, screened
from tuner.testing.fake_runner import FakeRunner
from tuner.vllm.flags import shipped

FRONTEND = {"server_cpu_peak_process": 0.98, "gpu_utilization_mean": 0.3,
            "requests_running_peak": 64.0}  # fmt: skip
DECODE = {"gpu_utilization_mean": 0.97, "requests_running_peak": 64.0}


class Telemetry(FakeRunner):
    """FakeRunner whose launches report ``metrics`` as the server's telemetry."""

    def __init__(self, metrics: Mapping[str, float], **kw: Any) -> None:
        super().__init__(**kw)
        self.metrics = dict(metrics)

    def run(self, config: ServingConfig, workload: Workload, **kw: Any) -> TrialResult:
        result = super().run(config, workload, **kw)
        if result.status is not TrialStatus.COMPLETE:
            return result
        return dataclasses.replace(result, server_metrics=self.metrics)


class Said:
    """A reporter that keeps what the study said between trials: (phase, detail)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.lines)

    def trial_started(self, *a: Any) -> None: ...
    def trial_finished(self, *a: Any) -> None: ...
    def phase(self, phase: str, detail: str) -> None:
        self.lines.append((phase, detail))


def _context(db_url: str, trials: int) -> StudyContext:
    # ernie-0.3b at 64 streams on an H200: a roofline far above one API server's rate.
    workload = get_workload("throughput-256").replace(
        concurrency=64, requests_per_window=16, warmup_requests=2, windows=1, output_tokens=8
    )
    spec = StudySpec(model="ernie-0.3b", gpu="h200", workload=workload.name, trials=trials,
                     name="predicted", confirm_launches=0)  # fmt: skip
    model, gpu = resolve_model("ernie-0.3b"), get_gpu("h200")
    return StudyContext(
        name="predicted",
        spec=spec,
        model=model,
        gpu=gpu,
        workload=workload,
        slo=parse_slo(""),
        space=SearchSpace(model, gpu, workload, flags=shipped("0.26.0")),
        storage_url=db_url,
        vllm_version="0.26.0",
        serve_model="baidu/ERNIE-4.5-0.3B-PT",
    )


def _roofline(ctx: StudyContext) -> float:
    found = predict(ctx.model, ctx.gpu, ctx.workload)
    assert found is not None
    return found.figures["roofline_tok_s"]


def test_too_few_trials_for_the_screening_measure_the_defaults_first(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'p.db'}"
    repo = make_repo(db_url)
    runner = Telemetry(FRONTEND)
    run_study(_context(db_url, trials=1), runner, repo)
    assert runner.calls == [ServingConfig()]


def test_the_predicted_recipe_is_measured_first_and_counts_as_the_screenings(
    tmp_path: Path,
) -> None:
    db_url = f"sqlite:///{tmp_path / 'p.db'}"
    repo = make_repo(db_url)
    ctx = _context(db_url, trials=6)
    runner = Telemetry(FRONTEND)
    said = Said()
    run_study(ctx, runner, repo, reporter=said)
    recipe = runner.calls[0].to_dict()
    assert recipe.get("stream_interval", 1) > 1, recipe  # the frontend's lever, first
    assert runner.calls[1] == ServingConfig()  # then the defaults, which diagnose
    predicted = [d for p, d in said if p == "prediction"]
    assert predicted == [
        "frontend-bound at 64 streams: predicted before launch: the GPU's roofline of "
        f"{_roofline(ctx):,.0f} out tok/s at 64 streams is far above one API server's 16,000: "
        "its recipe first, then the defaults"
    ]
    assert any(p == "screening" and "measured first" in d for p, d in said)
    assert not any("stays a trial of the search" in d for _, d in said)
    # The recipe is not measured twice: the leave-one-out trials follow the defaults.
    assert runner.calls.count(runner.calls[0]) == 1
    rows = repo.list_trials("predicted", limit=None)
    base = [r for r in rows if r.is_baseline]
    assert [r.number for r in base] == [1]
    scores = {r.number: r.score for r in rank(repo, "predicted", ctx.spec.objective)}
    assert scores[0] is not None and scores[1] == 1.0  # scored against the defaults
    record = repo.get_study("predicted")
    assert record is not None
    plan = record.spec["plan_record"]
    assert plan["diagnosis"]["regime"] == "frontend-bound"
    # The screening was judged with the predicted trial as its recipe: one effect per knob.
    assert plan["kept"] is not None and set(plan["effects"]) == {k["knob"] for k in plan["knobs"]}
    assert plan["recipe"] == scores[0]


def test_a_wrong_prediction_is_said_and_the_plan_screens_in_full(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'p.db'}"
    repo = make_repo(db_url)
    ctx = _context(db_url, trials=6)
    runner = Telemetry(DECODE)  # the defaults say decode-bound: the prediction was wrong
    said = Said()
    run_study(ctx, runner, repo, reporter=said)
    assert runner.calls[0].to_dict().get("stream_interval", 1) > 1
    assert runner.calls[1] == ServingConfig()
    assert any(p == "prediction" and "stays a trial of the search" in d for p, d in said)
    record = repo.get_study("predicted")
    assert record is not None
    plan = record.spec["plan_record"]
    assert plan["diagnosis"]["regime"] == "decode-bound"
    # The decode plan's own recipe is screened after the defaults.
    assert "stream_interval" not in runner.calls[2].to_dict()


class Interrupting(Telemetry):
    """Ctrl-C during its first launch."""

    def run(self, config: ServingConfig, workload: Workload, **kw: Any) -> TrialResult:
        if not self.calls:
            self.calls.append(config)
            raise KeyboardInterrupt
        return super().run(config, workload, **kw)


def test_an_interrupted_predicted_recipe_is_measured_again_as_itself(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'p.db'}"
    repo = make_repo(db_url)
    ctx = _context(db_url, trials=6)
    first = Interrupting(FRONTEND)
    try:
        run_study(ctx, first, repo)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the interruption did not reach the caller")
    again = Telemetry(FRONTEND)
    run_study(ctx, again, repo, resume=True)
    # The defaults were queued before the retry; the retry is drawn from the recipe's own
    # space (the same configuration, not a draw of the card's knobs around it), and the
    # screening takes it as its recipe instead of queueing the recipe a second time.
    recipe = first.calls[0]
    assert again.calls[:2] == [ServingConfig(), recipe]
    assert again.calls.count(recipe) == 1


class InterruptingThird(Telemetry):
    """Ctrl-C during its third launch: the first leave-one-out screening trial."""

    def run(self, config: ServingConfig, workload: Workload, **kw: Any) -> TrialResult:
        if len(self.calls) == 2:
            self.calls.append(config)
            raise KeyboardInterrupt
        return super().run(config, workload, **kw)


def test_a_screening_trial_retried_after_an_interruption_is_judged_by_its_measurement(
    tmp_path: Path,
) -> None:
    db_url = f"sqlite:///{tmp_path / 'p.db'}"
    repo = make_repo(db_url)
    ctx = _context(db_url, trials=6)
    first = InterruptingThird(FRONTEND)
    with pytest.raises(KeyboardInterrupt):
        run_study(ctx, first, repo)
    again = Telemetry(FRONTEND)
    run_study(ctx, again, repo, resume=True)
    assert first.calls[2] in again.calls  # measured after all
    record = repo.get_study("predicted")
    assert record is not None
    effects = record.spec["plan_record"]["effects"]
    # A knob judged by the interrupted launch would have the recipe over 0: an infinite share.
    assert effects and all(0.0 < e < 10.0 for e in effects.values()), effects


def test_a_plan_with_an_infinite_effect_is_stored_as_json_every_database_reads(
    tmp_path: Path,
) -> None:
    """A leave-one-out trial that failed gives its knob an infinite effect. The plan was
    stored raw, as JSON's non-standard ``Infinity``, which PostgreSQL refuses: a study on
    PostgreSQL crashed when its screening was judged."""
    db_url = f"sqlite:///{tmp_path / 'p.db'}"
    repo = make_repo(db_url)
    ctx = _context(db_url, trials=1)
    run_study(ctx, Telemetry(FRONTEND), repo)  # the study's row
    diagnosis = predict(ctx.model, ctx.gpu, ctx.workload)
    assert diagnosis is not None
    plan = make_plan(diagnosis, ctx.space, Objective.THROUGHPUT)
    assert plan is not None and len(plan.knobs) > 1
    failed, *rest = [k.knob for k in plan.knobs]
    judged = screened(plan, {RECIPE: 1.3, failed: 0.0, **dict.fromkeys(rest, 1.2)}, None, "")
    assert judged.effects[failed] == math.inf
    repo.set_study_plan(ctx.name, judged.as_dict())
    with sqlite3.connect(tmp_path / "p.db") as db:
        (text,) = db.execute("SELECT spec FROM tuner_studies").fetchone()
    assert "plan_record" in text and not re.search(r"Infinity|NaN", text), text
    back = repo.study_plan(ctx.name)
    assert back == judged.as_dict() and Plan.from_dict(back) == judged


class Checked(Telemetry):
    """Telemetry that notes, launch by launch, whether it was handed a first-point check."""

    def __init__(self, metrics: Mapping[str, float], **kw: Any) -> None:
        super().__init__(metrics, **kw)
        self.checked: list[bool] = []

    def run(self, config: ServingConfig, workload: Workload, **kw: Any) -> TrialResult:
        self.checked.append(kw.get("first_point") is not None)
        return super().run(config, workload, **kw)


def test_with_early_stopping_on_the_screening_trials_are_measured_in_full(tmp_path: Path) -> None:
    """The screening's trials had the first-point check of every search trial: a recipe one
    harmful knob from good was stopped against the defaults, every knob's effect was then 0,
    and the fallback kept the first two knobs of the plan, unmeasured."""
    db_url = f"sqlite:///{tmp_path / 'p.db'}"
    repo = make_repo(db_url)
    ctx = _context(db_url, trials=8)
    ctx = dataclasses.replace(ctx, spec=dataclasses.replace(ctx.spec, early_stop=True))
    runner = Checked(DECODE)  # a wrong prediction: the decode plan is screened after the defaults
    run_study(ctx, runner, repo)
    trials = optuna.load_study(study_name="predicted", storage=db_url).get_trials()
    assert len(runner.checked) == len(trials)  # one launch a trial
    launches = list(zip(trials, runner.calls, runner.checked, strict=True))
    screening = [c for t, _, c in launches if SCREEN in t.user_attrs or PREDICTED in t.user_attrs]
    # The search's own trials, the defaults (the reference) aside.
    searched = [c for t, config, c in launches if not {SCREEN, PREDICTED} & set(t.user_attrs)
                and config != ServingConfig()]  # fmt: skip
    assert len(screening) > 2 and not any(screening), runner.checked
    assert searched and all(searched), runner.checked  # early stopping is on


class Bursty(Telemetry):
    """Telemetry where a stream interval doubles the throughput and makes every chunk gap
    a hundred times longer (P99 ITL from about 2 ms to 200 ms)."""

    def run(self, config: ServingConfig, workload: Workload, **kw: Any) -> TrialResult:
        result = super().run(config, workload, **kw)
        if result.status is not TrialStatus.COMPLETE or "stream_interval" not in config.extra:
            return result
        scaled = {"output_throughput": 2.0, "itl_p99_ms": 100.0}
        metrics = {
            name: _times(est, scaled[name]) if name in scaled else est
            for name, est in result.metrics.items()
        }
        return dataclasses.replace(result, metrics=metrics)


def _times(est: Estimate, factor: float) -> Estimate:
    return Estimate(est.median * factor, est.low * factor, est.high * factor,
                    tuple(v * factor for v in est.values))  # fmt: skip


def test_a_screening_trial_that_misses_the_slo_scores_nothing_for_its_throughput(
    tmp_path: Path,
) -> None:
    """The screening scored its trials without the SLO: a recipe whose stream interval broke
    a P99 ITL bound of 100 ms kept that knob, alone, for the throughput it bought (the
    committed plan-ernie-256 study: 207 ms against the defaults' 46 ms)."""
    db_url = f"sqlite:///{tmp_path / 'p.db'}"
    repo = make_repo(db_url)
    ctx = dataclasses.replace(_context(db_url, trials=5), slo=parse_slo("itl_p99=100ms"))
    run_study(ctx, Bursty(FRONTEND), repo)
    record = repo.get_study("predicted")
    assert record is not None
    plan = Plan.from_dict(record.spec["plan_record"])
    assert [k.knob for k in plan.knobs] == ["stream_interval", "api_server_count"]
    # The recipe and the recipe without more API servers miss the SLO: no effect is known.
    assert plan.recipe == 0.0 and set(plan.effects.values()) == {0.0}
    assert plan.lines()[-1].endswith("(none helped: the two likeliest)")


def test_a_latency_study_judges_its_screening_against_the_noise_of_its_p99(
    tmp_path: Path,
) -> None:
    """The margin was the SD of a launch's output throughput whatever the objective scored;
    under a latency objective the P99's own, here ten times as wide, is the noise to beat."""
    db_url = f"sqlite:///{tmp_path / 'p.db'}"
    repo = make_repo(db_url)
    ctx = _context(db_url, trials=5)
    ctx = dataclasses.replace(ctx, spec=dataclasses.replace(ctx.spec, objective=Objective.LATENCY))
    key = noise_key(Telemetry(FRONTEND).run(ServingConfig(), ctx.workload), ctx.model,
                    ctx.workload.name)  # fmt: skip
    assert key is not None
    for step in (0.0, 0.2):  # two launches of the defaults: a launch value's SD 0.2 / sqrt(2)
        values = {"output_throughput": [7.0 + step / 10], "e2e_p99_ms": [5.0 + step]}
        repo.add_launch(key=key.to_dict(), config=ServingConfig(), is_defaults=True,
                        source="calibrate", run="calibrate:x", values=values)  # fmt: skip
    run_study(ctx, Telemetry(FRONTEND), repo)
    record = repo.get_study("predicted")
    assert record is not None
    plan = Plan.from_dict(record.spec["plan_record"])
    assert plan.kept is not None, plan
    assert plan.margin == pytest.approx(0.2)  # sqrt(2) x 0.2 / sqrt(2)
    assert plan.margin_source == "SD of a launch's P99 E2E ms 0.141 from 2 stored launches"


class Bounded(Said):
    """A reporter that stops a study drawing past ``most`` trials."""

    def __init__(self, most: int) -> None:
        super().__init__()
        self.left = most

    def trial_started(self, *a: Any) -> None:
        self.left -= 1
        assert self.left >= 0, "the study drew on and on"


@pytest.mark.parametrize("trials", [16, 30])
def test_a_combination_the_rules_rule_out_uses_no_trial_of_the_plans_budget(
    tmp_path: Path, trials: int
) -> None:
    """The decode plan searches kv_cache_dtype with attention_backend: its space holds
    FLEX_ATTENTION with an fp8 KV cache, which the rules rule out before launch. Such a draw
    took a trial of the budget (16 trials, 15 launches). Past the 12 configurations the
    search has left (30 trials), a draw again is a trial that launches nothing."""
    db_url = f"sqlite:///{tmp_path / 'p.db'}"
    repo = make_repo(db_url)
    runner = Telemetry(DECODE)
    run_study(_context(db_url, trials=trials), runner, repo, reporter=Bounded(100))
    rows = repo.list_trials("predicted", limit=None)
    failures = [r.failure for r in rows]
    assert FailureClass.INVALID_CONFIG in failures  # the search drew such a combination
    repeated = failures.count(FailureClass.REPEATED)
    assert len(runner.calls) + repeated == trials and (repeated > 0) == (trials > 16)
