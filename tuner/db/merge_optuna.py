"""The Optuna half of ``tuner db merge``: each merged study's Optuna study, so that ``--resume``,
parameter importances and optuna-dashboard work on the target.

Optuna's storage has its own sessions, so this runs after tuner's transaction has committed,
and it only ever adds what the target lacks: running a merge again finishes an interrupted one.
An Optuna study absent from the target is copied whole (:func:`optuna.copy_study`); one present
gets the source's trials past its last number (Optuna numbers trials 0, 1, ... in order) and
has its unfinished trials finished as the source finished them, and the study-level attributes
it lacks (the metric names of ``Study.set_metric_names`` are a study system attribute). A trial
the target already finished stays as it is: Optuna's storage does not change finished trials.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import create_engine, inspect
from sqlalchemy import exc as sa_exc

from tuner.errors import StorageError

# Two of Optuna's own tables: a database without them holds no Optuna study, and opening an
# RDBStorage there would create them (or, told not to, fail on the first query).
_OPTUNA_TABLES = frozenset({"studies", "version_info"})


@dataclass(frozen=True)
class OptunaMerge:
    """What happened to one study's Optuna study in the target."""

    action: str  # "copied" (it was absent), "merged" (it was there), "none" (no Optuna study)
    trials_added: int = 0
    trials_finished: int = 0  # unfinished in the target, finished in the source


@contextmanager
def open_storage(
    url: str, engine_kwargs: Mapping[str, Any], *, create: bool
) -> Iterator[RDBStorage | None]:
    """Optuna's storage at ``url``; None when it has no Optuna tables and ``create`` is false."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = None
    try:
        if create or _OPTUNA_TABLES.issubset(_tables(url, engine_kwargs)):
            storage = RDBStorage(
                url, engine_kwargs=dict(engine_kwargs), skip_table_creation=not create
            )
    except (sa_exc.SQLAlchemyError, optuna.exceptions.OptunaError, RuntimeError) as e:
        raise StorageError(f"cannot open Optuna's storage: {e}") from e
    try:
        yield storage
    finally:
        if storage is not None:
            storage.engine.dispose()


def _tables(url: str, engine_kwargs: Mapping[str, Any]) -> set[str]:
    engine = create_engine(url, **engine_kwargs)
    try:
        with engine.connect() as connection:
            return set(inspect(connection).get_table_names())
    finally:
        engine.dispose()


def study_names(storage: RDBStorage | None) -> set[str]:
    if storage is None:
        return set()
    return {s.study_name for s in storage.get_all_studies()}


def merge_study(
    source: RDBStorage | None,
    target: RDBStorage | None,
    from_name: str,
    to_name: str,
    *,
    dry_run: bool,
) -> OptunaMerge:
    """Bring Optuna study ``from_name`` of ``source`` into ``target`` as ``to_name``.

    ``target`` may be None only in a dry run (a target without Optuna's tables). Raises
    StorageError when Optuna cannot read or write a storage.
    """
    try:
        if source is None or from_name not in study_names(source):
            return OptunaMerge("none")
        from_id = source.get_study_id_from_name(from_name)
        theirs = sorted(source.get_all_trials(from_id, deepcopy=False), key=lambda t: t.number)
        if target is None or to_name not in study_names(target):
            if not dry_run:
                assert target is not None
                optuna.copy_study(
                    from_study_name=from_name,
                    from_storage=source,
                    to_storage=target,
                    to_study_name=to_name,
                )
            return OptunaMerge("copied", trials_added=len(theirs))
        to_id = target.get_study_id_from_name(to_name)
        mine = sorted(target.get_all_trials(to_id, deepcopy=False), key=lambda t: t.number)
        finished = 0
        for trial in theirs[: len(mine)]:
            here = mine[trial.number]
            if trial.state.is_finished() and not here.state.is_finished():
                finished += 1
                if not dry_run:
                    _finish(target, to_id, here, trial)
        added = theirs[len(mine) :]
        if not dry_run:
            _add_study_attrs(source, from_id, target, to_id)
            for trial in added:
                target.create_new_trial(to_id, template_trial=trial)
        return OptunaMerge("merged", trials_added=len(added), trials_finished=finished)
    except (sa_exc.SQLAlchemyError, optuna.exceptions.OptunaError, RuntimeError, ValueError) as e:
        raise StorageError(
            f"merging Optuna study {from_name!r} into {to_name!r} failed: {e}"
        ) from e


def _add_study_attrs(source: RDBStorage, from_id: int, target: RDBStorage, to_id: int) -> None:
    """Give the target's study the user and system attributes of the source's that it lacks
    (e.g. metric names, when the target's study was written before tuner named them)."""
    theirs, mine = source.get_study_system_attrs(from_id), target.get_study_system_attrs(to_id)
    for key, value in theirs.items():
        if key not in mine:
            target.set_study_system_attr(to_id, key, value)
    theirs, mine = source.get_study_user_attrs(from_id), target.get_study_user_attrs(to_id)
    for key, value in theirs.items():
        if key not in mine:
            target.set_study_user_attr(to_id, key, value)


def _finish(storage: RDBStorage, study_id: int, here: FrozenTrial, done: FrozenTrial) -> None:
    """Turn the target's unfinished trial ``here`` into the source's finished ``done``."""
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, here.number)
    if here.state == TrialState.WAITING:  # enqueued, never asked: start it so it has a start
        storage.set_trial_state_values(trial_id, TrialState.RUNNING)
    for name, value in done.params.items():
        if name not in here.params:
            distribution = done.distributions[name]
            storage.set_trial_param(
                trial_id, name, distribution.to_internal_repr(value), distribution
            )
    for key, value in done.user_attrs.items():
        storage.set_trial_user_attr(trial_id, key, value)
    for key, value in done.system_attrs.items():
        storage.set_trial_system_attr(trial_id, key, value)
    for step, value in done.intermediate_values.items():
        storage.set_trial_intermediate_value(trial_id, step, value)
    storage.set_trial_state_values(trial_id, done.state, done.values)
