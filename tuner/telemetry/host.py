"""Host side of a server: its process tree's resident memory and CPU use, the machine's totals.

The tree of a vLLM server is its API server (the launched process, and any other API-server
processes it starts) and an engine core child that runs the scheduler and the model, with the
engine core's own workers under it. :func:`is_engine_core` tells the two apart; CPU placement
(``tuner.runner.placement``) and the CPU sampler here both rely on it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass

import psutil

from tuner.telemetry.periodic import Periodic

log = logging.getLogger(__name__)

# A process that exits, turns zombie or hides from us between listing and reading simply
# does not count in that sample.
GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)

# What marks an engine-core process: vLLM's process title (``VLLM::EngineCore_DP0``), and the
# word tuner's fake server puts in its engine child's command line.
ENGINE_MARKERS = ("EngineCore", "tuner-fake-engine-core")


def is_engine_core(proc: psutil.Process) -> bool:
    """Whether ``proc``'s name or command line carries one of :data:`ENGINE_MARKERS`; False
    for a process that is gone or hidden from us."""
    try:
        words = [proc.name(), *proc.cmdline()]
    except GONE:
        return False
    return any(marker in word for word in words for marker in ENGINE_MARKERS)


def process_tree(root_pid: int) -> list[psutil.Process]:
    """``root_pid`` and all its descendants; empty when the root is gone."""
    try:
        root = psutil.Process(root_pid)
        return [root, *root.children(recursive=True)]
    except GONE:
        return []


def engine_tree(root_pid: int) -> list[tuple[psutil.Process, bool]]:
    """``root_pid``'s tree, each process with whether it is an engine core or runs under one
    (CPU vLLM's model worker, ``VLLM::Worker``, is an engine core's child); empty when the
    root is gone."""
    try:
        root = psutil.Process(root_pid)
    except GONE:
        return []
    found: list[tuple[psutil.Process, bool]] = []
    stack = [(root, False)]
    while stack:
        proc, under_engine = stack.pop()
        engine = under_engine or is_engine_core(proc)
        found.append((proc, engine))
        try:
            stack.extend((child, engine) for child in proc.children())
        except GONE:
            continue
    return found


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def since_boot(pid: int) -> float:
    """When process ``pid`` started, in seconds after the machine booted: with the pid, what
    tells that process apart from a later one given the same pid.

    It never moves. psutil's ``create_time()`` does: it adds the boot time that /proc/stat
    states at the moment of the call, which is the wall clock minus the uptime, so a clock
    that NTP (or a person, or a VM host) adjusts gives two readings of one process a second or
    more apart. Linux's /proc/PID/stat keeps the start as clock ticks after boot; elsewhere
    psutil's start less its boot time stands in (not proof against a clock step there).
    Raises what psutil raises: NoSuchProcess when no process has ``pid``, AccessDenied when
    /proc hides it.
    """
    if not sys.platform.startswith("linux"):
        return float(psutil.Process(pid).create_time() - psutil.boot_time())
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            ticks = int(stat.read().rsplit(b")", 1)[1].split()[19])  # field 22, after comm's
    except PermissionError:
        raise psutil.AccessDenied(pid) from None
    except (OSError, IndexError, ValueError):  # gone, or gone while being read
        raise psutil.NoSuchProcess(pid) from None
    return ticks / _CLOCK_TICKS


def cpu_seconds(proc: psutil.Process) -> float:
    """The CPU time ``proc`` used so far: user + system, all its threads."""
    times = proc.cpu_times()
    return float(times.user + times.system)


def tree_rss_bytes(root_pid: int) -> int | None:
    """Summed RSS of ``root_pid`` and all its descendants, or None when the root is gone.

    RSS counts pages shared between the processes (libraries, fork copy-on-write) once per
    process, so the sum over-states the tree's footprint a little; it does so the same way for
    every trial, which is what comparisons need.
    """
    procs = process_tree(root_pid)
    if not procs:
        return None
    total = 0
    for proc in procs:
        try:
            total += int(proc.memory_info().rss)
        except GONE:
            continue
    return total


class ProcessTreeRssSampler(Periodic):
    """Peak summed RSS of a process and its descendants (vLLM runs the model in an engine-core
    child), sampled in a background thread that never raises into the caller's."""

    thread_name = "tuner-rss-sampler"

    def __init__(self, root_pid: int, interval_s: float = 0.2) -> None:
        super().__init__(interval_s)
        self.root_pid = root_pid
        self._peak: int | None = None

    @property
    def peak_bytes(self) -> int | None:
        """Highest summed RSS seen so far; None before any successful sample."""
        with self._lock:
            return self._peak

    def _tick(self) -> None:
        try:
            rss = tree_rss_bytes(self.root_pid)
        except Exception as exc:  # e.g. /proc unreadable: lose the sample, keep going
            log.warning("RSS sample of pid %d failed: %s", self.root_pid, exc)
            return
        if rss is None:
            return
        with self._lock:
            self._peak = rss if self._peak is None else max(self._peak, rss)


