"""The study loop's side of the lever plan (:mod:`tuner.study.plan`): when the defaults'
trial has a result, diagnose it, store and print the plan and enqueue its screening trials;
when those have results, judge them and narrow the space. The plan lives in the study's row,
so a resumed study, or another worker, continues the same plan.

Called before every trial with the study's trial rows the loop read for it; it returns the space
the next trial is drawn from. Its own reads: the plan record (another worker may have written
it), and once, when the screening is judged, the stored launches of the noise profile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import optuna

from tuner.abtest import HEADLINE, load_profile, noise_key
from tuner.compose import StudyContext, plan_wanted
from tuner.db import Repository, TrialRow
from tuner.domain import Slo, TrialResult, TrialStatus
from tuner.scoring import diagnose
from tuner.space import SearchSpace
from tuner.study.plan import SCREEN, Plan, make_plan, moved, screen_configs, screened, space_of
from tuner.study.standings import baseline, standings

Say = Callable[[str, str], None]
_UNFINISHED = (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)


def stored_plan(repo: Repository, name: str) -> dict[str, Any] | None:
    """The plan record stored with study ``name`` (None: none yet, or not a planned study)."""
    row = repo.get_study(name)
    record = (row.spec or {}).get("plan_record") if row is not None else None
    return dict(record) if isinstance(record, dict) else None


def _baseline_result(rows: Sequence[TrialRow]) -> TrialResult | None:
    row = baseline(rows)
    return row.to_result() if row is not None else None


def current_space(
    ctx: StudyContext,
    study: optuna.Study,
    repo: Repository,
    say: Say,
    rows: Sequence[TrialRow],
    slo: Slo,
) -> SearchSpace:
    """The space of the study's next trial (see the module docstring); ``rows``: the study's
    trial rows, ``slo``: the one stored with it."""
    if not plan_wanted(ctx.spec):
        return ctx.space
    record = stored_plan(repo, ctx.name)
    if record is None:
        return _diagnose(ctx, study, repo, say, rows)
    if record.get("knobs") is None:  # the regime was unknown: the card's knobs
        return ctx.space
    plan = Plan.from_dict(record)
    if plan.kept is None:
        plan = _judge(ctx, study, repo, plan, say, rows, slo)
    elif (grown := _moved(ctx, plan, rows, slo)) is not None:
        repo.set_study_plan(ctx.name, grown.as_dict())
        say(*grown.lines()[-1].split(": ", 1))
        plan = grown
    return space_of(ctx.space, plan.searched)


def _moved(ctx: StudyContext, plan: Plan, rows: Sequence[TrialRow], slo: Slo) -> Plan | None:
    """The plan grown when the best trial so far has another bottleneck than the defaults."""
    ranked = [r for r in standings(rows, ctx.spec.objective, slo) if r.feasible]
    if not ranked or ranked[0].is_baseline:
        return None
    row = ranked[0].row
    if row.status is not TrialStatus.COMPLETE:
        return None
    return moved(plan, row.number, diagnose(row.to_result()), ctx.space, ctx.spec.objective)


def _diagnose(
    ctx: StudyContext, study: optuna.Study, repo: Repository, say: Say, rows: Sequence[TrialRow]
) -> SearchSpace:
    defaults = _baseline_result(rows)
    if defaults is None:
        return ctx.space  # the defaults are measured first (or failed: the card is searched)
    diagnosis = diagnose(defaults)
    plan = make_plan(diagnosis, ctx.space, ctx.spec.objective)
    say("diagnosis", diagnosis.summary())  # before the search goes on, as soon as it is known
    if plan is None or not plan.knobs:
        repo.set_study_plan(ctx.name, {"diagnosis": diagnosis.as_dict(), "knobs": None})
        say("plan", "nothing planned for this regime: searching the card's knobs")
        return ctx.space
    repo.set_study_plan(ctx.name, plan.as_dict())
    for line in plan.lines()[1:]:
        say(*line.split(": ", 1))
    space = space_of(ctx.space, plan.searched)
    for knob, config in screen_configs(plan, ctx.space):
        study.enqueue_trial(space.params_for(config), user_attrs={SCREEN: knob})
    return space


def _judge(
    ctx: StudyContext,
    study: optuna.Study,
    repo: Repository,
    plan: Plan,
    say: Say,
    rows: Sequence[TrialRow],
    slo: Slo,
) -> Plan:
    trials = [t for t in study.get_trials(deepcopy=False) if SCREEN in t.user_attrs]
    expected = len(screen_configs(plan, ctx.space))
    if len(trials) < expected or any(t.state in _UNFINISHED for t in trials):
        return plan  # screening still runs
    scores = {r.number: r.score for r in standings(rows, ctx.spec.objective, slo)}
    by_knob = {str(t.user_attrs[SCREEN]): scores.get(t.number, 0.0) for t in trials}
    sd, source = _launch_sd(ctx, repo, rows)
    judged = screened(plan, by_knob, sd, source)
    repo.set_study_plan(ctx.name, judged.as_dict())
    say(*judged.lines()[-1].split(": ", 1))
    return judged


def _launch_sd(
    ctx: StudyContext, repo: Repository, rows: Sequence[TrialRow]
) -> tuple[float | None, str]:
    defaults = _baseline_result(rows)
    key = noise_key(defaults, ctx.model.alias, ctx.workload.name) if defaults else None
    profile = load_profile(repo, key) if key is not None else None
    parts = profile.get(HEADLINE) if profile is not None else None
    if parts is None:
        return None, ""
    return parts.sd, f"launch SD {parts.sd:.3f} from {parts.launches} stored launches"
