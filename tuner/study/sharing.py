"""Several workers sharing one study's Optuna trials: the rules they share it by (an
interrupted trial is never taken for a result), and the upkeep that applies them.

Workers meet only in the storage, so every rule here reads the study's trials as the storage
holds them (``FrozenTrial``) and decides from that alone; each worker that applies a rule to
the same trials reaches the same answer.

- **What uses the budget** (:func:`counts`): a running trial, a measured one, a finding, and a
  fault that tuner recorded as a result (``counted`` attribute). A trial that was interrupted
  (Ctrl-C, SIGTERM, ``kill -9``, a lost machine) or withdrawn before it started never does,
  nor one the space's rules ruled out before launch (``invalid_config``) the first time
  (``free``): the sampler is told it as a finding, and its place goes to the next draw.
- **Who goes first** (:func:`start_order`): trials in the order they started, ties by number.
  A worker whose new trial is past the budget in that order withdraws it
  (:func:`over_budget`); one whose configuration another worker started earlier and still
  measures withdraws it too (:func:`duplicate_of`). Withdrawn trials are told FAIL with the
  reason in ``withdrawn``; they have no row in tuner's tables.
- **Whose trial is dead** (:func:`dead_here`): the worker's identity (host, pid, process start
  time) is stored on each trial it asks; a running trial whose worker process on this host is
  gone is dead now, on another host after Optuna's heartbeat goes stale (a trial beats from
  its ask on: Optuna never takes a trial that was never beaten for stale). A running trial
  that no worker owns (its worker was lost between Optuna's ask and its first beat) is dead
  once a worker has seen it unowned for the heartbeat's grace (:func:`abandoned`).

**Upkeep** between two trials of a worker (:func:`swept`): a dead trial's Optuna trial becomes
FAIL and its row FAILED/interrupted, by an atomic update that exactly one worker wins; that
worker queues the configuration again (at most :data:`MAX_ATTEMPTS` tries), the baseline
included. A trial lost before its row was written has no row to mark: the worker whose update
failed it (Optuna's stale-trial callback, or its own update) queues its configuration again,
if it had one (a queued one, or one drawn whole). From the ask of a trial to its end, the
worker's :func:`heartbeat` tells the others it lives.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import optuna
import psutil
from optuna.trial import FrozenTrial, TrialState

from tuner.db import RUN_OWNER, Repository, StudyRow, StudyStatus, TrialPhase, TrialRow
from tuner.domain import FailureClass, ServingConfig, TrialStatus
from tuner.errors import UsageError
from tuner.runner import still_running
from tuner.study.plan import ENQUEUED, PREDICTED, PREDICTED_KNOBS, SCREEN
from tuner.telemetry import since_boot

WORKER = "worker"  # user attr: {"host", "pid", "start"} of the worker that asked the trial
COUNTED = "counted"  # user attr on a FAIL trial that is a result (a crash, a timeout)
# User attr on a trial the space's rules ruled out before launch, the first time: no place in
# the budget (trials stored before it existed keep theirs, so a resume launches no more).
FREE = "free"
WITHDRAWN = "withdrawn"  # user attr: why the trial was given back before it started
ATTEMPT = "attempt"  # user attr: 1 for a first try, k for the (k-1)-th retry of a configuration
# user attr, set once every knob is drawn: the configuration (ServingConfig.to_dict). Optuna
# writes a trial's parameters one by one, so a trial with some parameters may not be drawn yet.
DRAWN = "drawn"
MAX_ATTEMPTS = 3  # an interrupted configuration is retried at most twice
# vLLM's defaults, which every score needs, more often (a Ctrl-C is not the configuration's
# fault), yet not forever: defaults that take their worker down would be taken over endlessly.
MAX_BASELINE_ATTEMPTS = 10
_NEVER = datetime.datetime.max


def host_name() -> str:
    """This host as workers name it: $TUNER_WORKER_HOST (a test seam, and a way to name a
    container's host), else the host name."""
    return os.environ.get("TUNER_WORKER_HOST") or socket.gethostname()


def worker_identity() -> dict[str, Any]:
    """This process as a trial's owner: host name, pid and its start (seconds after boot),
    with psutil's wall-clock start beside it for older tuners, which read only that."""
    start = since_boot(os.getpid())
    return {
        "host": host_name(),
        "pid": os.getpid(),
        "start": start,
        "started": start + psutil.boot_time(),
    }


def counts(trial: FrozenTrial) -> bool:
    """Whether ``trial`` uses the study's trial budget (see the module's rules)."""
    if trial.state is TrialState.RUNNING:
        return WITHDRAWN not in trial.user_attrs
    if trial.state is TrialState.FAIL:
        return bool(trial.user_attrs.get(COUNTED))
    finished = trial.state in (TrialState.COMPLETE, TrialState.PRUNED)
    return finished and not trial.user_attrs.get(FREE)


def results(trials: Iterable[FrozenTrial]) -> int:
    """Finished trials that use the budget: what "N trials done" means."""
    return sum(1 for t in trials if t.state.is_finished() and counts(t))


def budget_taken(trials: Iterable[FrozenTrial], total: int) -> bool:
    """Whether the trials that use the budget (:func:`counts`: running ones included) are
    ``total`` already: no place is left for another."""
    return sum(1 for t in trials if counts(t)) >= total


def start_order(trial: FrozenTrial) -> tuple[datetime.datetime, int]:
    return (trial.datetime_start or _NEVER, trial.number)


def place(trials: Sequence[FrozenTrial], number: int, total: int) -> int | None:
    """Where trial ``number`` (running) stands among the trials that count, by their starts
    (0: the first): its place in the study's budget of ``total``, which two workers' trials
    never share; None when it does not count or comes after the first ``total``."""
    ordered = sorted((t for t in trials if counts(t)), key=start_order)
    at = next((i for i, t in enumerate(ordered) if t.number == number), None)
    return at if at is not None and at < total else None


def over_budget(trials: Sequence[FrozenTrial], number: int, total: int) -> bool:
    """Whether trial ``number`` (running) comes after the first ``total`` trials that count."""
    return place(trials, number, total) is None


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
    """Running trials that started before trial ``number`` and have not drawn their
    configuration yet (no :data:`DRAWN`): until they have, :func:`duplicate_of` cannot tell
    whether they draw the same one (a worker that asked first may draw last)."""
    return [t.number for t in _earlier_running(trials, number) if DRAWN not in t.user_attrs]


def duplicate_of(
    trials: Sequence[FrozenTrial], number: int, config: Mapping[str, Any]
) -> int | None:
    """The number of a trial that measures ``config`` (a :data:`DRAWN` value) now and started
    before trial ``number``, whatever parameters it was drawn from.

    The earlier one keeps the configuration, so that two workers that drew it at once agree
    on which gives it back; asked once :func:`undrawn_earlier` is empty, it is race-free."""
    for t in _earlier_running(trials, number):
        if t.user_attrs.get(DRAWN) == dict(config):
            return t.number
    return None


def dead_here(trial: FrozenTrial) -> bool:
    """A running trial whose worker ran on this host and has exited (or its pid is reused).

    A trial without an owner (asked by a tuner older than this rule, or by hand) is not
    judged here: only a resume, which knows no other worker runs, treats it as dead.
    """
    owner = trial.user_attrs.get(WORKER)
    return trial.state is TrialState.RUNNING and isinstance(owner, dict) and gone_here(owner)


# When this process first saw each running trial without an owner (:func:`abandoned`), by
# study, number and start: trial numbers repeat across studies and databases.
_UNOWNED_SINCE: dict[tuple[str, int, datetime.datetime | None], float] = {}


def _forget_unowned(study: str, running: Sequence[FrozenTrial]) -> None:
    """Forget the trials of ``study`` seen unowned that run no longer (failed, told): a queue
    worker lives for days."""
    now = {(study, t.number, t.datetime_start) for t in running}
    for key in [k for k in _UNOWNED_SINCE if k[0] == study and k not in now]:
        del _UNOWNED_SINCE[key]


def abandoned(study: str, trial: FrozenTrial) -> bool:
    """A running trial of ``study`` that no worker owns, seen so by this process for longer
    than the heartbeat's grace.

    A worker records itself on its trial within milliseconds of Optuna's ask; one lost in
    between (``kill -9``, a host gone) leaves a trial that Optuna never takes for stale, as it
    was never beaten, and that kept a place in the budget for good. Its age is this process's
    own clock since it first saw it, not the trial's start: that is the asking host's local
    time, hours off on a host in another time zone.
    """
    key = (study, trial.number, trial.datetime_start)
    if trial.state is not TrialState.RUNNING or WORKER in trial.user_attrs:
        _UNOWNED_SINCE.pop(key, None)
        return False
    first = _UNOWNED_SINCE.setdefault(key, time.monotonic())
    return time.monotonic() - first > heartbeat_s() * _GRACE_BEATS


def owner_gone(owner: Mapping[str, Any], updated_at: float) -> bool:
    """Whether the queue worker ``owner`` of a study last written at ``updated_at`` is gone:
    on this host, its process has exited (:func:`gone_here`); on another, the study has had no
    write for four beats, where a live worker's :func:`study_heartbeat` writes every beat (the
    hosts' clocks are trusted to agree within a beat or two)."""
    if owner.get("host") == host_name():
        return gone_here(owner)
    return time.time() - updated_at > heartbeat_s() * _GRACE_BEATS


def gone_here(owner: Mapping[str, Any]) -> bool:
    """Whether the worker ``owner`` (:func:`worker_identity`) ran on this host and has exited
    (or its pid is now another process's); another host's is left to the heartbeat."""
    if owner.get("host") != host_name():
        return False
    try:
        pid = int(owner["pid"])
        if "start" in owner:
            start = float(owner["start"])
        else:  # an older tuner's record: psutil's wall-clock start time
            start = float(owner["started"]) - psutil.boot_time()
    except (KeyError, TypeError, ValueError):
        return True
    return not still_running(pid, start)  # cannot tell: leave it to the heartbeat


def runner_gone(study: StudyRow) -> bool:
    """Whether ``study`` is recorded as running by a process on this host that has exited
    (``kill -9``, a lost terminal): it stays "running" until resumed or taken over, and the
    surfaces that list it say so. Another host's runner cannot be told from here."""
    owner = study.spec.get(RUN_OWNER)
    running = study.status in (StudyStatus.RUNNING, StudyStatus.CONFIRMING)
    return running and isinstance(owner, dict) and gone_here(owner)  # another host's: False


def named(owner: Mapping[str, Any]) -> str:
    """The worker ``owner`` (:func:`worker_identity`) as messages name it: its process and host."""
    host = owner.get("host")
    return f"process {owner.get('pid')} on {'this host' if host == host_name() else f'host {host}'}"


def refuse_beside(
    owner: Mapping[str, Any], name: str, doing: str = "runs it", *, shared: bool = True
) -> None:
    """UsageError when ``owner`` (:func:`worker_identity`) is another live process on this
    host: a resume of study ``name`` beside it would mark its launch interrupted (between
    trials and in the confirmation too), and it would then lose that launch's measurement.
    ``shared``: the study's database takes several workers (not SQLite), so one may join."""
    mine = owner.get("pid") == os.getpid()  # an earlier run of this process's
    if owner.get("host") == host_name() and not mine and not gone_here(owner):
        beside = f"; `tuner worker --study {name}` runs beside it" if shared else ""
        raise UsageError(
            f"study {name!r} is running: {named(owner)} {doing}",
            hint=f"let it finish, or stop it (Ctrl-C, or kill PID) and resume then{beside}",
        )


def attempt(trial: FrozenTrial) -> int:
    value = trial.user_attrs.get(ATTEMPT, 1)
    return value if isinstance(value, int) and value >= 1 else 1


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
    return {
        "heartbeat_interval": beat,
        "grace_period": beat * _GRACE_BEATS,
        "heartbeat_stale_trial_callback": _failed_here,
    }


@contextlib.contextmanager
def quiet_optuna() -> Iterator[None]:
    """Optuna warns that heartbeats belong to ``Study.optimize``; tuner drives ask/tell and
    runs the heartbeat itself (:func:`heartbeat`). Its experimental APIs are silenced too."""
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
    with _beating(lambda: storage.record_heartbeat(trial_id), interval, f"trial-{trial_id}"):
        yield


@contextlib.contextmanager
def study_heartbeat(repo: Repository, name: str, worker: Mapping[str, Any]) -> Iterator[None]:
    """While queue worker ``worker`` runs study ``name``, move its ``updated_at`` every beat, so
    that a worker on another host can tell it lives (:func:`owner_gone`); a worker whose study
    was taken over (it fell silent for four beats) beats no more for it."""
    with _beating(lambda: repo.touch_study(name, worker), heartbeat_s(), f"study-{name}"):
        yield


@contextlib.contextmanager
def _beating(beat: Callable[[], object], interval: float, what: str) -> Iterator[None]:
    """Call ``beat`` now and every ``interval`` seconds, on a thread, until the block ends or
    ``beat`` returns False."""
    stop = threading.Event()

    def loop() -> None:
        while True:
            with contextlib.suppress(Exception):  # a missed beat is retried at the next one
                if beat() is False:
                    return
            if stop.wait(interval):
                return

    thread = threading.Thread(target=loop, name=f"tuner-heartbeat-{what}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def swept(
    study: optuna.Study,
    repo: Repository,
    name: str,
    *,
    alone: bool = False,
    confirmation_gone: bool = False,
) -> tuple[list[FrozenTrial], list[TrialRow]]:
    """Fail the dead trials, record them as interrupted, queue them again; the trials after,
    and the study's trial rows, read once on the way (with the trials of other workers that
    finished meanwhile). The rows this sweep marked interrupted say so (FAILED/interrupted);
    their other columns are as read.

    ``alone``: no other worker runs the study (``--resume``), so every running trial is dead.
    ``confirmation_gone``: the worker that ran the study's confirmation is gone (a takeover of
    a confirming study), so its running launches are dead, whoever else runs search trials.
    """
    storage = study._storage
    running_now = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if alone:  # unless a live tuner on this host runs it: its measurement would be lost
        for live in running_now:
            owner = live.user_attrs.get(WORKER)
            if isinstance(owner, dict):
                rdb = getattr(storage, "_backend", storage)  # under Optuna's cache
                shared = not str(getattr(rdb, "url", "")).startswith("sqlite")
                refuse_beside(owner, name, f"measures its trial #{live.number}", shared=shared)
    rows = repo.list_trials(name, limit=None)
    # A row stored as finished while its Optuna trial runs: the tuner stopped (or its host was
    # lost) between storing the result and telling Optuna. It is a result: it uses the budget
    # (as its tell would have), and is not launched again. It is marked so before anything
    # fails it, Optuna's heartbeat included: a finished trial takes no attribute.
    stored = {
        r.number
        for r in rows
        if r.status is not TrialStatus.RUNNING and r.failure is not FailureClass.INTERRUPTED
    }
    for running in running_now:
        if running.number in stored and not running.user_attrs.get(COUNTED):
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                storage.set_trial_user_attr(running._trial_id, COUNTED, True)  # told by now
    failed = _fail_stale(study)  # the trials this worker failed, each failed by one worker
    running_now = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    _forget_unowned(name, running_now)
    for running in running_now:
        if alone or dead_here(running) or abandoned(name, running):
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                if storage.set_trial_state_values(running._trial_id, state=TrialState.FAIL):
                    failed.add(running.number)
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    # A trial lost before its row was written (between the ask and start_trial) is queued
    # again by the worker that failed it: its queued configuration (the baseline, a retry, an
    # [[enqueue]] one) would be lost otherwise, and a configuration it drew whole is retried
    # as a measured one is. One that drew nothing yet needs no retry: its FAIL frees its place.
    for number in failed - {r.number for r in rows}:
        lost = trials[number]
        if DRAWN in lost.user_attrs or lost.system_attrs.get("fixed_params"):
            retry(study, lost)
    marked = set()
    for row in rows:
        if row.status is not TrialStatus.RUNNING or row.phase is not TrialPhase.SEARCH:
            continue
        t = trials.get(row.number)
        if t is None or not t.state.is_finished():
            continue
        if repo.mark_running_as_interrupted(name, numbers=[row.number]) == 1:  # this worker won
            marked.add(row.number)
            if t.state is TrialState.FAIL and not counts(t):
                retry(study, t)
    if alone:  # a confirmation launch cut short is measured again by the confirmation
        repo.mark_running_as_interrupted(name)
        marked |= {r.number for r in rows if r.status is TrialStatus.RUNNING}
    elif confirmation_gone:
        launches = [
            r.number
            for r in rows
            if r.status is TrialStatus.RUNNING and r.phase is TrialPhase.CONFIRM
        ]
        repo.mark_running_as_interrupted(name, numbers=launches)
        marked |= set(launches)
    rows = [_interrupted(r) if r.number in marked else r for r in rows]
    return study.get_trials(deepcopy=False), rows


# The stale trials this process fails while a sweep collects them (:func:`_fail_stale`).
_FAILED_HERE: contextvars.ContextVar[set[int] | None] = contextvars.ContextVar(
    "tuner_failed_here", default=None
)


def _failed_here(study: optuna.Study, trial: FrozenTrial) -> None:
    """The storage's stale-trial callback (:func:`storage_options`), which Optuna calls in the
    one process whose update failed the trial."""
    failed = _FAILED_HERE.get()
    if failed is not None:
        failed.add(trial.number)


def _fail_stale(study: optuna.Study) -> set[int]:
    """Fail the study's stale trials (Optuna's heartbeat); the numbers of those this worker
    failed, which no worker sweeping beside it failed too."""
    failed: set[int] = set()
    token = _FAILED_HERE.set(failed)
    try:
        with quiet_optuna():
            optuna.storages.fail_stale_trials(study)
    finally:
        _FAILED_HERE.reset(token)
    return failed


def _interrupted(row: TrialRow) -> TrialRow:
    return dataclasses.replace(row, status=TrialStatus.FAILED, failure=FailureClass.INTERRUPTED)


# What a queued configuration keeps when it is queued again (a retry, a withdrawal): the
# attributes that say which space it is drawn from (tuner.study.planning.trial_space) and which
# screening trial it is (a retried one is judged by its own measurement, not as a failure).
SPACE_ATTRS = ("baseline", ENQUEUED, PREDICTED, PREDICTED_KNOBS, SCREEN)


def retry(study: optuna.Study, trial: FrozenTrial, *, counted: bool = True) -> bool:
    """Queue ``trial``'s configuration again, unless it was tried :data:`MAX_ATTEMPTS` times
    or never got one (a trial stopped before its parameters were drawn, the baseline aside).
    vLLM's defaults are queued again up to :data:`MAX_BASELINE_ATTEMPTS` times: every score is
    a ratio to them, and a study without them has none. ``counted`` False: the stop was the
    user's (Ctrl-C, SIGTERM), not a lost worker's, and uses no attempt."""
    tries = attempt(trial)
    cap = MAX_BASELINE_ATTEMPTS if trial.user_attrs.get("baseline") else MAX_ATTEMPTS
    if counted and tries >= cap:
        return False
    # A queued configuration whole, even where its trial was lost while it drew
    params = {**(trial.system_attrs.get("fixed_params") or {}), **trial.params}
    if not params:
        return False
    attrs: dict[str, Any] = {ATTEMPT: tries + 1 if counted else tries, "retry_of": trial.number}
    attrs |= {k: v for k, v in trial.user_attrs.items() if k in SPACE_ATTRS}
    study.enqueue_trial(params, user_attrs=attrs)
    return True


def frozen(study: optuna.Study, trial: optuna.Trial) -> FrozenTrial:
    """``trial`` as the storage holds it now (its system attributes, its state)."""
    return study._storage.get_trial(trial._trial_id)


def withdraw(study: optuna.Study, trial: optuna.Trial, reason: str) -> None:
    """Give ``trial`` back before it starts: FAIL, not counted; a queued configuration (the
    baseline, a retry) is queued again so that it is not lost."""
    before = frozen(study, trial)
    trial.set_user_attr(WITHDRAWN, reason)
    study.tell(trial, state=TrialState.FAIL)
    fixed = before.system_attrs.get("fixed_params")
    if fixed:
        attrs = {k: v for k, v in before.user_attrs.items() if k in (*SPACE_ATTRS, ATTEMPT)}
        study.enqueue_trial(dict(fixed), user_attrs=attrs)


def twin_of(study: optuna.Study, trial: optuna.Trial, config: ServingConfig) -> int | None:
    """A trial of another worker, started earlier, that measures ``config`` now
    (:func:`duplicate_of`), once every earlier trial has drawn its configuration. Marks
    ``trial`` as drawn first, so that later trials wait for it no longer."""
    drawn = config.to_dict()
    trial.set_user_attr(DRAWN, drawn)
    deadline = time.monotonic() + DRAW_WAIT_S
    while True:
        trials = study.get_trials(deepcopy=False)
        if not undrawn_earlier(trials, trial.number) or time.monotonic() > deadline:
            return duplicate_of(trials, trial.number, drawn)
        time.sleep(0.05)
