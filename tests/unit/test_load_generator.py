"""The load generator over real sockets against scripted SSE servers (tests/sseserver.py)."""

from __future__ import annotations

import json
import resource
import socket
import time
from pathlib import Path

import numpy as np
import pytest
from aiohttp import web

from tests.sseserver import FakeVllm, endless, event, serving, stream
from tuner.domain import FailureClass, Slo, Workload
from tuner.errors import LoadFailure, UsageError
from tuner.load import selfcheck
from tuner.load import stream as stream_module
from tuner.load.generator import LoadGenerator
from tuner.load.prompts import PromptFactory
from tuner.load.workloads import get_workload, plan_requests

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


def _generator(url: str, timeout_s: float = 5.0) -> LoadGenerator:
    return LoadGenerator(
        url + "/v1/",
        "tuner-trial-1",
        PromptFactory(1024, synthetic=True, seed=0),
        request_timeout_s=timeout_s,
    )


def test_streams_are_timed_and_counted() -> None:
    server = FakeVllm()
    phases: list[tuple[str, int, int]] = []
    with serving(server) as url:
        report = _generator(url).run(
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
        assert rec.ttft_s is not None and rec.e2e_s is not None
        assert 0 < rec.ttft_s < rec.e2e_s
        # One gap per chunk after the first.
        assert len(rec.itl_s) == rec.output_tokens - 1
        assert rec.itl_mean_s is not None and rec.tpot_s is not None
    # On average the fake's 2 ms, pooled over the window's requests: one request's gaps alone can
    # be short on a busy machine (a chunk read late shortens the next gap; the server shares
    # this process).
    gaps = [g for rec in report.records[0] for g in rec.itl_s]
    assert sum(gaps) / len(gaps) >= 0.0015
    assert sum(r.tpot_s or 0 for r in report.records[0]) / len(report.records[0]) >= 0.0015
    w = report.windows[0]
    assert w.requests_ok == 6 and w.requests_failed == 0
    assert w.output_tokens == sum(r.output_tokens for r in report.records[0])
    assert w.prompt_tokens == sum(len(str(b["prompt"]).split()) for b in server.bodies[2:8])
    assert w.output_throughput > 0 and w.goodput == pytest.approx(w.request_throughput)
    # ITL is pooled over every gap of the window, as vLLM's benchmark pools it.
    assert w.itl_ms.count == sum(len(r.itl_s) for r in report.records[0])
    assert w.tpot_ms is not None and w.tpot_ms.count == 6
    assert w.concurrency == 3 and w.request_rate is None
    assert w.client is not None and not w.client_bound
    assert report.warmup_s > 0
    assert phases == [
        ("warmup", 0, 2),
        ("warmup", 1, 2),
        ("warmup", 2, 2),
        ("measure", 0, 2),
        ("measure", 1, 2),
    ]


def test_a_ladder_measures_each_load_point_after_one_warm_up() -> None:
    server = FakeVllm(gap_s=0.0005)
    ladder = SMALL.replace(concurrency_ladder=(4, 1, 2), windows=1, warmup_requests=3)
    with serving(server) as url:
        report = _generator(url).run(ladder)
    # Lowest load first; each window at least four requests per stream.
    assert [w.concurrency for w in report.windows] == [1, 2, 4]
    assert [len(r) for r in report.records] == [6, 8, 16]
    assert len(server.bodies) == 3 + 6 + 8 + 16
    assert server.max_in_flight == 4


def test_output_tokens_fall_back_to_counting_chunks() -> None:
    with serving(FakeVllm(usage=False)) as url:
        report = _generator(url).run(SMALL.replace(length_jitter=0.0))
    assert {r.output_tokens for rs in report.records for r in rs} == {4}
    assert {r.prompt_tokens for rs in report.records for r in rs} == {20}


def test_http_errors_past_the_limit_fail_the_load() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=500, text="CUDA out of memory")

    with serving(handler) as url, pytest.raises(LoadFailure) as info:
        _generator(url).run(SMALL)
    assert info.value.failure is FailureClass.LOAD_ERRORS
    assert "HTTP 500: CUDA out of memory" in info.value.message
    assert "warm-up" in info.value.message


