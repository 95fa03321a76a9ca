"""The orchestrator: it asks Optuna for trials and tells it their outcomes.

One loop: ask Optuna for a trial, let the space turn it into a :class:`ServingConfig`, rule it
out early if the validity rules or an earlier failure say it cannot work, otherwise hand it to
the runner; record the outcome in tuner's tables and tell Optuna. vLLM's defaults are enqueued
first (second where a predicted regime's recipe goes first, :mod:`tuner.study.planning`): the
baseline every score is relative to, never ruled out by another trial's failure. Several
workers may run the loop of one study at once, by the rules of :mod:`tuner.study.sharing`.

What Optuna is told:
- a measured trial: its three objective values and SLO constraints (see
  :mod:`tuner.scoring.objectives`);
- a finding (the config cannot run here): penalty values and a violated constraint, so the
  sampler learns the region is infeasible; one the space's rules rule out before launch
  (``invalid_config``) uses no place in the budget, which goes to the next draw;
- a fault (timeout, crash, stranger): FAIL, which samplers ignore; it counts as a trial;
- an interruption (Ctrl-C, SIGTERM, a dead worker): FAIL, not counted, and queued again;
- a configuration the sampler drew again after a trial of the study measured it, where every
  configuration of the space has been tried: not launched (PRUNED, failure ``repeated``, in
  tuner's table), FAIL like a fault; it counts. While one is untried, the sampler
  (:class:`tuner.study.sampling.Untried`) draws that instead where it draws the knobs jointly,
  and a draw again knob by knob is launched. A configuration naming the attention kernel that
  vLLM chose in a measured trial which left it to vLLM is that trial's
  (:func:`tuner.study.standings.ran_as`).

What the loop reads per trial: the study's trial rows, once (with the trials other workers
finished meanwhile), from which it takes the failed configurations, the defaults' values (the
reference of a score), the standings and what the lever plan and early stopping need; the
standings it reports after a trial are those rows with the trial's own row added in memory.
Besides: the plan record, in a planned study (once when its screening is judged, the stored
launches of the noise profile), and the rows again while the defaults have no result yet.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol

import optuna
from sqlalchemy import exc as sa_exc

from tuner.compose import StudyContext
from tuner.db import (
    FREE_NOTE,
    RUN_OWNER,
    USED_NOTE,
    Repository,
    StudyRow,
    StudyStatus,
    TrialPhase,
    TrialRow,
    ruled_out_before,
    storage_error,
)
from tuner.domain import FailureClass, ServingConfig, Slo, TrialResult, TrialStatus, interrupted
from tuner.errors import UsageError
from tuner.load import fingerprint
from tuner.runner import TrialRunner
from tuner.scoring import objectives as scoring
from tuner.space import SearchSpace
from tuner.spec import FINGERPRINT, check_same_requests, resumed_spec, stored_spec
from tuner.study import planning, sharing
from tuner.study.confirm import run_confirmation
from tuner.study.early import first_point_check
from tuner.study.plan import ENQUEUED
from tuner.study.sampling import (
    ask_trial,
    name_metrics,
    open_optuna_study,
    optuna_storage,
    tell_attrs,
)
from tuner.study.standings import (
    Ranked,
    baseline,
    failed_configs,
    measured_before,
    ran_as,
    rank,
    score_reference,
    standings,
    study_slo,
    with_row,
)

__all__ = ["Defaults", "Ranked", "Reporter", "SilentReporter", "rank", "run_study", "set_up_study"]

WAIT_S = 2.0  # between two looks at a study whose budget other workers' trials hold


Defaults = bool | Literal["again"]
"""Whether a trial launches vLLM's defaults: as the study's baseline (True, the trial every score
is measured against, :func:`tuner.study.standings.baseline`), as the defaults measured again
(``"again"``: a trial of their configuration after the baseline was measured) or not (False)."""


class Reporter(Protocol):
    def trial_started(
        self,
        number: int,
        index: int | None,  # its place in the budget, from 1; None: it takes none
        total: int,
        config: ServingConfig,
        baseline: Defaults,
    ) -> None: ...

    def phase(self, phase: str, detail: str) -> None: ...

    def trial_finished(self, number: int, result: TrialResult, best: Ranked | None) -> None: ...


class SilentReporter:
    def trial_started(
        self, number: int, index: int | None, total: int, config: ServingConfig, baseline: Defaults
    ) -> None:
        pass

    def phase(self, phase: str, detail: str) -> None:
        pass

    def trial_finished(self, number: int, result: TrialResult, best: Ranked | None) -> None:
        pass


def run_study(
    ctx: StudyContext,
    runner: TrialRunner,
    repo: Repository,
    *,
    resume: bool = False,
    reporter: Reporter | None = None,
    claimed: bool = False,
    join: bool = False,
    owner: Mapping[str, Any] | None = None,
    takeover: bool = False,
) -> list[Ranked]:
    """Run (or resume, or join) the study until ``ctx.spec.trials`` trials have results.

    Returns every finished trial ranked best first. Raises UsageError when the study exists and
    neither ``resume`` nor ``join`` is set, or when resuming or joining one that does not exist.
    ``claimed``: the study row was queued (``POST /v1/studies``) and taken by this worker; its
    Optuna study is created now. ``join``: other workers may be running this study now
    (``tuner worker --study``); their trials are left to them while they live. ``owner``: the
    queue worker running it (:func:`tuner.study.sharing.worker_identity`), recorded so that another
    worker takes the study over if this process dies; None (the command line) records none.
    ``takeover`` (with ``resume``): a queue worker resumes a study whose queue worker is gone,
    while workers that joined it (``tuner worker --study``) may still measure: only the trials
    of dead workers are swept, not every running one.
    A database error from Optuna's side is raised as a StorageError (the study is then marked
    interrupted, resumable); Optuna's connections are closed when this returns.
    """
    report = reporter or SilentReporter()
    me = sharing.worker_identity()
    with _optuna_session(ctx) as storage:
        study = _open(
            ctx, repo, storage, resume=resume, claimed=claimed, join=join, alone=not takeover
        )
        row = repo.get_study(ctx.name)
        if join and row is not None and row.status in _SETTLED:
            # Its runner's record stays: a confirming worker gone is said (tuner studies).
            return _nothing_to_do(ctx, repo, report, row)
        runs = not join  # whether this process is recorded as the study's runner
        if runs:
            repo.set_study_worker(ctx.name, owner)
            repo.set_study_runner(ctx.name, me)
        else:
            _clear_dead_runner(ctx.name, repo)  # a joining worker runs it now
        try:
            # Inside: a Ctrl-C (a SIGTERM) landing just after this write still records the
            # study interrupted, whatever another worker wrote before.
            if not join:
                repo.set_study_status(ctx.name, "running")
            elif not repo.claim_study_step(ctx.name, StudyStatus.RUNNING, unless=_SETTLED):
                # Its runner took the confirmation (or finished) since the read above: "running"
                # written over that let this worker start a second confirmation beside it.
                return _nothing_to_do(ctx, repo, report, repo.get_study(ctx.name))
            _loop(ctx, study, storage, runner, repo, report, study_slo(row), join=join)
            if ctx.spec.confirm_launches > 0:
                # A joined worker that takes the confirmation runs the study while it confirms:
                # recorded with the claim (claim_study_step), it is refused to a resume and
                # kept from a takeover while it lives, as the study's own runner is.
                if not repo.claim_study_step(
                    ctx.name,
                    StudyStatus.CONFIRMING,
                    unless=(StudyStatus.CONFIRMING,),
                    runner=me if join else None,
                ):
                    runs = False  # the worker that took the confirmation is recorded now
                    report.phase("confirmation", "left to the worker that runs it")
                    return rank(repo, ctx.name, ctx.spec.objective)
                runs = True
                # A joined worker beats for the study as its queue worker did (if it had one).
                beating = sharing.study_heartbeat(repo, ctx.name, me) if join else None
                with beating or contextlib.nullcontext():
                    # A confirmation cut short goes on; a study given more trials after its
                    # confirmation confirms the new top candidates (the rest is decided).
                    run_confirmation(
                        ctx, rank(repo, ctx.name, ctx.spec.objective), runner, repo, report
                    )
        except BaseException:
            repo.set_study_status(ctx.name, "interrupted")
            raise
        finally:  # however it ends; a confirmation left to another worker is that one's
            if runs:
                repo.set_study_runner(ctx.name, None)
        repo.set_study_status(ctx.name, "finished")
        return rank(repo, ctx.name, ctx.spec.objective)


_SETTLED = (StudyStatus.CONFIRMING, StudyStatus.FINISHED)  # nothing left for a joined worker


def _nothing_to_do(
    ctx: StudyContext, repo: Repository, report: Reporter, row: StudyRow | None
) -> list[Ranked]:
    """A joining worker's end where the study is confirming or finished (``row``): said, and
    the study's standings returned."""
    report.phase("nothing to do", _settled(ctx.name, row) if row is not None else "")
    return rank(repo, ctx.name, ctx.spec.objective)