# CPU time comes in clock ticks (10 ms on most kernels): over a phase shorter than this the
# cores figure would be mostly rounding, so none is given.
MIN_CPU_PHASE_S = 0.1


@dataclass
class _CpuSeen:
    """One process as the CPU sampler saw it: CPU seconds at first and last sight, its role."""

    first_s: float
    last_s: float
    engine: bool


class ProcessTreeCpuSampler(Periodic):
    """CPU cores a server's API-server and engine-core processes use, between ``start()`` and
    ``stop()``.

    Each tick walks the tree from ``root_pid`` down, so that a process started meanwhile is
    found, and records each process's CPU time (user + system, all its threads). A process is
    an engine-core process when it or an ancestor below the root is an engine core
    (:func:`is_engine_core`); every other process of the tree, the root included, is an
    API-server process. A process counts with the CPU time it used while watched: from the
    first tick when that tick saw it, else from its birth (the first tick did not see it, so it
    started after ``start()``), to the last tick that saw it (one that exited meanwhile keeps
    what was seen). Its birth is not compared with the clock: the kernel gives a start time in
    clock ticks (10 ms), and a child forked a few ms after ``start()`` could read as born
    before it and lose its first 50 ms of CPU (a CI run saw 0.26 of a 0.3 s burn). Processes
    are told apart by pid and start time, so a reused pid is a new process; start times are
    taken since boot, so that a step of the system clock (NTP) changes neither. Sampling never
    raises into the caller's thread.
    """

    thread_name = "tuner-cpu-sampler"

    def __init__(self, root_pid: int, interval_s: float = 0.5) -> None:
        super().__init__(interval_s)
        self.root_pid = root_pid
        self._seen: dict[tuple[int, float], _CpuSeen] = {}
        self._first_tick: float | None = None  # time.monotonic() of the first and last tick
        self._last_tick: float | None = None

    def _tick(self) -> None:
        now = time.monotonic()
        try:
            readings: list[tuple[tuple[int, float], float, bool]] = []
            for proc, engine in engine_tree(self.root_pid):
                try:
                    born = since_boot(proc.pid)
                    readings.append(((proc.pid, born), cpu_seconds(proc), engine))
                except GONE:
                    continue
        except Exception as exc:  # e.g. /proc unreadable: lose the sample, keep going
            log.warning("CPU sample of pid %d's tree failed: %s", self.root_pid, exc)
            return
        with self._lock:
            first_tick = self._first_tick is None
            if first_tick:
                self._first_tick = now
            self._last_tick = now
            for key, cpu_s, engine in readings:
                seen = self._seen.get(key)
                if seen is None:
                    # Not seen by the first tick: born while watched (or being born as it
                    # walked), so everything it used so far was used in the phase.
                    first = cpu_s if first_tick else 0.0
                    self._seen[key] = _CpuSeen(first_s=first, last_s=cpu_s, engine=engine)
                else:
                    seen.last_s = max(seen.last_s, cpu_s)
                    seen.engine = engine  # the latest word: vLLM titles its engine core late

    def result(self) -> dict[str, float]:
        """The CPU figures, in cores (CPU seconds per wall second of the watched phase).

        ``api_server_cpu`` (summed over API-server processes), ``api_server_processes`` (how
        many were seen), ``server_cpu_peak_process`` (the busiest single API-server process;
        about 1.0 for a saturated single-threaded one), ``engine_core_cpu`` (summed over the
        engine-core processes, their descendants included) and ``engine_core_processes``. The
        API-server keys are left out when no API-server process was seen, the engine keys when
        no engine core was, and all of them when the ticks span less than
        :data:`MIN_CPU_PHASE_S`.
        """
        with self._lock:
            if self._first_tick is None or self._last_tick is None:
                return {}
            wall = self._last_tick - self._first_tick
            used = [(seen.last_s - seen.first_s, seen.engine) for seen in self._seen.values()]
        if wall < MIN_CPU_PHASE_S:
            return {}
        api = [cpu_s / wall for cpu_s, engine in used if not engine]
        engine_cores = [cpu_s / wall for cpu_s, engine in used if engine]
        out: dict[str, float] = {}
        if api:
            out["api_server_cpu"] = sum(api)
            out["api_server_processes"] = float(len(api))
            out["server_cpu_peak_process"] = max(api)
        if engine_cores:
            out["engine_core_cpu"] = sum(engine_cores)
            out["engine_core_processes"] = float(len(engine_cores))
        return out
