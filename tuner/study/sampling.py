"""How a study draws from Optuna: Optuna's storage on the study's database, the sampler (TPE,
kept from drawing again a configuration a trial has had: :class:`Untried`), opening the study
(its seed moved on by the trials it holds), asking a worker's next trial, and what a trial
tells Optuna beside its values (the metric names, the trial's attributes), for the loop
(:mod:`tuner.study.loop`)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from tuner.compose import StudyContext
from tuner.db import optuna_rdb
from tuner.domain import SEED_MAX, TrialResult
from tuner.scoring import objectives as scoring
from tuner.space import CONDITIONAL, DEFAULT, LISTED, kernel_twins, listed
from tuner.study import sharing
from tuner.study.attrs import metric_names, trial_attrs


def optuna_storage(ctx: StudyContext) -> optuna.storages.RDBStorage:
    """Optuna's storage on the study's database; its caller disposes ``storage.engine``."""
    with sharing.quiet_optuna():  # the heartbeat arguments are "experimental" since Optuna 2.9
        storage: optuna.storages.RDBStorage = optuna_rdb(
            ctx.storage_url, **sharing.storage_options()
        )
        return storage


def _sampler(ctx: StudyContext, seed: int) -> optuna.samplers.BaseSampler:
    # constant_liar: a trial another worker measures counts as a poor one while it runs, so
    # that concurrent workers are steered apart; with one worker nothing runs at ask time.
    tpe = optuna.samplers.TPESampler(
        seed=seed % (SEED_MAX + 1),
        multivariate=True,
        n_startup_trials=max(3, ctx.spec.trials // 3),
        constant_liar=True,
    )
    return Untried(tpe, seed)


_FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


class Untried(optuna.samplers.BaseSampler):
    """The study's sampler, kept from drawing a configuration a trial has had while another of
    the same knobs is left untried. TPE, once it models a categorical space, draws its best so
    far again (Optuna's samplers take an objective to be stochastic, optuna issue 2021), and a
    second search launch is not pooled with the first: the confirmation measures the best
    afresh. Such a draw becomes one drawn at random among the untried combinations (one the
    space's rules ruled out is tried, though it uses no budget: drawn again, it would be
    ruled out again, and a search with no other combination left would never end). The random
    start-up phase draws knob by knob, which this leaves as it is: a configuration drawn again
    there is the loop's to skip (``tuner.study.loop._drawn_again``), as one drawn where none is
    left."""

    def __init__(self, inner: optuna.samplers.BaseSampler, seed: int) -> None:
        self.inner, self._rng = inner, random.Random(seed)

    def infer_relative_search_space(
        self, study: optuna.Study, trial: optuna.trial.FrozenTrial
    ) -> dict[str, optuna.distributions.BaseDistribution]:
        """TPE's joint space, the knobs every finished trial drew, taken over the trials the
        sampler drew once there are some: a queued trial (the defaults, a lever plan's
        screening) holds only the knobs it was queued with, and a lever the defaults' trial
        lacks would be drawn knob by knob for the whole search, out of the untried rule. Left
        out as TPE leaves them: a knob any finished trial drew from other choices, and a
        conditional knob (:data:`tuner.space.CONDITIONAL`) any finished trial lacks."""
        finished = study.get_trials(deepcopy=False, states=_FINISHED)
        drawn = [t for t in finished if not t.system_attrs.get("fixed_params")]
        if not drawn:
            return self.inner.infer_relative_search_space(study, trial)
        found = optuna.search_space.intersection_search_space(drawn, include_pruned=True)
        for t in finished:
            for name in list(found):
                held = t.distributions.get(name)
                if (held is None and name in CONDITIONAL) or held not in (None, found[name]):
                    del found[name]
        return {name: d for name, d in sorted(found.items()) if not d.single()}

    def sample_relative(
        self,
        study: optuna.Study,
        trial: optuna.trial.FrozenTrial,
        search_space: dict[str, optuna.distributions.BaseDistribution],
    ) -> dict[str, Any]:
        params = self.inner.sample_relative(study, trial, search_space)
        if not params or set(params) != set(search_space):
            return params
        knobs = sorted(search_space)
        tried = {
            tuple(repr(twin.get(k)) for k in knobs)
            for t in study.get_trials(deepcopy=False)
            if t.number != trial.number and (t.state in _FINISHED or sharing.counts(t))
            for twin in _ran_as(t)
        }
        if tuple(repr(params[k]) for k in knobs) not in tried:
            return params
        return _untried(search_space, knobs, tried, self._rng) or params

    def sample_independent(
        self,
        study: optuna.Study,
        trial: optuna.trial.FrozenTrial,
        param_name: str,
        param_distribution: optuna.distributions.BaseDistribution,
    ) -> Any:
        return self.inner.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(
        self,
        study: optuna.Study,
        trial: optuna.trial.FrozenTrial,
        state: optuna.trial.TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()
        self._rng.seed()


def _ran_as(trial: optuna.trial.FrozenTrial) -> list[dict[str, Any]]:
    """``trial``'s params, and the same with the attention kernel its server chose where they
    left that to vLLM (:func:`tuner.space.kernel_twins`; the choice is in its attributes)."""
    attrs = trial.user_attrs
    backend, fa = attrs.get("attention_backend"), attrs.get("flash_attn_version")
    twins = kernel_twins(
        trial.params,
        backend if isinstance(backend, str) else None,
        fa if isinstance(fa, int) else None,
        unset=DEFAULT,
    )
    return [{**trial.params, **twin} for twin in twins]


def _untried(
    space: Mapping[str, optuna.distributions.BaseDistribution],
    knobs: Sequence[str],
    tried: set[tuple[str, ...]],
    rng: random.Random,
) -> dict[str, Any] | None:
    """Values of the categorical ``space`` (``knobs`` in order) that no trial in ``tried`` (their
    values' reprs) has had, drawn by ``rng``; None where none is left or found."""
    choices = [getattr(space[k], "choices", None) for k in knobs]
    if any(c is None for c in choices):
        return None  # a knob that is not categorical: no list of combinations
    lists = [list(c or ()) for c in choices]
    combos = listed(lists)
    if combos is not None:
        fresh = [combo for combo in combos if tuple(repr(v) for v in combo) not in tried]
        return dict(zip(knobs, rng.choice(fresh), strict=True)) if fresh else None
    for _ in range(LISTED // 16):
        combo = tuple(rng.choice(c) for c in lists)
        if tuple(repr(v) for v in combo) not in tried:
            return dict(zip(knobs, combo, strict=True))
    return None


def open_optuna_study(
    ctx: StudyContext, *, create: bool, storage: optuna.storages.RDBStorage | None = None
) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = storage or optuna_storage(ctx)
    if create:
        return optuna.create_study(
            study_name=ctx.name,
            storage=storage,
            sampler=_sampler(ctx, ctx.spec.seed),
            directions=scoring.DIRECTIONS,
        )
    study = optuna.load_study(study_name=ctx.name, storage=storage, sampler=_sampler(ctx, 0))
    # A study taken up again (a resume, a worker joining or taking over) must not replay its
    # first random draws, which a sampler seeded as before would: the seed moves on with the
    # trials the study already holds, so a resume stays reproducible by its seed too.
    held = len(study.get_trials(deepcopy=False))
    study.sampler = _sampler(ctx, ctx.spec.seed + held)
    return study


# Where a joined worker's seeds start: half the seed range from the study's seed, which a
# single worker's seed (the study's, plus the trials held) never reaches.
_JOINED_SEEDS = 2**31


def ask_trial(ctx: StudyContext, study: optuna.Study, *, join: bool) -> optuna.Trial:
    """Optuna's next trial for this worker, its parameters not drawn yet.

    A joined worker draws each trial from a seed of its own: the study's, moved by
    :data:`_JOINED_SEEDS` and the trial's number, which Optuna gives to one trial only. Workers
    that joined at once hold the same trials, and seeded by them (as a single worker is) they
    drew the same configurations in lockstep. A single worker's draws are as they were, and a
    joined worker's trial draws alike from the same study (its parameters are drawn after the
    ask, when Optuna's sampler is first asked for them)."""
    with sharing.quiet_optuna():
        trial = study.ask()
    if join:
        study.sampler = _sampler(ctx, ctx.spec.seed + _JOINED_SEEDS + trial.number)
    return trial


def name_metrics(ctx: StudyContext, study: optuna.Study) -> None:
    """Name the objectives (optuna-dashboard shows them); also on resume, for older studies."""
    names = metric_names(ctx.spec.objective)
    if study.metric_names != names:
        with sharing.quiet_optuna():  # experimental since Optuna 3.2, stable in practice
            study.set_metric_names(names)


def tell_attrs(trial: optuna.Trial, result: TrialResult) -> None:
    for key, value in trial_attrs(result).items():
        trial.set_user_attr(key, value)