def _settled(name: str, row: StudyRow) -> str:
    """Why a worker that joins study ``name`` (stored as ``row``, confirming or finished) has
    nothing to do, and, where the worker that confirmed it has exited, what goes on with it."""
    if not sharing.runner_gone(row):
        return f"the study is {row.status}"
    return (
        f"the study is confirming, and the worker that confirmed it "
        f"({sharing.named(row.spec[RUN_OWNER])}) has exited: `tuner run --study {name} "
        "--resume` goes on with its confirmation"
    )


@contextlib.contextmanager
def _optuna_session(ctx: StudyContext) -> Iterator[optuna.storages.RDBStorage]:
    """Optuna's storage for one call: its database errors raised as StorageError, its
    connections closed at the end."""
    storage = optuna_storage(ctx)
    try:
        yield storage
    except sa_exc.SQLAlchemyError as e:
        raise storage_error(e, ctx.storage_url) from e
    finally:
        storage.engine.dispose()


def set_up_study(ctx: StudyContext, repo: Repository, *, resume: bool) -> None:
    """Create (or, with ``resume``, take over) the study without running a trial: what
    ``tuner run --parallel`` does before its workers join it."""
    with _optuna_session(ctx) as storage:
        _open(ctx, repo, storage, resume=resume, claimed=False, join=False, alone=True)
        _clear_dead_runner(ctx.name, repo)  # its workers run it now
        repo.set_study_status(ctx.name, "running")  # not "queued": its Optuna study exists