def test_some_failures_are_recorded_not_raised() -> None:
    server = FakeVllm()
    calls = 0

    async def flaky(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls % 3 == 0:
            await request.read()
            return web.Response(status=503, text="busy")
        return await server(request)

    with serving(flaky) as url:
        report = _generator(url).run(SMALL, max_error_rate=0.5)
    failed = [r for rs in report.records for r in rs if not r.ok]
    assert len(failed) == 4
    assert all(r.error == "HTTP 503: busy" and r.ttft_s is None for r in failed)
    assert sum(w.requests_failed for w in report.windows) == 4
    assert report.windows[0].requests_ok + report.windows[0].requests_failed == 6


@pytest.mark.parametrize(
    ("parts", "needle"),
    [
        ([event(" t1"), event(" t2")], "ended before [DONE]"),
        ([event(" t1"), b'data: {"error": {"message": "engine dead"}}\n\n'], "engine dead"),
        ([event(" t1"), b"data: {not json}\n\n"], "malformed"),
        ([event(" t1"), b"data: [1, 2]\n\n"], "unexpected stream data"),
        ([event(" t1"), b'data: {"object":"error","message":"old style"}\n\n'], "old style"),
        # A 200 with a usage chunk and no token: it counted as a success with no TTFT, and met
        # any TTFT SLO (goodput); vLLM's benchmark fails it.
        ([event(None, {"prompt_tokens": 20, "completion_tokens": 0})], "no token before [DONE]"),
    ],
)
def test_bad_streams_are_failed_records(parts: list[bytes], needle: str) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        done = [b"data: [DONE]\n\n"] if "ended" not in needle else []
        return await stream(request, [*parts, *done])

    with serving(handler) as url, pytest.raises(LoadFailure, match="warm-up") as info:
        _generator(url).run(SMALL)
    assert needle in info.value.message


def test_a_request_ends_at_its_last_token_as_vllm_times_it() -> None:
    """E2E ran to [DONE]: a usage chunk sent 0.3 s after the last token (a busy API server)
    added 0.3 s to E2E, its P99 against the SLO and TPOT; vLLM's benchmark stops at the last
    token."""
    import asyncio

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = int(body["max_tokens"])
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(n):
            await resp.write(event(f" t{i}"))
        await asyncio.sleep(0.3)
        await resp.write(event(None, {"prompt_tokens": 20, "completion_tokens": n}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    w = SMALL.replace(length_jitter=0.0, warmup_requests=0, windows=1, requests_per_window=3)
    with serving(handler) as url:
        report = _generator(url).run(w)
    records = report.records[0]
    assert records and all(r.ok and r.e2e_s is not None for r in records)
    assert all(r.e2e_s < 0.2 for r in records if r.e2e_s is not None), records


def test_crlf_events_and_split_reads_parse_like_vllm_events() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = int(body["max_tokens"])
        text = b"".join(event(f" t{i}").replace(b"\n", b"\r\n") for i in range(n))
        text += event(None, {"prompt_tokens": 20, "completion_tokens": n}) + b"data: [DONE]\n\n"
        # Cut the bytes at awkward places: inside "\r\n", inside a JSON document.
        cuts = [text[i : i + 7] for i in range(0, len(text), 7)]
        return await stream(request, cuts, gap_s=0.0)

    with serving(handler) as url:
        report = _generator(url).run(SMALL.replace(length_jitter=0.0))
    assert all(r.ok and r.output_tokens == 4 for rs in report.records for r in rs)


def test_broken_connection_is_a_failed_record() -> None:
    async def broken(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(event(" t1"))
        assert request.transport is not None
        request.transport.abort()
        return resp

    with serving(broken) as url, pytest.raises(LoadFailure) as info:
        _generator(url).run(SMALL)
    assert "ClientPayloadError" in info.value.message or "Disconnected" in info.value.message


def test_a_refused_connection_is_a_failed_record() -> None:
    # A port bound but never listening refuses connections, and nobody else can take it.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}"
        with pytest.raises(LoadFailure) as info:
            _generator(url).run(SMALL)
    assert "ClientConnectorError" in info.value.message


def test_a_request_past_its_timeout_fails() -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        await request.read()
        return await stream(request, [event(" t1"), b"data: [DONE]\n\n"], gap_s=5.0)

    with serving(slow) as url:
        t = time.perf_counter()
        with pytest.raises(LoadFailure, match=r"timed out after 0\.05 s"):
            _generator(url, timeout_s=0.05).run(SMALL)
        assert time.perf_counter() - t < 4.0  # not the 5 s the server would take


def test_abort_cancels_outstanding_requests() -> None:
    cancelled: list[int] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        return await endless(request, cancelled)

    checks = 0

    def should_abort() -> bool:
        nonlocal checks
        checks += 1
        return checks > 1

    with serving(handler) as url:
        t = time.perf_counter()
        with pytest.raises(LoadFailure) as info:
            gen = _generator(url, timeout_s=60.0)
            gen.run(SMALL.replace(warmup_requests=5), should_abort=should_abort)
        # Ended by the abort, not by the requests' 60 s timeout (2.2 s seen beside CPU vLLM).
        assert time.perf_counter() - t < 15.0
        deadline = time.monotonic() + 5
        while len(cancelled) < SMALL.concurrency and time.monotonic() < deadline:
            time.sleep(0.01)
    assert info.value.failure is FailureClass.CRASHED
    assert "aborted with 5 of 5 requests outstanding" in info.value.message
    assert len(cancelled) == SMALL.concurrency  # the two still queued never started


def test_poisson_arrivals_start_on_schedule() -> None:
    w = SMALL.replace(request_rate=50.0, concurrency=6, warmup_requests=0, windows=1)
    with serving(FakeVllm()) as url:
        report = _generator(url).run(w)
    starts = [r.start_s for r in report.records[0]]
    planned = [p.arrival_s for p in plan_requests(w, 6, seed=1)]  # window 1 uses seed 1
    assert all(a is not None and s >= a - 0.001 for s, a in zip(starts, planned, strict=True))
    assert starts[0] < 0.05
    assert starts == sorted(starts)
    assert starts[-1] > 0.02  # spread out, not all at once
    assert report.windows[0].request_rate == 50.0


def test_bad_settings_are_rejected_before_any_request() -> None:
    server = FakeVllm()
    with serving(server) as url:
        gen = _generator(url)
        with pytest.raises(ValueError, match="max_error_rate"):
            gen.run(SMALL, max_error_rate=2.0)
        with pytest.raises(UsageError, match="concurrency"):
            gen.run(SMALL.replace(concurrency=0))
        with pytest.raises(UsageError, match="not both"):
            gen.run(SMALL.replace(concurrency_ladder=(1, 2), rate_ladder=(1.0,)))
        with pytest.raises(UsageError, match="request rate"):
            gen.run(SMALL.replace(rate_ladder=(0.0,)))
    assert server.bodies == []


def test_a_saturated_client_is_never_reported_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    """A generator throttled to ~0.3 ms of CPU per chunk cannot keep up with a server that
    sends chunks as fast as it can: its window must say so. With a core to itself it says
    "client-bound"; on a machine whose other processes take that core (CI beside CPU vLLM
    measured the throttled client at 0.39 of a core, its loop stalled 2.2 s) the same window is
    "disturbed", naming the contention it measured. Either way its throughput is never passed
    off as the server's; which of the two rules fired is asserted by the pure tests of
    ``judge`` below."""
    real = stream_module._Stream._token

    def throttled(self: stream_module._Stream, now: float) -> None:
        spin = time.perf_counter() + 0.0003
        while time.perf_counter() < spin:
            pass
        real(self, now)

    monkeypatch.setattr(stream_module._Stream, "_token", throttled)
    fast = FakeVllm(gap_s=0.0)
    w = SMALL.replace(output_tokens=200, concurrency=8, requests_per_window=24, windows=1)
    with serving(fast) as url:
        report = _generator(url).run(w.replace(warmup_requests=0, length_jitter=0.0))
    health = report.windows[0].client
    assert health is not None
    assert health.client_bound or health.disturbed, health
    if health.client_bound:
        assert health.client_cpu >= selfcheck.BUSY_FOR_LAG
        assert any("client" in n for n in health.notes)
    else:  # starved by others: the contention is what the notes name
        assert any("contention" in n or "other processes" in n for n in health.notes), health


@pytest.mark.parametrize(
    ("cpu", "lag_ms", "bound", "disturbed"),
    [
        (0.95, 0.0, True, False),  # a core's worth of CPU: saturated
        (0.6, 50.0, True, False),  # busy and late: its own work delays it
        (0.2, 50.0, False, True),  # late while idle: someone else has the core
        (0.2, 1.0, False, False),  # idle and punctual: clean
    ],
)
def test_judge_tells_a_saturated_client_from_a_starved_one(
    cpu: float, lag_ms: float, bound: bool, disturbed: bool
) -> None:
    lags = np.full(200, lag_ms)
    health = selfcheck.judge(client_cpu=cpu, lags_ms=lags, reading=None, cores=2)
    assert (health.client_bound, health.disturbed) == (bound, disturbed), health


def test_a_client_starved_by_the_server_it_measures_says_so() -> None:
    # CPU vLLM on 2 cores: the host's cores busy, the server's processes all but all of it.
    late = np.full(200, 300.0)
    mine = selfcheck.NeighbourReading(host_cpu=1.98, others_cpu=0.01)
    health = selfcheck.judge(client_cpu=0.08, lags_ms=late, reading=mine, cores=2)
    assert health.disturbed and not health.client_bound
    assert health.notes == (
        "client event loop late by 300 ms at P99 while idle: CPU contention with the server's "
        "own processes (2.0 of 2 cores busy)",
    )
    # A late loop on a host with cores to spare is not the server's doing.
    idle = selfcheck.NeighbourReading(host_cpu=3.0, others_cpu=0.2)
    health = selfcheck.judge(client_cpu=0.08, lags_ms=late, reading=idle, cores=16)
    assert health.notes == ("client event loop late by 300 ms at P99 while idle: CPU contention",)
    others = selfcheck.NeighbourReading(host_cpu=1.98, others_cpu=1.2)
    health = selfcheck.judge(client_cpu=0.08, lags_ms=late, reading=others, cores=2)
    assert health.notes == (
        "client event loop late by 300 ms at P99 while idle: CPU contention",
        "other processes used 1.2 of 2 cores",
    )


def test_judge_calls_busy_neighbours_disturbed() -> None:
    reading = selfcheck.NeighbourReading(host_cpu=1.9, others_cpu=1.2, other_gpu_processes=0)
    health = selfcheck.judge(client_cpu=0.3, lags_ms=np.zeros(10), reading=reading, cores=2)
    assert health.disturbed and not health.client_bound
    assert any("other processes used 1.2 of 2 cores" in n for n in health.notes)


def test_an_idle_client_against_a_slow_server_is_not_flagged() -> None:
    with serving(FakeVllm(gap_s=0.01)) as url:
        report = _generator(url).run(SMALL.replace(windows=1, warmup_requests=0))
    health = report.windows[0].client
    assert health is not None and not health.client_bound
    assert health.client_cpu < 0.9


def test_timed_arrivals_held_back_by_the_in_flight_cap_are_measured_and_said() -> None:
    """Requests with arrival times (Poisson, a trace's) that found every slot of the workload's
    concurrency cap taken waited in the client, then were timed from their late send: a
    server that did not keep up read as one that did, with nothing to say so. The wait is
    measured (not a verdict on the client: the server's backlog at that cap), and `tuner
    load` says what it means. A closed loop, and a trace whose rows all came at 0 (a closed
    loop too), wait for a slot by design: nothing is recorded for them."""
    from tuner.cli.load import warnings
    from tuner.load import PointResult

    burst = SMALL.replace(windows=1, warmup_requests=0, request_rate=500.0)
    with serving(FakeVllm(gap_s=0.01)) as url:
        capped = _generator(url).run(burst.replace(concurrency=1)).windows[0]
        roomy = _generator(url).run(burst.replace(concurrency=6)).windows[0]
        closed = _generator(url).run(SMALL.replace(windows=1, warmup_requests=0)).windows[0]
    assert capped.client is not None and not capped.client_bound
    assert capped.client.held_p99_ms >= 100  # five requests queued behind ~40 ms each
    assert roomy.client is not None and roomy.client.held_p99_ms < selfcheck.LAG_BOUND_MS
    assert closed.client is not None and closed.client.held_p99_ms == 0.0
    said = warnings(PointResult("500 req/s", capped, {"failed": 0, "errors": []}, {}))
    assert len(said) == 1 and said[0].startswith(
        "500 req/s: arrivals waited for one of the 1 requests in flight"
    )
    assert "leaves the wait out" in said[0] and "--workload-set concurrency=N" in said[0]
    assert "--max-concurrency N with --request-rate" in said[0]
    # A replay at the trace's times: its cap is --concurrency (--workload-set concurrency was
    # refused alongside it, or ignored).
    replay = PointResult("trace", capped, {"failed": 0, "errors": [], "tuner_arrival": "trace"})
    (line,) = warnings(replay)
    assert "raise the cap (--concurrency N)" in line and "--workload-set" not in line
    assert warnings(PointResult("500 req/s", roomy, {"failed": 0, "errors": []}, {})) == []


def test_a_trace_replayed_at_its_own_times_caps_nothing_in_flight_unless_told(
    tmp_path: Path,
) -> None:
    """A trace replayed at its own times kept at most 64 requests in flight, where `vllm bench
    serve` sends each at its time unless given --max-concurrency: 80 rows arriving within 80 ms
    at a server that takes a second over each were 64 at once, the rest held back in the
    client. ``concurrency`` is the cap when given."""
    trace = tmp_path / "burst.jsonl"
    rows = [{"prompt_tokens": 8, "output_tokens": 2, "arrival_s": i / 1000} for i in range(80)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for given, most in (({}, 80), ({"concurrency": 40}, 40)):
        server = FakeVllm(gap_s=0.25)
        workload = get_workload(f"tuner:{trace}", {"windows": 1, "warmup_requests": 0, **given})
        with serving(server) as url:
            _generator(url).run(workload)
        assert server.max_in_flight == most


def test_the_client_holds_a_socket_for_each_request_in_flight() -> None:
    """At a soft limit on open files below the requests in flight (Linux's default is 1024;
    2,000 of a trace's requests were in flight at once), every further open failed (EMFILE):
    the generator raises its soft limit, up to the hard one, to hold them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wide = SMALL.replace(concurrency=150, requests_per_window=150, windows=1, warmup_requests=0)
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, hard))
    try:
        with serving(FakeVllm(gap_s=0.05)) as url:
            report = _generator(url).run(wide)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert all(r.ok for r in report.records[0])


def test_a_hard_limit_below_a_windows_requests_lets_the_run_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An uncapped replay asks for a socket per request of its window (23,000 rows of an hour's
    trace, tens in flight at a time): past the hard limit the soft one is raised to it and the
    run goes on, not refused."""
    from tuner.load import generator

    set_to: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))
    monkeypatch.setattr(resource, "setrlimit", lambda _, limits: set_to.append(limits))
    assert generator._allow_open_files(23_000) == 4096 - generator._SPARE_FILES
    assert set_to == [(4096, 4096)]


@pytest.mark.parametrize("rate", [None, 500.0])
def test_requests_in_flight_are_held_to_what_the_open_file_limit_holds(
    monkeypatch: pytest.MonkeyPatch, rate: float | None
) -> None:
    """Past the hard limit on open files an uncapped run kept a socket per request in flight
    until every further open failed: a module's import in the client's self-check raised
    EMFILE and `tuner load` died with a traceback. The requests in flight are held to what the
    limit holds, and the window says the client was the limit."""
    from tuner.load import generator

    monkeypatch.setattr(generator, "_allow_open_files", lambda sockets: min(sockets, 2))
    server = FakeVllm(gap_s=0.02)
    wide = SMALL.replace(concurrency=6, requests_per_window=12, windows=1, warmup_requests=0)
    with serving(server) as url:
        window = _generator(url).run(wide.replace(request_rate=rate)).windows[0]
    assert server.max_in_flight == 2 and window.requests_ok == 12
    assert window.client is not None and window.client_bound
    assert "open files for 2 requests in flight" in "; ".join(window.client.notes)
    assert window.client.files_room == 2  # a field, stored with the window, not a note's text
    # Said as the client's files, not as a cap to raise or a server that fell behind.
    from tuner.cli.load import warnings
    from tuner.load import PointResult

    (said,) = warnings(PointResult("p", window, {"failed": 0, "errors": []}))
    assert "raise the hard limit on open files (ulimit -Hn)" in said
    assert "arrivals waited" not in said and "--max-concurrency" not in said
    monkeypatch.undo()  # a limit that holds them all
    with serving(FakeVllm(gap_s=0.02)) as url:
        roomy = _generator(url).run(wide.replace(request_rate=rate)).windows[0]
    assert not roomy.client_bound and roomy.client is not None
    assert roomy.client.files_room is None


def test_a_wait_for_a_slot_is_no_verdict_on_the_client() -> None:
    long = selfcheck.judge(
        client_cpu=0.1, lags_ms=np.zeros(10), reading=None, cores=2,
        held_ms=np.full(50, 250.0),
    )  # fmt: skip
    assert long.held_p99_ms == 250.0
    assert not long.client_bound and not long.disturbed and long.notes == ()


def test_the_generator_keeps_no_phases_streams_after_a_run() -> None:
    """Every window's conversations were kept as prompt streams for the whole run."""
    conversations = SMALL.replace(windows=2, warmup_requests=2, turns=2, requests_per_window=4)
    with serving(FakeVllm()) as url:
        gen = _generator(url)
        report = gen.run(conversations)
    assert len(report.windows) == 2
    assert sorted(gen.prompts._streams) == [""]  # the shared prefix alone


def test_a_stop_inside_a_client_task_is_not_logged_as_a_second_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SIGTERM (taken as Ctrl-C) landing inside a task aiohttp started printed "Task exception
    was never retrieved" and 30 lines of traceback after the stop's own line (once in seven
    stops); the run's loop takes a stop there as handled. Other errors are logged as before."""
    import asyncio
    import logging

    from tuner.load.generator import quiet_stops

    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            quiet_stops(loop, {"message": "Task exception was never retrieved",
                               "exception": KeyboardInterrupt()})  # fmt: skip
            assert not caplog.records
            quiet_stops(loop, {"message": "boom", "exception": ValueError("x")})
            assert [r.getMessage() for r in caplog.records] == ["boom"]
    finally:
        loop.close()
    handlers: list[object] = []  # the handler a run's own loop has
    with serving(FakeVllm()) as url:
        _generator(url).run(SMALL, on_phase=lambda *_: handlers.append(
            asyncio.get_running_loop().get_exception_handler()))  # fmt: skip
    assert handlers and set(handlers) == {quiet_stops}
