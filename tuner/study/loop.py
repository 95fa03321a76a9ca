"""The orchestrator, and the only module that imports optuna (besides the space's suggest).

One loop: ask Optuna for a trial, let the space turn it into a :class:`ServingConfig`, rule it
out early if the validity rules or an earlier failure say it cannot work, otherwise hand it to
the runner; record the outcome in tuner's tables and tell Optuna. vLLM's defaults are enqueued
as trial 0, the baseline every score is relative to.

What Optuna is told:
- a measured trial: its three objective values and SLO constraints (see
  :mod:`tuner.scoring.objectives`);
- a finding (the config cannot run here): penalty values and a violated constraint, so the
  sampler learns the region is infeasible;
- a fault (timeout, crash, stranger, interrupt): FAIL, which samplers ignore; it may be retried.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import optuna
from sqlalchemy import exc as sa_exc

from tuner.compose import StudyContext
from tuner.db.repository import Repository
from tuner.db.session import storage_error
from tuner.domain import (
    Estimate,
    FailureClass,
    Objective,
    ServingConfig,
    Slo,
    TrialResult,
    TrialStatus,
    interrupted,
)
from tuner.errors import UsageError
from tuner.runner.vllm import TrialRunner
from tuner.scoring import objectives as scoring
from tuner.scoring.ranking import Standing, best_first, canary_broken
from tuner.study.attrs import metric_names, trial_attrs
from tuner.study.confirm import run_confirmation


@dataclass(frozen=True)
class Ranked:
    number: int
    config: ServingConfig
    score: float
    values: tuple[float, float, float]
    feasible: bool
    is_baseline: bool


class Reporter(Protocol):
    def trial_started(
        self, number: int, index: int, total: int, config: ServingConfig, baseline: bool
    ) -> None: ...

    def phase(self, phase: str, detail: str) -> None: ...

    def trial_finished(self, number: int, result: TrialResult, best: Ranked | None) -> None: ...


class SilentReporter:
    def trial_started(
        self, number: int, index: int, total: int, config: ServingConfig, baseline: bool
    ) -> None:
        pass

    def phase(self, phase: str, detail: str) -> None:
        pass

    def trial_finished(self, number: int, result: TrialResult, best: Ranked | None) -> None:
        pass


def optuna_storage(ctx: StudyContext) -> optuna.storages.RDBStorage:
    """Optuna's storage on the study's database; its caller disposes ``storage.engine``."""
    return optuna.storages.RDBStorage(
        ctx.storage_url, engine_kwargs=_engine_kwargs(ctx.storage_url)
    )


def open_optuna_study(
    ctx: StudyContext, *, create: bool, storage: optuna.storages.RDBStorage | None = None
) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(
        seed=ctx.spec.seed,
        multivariate=True,
        n_startup_trials=max(3, ctx.spec.trials // 3),
    )
    storage = storage or optuna_storage(ctx)
    if create:
        return optuna.create_study(
            study_name=ctx.name, storage=storage, sampler=sampler, directions=scoring.DIRECTIONS
        )
    return optuna.load_study(study_name=ctx.name, storage=storage, sampler=sampler)


def _name_metrics(ctx: StudyContext, study: optuna.Study) -> None:
    """Name the objectives (optuna-dashboard shows them); also on resume, for older studies."""
    names = metric_names(ctx.spec.objective)
    if study.metric_names != names:
        with warnings.catch_warnings():  # experimental since Optuna 3.2, stable in practice
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(names)


def _tell_attrs(trial: optuna.Trial, result: TrialResult) -> None:
    for key, value in trial_attrs(result).items():
        trial.set_user_attr(key, value)


def _engine_kwargs(url: str) -> dict[str, Any]:
    return {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}


def run_study(
    ctx: StudyContext,
    runner: TrialRunner,
    repo: Repository,
    *,
    resume: bool = False,
    reporter: Reporter | None = None,
    claimed: bool = False,
) -> list[Ranked]:
    """Run (or resume) the study until ``ctx.spec.trials`` trials have finished.

    Returns every finished trial ranked best first. Raises UsageError when the study exists and
    ``resume`` is false, or when resuming a study that does not exist. ``claimed``: the study
    row was queued (``POST /v1/studies``) and taken by this worker; its Optuna study is created now.
    A database error from Optuna's side is raised as a StorageError (the study is then marked
    interrupted, resumable); Optuna's connections are closed when this returns.
    """
    storage = optuna_storage(ctx)
    try:
        return _run_study(ctx, runner, repo, storage, resume, reporter or SilentReporter(), claimed)
    except sa_exc.SQLAlchemyError as e:
        raise storage_error(e, ctx.storage_url) from e
    finally:
        storage.engine.dispose()


def _run_study(
    ctx: StudyContext,
    runner: TrialRunner,
    repo: Repository,
    storage: optuna.storages.RDBStorage,
    resume: bool,
    report: Reporter,
    claimed: bool,
) -> list[Ranked]:
    existing = repo.get_study(ctx.name)
    if claimed and existing is None:
        raise UsageError(f"no queued study named {ctx.name!r}", hint="run `tuner studies`")
    if existing is not None and not resume and not claimed:
        raise UsageError(
            f"study {ctx.name!r} already exists ({existing.status})",
            hint="add --resume to continue it, or pick another --study name",
        )
    if existing is None and resume:
        raise UsageError(f"no study named {ctx.name!r} to resume", hint="run `tuner studies`")
    if existing is None or claimed:
        if existing is None:
            repo.create_study(
                name=ctx.name,
                optuna_study_name=ctx.name,
                model=ctx.model.alias,
                model_source=ctx.serve_model,
                gpu=ctx.gpu.name,
                workload=ctx.workload.name,
                objective=ctx.spec.objective.value,
                slo=scoring_slo_dict(ctx.slo),
                spec=ctx.spec.to_dict(),
                emulated=ctx.emulated,
                vllm_version=ctx.vllm_version,
                n_trials_requested=ctx.spec.trials,
            )
        study = open_optuna_study(ctx, create=True, storage=storage)
        study.enqueue_trial(ctx.space.baseline_params(), user_attrs={"baseline": True})
        for item in ctx.spec.enqueue:
            study.enqueue_trial(ctx.space.params_for(ctx.space.config_from(item)))
    else:
        study = open_optuna_study(ctx, create=False, storage=storage)
        repo.mark_running_as_interrupted(ctx.name)
        if existing.n_trials_requested != ctx.spec.trials:
            repo.set_trials_requested(ctx.name, ctx.spec.trials)
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            study.tell(t.number, state=optuna.trial.TrialState.FAIL)
    _name_metrics(ctx, study)
    repo.set_study_status(ctx.name, "running")
    try:
        _loop(ctx, study, runner, repo, report)
        if ctx.spec.confirm_launches > 0:
            _confirm(ctx, runner, repo, report)
    except BaseException:
        repo.set_study_status(ctx.name, "interrupted")
        raise
    repo.set_study_status(ctx.name, "finished")
    return rank(repo, ctx.name, ctx.spec.objective)


def _loop(
    ctx: StudyContext,
    study: optuna.Study,
    runner: TrialRunner,
    repo: Repository,
    report: Reporter,
) -> None:
    total = ctx.spec.trials
    finished = optuna.trial.TrialState.is_finished
    while (done := sum(1 for t in study.get_trials(deepcopy=False) if finished(t.state))) < total:
        trial = study.ask()
        config = ctx.space.suggest(trial)
        baseline = bool(trial.user_attrs.get("baseline")) or config == ctx.space.baseline()
        report.trial_started(trial.number, done + 1, total, config, baseline)
        trial_id = repo.start_trial(ctx.name, trial.number, config, "search", baseline)
        try:
            result = _screen(ctx, config, repo) or runner.run(
                config, ctx.workload, slo=ctx.slo, on_phase=report.phase
            )
        except BaseException:
            # The tuner itself is going down (Ctrl-C, SIGTERM): record it, let it propagate.
            stopped = interrupted(config, "the tuner stopped during this trial")
            repo.finish_trial(trial_id, stopped, None, None)
            _tell_attrs(trial, stopped)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise
        _record(ctx, study, trial, trial_id, result, repo, baseline)
        report.trial_finished(trial.number, result, _best(repo, ctx))


def _confirm(ctx: StudyContext, runner: TrialRunner, repo: Repository, report: Reporter) -> None:
    """Re-measure the best candidates against the defaults (see :mod:`tuner.study.confirm`)."""
    if repo.list_comparisons(ctx.name):
        return  # done before an interruption of the study's last steps
    ranked = rank(repo, ctx.name, ctx.spec.objective)
    if not any(r.is_baseline for r in ranked):
        report.phase("confirmation skipped", "vLLM's defaults produced no measurement")
        return
    seen = {ctx.space.baseline()}
    candidates = []
    for r in ranked:
        if r.feasible and not r.is_baseline and r.config not in seen:
            seen.add(r.config)
            candidates.append((r.number, r.config))
    candidates = candidates[: ctx.spec.confirm_top]
    if not candidates:
        report.phase("confirmation skipped", "no candidate besides the defaults")
        return
    run_confirmation(
        study=ctx.name,
        baseline=ctx.space.baseline(),
        candidates=candidates,
        runner=runner,
        repo=repo,
        workload=ctx.workload,
        slo=ctx.slo,
        launches=ctx.spec.confirm_launches,
        confidence=ctx.spec.confidence,
        reporter=report,
    )


def _screen(ctx: StudyContext, config: ServingConfig, repo: Repository) -> TrialResult | None:
    """Rule a config out before launching it, or return None to go ahead."""
    problems = ctx.space.violations(config)
    if problems:
        return TrialResult(
            config=config,
            status=TrialStatus.PRUNED,
            failure=FailureClass.INVALID_CONFIG,
            failure_detail="; ".join(problems),
        )
    blocker = ctx.space.dominated_by(config, repo.failed_configs(ctx.name))
    if blocker is not None:
        return TrialResult(
            config=config,
            status=TrialStatus.PRUNED,
            failure=FailureClass.DOMINATED,
            failure_detail=f"at least as demanding as {blocker.label()}, which did not fit",
        )
    return None


def _record(
    ctx: StudyContext,
    study: optuna.Study,
    trial: optuna.Trial,
    trial_id: int,
    result: TrialResult,
    repo: Repository,
    baseline: bool,
) -> None:
    ceiling = ctx.gpu.memory_gib if not ctx.gpu.is_cpu else 1024.0
    objective = ctx.spec.objective
    values = scoring.objective_values(result, memory_ceiling_gib=ceiling, objective=objective)
    constraints = scoring.constraint_values(result, ctx.slo, objective)
    measured = result.status is TrialStatus.COMPLETE
    finding = result.failure is not None and result.failure.is_finding
    # The baseline is its own reference (score 1.0): it is measured before any other trial.
    reference = _baseline_values(repo, ctx.name) or (values if baseline else None)
    score = scoring.score_values(values, ctx.spec.objective, reference) if measured else None
    repo.finish_trial(trial_id, result, score, values if measured or finding else None)
    _tell_attrs(trial, result)
    if measured or finding:
        for name, value in zip(scoring.CONSTRAINT_NAMES, constraints, strict=True):
            trial.set_constraint(name, value)
        study.tell(trial, values)
    else:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)


def _baseline_values(repo: Repository, name: str) -> list[float] | None:
    for row in repo.list_trials(name, status=TrialStatus.COMPLETE, phase="search", limit=None):
        if row.is_baseline and row.objective_values:
            return list(row.objective_values)
    return None


def rank(repo: Repository, name: str, objective: Objective) -> list[Ranked]:
    """Complete trials ranked by the preset's score: SLO-feasible ones first (the one rule,
    :mod:`tuner.scoring.ranking`); configurations that failed the canary in any launch of the
    study (its confirmation's included) are left out."""
    study = repo.get_study(name)
    slo = Slo(**(study.slo if study else {}))
    reference = _baseline_values(repo, name)
    broken = canary_broken(repo.list_trials(name, status=TrialStatus.FAILED, limit=None))
    out = []
    for row in repo.list_trials(name, status=TrialStatus.COMPLETE, phase="search", limit=None):
        if not row.objective_values or row.config in broken:
            continue
        values = tuple(row.objective_values)
        constraints = _row_constraints(row.metrics, slo, objective)
        out.append(
            Ranked(
                number=row.number,
                config=row.config,
                score=scoring.score_values(values, objective, reference),
                values=(values[0], values[1], values[2]),
                feasible=scoring.is_feasible(constraints),
                is_baseline=row.is_baseline,
            )
        )
    return best_first(out, lambda r: Standing(r.feasible, r.score, number=r.number))


def _row_constraints(
    metrics: Mapping[str, Estimate], slo: Slo, objective: Objective | None = None
) -> list[float]:
    fake = TrialResult(config=ServingConfig(), status=TrialStatus.COMPLETE, metrics=metrics)
    return scoring.constraint_values(fake, slo, objective)


def _best(repo: Repository, ctx: StudyContext) -> Ranked | None:
    ranked = rank(repo, ctx.name, ctx.spec.objective)
    return ranked[0] if ranked else None


def scoring_slo_dict(slo: Slo) -> dict[str, float]:
    return {k: v for k, v in vars(slo).items() if v is not None}