def _clear_dead_runner(name: str, repo: Repository) -> None:
    """Forget the recorded runner of study ``name`` when it has exited on this host (a
    ``kill -9``): the workers that run the study now are not "gone"."""
    row = repo.get_study(name)
    runner = row.spec.get(RUN_OWNER) if row is not None else None
    if isinstance(runner, dict) and sharing.gone_here(runner):
        repo.set_study_runner(name, None)


def _open(
    ctx: StudyContext,
    repo: Repository,
    storage: optuna.storages.RDBStorage,
    *,
    resume: bool,
    claimed: bool,
    join: bool,
    alone: bool,
) -> optuna.Study:
    existing = repo.get_study(ctx.name)
    if claimed and existing is None:
        raise UsageError(f"no queued study named {ctx.name!r}", hint="run `tuner studies`")
    if not (resume or claimed or join):
        refuse_taken(ctx.name, existing)
    if existing is None and (resume or join):
        what = "resume" if resume else "join"
        raise UsageError(f"no study named {ctx.name!r} to {what}", hint="run `tuner studies`")
    if resume and existing is not None and existing.status == StudyStatus.QUEUED:
        # Queued through the API and never set up (no Optuna study yet): this run takes it
        # as the first worker to join would (tuner.study.worker.join_study).
        claimed = repo.claim_queued(ctx.name)
        if not claimed:
            raise UsageError(
                f"study {ctx.name!r} was taken by a worker as this run started",
                hint=f"`tuner worker --study {ctx.name}` joins it on this host",
            )
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
                slo={k: v for k, v in vars(ctx.slo).items() if v is not None},
                # The workload's fingerprint rides with the spec (from_dict ignores it).
                spec={
                    **ctx.spec.to_dict(),
                    FINGERPRINT: fingerprint(ctx.workload).as_dict(),
                },
                emulated=ctx.emulated,
                vllm_version=ctx.vllm_version,
                n_trials_requested=ctx.spec.trials,
                # Not queued: a worker polling this database would claim it while it is set up.
                status=StudyStatus.RUNNING,
            )
        if existing is not None:  # queued: what its worker knows now
            _record_set_up(ctx, repo)
        study = _set_up_optuna(ctx, storage)
    else:
        runner = existing.spec.get(RUN_OWNER)
        if resume and isinstance(runner, dict):  # between its trials, or confirming
            confirming = existing.status == StudyStatus.CONFIRMING
            sharing.refuse_beside(
                runner,
                ctx.name,
                "confirms it" if confirming else "runs it",
                shared=not ctx.storage_url.startswith("sqlite"),
            )
        if existing.spec:  # the study continues as it was created (tuner.spec.resume)
            resumed_spec(stored_spec(existing.spec, existing.name, existing.model_source), ctx.spec)
            check_same_requests(existing.spec.get(FINGERPRINT), ctx.workload, ctx.name)
        if ctx.model.source and existing.model_source not in (None, ctx.model.source):
            raise UsageError(  # another directory of the same name, or another hub id
                f"study {ctx.name!r} measured the model at {existing.model_source}, and this "
                f"run's --model {ctx.spec.model} is {ctx.model.source}",
                hint=f"continue it with --model {shlex.quote(existing.model_source)}",
            )
        if existing.vllm_version and existing.vllm_version != ctx.vllm_version:
            raise UsageError(
                f"study {ctx.name!r} measured vLLM {existing.vllm_version}, and this run has "
                f"vLLM {ctx.vllm_version}: its trials would rank against the other version's "
                "defaults",
                hint=f"continue it with vLLM {existing.vllm_version} (--vllm-python), or start "
                "another study (--study NEW) for this version",
            )
        if resume and not _optuna_study_exists(storage, ctx.name):
            # Its queue worker stopped (or failed) while it set the study up, before the
            # Optuna study existed: this resume sets it up, as that worker would have.
            _record_set_up(ctx, repo)
            study = _set_up_optuna(ctx, storage)
        else:
            study = open_optuna_study(ctx, create=False, storage=storage)
            # A resume: nobody else runs the study (none on this host, it checks first), so
            # every trial still running is dead; not so for a takeover (``alone`` False).
            sharing.swept(
                study,
                repo,
                ctx.name,
                alone=resume and alone,
                # A takeover of a confirming study: its queue worker, gone, ran the confirmation.
                confirmation_gone=resume and existing.status == StudyStatus.CONFIRMING,
            )
        if resume and existing.n_trials_requested != ctx.spec.trials:
            repo.set_trials_requested(ctx.name, ctx.spec.trials)
    name_metrics(ctx, study)
    return study


