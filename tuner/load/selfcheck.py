"""The load generator watching itself: is a window the server's number or the client's?

Two things are measured during every window, in the generator's own process:

- **event-loop lag**: a task asks to wake every ``interval_s`` and records how late it woke.
  A loop that is busy parsing chunks, or starved of CPU, wakes late, and every timestamp it
  takes is late by as much;
- **CPU**: the generator's own CPU time (all its threads) over the window's wall time.

A window is **client-bound** when the generator was saturated: its CPU near one full core, or
its loop late by more than :data:`LAG_BOUND_MS` at the 99th percentile while it was busy. Its
throughput is then a floor set by the client, not the server's number.

Where arrivals are timed (Poisson, a trace's own times), the window also records how long they
waited, once due, for one of the in-flight slots the workload's concurrency caps
(``held_p99_ms``). That is no verdict on the client: the server did not keep up with the
arrivals at that cap (it served a closed loop of ``concurrency`` streams, a number of its
own), and TTFT, timed from the send as ``vllm bench serve`` times it, leaves the wait out.
``tuner load`` says so.

What the host's other processes did is asked of a :class:`Neighbours` (the runner's telemetry
knows the server's process tree and the GPU's processes); a window in which they took more
than :func:`others_bound` cores, or another process used the measured GPU, or the generator's
loop was late while it was idle (starved of CPU: by others, or on a host too small for it and
the server it measures, by the server), is **disturbed**.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tuner.domain import ClientHealth, WindowEnergy

# The client's CPU share above which one asyncio process is taken as saturated.
CPU_BOUND = 0.9
# Loop lag at the 99th percentile that blurs timings by more than the measurement is worth.
LAG_BOUND_MS = 20.0
# Below this CPU share a late loop is starved by other processes (the server's included), not
# saturated.
BUSY_FOR_LAG = 0.5


def others_bound(cores: int) -> float:
    """Cores that processes other than the client and the server may use before a window is
    called disturbed: half a core, or 15 % of a large host."""
    return max(0.5, 0.15 * cores)


@dataclass(frozen=True)
class NeighbourReading:
    """What the rest of the host did during one window."""

    host_cpu: float  # busy cores, everything included
    others_cpu: float | None  # busy cores outside client and server; None when unknown
    other_gpu_processes: int = 0


class Neighbours(Protocol):
    """Host-side accounting for one window (see :mod:`tuner.telemetry.interference`)."""

    def begin(self) -> None: ...

    def end(self, client_cpu_s: float) -> NeighbourReading: ...


class EnergyMeter(Protocol):
    """The measured GPU's energy over one window (see :mod:`tuner.telemetry.energy`):
    ``end()`` gives None when it was not measured, and neither call raises."""

    def begin(self) -> None: ...

    def end(self) -> WindowEnergy | None: ...


class LoopLag:
    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self._lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        interval = self.interval_s
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(interval)
            self._lags.append(max(0.0, time.perf_counter() - asked - interval))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def take(self) -> list[float]:
        """The lags (seconds) recorded since the last call."""
        lags, self._lags = self._lags, []
        return lags


class WindowCheck:
    """CPU and lag accounting of one window: ``begin()`` as it starts, ``end()`` as it ends."""

    def __init__(self, lag: LoopLag, neighbours: Neighbours | None = None) -> None:
        self.lag = lag
        self.neighbours = neighbours
        self._wall = 0.0
        self._cpu = 0.0

    def begin(self) -> None:
        self.lag.take()
        if self.neighbours is not None:
            self.neighbours.begin()
        self._wall = time.perf_counter()
        self._cpu = time.process_time()

    def end(self, held_s: Sequence[float] = ()) -> ClientHealth:
        """The window's verdicts; ``held_s``: how long each timed arrival waited, once due,
        for a slot."""
        wall = max(time.perf_counter() - self._wall, 1e-9)
        cpu_s = time.process_time() - self._cpu
        lags_ms = np.asarray(self.lag.take(), dtype=float) * 1000.0
        reading = self.neighbours.end(cpu_s) if self.neighbours is not None else None
        return judge(
            client_cpu=cpu_s / wall,
            lags_ms=lags_ms,
            reading=reading,
            cores=os.cpu_count() or 1,
            held_ms=np.asarray(held_s, dtype=float) * 1000.0,
        )


def judge(
    *,
    client_cpu: float,
    lags_ms: np.ndarray,
    reading: NeighbourReading | None,
    cores: int,
    held_ms: np.ndarray | None = None,
) -> ClientHealth:
    """The verdicts for one window from its raw readings (pure, for tests)."""
    p99 = float(np.percentile(lags_ms, 99)) if lags_ms.size else 0.0
    worst = float(lags_ms.max()) if lags_ms.size else 0.0
    late = p99 >= LAG_BOUND_MS
    bound: list[str] = []  # the notes that make the window client-bound, then disturbed
    if client_cpu >= CPU_BOUND:
        bound.append(f"client used {client_cpu:.0%} of a core (saturated at {CPU_BOUND:.0%})")
    if late and client_cpu >= BUSY_FOR_LAG:
        bound.append(f"client event loop late by {p99:.0f} ms at P99 while busy")
    held = float(np.percentile(held_ms, 99)) if held_ms is not None and held_ms.size else 0.0
    disturbed: list[str] = []
    reading = reading or NeighbourReading(host_cpu=float("nan"), others_cpu=None)
    others = reading.others_cpu
    if late and client_cpu < BUSY_FOR_LAG:
        # Starved: by others (said below), or by the server it measures, where the host has too
        # few cores for both (CPU vLLM on 2 cores: host 2.0 busy, others 0.01).
        mine = (
            others is not None
            and others <= others_bound(cores)
            and reading.host_cpu >= cores - 0.5  # every core busy, and not with others' work
        )
        by = (
            f" with the server's own processes ({reading.host_cpu:.1f} of {cores} cores busy)"
            if mine
            else ""
        )
        disturbed.append(
            f"client event loop late by {p99:.0f} ms at P99 while idle: CPU contention{by}"
        )
    if others is not None and others > others_bound(cores):
        disturbed.append(f"other processes used {others:.1f} of {cores} cores")
    if reading.other_gpu_processes:
        disturbed.append(f"{reading.other_gpu_processes} other process(es) on the measured GPU")
    return ClientHealth(
        client_cpu=round(client_cpu, 4),
        loop_lag_p99_ms=round(p99, 3),
        loop_lag_max_ms=round(worst, 3),
        host_cpu=round(reading.host_cpu, 4),
        host_cores=cores,
        others_cpu=None if others is None else round(others, 4),
        other_gpu_processes=reading.other_gpu_processes,
        held_p99_ms=round(held, 3),
        client_bound=bool(bound),
        disturbed=bool(disturbed),
        notes=(*bound, *disturbed),
    )
