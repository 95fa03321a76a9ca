"""The study loop's side of the lever plan (:mod:`tuner.study.plan`): when the defaults'
trial has a result, diagnose it, store and print the plan and enqueue its screening trials;
when those have results, judge them and narrow the space. The plan lives in the study's row,
so a resumed study, or another worker, continues the same plan.

Where arithmetic already names the regime (:func:`tuner.study.plan.predict`: the GPU's roofline
far above or below what one API server streams), a new study measures that regime's recipe
first and the defaults second, so its likeliest configuration is measured one launch earlier.
The defaults' trial still diagnoses: when it names the predicted regime the recipe counts as
the plan's first screening trial; when it names another, the prediction was wrong, the study
says so, and its own plan is screened in full (the predicted trial stays one of the search).

Called before every trial with the study's trial rows the loop read for it; it returns the space
the next trial is drawn from. Its own reads: the plan record (another worker may have written
it), and once, when the screening is judged, the stored launches of the noise profile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import optuna

from tuner.abtest import COMPARED, HEADLINE, launches_profile
from tuner.compose import StudyContext, plan_wanted
from tuner.db import Repository, TrialRow
from tuner.domain import Objective, Slo, TrialResult, TrialStatus
from tuner.errors import UsageError
from tuner.scoring import CAPACITY, Components, NoiseProfile, diagnose
from tuner.scoring.objectives import WEIGHTS
from tuner.space import SearchSpace
from tuner.study.plan import (
    ENQUEUED,
    PREDICTED,
    PREDICTED_KNOBS,
    RECIPE,
    SCREEN,
    Plan,
    make_plan,
    moved,
    predict,
    screen_configs,
    screened,
    space_of,
)
from tuner.study.standings import baseline, standings

Say = Callable[[str, str], None]
_LABELS = {name: label for name, label, _ in COMPARED}  # "e2e_p99_ms": "P99 E2E ms"
_LABELS[CAPACITY] = "capacity out tok/s"
# The metrics an objective's WEIGHTS weigh, in their order: throughput, P99 latency, memory.
_WEIGHED = ("output_throughput", "e2e_p99_ms", "memory_gib")
_UNFINISHED = (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)


def stored_plan(repo: Repository, name: str) -> dict[str, Any] | None:
    """The plan record stored with study ``name`` (None: none yet, or not a planned study)."""
    return repo.study_plan(name)


def _baseline_result(rows: Sequence[TrialRow]) -> TrialResult | None:
    row = baseline(rows)
    return row.to_result() if row is not None else None


def enqueue_predicted(ctx: StudyContext, study: optuna.Study) -> None:
    """On a new planned study, before its defaults: the predicted regime's recipe, if any."""
    if not plan_wanted(ctx.spec) or ctx.emulated:
        return
    diagnosis = predict(ctx.model, ctx.gpu, ctx.workload)
    plan = make_plan(diagnosis, ctx.space, ctx.spec.objective) if diagnosis else None
    if diagnosis is None or plan is None or not plan.knobs:
        return
    screening = screen_configs(plan, ctx.space)
    if ctx.spec.trials < 1 + len(screening):  # the defaults and the screening come first
        return
    knobs = [k.knob for k in plan.knobs]
    (_, recipe), *_ = screening
    study.enqueue_trial(
        space_of(ctx.space, knobs).params_for(recipe),
        user_attrs={PREDICTED: diagnosis.summary(), PREDICTED_KNOBS: knobs},
    )


def trial_space(ctx: StudyContext, trial: optuna.Trial, space: SearchSpace) -> SearchSpace:
    """The space ``trial`` is drawn from: the card's for the defaults and for a spec's
    ``[[enqueue]]`` entry (a plan's narrower space would drop the knobs it does not search and
    draw the rest), the predicted recipe's knobs for that trial, else ``space`` (the study's
    current one)."""
    if trial.user_attrs.get("baseline") or trial.user_attrs.get(ENQUEUED):
        return ctx.space
    return _predicted_space(ctx.space, trial.user_attrs) or space


def screening(trial: optuna.Trial) -> bool:
    """Whether ``trial`` measures the screening: its recipe, the recipe without one knob, or a
    predicted recipe that may count as its recipe. Such a trial runs in full, never stopped at
    its first load point against the best so far: a knob's effect is the recipe's score over
    the score without it, and a stopped trial scores nothing (a recipe one harmful knob from
    good would zero every effect)."""
    return SCREEN in trial.user_attrs or PREDICTED in trial.user_attrs


def _predicted_space(card: SearchSpace, attrs: Mapping[str, Any]) -> SearchSpace | None:
    """The space of a predicted recipe's trial (its user attributes ``attrs``); None for
    any other trial."""
    knobs = attrs.get(PREDICTED_KNOBS)
    if PREDICTED not in attrs or not isinstance(knobs, list):
        return None
    return space_of(card, [str(k) for k in knobs])


