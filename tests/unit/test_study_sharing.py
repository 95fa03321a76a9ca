"""The rules by which workers share a study (tuner.study.sharing), on hand-made Optuna trials."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys

import psutil
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from tuner.study import sharing
from tuner.telemetry import since_boot

T0 = datetime.datetime(2026, 12, 1, 12, 0, 0)
DIST = {
    "max_num_seqs": CategoricalDistribution((4, 16, 64)),
    "enable_prefix_caching": CategoricalDistribution(("default", True, False)),
}


def trial(
    number: int,
    state: TrialState,
    *,
    started_s: float | None = None,
    params: dict[str, object] | None = None,
    **attrs: object,
) -> FrozenTrial:
    start = None if started_s is None else T0 + datetime.timedelta(seconds=started_s)
    finished = state.is_finished()
    return FrozenTrial(
        number=number,
        state=state,
        value=None,
        values=[1.0, 1.0, 1.0] if state is TrialState.COMPLETE else None,
        datetime_start=start,
        datetime_complete=start if finished else None,
        params=params or {},
        distributions={k: DIST[k] for k in (params or {})},
        # A trial with parameters here has drawn them all: its configuration is marked drawn.
        user_attrs={**({sharing.DRAWN: params} if params else {}), **attrs},
        system_attrs={},
        intermediate_values={},
        trial_id=number + 1,
    )


def test_what_uses_the_budget() -> None:
    assert sharing.counts(trial(0, TrialState.COMPLETE, started_s=0))
    assert sharing.counts(trial(1, TrialState.PRUNED, started_s=0))
    assert sharing.counts(trial(2, TrialState.RUNNING, started_s=0))
    assert sharing.counts(trial(3, TrialState.FAIL, started_s=0, counted=True))  # a crash
    assert not sharing.counts(trial(4, TrialState.FAIL, started_s=0))  # interrupted, or stale
    assert not sharing.counts(trial(5, TrialState.FAIL, started_s=0, withdrawn="over budget"))
    assert not sharing.counts(trial(6, TrialState.RUNNING, started_s=0, withdrawn="duplicate"))
    assert not sharing.counts(trial(7, TrialState.WAITING))


def test_a_rule_rejected_draw_is_free_only_where_marked_so() -> None:
    """The loop marks the first draw of a combination the rules rule out ``free``. A rejected
    trial stored before the mark existed used its place, and keeps it: read as free, a resume
    of an old study (or of one confirming) launched one more search trial per rejection."""
    rejected = {"failure_class": "invalid_config"}
    assert sharing.counts(trial(0, TrialState.COMPLETE, started_s=0, **rejected))  # an old one
    assert not sharing.counts(trial(1, TrialState.COMPLETE, started_s=0, free=True, **rejected))
    done = [trial(0, TrialState.COMPLETE, started_s=0), trial(1, TrialState.RUNNING, started_s=1)]
    assert sharing.results(done) == 1


def test_the_trial_past_the_budget_in_start_order_is_the_one_given_back() -> None:
    trials = [
        trial(0, TrialState.COMPLETE, started_s=0),
        trial(1, TrialState.FAIL, started_s=1),  # interrupted: frees its place
        trial(2, TrialState.RUNNING, started_s=3),
        trial(3, TrialState.RUNNING, started_s=2),  # a queued retry popped earlier
    ]
    assert not sharing.over_budget(trials, 3, total=2)
    assert sharing.over_budget(trials, 2, total=2)
    assert not sharing.over_budget(trials, 2, total=3)
    assert sharing.over_budget(trials, 9, total=5), "a trial not in the list is never in budget"


def test_two_workers_trials_are_told_their_own_places_in_the_budget() -> None:
    """Two workers that asked at once both printed "trial 2/6" (the finished trials plus one),
    and no trial was called the third: each trial's place among those that count is its own."""
    trials = [
        trial(0, TrialState.COMPLETE, started_s=0),
        trial(1, TrialState.FAIL, started_s=1),  # interrupted: no place
        trial(2, TrialState.RUNNING, started_s=2),  # one worker's
        trial(3, TrialState.RUNNING, started_s=3),  # the other's
    ]
    assert [sharing.place(trials, n, total=6) for n in range(4)] == [0, None, 1, 2]
    assert sharing.results(trials) == 1  # what "done + 1" read for both running trials


