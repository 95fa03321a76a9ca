"""The streaming load generator: drives an OpenAI-compatible ``/v1/completions`` as vLLM
serves it and times every request as a client sees it.

Every failure of one request (HTTP status, broken connection, timeout, an error event in the
stream) becomes a failed :class:`tuner.domain.RequestRecord`; only the run as a whole fails,
with :class:`tuner.errors.LoadFailure`, when too many requests fail or the caller aborts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from tuner.domain import FailureClass, RequestRecord, Slo, WindowMetrics, Workload
from tuner.errors import LoadFailure, UsageError
from tuner.load.prompts import PromptFactory
from tuner.load.request import stream_completion
from tuner.load.stats import window_metrics
from tuner.load.workloads import PlannedRequest, plan_requests

PhaseCallback = Callable[[str, int, int], None]
AbortCheck = Callable[[], bool]

_POLL_S = 0.2  # how often should_abort is asked


@dataclass(frozen=True)
class LoadReport:
    """What one run measured: per-window metrics and the records they were computed from."""

    windows: tuple[WindowMetrics, ...]
    records: tuple[tuple[RequestRecord, ...], ...]  # one tuple per window
    warmup_s: float


def _api_root(base_url: str) -> str:
    """``http://host:port`` from that or ``http://host:port/v1`` (with or without a slash)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


class LoadGenerator:
    """Sends a :class:`Workload` to one server and measures it.

    ``base_url`` is the server root (``http://host:port``; a trailing ``/v1`` is accepted).
    ``transport`` replaces the network, e.g. with :class:`httpx.MockTransport` in tests.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        prompts: PromptFactory,
        request_timeout_s: float = 600,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be > 0, got {request_timeout_s}")
        self.base_url = _api_root(base_url)
        self.model = model
        self.prompts = prompts
        self.request_timeout_s = request_timeout_s
        self._transport = transport

    def run(
        self,
        workload: Workload,
        slo: Slo | None = None,
        *,
        on_phase: PhaseCallback | None = None,
        should_abort: AbortCheck | None = None,
        max_error_rate: float = 0.5,
    ) -> LoadReport:
        """Warm up, then measure ``workload.windows`` windows; blocks (runs its own event loop).

        ``on_phase`` gets ``("warmup", done, total)`` as warm-up requests finish and
        ``("measure", i, windows)`` as window ``i`` (0-based) starts. ``should_abort`` is
        polled about every 0.2 s; when it says True the outstanding requests are cancelled and
        ``LoadFailure(CRASHED)`` is raised. A phase (warm-up included) whose error rate exceeds
        ``max_error_rate`` raises ``LoadFailure(LOAD_ERRORS)`` naming the first errors.
        """
        if not 0.0 <= max_error_rate <= 1.0:
            raise ValueError(f"max_error_rate must be in [0, 1], got {max_error_rate}")
        for field in ("concurrency", "requests_per_window", "windows"):
            if getattr(workload, field) < 1:
                raise UsageError(f"workload {workload.name!r}: {field} must be >= 1")
        if workload.warmup_requests < 0:
            raise UsageError(f"workload {workload.name!r}: warmup_requests must be >= 0")
        return asyncio.run(self._run(workload, slo, on_phase, should_abort, max_error_rate))

    async def _run(
        self,
        workload: Workload,
        slo: Slo | None,
        on_phase: PhaseCallback | None,
        should_abort: AbortCheck | None,
        max_error_rate: float,
    ) -> LoadReport:
        # The semaphore in _phase is the concurrency limit; the pool must not add its own.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=workload.concurrency)
        timeout = httpx.Timeout(self.request_timeout_s, connect=min(10.0, self.request_timeout_s))
        async with httpx.AsyncClient(
            base_url=self.base_url,
            transport=self._transport,
            timeout=timeout,
            limits=limits,
            trust_env=False,  # a proxy from the environment must not sit between us and vLLM
        ) as client:
            started = time.perf_counter()
            # Warm-up runs closed-loop whatever the arrival process: it is there to compile
            # and cache the shapes, not to be timed, so it should finish fast.
            warm = [
                PlannedRequest(p.prompt_tokens, p.output_tokens, p.shared_prefix_tokens, None)
                for p in plan_requests(workload, workload.warmup_requests, seed=0)
            ]
            if warm:
                done = 0

                def warmed() -> None:
                    nonlocal done
                    done += 1
                    if on_phase:
                        on_phase("warmup", done, len(warm))

                if on_phase:
                    on_phase("warmup", 0, len(warm))
                records, _ = await self._phase(
                    client, warm, workload.concurrency, should_abort, warmed
                )
                _check_errors(records, "warm-up", max_error_rate)
            warmup_s = time.perf_counter() - started

            windows: list[WindowMetrics] = []
            per_window: list[tuple[RequestRecord, ...]] = []
            for index in range(workload.windows):
                if on_phase:
                    on_phase("measure", index, workload.windows)
                plan = plan_requests(workload, workload.requests_per_window, seed=index + 1)
                records, duration = await self._phase(
                    client, plan, workload.concurrency, should_abort, None
                )
                _check_errors(records, f"window {index + 1}", max_error_rate)
                windows.append(window_metrics(records, duration, slo))
                per_window.append(tuple(records))
        return LoadReport(tuple(windows), tuple(per_window), warmup_s)

    async def _phase(
        self,
        client: httpx.AsyncClient,
        plan: list[PlannedRequest],
        concurrency: int,
        should_abort: AbortCheck | None,
        on_done: Callable[[], None] | None,
    ) -> tuple[list[RequestRecord], float]:
        """Send ``plan`` with at most ``concurrency`` in flight; the records in plan order and
        the wall time from the first launch to the last completion."""
        # Prompts are made before the clock starts so that building them is never timed.
        prompts = [self.prompts.make(p.prompt_tokens, p.shared_prefix_tokens) for p in plan]
        slots = asyncio.Semaphore(concurrency)
        t0 = time.perf_counter()

        async def one(p: PlannedRequest, prompt: str | list[int]) -> RequestRecord:
            if p.arrival_s is not None:
                delay = t0 + p.arrival_s - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            async with slots:
                record = await stream_completion(
                    client, self.model, p, prompt, t0, self.request_timeout_s
                )
            if on_done:
                on_done()
            return record

        tasks = [asyncio.create_task(one(p, s)) for p, s in zip(plan, prompts, strict=True)]
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
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return [t.result() for t in tasks], time.perf_counter() - t0


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
