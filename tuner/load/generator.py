"""The streaming load generator: drives an OpenAI-compatible ``/v1/completions`` as vLLM
serves it, times every request as ``vllm bench serve`` does, and checks itself.

One asyncio process over aiohttp, with a few byte searches per streamed chunk
(:mod:`tuner.load.stream`), keeps up with hundreds of streams; every window also records
whether the client kept up (:mod:`tuner.load.selfcheck`), so a window in which it did not is
flagged instead of being reported as the server's number.

A workload with a ladder is measured at each of its load points in turn on the same server,
after one warm-up: one launch gives a throughput-latency curve.

Every failure of one request (HTTP status, broken connection, timeout, an error event in the
stream) becomes a failed :class:`tuner.domain.RequestRecord`; only the run as a whole fails,
with :class:`tuner.errors.LoadFailure`, when too many requests fail or the caller aborts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from tuner.domain import (
    ClientHealth,
    FailureClass,
    RequestRecord,
    Slo,
    WindowMetrics,
    Workload,
)
from tuner.errors import LoadFailure
from tuner.load.curve import point_label
from tuner.load.prompts import PromptFactory
from tuner.load.selfcheck import LAG_BOUND_MS, EnergyMeter, LoopLag, Neighbours, WindowCheck
from tuner.load.stats import window_metrics
from tuner.load.stream import request_body, stream_completion
from tuner.load.workloads import PlannedRequest, check_workload, plan_requests

PhaseCallback = Callable[[str, int, int], None]
AbortCheck = Callable[[], bool]
# Called once with the windows of the first load point (the first window, for a workload of one
# point): a reason to stop measuring there, or None to go on (tuner.scoring.early_stop).
FirstPointCheck = Callable[[tuple[WindowMetrics, ...]], str | None]


def first_point_windows(workload: Workload) -> int:
    """How many windows a :data:`FirstPointCheck` sees: the first load point's, or the first
    window of a one-point workload."""
    return 1 if len(workload.load_points()) == 1 else workload.windows


_POLL_S = 0.2  # how often should_abort is asked
_SPARE_FILES = 256  # open files kept beside the sockets of the requests in flight


def _allow_open_files(sockets: int) -> int:
    """Raise this process's soft limit on open files, up to its hard limit, to hold
    ``sockets`` (one a request in flight) and :data:`_SPARE_FILES` more; how many sockets it
    then holds (``sockets``, or fewer past the hard limit). At Linux's default soft limit of
    1024, a trace replayed with 2,000 requests in flight at once failed every open (a socket,
    a module's import) with EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = sockets + _SPARE_FILES
    if soft == resource.RLIM_INFINITY or soft >= want:
        return sockets
    # An uncapped replay may ask for more than ever are in flight (every row of an hour's
    # trace), so past the hard limit this raises what it can and lets the run go on.
    most = want if hard == resource.RLIM_INFINITY else min(want, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (most, hard))
    return max(1, most - _SPARE_FILES)


def _files_bound(health: ClientHealth, room: int) -> ClientHealth:
    """``health`` of a window that this process's open files held to ``room`` requests in
    flight (its arrivals waited, or its closed loop ran fewer streams): the client was the
    limit."""
    note = (
        f"this process may open files for {room} requests in flight at most (its hard limit, "
        "ulimit -Hn)"
    )
    return dataclasses.replace(
        health, client_bound=True, files_room=room, notes=(*health.notes, note)
    )


@dataclass(frozen=True)
class LoadReport:
    """What one run measured: per-window metrics (every load point, in the order measured)
    and the per-request records they were computed from."""

    windows: tuple[WindowMetrics, ...]
    records: tuple[tuple[RequestRecord, ...], ...]  # one tuple per window
    warmup_s: float
    stopped_early: str | None = None  # why the run stopped after its first load point
    # Multi-turn workloads: the planned turn of each record (0: no session), per window.
    turns: tuple[tuple[int, ...], ...] = ()


class FailedAfterPoints(LoadFailure):
    """A run that failed after measuring some windows: those windows are in ``report``, so
    that a caller can still report them."""

    def __init__(self, exc: LoadFailure, report: LoadReport) -> None:
        super().__init__(exc.failure, exc.message, log_tail=exc.log_tail)
        self.report = report


def api_root(base_url: str) -> str:
    """``http://host:port`` from that or ``http://host:port/v1`` (with or without a slash)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def quiet_stops(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The run's loop's exception handler: a stop (Ctrl-C, or SIGTERM taken as one) raised
    inside a task the HTTP client started for itself is the run's own stop, handled where
    the run ends; logged as "Task exception was never retrieved", it printed a traceback after
    the stop's one line. Anything else goes to asyncio's default handler."""
    if isinstance(context.get("exception"), KeyboardInterrupt):
        return
    loop.default_exception_handler(context)


class LoadGenerator:
    """Sends a :class:`Workload` to one server and measures it.

    ``base_url`` is the server root (``http://host:port``; a trailing ``/v1`` is accepted).
    ``neighbours`` accounts for the host's other processes during each window (the runner
    passes one that knows the server's processes and GPU); ``energy`` reads the measured GPU's
    energy over each window (none: not measured).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        prompts: PromptFactory,
        request_timeout_s: float = 600,
        *,
        neighbours: Neighbours | None = None,
        energy: EnergyMeter | None = None,
        stall_timeout_s: float | None = None,  # no byte for this long fails a request
    ) -> None:
        if not request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be > 0, got {request_timeout_s}")
        self.base_url = api_root(base_url)
        self.model = model
        self.prompts = prompts
        self.request_timeout_s = request_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.neighbours = neighbours
        self.energy = energy

    def run(
        self,
        workload: Workload,
        slo: Slo | None = None,
        *,
        on_phase: PhaseCallback | None = None,
        should_abort: AbortCheck | None = None,
        max_error_rate: float = 0.5,
        first_point: FirstPointCheck | None = None,
    ) -> LoadReport:
        """Warm up once, then measure ``workload.windows`` windows at each load point; blocks
        (runs its own event loop).

        A reason ``first_point`` (:data:`FirstPointCheck`) returns ends the run there, in the
        report's ``stopped_early``.

        ``on_phase`` gets ``("warmup", done, total)`` as warm-up requests finish and
        ``("measure", i, n)`` as window ``i`` of ``n`` (0-based, over all load points) starts.
        ``should_abort`` is polled about every 0.2 s; when it says True the outstanding requests
        are cancelled and ``LoadFailure(CRASHED)`` is raised. A phase (warm-up included) whose
        error rate exceeds ``max_error_rate`` raises ``LoadFailure(LOAD_ERRORS)``; a failure
        after some windows were measured is a :class:`FailedAfterPoints` holding them.
        """
        if not 0.0 <= max_error_rate <= 1.0:
            raise ValueError(f"max_error_rate must be in [0, 1], got {max_error_rate}")
        check_workload(workload)
        return asyncio.run(
            self._run(workload, slo, on_phase, should_abort, max_error_rate, first_point)
        )

    async def _run(
        self,
        workload: Workload,
        slo: Slo | None,
        on_phase: PhaseCallback | None,
        should_abort: AbortCheck | None,
        max_error_rate: float,
        first_point: FirstPointCheck | None = None,
    ) -> LoadReport:
        points = workload.load_points()
        asyncio.get_running_loop().set_exception_handler(quiet_stops)
        lag = LoopLag()
        async with self._session() as session:
            lag.start()
            windows: list[WindowMetrics] = []
            per_window: list[tuple[RequestRecord, ...]] = []
            turns: list[tuple[int, ...]] = []
            try:
                started = time.perf_counter()
                await self._warm_up(session, workload, on_phase, should_abort, max_error_rate)
                warmup_s = time.perf_counter() - started

                check = WindowCheck(lag, self.neighbours)
                first = first_point_windows(workload)  # what first_point sees
                reason = None
                for (at, point), index in itertools.product(
                    enumerate(points), range(workload.windows)
                ):
                    if on_phase:
                        on_phase("measure", len(windows), len(points) * workload.windows)
                    # The same shapes at every point; streams of this window at this point.
                    plan = plan_requests(
                        point, point.requests_per_window, seed=index + 1, phase=f"p{at}w{index + 1}"
                    )
                    check.begin()
                    if self.energy is not None:
                        self.energy.begin()
                    # Waits for a slot, of arrivals that are timed: a trace whose rows all
                    # came at 0 is a closed loop, whose requests wait for a slot by design.
                    held: list[float] = []
                    timed = point.trace_paced or point.request_rate is not None
                    records, duration, capped = await self._phase(
                        session, plan, point.concurrency, should_abort, None,
                        held if timed else None,
                    )  # fmt: skip
                    energy = self.energy.end() if self.energy is not None else None
                    health = check.end(held)
                    # A closed loop so capped ran fewer streams than its point says.
                    waited = not timed or health.held_p99_ms >= LAG_BOUND_MS
                    if capped is not None and waited:
                        health = _files_bound(health, capped)
                    where = f"window {index + 1}"
                    if len(points) > 1:
                        label = point_label(
                            point.concurrency, point.request_rate, point.trace_paced
                        )
                        where += f" at {label}"
                    _check_errors(records, where, max_error_rate)
                    windows.append(
                        window_metrics(
                            records,
                            duration,
                            slo,
                            concurrency=point.concurrency,
                            request_rate=point.request_rate,
                            client=health,
                            energy=energy,
                        )
                    )
                    per_window.append(tuple(records))
                    turns.append(tuple(p.turn for p in plan))
                    if first_point is not None and len(windows) == first:
                        reason = first_point(tuple(windows))
                        if reason is not None:
                            break
            except LoadFailure as exc:
                if not windows:
                    raise
                measured = LoadReport(
                    tuple(windows), tuple(per_window), warmup_s, None, tuple(turns)
                )
                raise FailedAfterPoints(exc, measured) from exc
            finally:
                await lag.stop()
                if self.energy is not None:
                    self.energy.end()  # a window cut short: stop its sampling, drop its reading
        return LoadReport(tuple(windows), tuple(per_window), warmup_s, reason, tuple(turns))

    def warm_up(self, workload: Workload, *, should_abort: AbortCheck | None = None) -> float:
        """Only the warm-up of :meth:`run` (the workload's own shapes, closed-loop at its
        highest concurrency, untimed); returns its seconds. ``tuner launch`` sends it before it
        announces a server, as a trial does before it measures."""
        check_workload(workload)

        async def warm() -> float:
            started = time.perf_counter()
            async with self._session() as session:
                await self._warm_up(session, workload, None, should_abort, 0.5)
            return time.perf_counter() - started

        return asyncio.run(warm())

    def _session(self) -> aiohttp.ClientSession:
        # The semaphore in _phase is the concurrency limit; the pool must not add its own.
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=None)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=min(10.0, self.request_timeout_s))
        return aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            trust_env=False,  # a proxy from the environment must not sit between us and vLLM
            auto_decompress=False,
        )

    async def _warm_up(
        self,
        session: aiohttp.ClientSession,
        workload: Workload,
        on_phase: PhaseCallback | None,
        should_abort: AbortCheck | None,
        max_error_rate: float,
    ) -> None:
        # Warm-up runs closed-loop at the highest concurrency whatever the arrival process: it
        # is there to compile and cache the shapes, not to be timed.
        warm = [
            dataclasses.replace(p, arrival_s=None, think_s=0.0)
            for p in plan_requests(workload, workload.warmup_requests, seed=0, timed=False)
        ]
        if not warm:
            return
        if on_phase:
            on_phase("warmup", 0, len(warm))
        done = itertools.count(1)

        def warmed() -> None:
            if on_phase:
                on_phase("warmup", next(done), len(warm))

        top = max(p.concurrency for p in workload.load_points())
        records, _, _ = await self._phase(session, warm, top, should_abort, warmed)
        _check_errors(records, "warm-up", max_error_rate)

    async def _phase(
        self,
        session: aiohttp.ClientSession,
        plan: list[PlannedRequest],
        concurrency: int,
        should_abort: AbortCheck | None,
        on_done: Callable[[], None] | None,
        held: list[float] | None = None,
    ) -> tuple[list[RequestRecord], float, int | None]:
        """Send ``plan`` with at most ``concurrency`` in flight; the records in plan order, the
        wall time from the first launch to the last completion, and the requests in flight
        this process's open files held it to where they were fewer than it wanted (else
        None). ``held`` gets the seconds each request with an arrival time waited, once due,
        for a slot."""
        # Bodies are made before the clock starts so that building them is never timed.
        bodies = [
            request_body(
                self.model,
                self.prompts.make_segments(p.prompt_tokens, p.prefix_segments()),
                p.output_tokens,
            )
            for p in plan
        ]
        self.prompts.forget_phase_streams()  # this phase's, all used by now
        url = f"{self.base_url}/v1/completions"
        # Past the hard limit on open files the requests in flight are capped at what it
        # holds: beyond, a socket (or an import of the run's own) failed with EMFILE.
        wanted = min(concurrency, len(plan))
        room = _allow_open_files(wanted)
        slots = asyncio.Semaphore(min(concurrency, room))
        # A session's turns go in plan order: each waits for the one before it to finish.
        done_events = [asyncio.Event() for _ in plan]
        previous: list[int | None] = []
        last: dict[str, int] = {}
        for i, p in enumerate(plan):
            previous.append(last.get(p.session) if p.session is not None else None)
            if p.session is not None:
                last[p.session] = i
        t0 = time.perf_counter()

        async def one(i: int, p: PlannedRequest, body: bytes) -> RequestRecord:
            try:
                before = previous[i]
                if before is not None:
                    await done_events[before].wait()
                    if p.think_s > 0:
                        await asyncio.sleep(p.think_s)
                if p.arrival_s is not None:
                    delay = t0 + p.arrival_s - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                due = time.perf_counter()
                async with slots:
                    if held is not None and p.arrival_s is not None:
                        held.append(time.perf_counter() - due)
                    record = await stream_completion(
                        session,
                        url,
                        body,
                        p.prompt_tokens,
                        t0,
                        self.request_timeout_s,
                        self.stall_timeout_s,
                    )
                if on_done:
                    on_done()
                return record
            finally:
                done_events[i].set()  # a failed turn still lets its session go on

        tasks = [
            asyncio.create_task(one(i, p, b))
            for i, (p, b) in enumerate(zip(plan, bodies, strict=True))
        ]
        try:
            pending: set[asyncio.Task[RequestRecord]] = set(tasks)
            while pending:
                if should_abort and should_abort():
                    raise LoadFailure(
                        FailureClass.CRASHED,
                        f"load aborted with {len(pending)} of {len(tasks)} requests outstanding "
                        "(the server stopped or the trial was stopped)",
                    )
                _, pending = await asyncio.wait(
                    pending, timeout=_POLL_S, return_when=asyncio.FIRST_EXCEPTION
                )
                for task in tasks:
                    # stream_completion never raises for a failed request: this is a bug (or a
                    # raising callback) and must not be counted as a load error.
                    exc = task.exception() if task.done() and not task.cancelled() else None
                    if exc is not None:
                        raise exc
            duration = time.perf_counter() - t0
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return [t.result() for t in tasks], max(duration, 1e-9), room if room < wanted else None


def _check_errors(records: list[RequestRecord], phase: str, max_error_rate: float) -> None:
    failed = [r for r in records if not r.ok]
    if not records or len(failed) / len(records) <= max_error_rate:
        return
    # The same error usually repeats; name the first few distinct ones.
    distinct = list(dict.fromkeys(r.error or "?" for r in failed))[:3]
    raise LoadFailure(
        FailureClass.LOAD_ERRORS,
        f"{len(failed)} of {len(records)} requests failed in {phase} "
        f"(more than {max_error_rate:.0%}); first errors: " + " | ".join(distinct),
    )