def test_a_configuration_measured_now_by_an_earlier_trial_is_a_duplicate() -> None:
    same = {"max_num_seqs": 16}
    trials = [
        trial(0, TrialState.RUNNING, started_s=0, params=same),
        trial(1, TrialState.RUNNING, started_s=1, params=same),
        trial(2, TrialState.RUNNING, started_s=2, params={"max_num_seqs": 64}),
        trial(3, TrialState.COMPLETE, started_s=0, params={"max_num_seqs": 64}),
    ]
    assert sharing.duplicate_of(trials, 1, same) == 0
    assert sharing.duplicate_of(trials, 0, same) is None, "the earlier one keeps it"
    assert sharing.duplicate_of(trials, 2, {"max_num_seqs": 64}) is None, "#3 is finished"


def test_a_dead_worker_on_this_host_is_told_apart_from_a_live_one_and_another_host() -> None:
    me = sharing.worker_identity()
    alive = trial(0, TrialState.RUNNING, started_s=0, worker=me)
    assert not sharing.dead_here(alive)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = since_boot(child.pid)
    child.wait()
    gone = {"host": me["host"], "pid": child.pid, "start": start}
    assert sharing.dead_here(trial(1, TrialState.RUNNING, started_s=0, worker=gone))
    reused = {**me, "start": me["start"] - 100}  # same pid, another process's start
    assert sharing.dead_here(trial(2, TrialState.RUNNING, started_s=0, worker=reused))
    elsewhere = {**gone, "host": "another-host"}
    assert not sharing.dead_here(trial(3, TrialState.RUNNING, started_s=0, worker=elsewhere))
    assert not sharing.dead_here(trial(4, TrialState.RUNNING, started_s=0)), "no owner: not judged"
    assert not sharing.dead_here(trial(5, TrialState.COMPLETE, started_s=0, worker=gone))
    assert os.getpid() == me["pid"]
    # An owner record that names no process (written by hand, or damaged) is dead, not a crash.
    for bad in ({"host": me["host"]}, {**me, "pid": "x"}, {**me, "pid": -1}):
        assert sharing.dead_here(trial(6, TrialState.RUNNING, started_s=0, worker=bad)), bad


def test_a_live_worker_stays_alive_when_the_wall_clock_moves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # NTP sets the clock: psutil's create_time of one process then reads a second or more
    # off what it read when the worker recorded itself. A worker on the same host must not
    # fail a live worker's trial for that (a CI run lost a measuring worker's trial to it).
    me = sharing.worker_identity()
    older = {"host": me["host"], "pid": me["pid"], "started": psutil.Process().create_time()}
    assert abs(me["started"] - older["started"]) <= 0.05, "what an older tuner reads is there"
    booted = psutil.boot_time()
    for step_s in (-1.0, 1.0, 3600.0):
        monkeypatch.setattr(psutil._pslinux, "boot_time", lambda s=step_s: booted + s)
        assert not sharing.dead_here(trial(0, TrialState.RUNNING, started_s=0, worker=me))
    monkeypatch.undo()
    # A record of an older tuner (a wall-clock start) is still judged, as of the clock now.
    assert not sharing.dead_here(trial(1, TrialState.RUNNING, started_s=0, worker=older))
    moved = {**older, "started": older["started"] - 100}
    assert sharing.dead_here(trial(2, TrialState.RUNNING, started_s=0, worker=moved))


def test_a_worker_that_asked_first_but_draws_last_is_waited_for() -> None:
    # Trial 0 asked first (started earlier) and has not drawn yet; trial 1 drew max_num_seqs=16.
    same = {"max_num_seqs": 16}
    before = [
        trial(0, TrialState.RUNNING, started_s=0),
        trial(1, TrialState.RUNNING, started_s=1, params=same),
    ]
    assert sharing.undrawn_earlier(before, 1) == [0], "1 must wait for 0 to draw"
    assert sharing.undrawn_earlier(before, 0) == [], "nobody started before 0"
    after = [trial(0, TrialState.RUNNING, started_s=0, params=same), before[1]]
    assert sharing.undrawn_earlier(after, 1) == []
    assert sharing.duplicate_of(after, 1, same) == 0, "the later one gives the configuration back"
    assert sharing.duplicate_of(after, 0, same) is None, "and the earlier one keeps it"