def _record_set_up(ctx: StudyContext, repo: Repository) -> None:
    """What a queued study learns where it is set up: its vLLM, served model, emulation and
    the fingerprint of its requests (which later resumes are checked against)."""
    repo.set_up_queued(
        ctx.name,
        vllm_version=ctx.vllm_version,
        model_source=ctx.serve_model,
        emulated=ctx.emulated,
        spec={FINGERPRINT: fingerprint(ctx.workload).as_dict()},
    )


def _set_up_optuna(ctx: StudyContext, storage: optuna.storages.RDBStorage) -> optuna.Study:
    """The study's Optuna study, created with its first trials queued: a predicted regime's
    recipe, vLLM's defaults, then the spec's ``[[enqueue]]``."""
    study = open_optuna_study(ctx, create=True, storage=storage)
    planning.enqueue_predicted(ctx, study)  # a predicted regime's recipe goes first
    study.enqueue_trial(ctx.space.baseline_params(), user_attrs={"baseline": True})
    for item in ctx.spec.enqueue:
        params = ctx.space.params_for(ctx.space.config_from(item))
        study.enqueue_trial(params, user_attrs={ENQUEUED: True})  # run as written, plan or not
    return study


def _optuna_study_exists(storage: optuna.storages.RDBStorage, name: str) -> bool:
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return True