def _predicted(trials: Sequence[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    return [t for t in trials if PREDICTED in t.user_attrs]


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
        if not rows:  # a new study: say why its first trial is not the defaults
            for t in _predicted(study.get_trials(deepcopy=False)):
                say("prediction", f"{t.user_attrs[PREDICTED]}: its recipe first, then the defaults")
        return ctx.space  # the defaults are not measured yet (or failed: the card is searched)
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
    predicted = _predicted(study.get_trials(deepcopy=False))
    first = _predicted_recipe(predicted, plan, ctx.space)
    measured = first.number if first is not None else None
    for t in predicted if first is None else ():
        if "retry_of" not in t.user_attrs:  # the first attempt speaks for its retries
            said = str(t.user_attrs[PREDICTED]).split(" at ")[0]
            say("prediction", f"#{t.number} measured the recipe for {said}, not this plan's "
                f"({diagnosis.regime}): it stays a trial of the search")  # fmt: skip
    for knob, config in screen_configs(plan, ctx.space):
        if knob == RECIPE and first is not None:
            done = first.state is optuna.trial.TrialState.COMPLETE
            say("screening", f"the recipe was {'measured' if done else 'queued'} first, as "
                f"predicted (#{measured})")  # fmt: skip
            continue
        study.enqueue_trial(space.params_for(config), user_attrs={SCREEN: knob})
    return space


def _predicted_recipe(
    predicted: Sequence[optuna.trial.FrozenTrial], plan: Plan, card: SearchSpace
) -> optuna.trial.FrozenTrial | None:
    """The predicted trial that measures ``plan``'s recipe, if one does: a complete one (a
    finding is told complete too) first, else one queued or running (a retry). One that failed
    (a fault, an interruption) measured nothing: the screening launches the recipe itself."""
    (_, recipe), *_ = screen_configs(plan, card)
    matches = []
    for t in predicted:
        own = _predicted_space(card, t.user_attrs)
        if own is None or t.state is optuna.trial.TrialState.FAIL:
            continue
        try:
            want = own.params_for(recipe)
        except UsageError:  # the recipe is outside the predicted trial's space
            continue
        if dict(t.params or t.system_attrs.get("fixed_params") or {}) == want:
            matches.append(t)
    rank = {optuna.trial.TrialState.COMPLETE: 0, **dict.fromkeys(_UNFINISHED, 1)}
    return min(matches, key=lambda t: (rank.get(t.state, 2), -t.number), default=None)


def _judge(
    ctx: StudyContext,
    study: optuna.Study,
    repo: Repository,
    plan: Plan,
    say: Say,
    rows: Sequence[TrialRow],
    slo: Slo,
) -> Plan:
    every = study.get_trials(deepcopy=False)
    trials = [t for t in every if SCREEN in t.user_attrs]
    labels = {t.number: str(t.user_attrs[SCREEN]) for t in trials}
    first = _predicted_recipe(_predicted(every), plan, ctx.space)
    if first is not None:  # the predicted recipe is the screening's recipe
        labels[first.number] = RECIPE
        trials.append(first)
    expected = len(screen_configs(plan, ctx.space))
    if len(labels) < expected or any(t.state in _UNFINISHED for t in trials):
        return plan  # screening still runs
    # A trial that misses the SLO scores as one that failed: a knob is not kept for the
    # throughput of a recipe the study could never recommend.
    ranked = standings(rows, ctx.spec.objective, slo)
    scores = {r.number: r.score if r.feasible else 0.0 for r in ranked}
    by_knob = {label: scores.get(number, 0.0) for number, label in labels.items()}
    sd, source = _launch_sd(ctx, repo, rows)
    judged = screened(plan, by_knob, sd, source)
    repo.set_study_plan(ctx.name, judged.as_dict())
    say(*judged.lines()[-1].split(": ", 1))
    return judged


def _launch_sd(
    ctx: StudyContext, repo: Repository, rows: Sequence[TrialRow]
) -> tuple[float | None, str]:
    defaults = _baseline_result(rows)
    profile = launches_profile(repo, [defaults] if defaults else [], ctx.model, ctx.workload.name)
    return score_sd(profile, ctx.spec.objective) if profile is not None else (None, "")


def score_sd(
    profile: NoiseProfile | Mapping[str, Components],
    objective: Objective,
    *,
    stand_in: bool = True,
) -> tuple[float | None, str]:
    """The SD of one launch's ``objective`` score from ``profile`` (or its components by
    metric), and what it rests on.

    The score is a weighted sum of its metrics' log ratios (:data:`tuner.scoring.objectives.
    WEIGHTS`), so its SD is at most that sum of their SDs (equal where they move together).
    Throughput's alone let null knobs through a latency objective: a launch's P99 latency
    spreads wider (P99 TTFT twice as wide on the H200, docs/results/noise-h200.md). The memory
    score is guarded by throughput (``min(1, thr / thr_ref)``), so its noise counts too; a
    capacity or cost study scores the capacity where the profile has it (a load curve's).
    Where the profile lacks one of the metrics: throughput's, said so (``stand_in``; else
    None); None where it lacks that too."""
    weights = {n: w for n, w in zip(_WEIGHED, WEIGHTS[objective], strict=True) if w}
    if objective is Objective.MEMORY:
        weights[HEADLINE] = 1.0
    if objective in (Objective.CAPACITY, Objective.COST) and profile.get(CAPACITY) is not None:
        weights = {CAPACITY: 1.0}
    parts = {n: profile.get(n) for n in weights}
    if all(parts.values()):
        sd = sum(w * p.sd for n, w in weights.items() if (p := parts[n]) is not None)
        launches = min(p.launches for p in parts.values() if p is not None)
        if len(weights) == 1:
            (name,) = weights
            return sd, f"SD of a launch's {_LABELS[name]} {sd:.3f} from {launches} stored launches"
        what = " + ".join(f"{w:g} x {_LABELS[n]}" for n, w in weights.items())
        return sd, f"SD of a launch's {what}, at most {sd:.3f}, from {launches} stored launches"
    thr = profile.get(HEADLINE)
    if thr is None or not stand_in:
        return None, ""
    missing = ", ".join(_LABELS[n] for n, p in parts.items() if p is None)
    label = _LABELS[HEADLINE]
    return thr.sd, (
        f"SD of a launch's {label} {thr.sd:.3f} from {thr.launches} stored launches (the noise "
        f"profile has no {missing}: {label}'s instead)"
    )