def test_a_trial_with_some_parameters_written_is_not_drawn_yet() -> None:
    """Optuna writes a trial's parameters one by one: a worker that asked first and has
    written its first knob may still draw the configuration a later trial drew. CI saw both
    measure it at once (tests/postgres/test_postgres_one_study.py, three workers)."""
    partial = trial(0, TrialState.RUNNING, started_s=0, params={"max_num_seqs": 16})
    del partial.user_attrs[sharing.DRAWN]  # its second knob is not written yet
    drawn = {"max_num_seqs": 16, "enable_prefix_caching": True}
    later = trial(1, TrialState.RUNNING, started_s=1, params=drawn)
    assert sharing.undrawn_earlier([partial, later], 1) == [0], "1 must wait for 0's draw"


def test_the_same_configuration_from_other_parameters_is_a_duplicate() -> None:
    """Trials of one study may be drawn from different spaces (a screening trial, the search
    after it): the configuration decides, not the parameters it came from."""
    config = {"enable_prefix_caching": True}
    first = trial(0, TrialState.RUNNING, started_s=0, params={"enable_prefix_caching": True})
    second = trial(1, TrialState.RUNNING, started_s=1, params={"max_num_seqs": 16})
    first.user_attrs[sharing.DRAWN] = second.user_attrs[sharing.DRAWN] = config
    assert sharing.duplicate_of([first, second], 1, config) == 0


def test_a_running_trial_no_worker_owns_is_abandoned_once_seen_so_for_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Judged by its start, a trial asked on a host whose clock (or time zone) is hours behind
    read as long abandoned in the milliseconds before its worker recorded itself: a live
    trial failed. It is judged by how long this process has seen it unowned."""
    clock = [1000.0]
    monkeypatch.setattr(sharing.time, "monotonic", lambda: clock[0])
    grace = sharing.heartbeat_s() * 4
    unowned = trial(0, TrialState.RUNNING, started_s=0)  # its start: days ago
    assert not sharing.abandoned("s", unowned), "first seen now"
    clock[0] += grace / 2
    assert not sharing.abandoned("s", unowned)
    assert not sharing.abandoned("other", unowned), "another study's trial of that number"
    clock[0] += grace
    assert sharing.abandoned("s", unowned)
    owned = trial(1, TrialState.RUNNING, started_s=0, worker=sharing.worker_identity())
    assert not sharing.abandoned("s", owned), "an owner's trial is judged by dead_here"
    clock[0] += 10 * grace
    assert not sharing.abandoned("s", owned)
    assert not sharing.abandoned("s", trial(3, TrialState.FAIL, started_s=0))
    assert not sharing.abandoned("s", trial(4, TrialState.WAITING))
    # A sweep forgets the study's trials that run no longer; another study's stay.
    sharing._forget_unowned("s", [])
    assert [k for k in sharing._UNOWNED_SINCE if k[0] == "s"] == []
    assert [k for k in sharing._UNOWNED_SINCE if k[0] == "other"]
    sharing._forget_unowned("other", [])


def test_the_hints_for_a_study_running_beside_name_what_its_database_allows() -> None:
    """On SQLite the refusal of a resume beside a live tuner hinted `tuner worker --study`,
    which SQLite refuses, and that refusal hinted `tuner run --resume`, refused here: a
    circle. A new study's --parallel was pointed at a resume of a study that did not exist."""
    from tuner.errors import UsageError
    from tuner.study.parallel import refuse_sqlite

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        live = {**sharing.worker_identity(), "pid": child.pid, "start": since_boot(child.pid)}
        for shared, named in ((True, True), (False, False)):
            with pytest.raises(UsageError) as info:
                sharing.refuse_beside(live, "s", shared=shared)
            assert ("`tuner worker --study s`" in info.value.hint) is named
    finally:
        child.kill()
        child.wait()
    with pytest.raises(UsageError) as info:
        refuse_sqlite("sqlite:///x.db", "--parallel 2")
    assert "drop --parallel" in info.value.hint
    with pytest.raises(UsageError) as info:  # it told a worker to drop an option it lacked
        refuse_sqlite("sqlite:///x.db", "`tuner worker --study`", "my study")
    hint = info.value.hint or ""
    assert "--parallel" not in hint
    assert "`tuner run --study 'my study' --resume --storage sqlite:///x.db`" in hint