def refuse_taken(name: str, row: StudyRow | None) -> None:
    """UsageError when a new study's ``name`` is taken (``row``: the study stored under it)."""
    if row is not None:
        raise UsageError(
            f"study {name!r} already exists ({row.status})",
            hint="add --resume to continue it, or pick another --study name",
        )


def _loop(
    ctx: StudyContext,
    study: optuna.Study,
    storage: optuna.storages.RDBStorage,
    runner: TrialRunner,
    repo: Repository,
    report: Reporter,
    slo: Slo,
    *,
    join: bool,
) -> None:
    """``slo``: the one stored with the study, which its standings are judged by; ``join``:
    other workers may draw beside this one (:func:`ask_trial`)."""
    total = ctx.spec.trials
    me = sharing.worker_identity()
    while True:
        trials, rows = sharing.swept(study, repo, ctx.name)  # the one read of the trial rows
        done = sharing.results(trials)
        if done >= total:
            return
        space = planning.current_space(ctx, study, repo, report.phase, rows, slo)
        if sharing.budget_taken(trials, total):
            report.phase("waiting", "for the trials other workers measure")
            time.sleep(WAIT_S)
            continue
        trial = ask_trial(ctx, study, join=join)
        if _before_defaults(study, trial):
            sharing.withdraw(study, trial, "vLLM's defaults, queued again, are measured first")
            continue
        # It beats from the ask on (sharing.heartbeat): a trial whose worker is lost before its
        # measurement (a host gone, kill -9) goes stale as any other; Optuna's heartbeat never
        # marks stale a trial that was never beaten, and it kept the budget of the others.
        with sharing.heartbeat(storage, trial._trial_id):
            trial.set_user_attr(sharing.WORKER, me)
            at = sharing.place(study.get_trials(deepcopy=False), trial.number, total)
            if at is None:
                sharing.withdraw(study, trial, "the trial budget was taken by other workers")
                continue
            space = planning.trial_space(ctx, trial, space)
            config = space.suggest(trial)
            twin = sharing.twin_of(study, trial, config)
            if twin is not None:
                sharing.withdraw(study, trial, f"trial {twin} measures this configuration now")
                report.phase("waiting", f"trial {twin} of another worker measures {config.label()}")
                time.sleep(WAIT_S)
                continue
            defaults = bool(trial.user_attrs.get("baseline")) or config == ctx.space.baseline()
            # Only the first measured trial of the defaults is the baseline; no other measures them
            # now (twin_of), so one already measured is the baseline and this one measures it again.
            again = defaults and baseline(rows) is not None
            earlier = _drawn_again(study, trial, config, rows, space)
            if earlier is not None:
                screen: TrialResult | None = _repeated(config, earlier)
            else:
                screen = None if defaults else _screen(space, config, rows)
            free = _free_draw(study, trial, config, screen, rows)
            if free:
                trial.set_user_attr(sharing.FREE, True)
            if screen is not None and screen.failure is FailureClass.INVALID_CONFIG:
                budget = FREE_NOTE if free else USED_NOTE
                screen = dataclasses.replace(
                    screen, failure_detail=f"{screen.failure_detail} ({budget})"
                )
            # Its place in the budget: "trial 3/6" once, whichever worker measures it; a
            # first draw the rules rule out takes none.
            report.trial_started(
                trial.number,
                None if free else at + 1,
                total,
                config,
                "again" if again else defaults,
            )
            repo.set_study_status(ctx.name, "running")  # another worker may have stopped
            trial_id = repo.start_trial(ctx.name, trial.number, config, "search", defaults)
            check = (
                None
                if defaults or earlier or planning.screening(trial)
                else first_point_check(ctx, rows, slo)
            )
            try:
                result = screen or runner.run(
                    config, ctx.workload, slo=ctx.slo, on_phase=report.phase, first_point=check
                )
            except BaseException as exc:
                # The tuner itself is going down (Ctrl-C, SIGTERM): record it, queue the
                # configuration again (an interruption is not a result), let it propagate.
                stopped = interrupted(config, "the tuner stopped during this trial")
                repo.finish_trial(trial_id, stopped, None, None)
                tell_attrs(trial, stopped)
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                # A user's stop is not the configuration's doing: it keeps its attempts (three
                # Ctrl-Cs dropped a user's [[enqueue]] configuration for good).
                user = isinstance(exc, (KeyboardInterrupt, SystemExit))
                sharing.retry(study, sharing.frozen(study, trial), counted=not user)
                raise
        rows = _record(ctx, study, trial, trial_id, result, repo, defaults, rows)
        _defaults_here(ctx, study, rows, trial.number, report.phase)
        if defaults:
            _defaults_again(ctx, study, trial, result, rows, report.phase)
        ranked = standings(rows, ctx.spec.objective, slo)
        report.trial_finished(trial.number, result, ranked[0] if ranked else None)


