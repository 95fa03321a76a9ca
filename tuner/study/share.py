"""The rules by which several workers share one study's Optuna trials, and by which an
interrupted trial is never taken for a result.

Workers meet only in the storage, so every rule here reads the study's trials as the storage
holds them (``FrozenTrial``) and decides from that alone; each worker that applies a rule to
the same trials reaches the same answer.

- **What uses the budget** (:func:`counts`): a running trial, a measured one, a finding, and a
  fault that tuner recorded as a result (``counted`` attribute). A trial that was interrupted
  (Ctrl-C, SIGTERM, ``kill -9``, a lost machine) or withdrawn before it started never does.
- **Who goes first** (:func:`start_order`): trials in the order they started, ties by number.
  A worker whose new trial is past the budget in that order withdraws it
  (:func:`over_budget`); one whose configuration another worker started earlier and still
  measures withdraws it too (:func:`duplicate_of`). Withdrawn trials are told FAIL with the
  reason in ``withdrawn``; they have no row in tuner's tables.
- **Whose trial is dead** (:func:`dead_here`): the worker's identity (host, pid, process start
  time) is stored on each trial it asks; a running trial whose worker process on this host is
  gone is dead now, on another host after Optuna's heartbeat goes stale.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psutil
from optuna.trial import FrozenTrial, TrialState

WORKER = "worker"  # user attr: {"host", "pid", "started"} of the worker that asked the trial
COUNTED = "counted"  # user attr on a FAIL trial that is a result (a crash, a timeout)
WITHDRAWN = "withdrawn"  # user attr: why the trial was given back before it started
ATTEMPT = "attempt"  # user attr: 1 for a first try, k for the (k-1)-th retry of a configuration
MAX_ATTEMPTS = 3  # an interrupted configuration is retried at most twice
_START_TOLERANCE_S = 0.05
_NEVER = datetime.datetime.max


def host_name() -> str:
    """This host as workers name it: $TUNER_WORKER_HOST (a test seam, and a way to name a
    container's host), else the host name."""
    return os.environ.get("TUNER_WORKER_HOST") or socket.gethostname()


def worker_identity() -> dict[str, Any]:
    """This process as a trial's owner: host name, pid and the process's start time."""
    me = psutil.Process()
    return {"host": host_name(), "pid": os.getpid(), "started": me.create_time()}


def counts(trial: FrozenTrial) -> bool:
    """Whether ``trial`` uses the study's trial budget (see the module's rules)."""
    if trial.state is TrialState.RUNNING:
        return WITHDRAWN not in trial.user_attrs
    if trial.state is TrialState.FAIL:
        return bool(trial.user_attrs.get(COUNTED))
    return trial.state in (TrialState.COMPLETE, TrialState.PRUNED)


def results(trials: Iterable[FrozenTrial]) -> int:
    """Finished trials that use the budget: what "N trials done" means."""
    return sum(1 for t in trials if t.state.is_finished() and counts(t))


def start_order(trial: FrozenTrial) -> tuple[datetime.datetime, int]:
    return (trial.datetime_start or _NEVER, trial.number)


def over_budget(trials: Sequence[FrozenTrial], number: int, total: int) -> bool:
    """Whether trial ``number`` (running) comes after the first ``total`` trials that count."""
    ordered = sorted((t for t in trials if counts(t)), key=start_order)
    place = next((i for i, t in enumerate(ordered) if t.number == number), None)
    return place is None or place >= total


def _earlier_running(trials: Sequence[FrozenTrial], number: int) -> list[FrozenTrial]:
    mine = next((t for t in trials if t.number == number), None)
    if mine is None:
        return []
    return [
        t
        for t in trials
        if t.number != number
        and t.state is TrialState.RUNNING
        and WITHDRAWN not in t.user_attrs
        and start_order(t) < start_order(mine)
    ]


def undrawn_earlier(trials: Sequence[FrozenTrial], number: int) -> list[int]:
    """Running trials that started before trial ``number`` and have no parameters yet: until
    they have, :func:`duplicate_of` cannot tell whether they draw the same configuration (a
    worker that asked first may draw last)."""
    return [t.number for t in _earlier_running(trials, number) if not t.params]


def duplicate_of(
    trials: Sequence[FrozenTrial], number: int, params: Mapping[str, Any]
) -> int | None:
    """The number of a trial that measures ``params`` now and started before trial ``number``.

    The earlier one keeps the configuration, so that two workers that drew it at once agree
    on which gives it back; asked once :func:`undrawn_earlier` is empty, it is race-free."""
    for t in _earlier_running(trials, number):
        if dict(t.params) == dict(params):
            return t.number
    return None


def dead_here(trial: FrozenTrial, host: str | None = None) -> bool:
    """A running trial whose worker ran on this host and has exited (or its pid is reused).

    A trial without an owner (asked by a tuner older than this rule, or by hand) is not
    judged here: only a resume, which knows no other worker runs, treats it as dead.
    """
    owner = trial.user_attrs.get(WORKER)
    if trial.state is not TrialState.RUNNING or not isinstance(owner, dict):
        return False
    if owner.get("host") != (host or host_name()):
        return False
    try:
        proc = psutil.Process(int(owner["pid"]))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return True
        return abs(proc.create_time() - float(owner["started"])) > _START_TOLERANCE_S
    except (psutil.NoSuchProcess, KeyError, TypeError, ValueError):
        return True
    except psutil.Error:
        return False  # cannot tell: leave it to the heartbeat


def attempt(trial: FrozenTrial) -> int:
    value = trial.user_attrs.get(ATTEMPT, 1)
    return value if isinstance(value, int) and value >= 1 else 1
