"""Upkeep of a study's Optuna trials between two trials of a worker: dead trials found and
recorded as interrupted, interrupted configurations queued again, trials given back, and the
heartbeat that tells other workers this one still measures (rules: :mod:`tuner.study.share`).

A dead trial is one whose worker ran on this host and exited (``kill -9``, a crash of the
tuner) or whose heartbeat went stale (a worker on a lost machine). Its Optuna trial becomes
FAIL; its row in tuner's tables becomes FAILED/interrupted, by an atomic update that exactly
one worker wins, and that worker queues the configuration again (at most
:data:`share.MAX_ATTEMPTS` tries), the baseline included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.db.repository import Repository
from tuner.db.rows import TrialPhase, TrialRow
from tuner.domain import FailureClass, TrialStatus
from tuner.study import share

# Seconds between two heartbeats of a measuring worker, and without one before its trial is
# taken for dead. TUNER_HEARTBEAT_S changes the first (the grace is four beats): tests use 1 s.
HEARTBEAT_S = 30
_GRACE_BEATS = 4
# How long a worker waits for earlier trials to draw their parameters before it judges its own
# a duplicate or not (another worker draws in milliseconds; a dead one never does).
DRAW_WAIT_S = 10.0


def heartbeat_s() -> int:
    raw = os.environ.get("TUNER_HEARTBEAT_S", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else HEARTBEAT_S


def storage_options() -> dict[str, Any]:
    beat = heartbeat_s()
    return {"heartbeat_interval": beat, "grace_period": beat * _GRACE_BEATS}


@contextlib.contextmanager
def quiet_optuna() -> Iterator[None]:
    """Optuna warns that heartbeats belong to ``Study.optimize``; tuner drives ask/tell and
    runs the heartbeat itself (:func:`heartbeat`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


@contextlib.contextmanager
def heartbeat(storage: optuna.storages.RDBStorage, trial_id: int) -> Iterator[None]:
    """Record a heartbeat for ``trial_id`` now and every interval until the block ends."""
    interval = storage.get_heartbeat_interval()
    if interval is None:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while True:
            with contextlib.suppress(Exception):  # a missed beat is retried at the next one
                storage.record_heartbeat(trial_id)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, name=f"tuner-heartbeat-{trial_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def sweep(
    study: optuna.Study, repo: Repository, name: str, *, alone: bool = False
) -> list[FrozenTrial]:
    """Fail the dead trials, record them as interrupted, queue them again; the trials after.

    ``alone``: no other worker runs the study (``--resume``), so every running trial is dead.
    """
    return swept(study, repo, name, alone=alone)[0]


def swept(
    study: optuna.Study, repo: Repository, name: str, *, alone: bool = False
) -> tuple[list[FrozenTrial], list[TrialRow]]:
    """:func:`sweep`, and the study's trial rows, read once on the way (the trials of other
    workers that finished meanwhile with them). The rows this sweep marked interrupted say
    so (FAILED/interrupted); their other columns are as read."""
    storage = study._storage
    with quiet_optuna():
        optuna.storages.fail_stale_trials(study)
    for running in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if alone or share.dead_here(running):
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                storage.set_trial_state_values(running._trial_id, state=TrialState.FAIL)
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    rows = repo.list_trials(name, limit=None)
    marked = set()
    for row in rows:
        if row.status is not TrialStatus.RUNNING or row.phase is not TrialPhase.SEARCH:
            continue
        t = trials.get(row.number)
        if t is None or not t.state.is_finished():
            continue
        won = repo.mark_running_as_interrupted(name, numbers=[row.number]) == 1
        if won:
            marked.add(row.number)
            if t.state is TrialState.FAIL and not share.counts(t):
                retry(study, t)
    if alone:  # a confirmation launch cut short is measured again by the confirmation
        repo.mark_running_as_interrupted(name)
        marked |= {r.number for r in rows if r.status is TrialStatus.RUNNING}
    rows = [_interrupted(r) if r.number in marked else r for r in rows]
    return study.get_trials(deepcopy=False), rows


def _interrupted(row: TrialRow) -> TrialRow:
    return dataclasses.replace(row, status=TrialStatus.FAILED, failure=FailureClass.INTERRUPTED)


def retry(study: optuna.Study, trial: FrozenTrial) -> bool:
    """Queue ``trial``'s configuration again, unless it was tried :data:`MAX_ATTEMPTS` times
    or never got one (a trial stopped before its parameters were drawn, the baseline aside)."""
    tries = share.attempt(trial)
    if tries >= share.MAX_ATTEMPTS:
        return False
    params = dict(trial.params) or dict(trial.system_attrs.get("fixed_params") or {})
    if not params:
        return False
    attrs: dict[str, Any] = {share.ATTEMPT: tries + 1, "retry_of": trial.number}
    if trial.user_attrs.get("baseline"):
        attrs["baseline"] = True
    study.enqueue_trial(params, user_attrs=attrs)
    return True


def frozen(study: optuna.Study, trial: optuna.Trial) -> FrozenTrial:
    """``trial`` as the storage holds it now (its system attributes, its state)."""
    return study._storage.get_trial(trial._trial_id)


def withdraw(study: optuna.Study, trial: optuna.Trial, reason: str) -> None:
    """Give ``trial`` back before it starts: FAIL, not counted; a queued configuration (the
    baseline, a retry) is queued again so that it is not lost."""
    before = frozen(study, trial)
    trial.set_user_attr(share.WITHDRAWN, reason)
    study.tell(trial, state=TrialState.FAIL)
    fixed = before.system_attrs.get("fixed_params")
    if fixed:
        attrs = {k: v for k, v in before.user_attrs.items() if k in ("baseline", share.ATTEMPT)}
        study.enqueue_trial(dict(fixed), user_attrs=attrs)


def twin_of(study: optuna.Study, trial: optuna.Trial) -> int | None:
    """A trial of another worker, started earlier, that measures ``trial``'s configuration now
    (:func:`share.duplicate_of`), once every earlier trial has drawn its parameters."""
    deadline = time.monotonic() + DRAW_WAIT_S
    while True:
        trials = study.get_trials(deepcopy=False)
        if not share.undrawn_earlier(trials, trial.number) or time.monotonic() > deadline:
            return share.duplicate_of(trials, trial.number, trial.params)
        time.sleep(0.05)