def _before_defaults(study: optuna.Study, trial: optuna.Trial) -> bool:
    """Whether ``trial``, a queued configuration, was popped while vLLM's defaults wait to be
    tried again (their trial was interrupted, or its worker lost) or on a card that has not run
    them (:func:`_defaults_here`): Optuna pops the oldest first, and the trials of
    ``[[enqueue]]``, a predicted recipe or a screening need the reference of their card
    (first-point check, screening, plan). Given back, it is queued again behind them. A new
    study's first defaults keep their place behind a predicted recipe, which goes first by
    design (:mod:`tuner.study.planning`)."""
    if trial.user_attrs.get("baseline"):
        return False
    trials = study.get_trials(deepcopy=False)
    done = optuna.trial.TrialState.COMPLETE
    measured = any(t.state is done and t.user_attrs.get("baseline") for t in trials)
    return any(
        t.state is optuna.trial.TrialState.WAITING
        and t.user_attrs.get("baseline")
        and (measured or sharing.attempt(t) > 1 or "retry_of" in t.user_attrs)
        for t in trials
    )


def _defaults_here(
    ctx: StudyContext, study: optuna.Study, rows: list[TrialRow], number: int, say: planning.Say
) -> None:
    """Queue vLLM's defaults once trial ``number`` ran on a GPU (NVML UUID) where the study has
    not measured them (a study resumed on another machine, a worker on another host), while
    the budget has room: that card's trials are then scored against its own defaults
    (:class:`tuner.study.standings.Reference`), not another card's."""
    row = next((r for r in rows if r.number == number), None)
    card = row.gpu_uuid if row is not None else None
    found = score_reference(rows)
    here = baseline(rows, card)  # measured on this card, a yardstick or not (a capacity of 0)
    if row is None or card is None or found is None or (here and here.gpu_uuid == card):
        return
    trials = study.get_trials(deepcopy=False)
    unfinished = (optuna.trial.TrialState.WAITING, optuna.trial.TrialState.RUNNING)
    if any(t.state in unfinished and t.user_attrs.get("baseline") for t in trials):
        return  # the defaults are queued or measured now (here or on another card)
    if sharing.budget_taken(trials, ctx.spec.trials):
        return
    study.enqueue_trial(ctx.space.baseline_params(), user_attrs={"baseline": True})
    say(
        "defaults",
        f"{row.gpu_name or 'this GPU'} ({card}) has not run vLLM's defaults in this study: "
        "they run next, and the trials of this card are scored against them",
    )


