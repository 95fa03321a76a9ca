"""Process groups: find their live members, and end them TERM-then-KILL.

A vLLM server is a process group of its own (the API server plus its engine-core and
worker children), so tuner ends it by group, never by process name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable

import psutil

from tuner.telemetry import since_boot

POLL_S = 0.05
KILL_WAIT_S = 5.0
# Start times (tuner.telemetry.since_boot) are whole clock ticks on Linux (10 ms); elsewhere
# they are psutil's, rounded the same way: allow for that when comparing them.
START_TIME_TOLERANCE_S = 0.05


def still_running(pid: int, started: float) -> bool:
    """Whether the process that had ``pid`` and started ``started`` seconds after boot
    (:func:`tuner.telemetry.since_boot`) still runs: not exited, not a zombie, the pid not
    reused. True when psutil cannot tell."""
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(since_boot(pid) - started) <= START_TIME_TOLERANCE_S
    except (psutil.NoSuchProcess, ValueError):  # ValueError: not a pid at all
        return False
    except psutil.Error:
        return True


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue  # gone while we looked
    return members


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the group; a group that is already gone is not an error."""
    if pgid == os.getpgrp():
        # Never signal our own group: that would end tuner itself.
        raise ValueError(f"refusing to signal tuner's own process group {pgid}")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _wait_empty(pgid: int, deadline: float, reap: Callable[[], object] | None) -> bool:
    while True:
        if reap is not None:
            reap()
        if not group_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


def _created_before(members: list[psutil.Process], when: float) -> bool:
    for proc in members:
        try:
            if since_boot(proc.pid) < when - START_TIME_TOLERANCE_S:
                return True
        except psutil.Error:
            continue
    return False


def kill_group(
    pgid: int,
    grace_s: float,
    *,
    reap: Callable[[], object] | None = None,
    not_before: float | None = None,
) -> bool:
    """SIGTERM the group, wait up to ``grace_s``, then SIGKILL what is left.

    ``reap`` is called while waiting so that a leader which is our own child does not
    linger as a zombie. ``not_before`` (a start, in seconds after boot: see
    :func:`tuner.telemetry.since_boot`) guards against a group id the OS handed out again: a
    group with a member older than that is not ours and is left alone. Returns True when the
    group had live members to end.
    """
    members = group_members(pgid)
    if not members or (not_before is not None and _created_before(members, not_before)):
        return False
    signal_group(pgid, signal.SIGTERM)
    if not _wait_empty(pgid, time.monotonic() + grace_s, reap):
        signal_group(pgid, signal.SIGKILL)
        _wait_empty(pgid, time.monotonic() + KILL_WAIT_S, reap)
    return True


def run_in_group(
    argv: list[str], timeout_s: float, **popen: object
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to its end in a process group of its own, its output captured as text,
    like :func:`subprocess.run`; past ``timeout_s`` (or on Ctrl-C) the whole group is ended,
    so a probe that started processes of its own leaves none behind, and TimeoutExpired (or
    the interrupt) is raised."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **popen,  # type: ignore[call-overload]
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        kill_group(proc.pid, 1.0, reap=proc.poll)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
