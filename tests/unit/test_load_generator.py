"""The load generator against canned SSE streams served by httpx.MockTransport."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import httpx
import pytest

from tuner.domain import FailureClass, Slo, Workload
from tuner.errors import LoadFailure, UsageError
from tuner.load.generator import LoadGenerator
from tuner.load.prompts import PromptFactory
from tuner.load.workloads import plan_requests

Handler = Callable[[httpx.Request], Coroutine[Any, Any, httpx.Response]]

SMALL = Workload(
    name="unit",
    prompt_tokens=20,
    output_tokens=4,
    shared_prefix_tokens=5,
    concurrency=3,
    requests_per_window=6,
    windows=2,
    warmup_requests=2,
)


def _event(text: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    obj: dict[str, object] = {"object": "text_completion", "choices": []}
    if text is not None:
        obj["choices"] = [{"index": 0, "text": text}]
    if usage is not None:
        obj["usage"] = usage
    return f"data: {json.dumps(obj)}\n\n".encode()


async def _stream(parts: list[bytes], gap_s: float = 0.002) -> AsyncIterator[bytes]:
    for part in parts:
        await asyncio.sleep(gap_s)
        yield part


def _sse(parts: list[bytes], gap_s: float = 0.002) -> httpx.Response:
    return httpx.Response(
        200, headers={"content-type": "text/event-stream"}, content=_stream(parts, gap_s)
    )


class FakeVllm:
    """Answers like vLLM: one text chunk per token, a usage chunk, then [DONE]."""

    def __init__(self, usage: bool = True) -> None:
        self.usage = usage
        self.bodies: list[dict[str, object]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        n_out = int(body["max_tokens"])
        parts = [_event(f" t{i}") for i in range(n_out)] + [_event("", None)]
        if self.usage:
            n_in = len(str(body["prompt"]).split())
            usage = {"prompt_tokens": n_in, "completion_tokens": n_out}
            parts.append(_event(None, usage))
        parts.append(b"data: [DONE]\n\n")
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=self._track(parts)
        )

    async def _track(self, parts: list[bytes]) -> AsyncIterator[bytes]:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        async for part in _stream(parts[:-1]):
            yield part
        self.in_flight -= 1
        yield parts[-1]


def _generator(handler: Handler, timeout_s: float = 5.0) -> LoadGenerator:
    return LoadGenerator(
        "http://fake:8000/v1/",
        "tuner-trial-1",
        PromptFactory(1024, synthetic=True, seed=0),
        request_timeout_s=timeout_s,
        transport=httpx.MockTransport(handler),
    )


def test_streams_are_timed_and_counted() -> None:
    server = FakeVllm()
    phases: list[tuple[str, int, int]] = []
    report = _generator(server).run(
        SMALL, Slo(ttft_p99_ms=10_000), on_phase=lambda *a: phases.append(a)
    )
    assert len(report.windows) == 2 and [len(r) for r in report.records] == [6, 6]
    assert len(server.bodies) == 2 + 12
    assert server.max_in_flight == 3
    body = server.bodies[0]
    assert body["model"] == "tuner-trial-1"
    assert body["max_tokens"] == body["min_tokens"]
    assert body["ignore_eos"] is True and body["stream"] is True and body["temperature"] == 0
    assert body["stream_options"] == {"include_usage": True}
    for rec in report.records[0]:
        assert rec.ok and rec.error is None
        assert rec.output_tokens in (3, 4, 5)
        assert rec.ttft_s is not None and rec.e2e_s is not None and rec.itl_mean_s is not None
        assert 0 < rec.ttft_s < rec.e2e_s
        assert rec.itl_mean_s >= 0.0015  # the fake waits 2 ms between chunks
    w = report.windows[0]
    assert w.requests_ok == 6 and w.requests_failed == 0
    assert w.output_tokens == sum(r.output_tokens for r in report.records[0])
    assert w.prompt_tokens == sum(len(str(b["prompt"]).split()) for b in server.bodies[2:8])
    assert w.output_throughput > 0 and w.goodput == pytest.approx(w.request_throughput)
    assert report.warmup_s > 0
    assert phases == [
        ("warmup", 0, 2),
        ("warmup", 1, 2),
        ("warmup", 2, 2),
        ("measure", 0, 2),
        ("measure", 1, 2),
    ]


def test_output_tokens_fall_back_to_counting_chunks() -> None:
    report = _generator(FakeVllm(usage=False)).run(SMALL.replace(length_jitter=0.0))
    assert {r.output_tokens for rs in report.records for r in rs} == {4}
    assert {r.prompt_tokens for rs in report.records for r in rs} == {20}


def test_http_errors_past_the_limit_fail_the_load() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="CUDA out of memory")

    with pytest.raises(LoadFailure) as info:
        _generator(handler).run(SMALL)
    assert info.value.failure is FailureClass.LOAD_ERRORS
    assert "HTTP 500: CUDA out of memory" in info.value.message
    assert "warm-up" in info.value.message


def test_some_failures_are_recorded_not_raised() -> None:
    server = FakeVllm()
    calls = 0

    async def flaky(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls % 3 == 0:
            return httpx.Response(503, text="busy")
        return await server(request)

    report = _generator(flaky).run(SMALL, max_error_rate=0.5)
    failed = [r for rs in report.records for r in rs if not r.ok]
    assert len(failed) == 4
    assert all(r.error == "HTTP 503: busy" and r.ttft_s is None for r in failed)
    assert sum(w.requests_failed for w in report.windows) == 4
    assert report.windows[0].requests_ok + report.windows[0].requests_failed == 6


@pytest.mark.parametrize(
    ("parts", "needle"),
    [
        ([_event(" t1"), _event(" t2")], "ended before [DONE]"),
        ([_event(" t1"), b'data: {"error": {"message": "engine dead"}}\n\n'], "engine dead"),
        ([_event(" t1"), b"data: {not json\n\n"], "malformed"),
    ],
)
def test_bad_streams_are_failed_records(parts: list[bytes], needle: str) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return _sse([*parts, b"data: [DONE]\n\n"] if "error" in needle else parts)

    with pytest.raises(LoadFailure, match="warm-up") as info:
        _generator(handler).run(SMALL)
    assert needle in info.value.message


def test_broken_connection_is_a_failed_record() -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield _event(" t1")
        raise httpx.ReadError("connection reset by peer")

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=broken())

    with pytest.raises(LoadFailure) as info:
        _generator(handler).run(SMALL)
    assert "ReadError: connection reset by peer" in info.value.message


def test_a_request_past_its_timeout_fails() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        return _sse([_event(" t1"), b"data: [DONE]\n\n"], gap_s=5.0)

    t = time.perf_counter()
    with pytest.raises(LoadFailure, match=r"timed out after 0\.05 s"):
        _generator(slow, timeout_s=0.05).run(SMALL)
    assert time.perf_counter() - t < 2.0


def test_abort_cancels_outstanding_requests() -> None:
    cancelled = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal cancelled
        try:
            while True:
                await asyncio.sleep(0.01)
                yield _event(" t1")
        except asyncio.CancelledError:
            cancelled += 1
            raise

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=endless())

    t = time.perf_counter()
    checks = 0

    def should_abort() -> bool:
        nonlocal checks
        checks += 1
        return checks > 1

    with pytest.raises(LoadFailure) as info:
        _generator(handler).run(SMALL.replace(warmup_requests=5), should_abort=should_abort)
    assert info.value.failure is FailureClass.CRASHED
    assert "aborted with 5 of 5 requests outstanding" in info.value.message
    assert cancelled == SMALL.concurrency  # the two still queued never started
    assert time.perf_counter() - t < 2.0


def test_poisson_arrivals_start_on_schedule() -> None:
    server = FakeVllm()
    w = SMALL.replace(request_rate=50.0, concurrency=6, warmup_requests=0, windows=1)
    report = _generator(server).run(w)
    starts = [r.start_s for r in report.records[0]]
    planned = [p.arrival_s for p in plan_requests(w, 6, seed=1)]  # window 1 uses seed 1
    assert all(a is not None and s >= a - 0.001 for s, a in zip(starts, planned, strict=True))
    assert starts[0] < 0.05
    assert starts == sorted(starts)
    assert starts[-1] > 0.02  # spread out, not all at once


def test_bad_settings_are_rejected_before_any_request() -> None:
    server = FakeVllm()
    with pytest.raises(ValueError, match="max_error_rate"):
        _generator(server).run(SMALL, max_error_rate=2.0)
    with pytest.raises(UsageError, match="concurrency"):
        _generator(server).run(SMALL.replace(concurrency=0))
    assert server.bodies == []