def _defaults_again(
    ctx: StudyContext,
    study: optuna.Study,
    trial: optuna.Trial,
    result: TrialResult,
    rows: list[TrialRow],
    say: planning.Say,
) -> None:
    """Queue vLLM's defaults again after a fault of theirs (a start that failed, a timeout, a
    crash: not a finding) while the study has no measurement of them and the budget has room,
    up to :data:`tuner.study.sharing.MAX_ATTEMPTS` tries: every score is a ratio to them, and
    one cold start that went wrong left a study without any (and without its confirmation)."""
    failure = result.failure
    if failure is None or failure.is_finding or result.status is not TrialStatus.FAILED:
        return
    if baseline(rows) is not None:
        return
    told = sharing.frozen(study, trial)
    tries = sharing.attempt(told)
    trials = study.get_trials(deepcopy=False)
    if tries >= sharing.MAX_ATTEMPTS or sharing.budget_taken(trials, ctx.spec.trials):
        return
    if sharing.retry(study, told):
        say(
            "defaults",
            f"vLLM's defaults failed ({failure.value}): they run again, try {tries + 1} of "
            f"{sharing.MAX_ATTEMPTS} (every score is a ratio to them)",
        )


def _drawn_again(
    study: optuna.Study,
    trial: optuna.Trial,
    config: ServingConfig,
    rows: list[TrialRow],
    space: SearchSpace,
) -> TrialRow | None:
    """The trial among ``rows`` that measured ``config`` already, where the sampler drew it
    again and no configuration of ``space`` is left untried: a launch then only measures the
    noise again, which the confirmation does. None for a first draw, for a queued one (the
    defaults, a screening's, a retry, one the user enqueued) and while the space has untried
    configurations: a draw again is launched then, so that the sampler learns (told FAIL it
    would draw the same again; on a replay of the H200's lever plan, `bench/plan_replay.py
    --repeats skip`, that left 18 of 50 searches short of the target against 3)."""
    earlier = measured_before(rows, config)
    if earlier is None or sharing.frozen(study, trial).system_attrs.get("fixed_params"):
        return None
    return earlier if space.exhausted_by({c for r in rows for c in ran_as(r)}) else None


def _free_draw(
    study: optuna.Study,
    trial: optuna.Trial,
    config: ServingConfig,
    screen: TrialResult | None,
    rows: list[TrialRow],
) -> bool:
    """Whether ``screen`` rules ``config`` out by the space's rules for the first time, so
    that ``trial`` takes no place in the budget (:func:`tuner.db.rows.ruled_out_before`, in
    trial number order as the surfaces count it). Another worker's draw of it may have been
    ruled out since ``rows`` were read: the trials as they are now say so."""
    if screen is None or screen.failure is not FailureClass.INVALID_CONFIG:
        return False
    if ruled_out_before(rows, config):
        return False
    drawn, invalid = config.to_dict(), FailureClass.INVALID_CONFIG.value
    return not any(
        t.number < trial.number
        and t.user_attrs.get(sharing.DRAWN) == drawn
        and t.user_attrs.get("failure_class") == invalid
        for t in study.get_trials(deepcopy=False)
    )


def _repeated(config: ServingConfig, earlier: TrialRow) -> TrialResult:
    """The record of a trial that :func:`_drawn_again` found measured: PRUNED, not launched."""
    same = "" if earlier.config == config else f" ({earlier.config.label()}, the same kernel)"
    return TrialResult(
        config,
        TrialStatus.PRUNED,
        failure=FailureClass.REPEATED,
        failure_detail=f"trial #{earlier.number} measured this configuration{same}, and every "
        "configuration of the space has been tried: not launched again (the confirmation "
        "measures the best afresh)",
    )


def _screen(space: SearchSpace, config: ServingConfig, rows: list[TrialRow]) -> TrialResult | None:
    """Rule a config out before launching it, or return None to go ahead (``rows``: the
    study's trial rows, whose failures rule out what they dominate)."""
    problems = space.violations(config)
    if problems:
        failure = FailureClass.INVALID_CONFIG
        detail = "; ".join(problems)  # and its place in the budget (_free_draw)
    elif (blocker := space.dominated_by(config, failed_configs(rows))) is not None:
        failure = FailureClass.DOMINATED
        detail = f"at least as demanding as {blocker.label()}, which did not fit"
    else:
        return None
    return TrialResult(config, TrialStatus.PRUNED, failure=failure, failure_detail=detail)


def _record(
    ctx: StudyContext,
    study: optuna.Study,
    trial: optuna.Trial,
    trial_id: int,
    result: TrialResult,
    repo: Repository,
    baseline: bool,
    rows: list[TrialRow],
) -> list[TrialRow]:
    """Store the trial's outcome and tell Optuna; the study's trial rows (``rows``, read
    before the trial) with this trial's row as stored, the standings after it."""
    ceiling = ctx.gpu.memory_gib if not ctx.gpu.is_cpu else 1024.0
    objective = ctx.spec.objective
    # A trial stopped early tells Optuna its first point's numbers: a measurement, if partial.
    told = result
    partial = result.failure is FailureClass.STOPPED_EARLY
    if partial:
        told = dataclasses.replace(
            result, status=TrialStatus.COMPLETE, failure=None, failure_detail=""
        )
    values = scoring.objective_values(told, memory_ceiling_gib=ceiling, objective=objective)
    constraints = scoring.constraint_values(told, ctx.slo, objective)
    measured = result.status is TrialStatus.COMPLETE
    finding = partial or (result.failure is not None and result.failure.is_finding)
    # The baseline is its own reference (score 1.0). Without it (another worker still measures
    # it, or it failed) no score is stored: rank() scores every trial once it exists. Until
    # the defaults' result is known for good the rows are read again: it may have come since.
    if _unsettled(rows, trial.number):
        rows = repo.list_trials(ctx.name, limit=None)
    found = score_reference(rows)
    card = result.provenance.gpu_uuid if result.provenance is not None else None
    if found is None:
        reference: Sequence[float] | None = values if baseline else None
    elif baseline and card and card not in found.cards:  # the first defaults on this card
        reference = values
    else:
        reference = found.of(card)
    score = (
        scoring.score_values(values, ctx.spec.objective, reference)
        if measured and reference is not None
        else None
    )
    own = repo.finish_trial(trial_id, result, score, values if measured or finding else None)
    tell_attrs(trial, result)
    if measured or finding:
        for name, value in zip(scoring.CONSTRAINT_NAMES, constraints, strict=True):
            trial.set_constraint(name, value)
        study.tell(trial, values)
    else:
        trial.set_user_attr(sharing.COUNTED, True)  # a fault is a result: it uses the budget
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return with_row(rows, own)


def _unsettled(rows: list[TrialRow], number: int) -> bool:
    """Whether the defaults' result among ``rows`` may differ from the stored one by now:
    none yet, or a trial of the defaults numbered before it still runs (trial ``number``,
    this worker's own, aside)."""
    base = baseline(rows)
    return base is None or any(
        r.is_baseline
        and r.status is TrialStatus.RUNNING
        and r.phase is TrialPhase.SEARCH
        and r.number < base.number
        and r.number != number
        for r in rows
    )
