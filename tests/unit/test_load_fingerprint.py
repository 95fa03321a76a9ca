"""The workload fingerprint: a pure function of the workload's planned window."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tuner.domain import TraceRequest, Workload
from tuner.load.fingerprints import fingerprint, prefix_reuse
from tuner.load.workloads import WORKLOADS, PlannedRequest, get_workload, plan_requests

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


def test_independent_requests_reuse_only_their_system_prompt() -> None:
    w = WORKLOADS["seed-bench"].replace(shared_prefix_tokens=128)
    fp = fingerprint(w)
    assert fp.requests == 64 and fp.sessions == 0
    assert fp.prompt_tokens["p50"] == fp.prompt_tokens["p99"] == 512
    # Every request after the first repeats the 128 system tokens.
    assert fp.prefix_reuse == pytest.approx(63 * 128 / (64 * 512))
    assert fp.mean_rate is None and fp.burstiness is None
    assert "closed loop at 8 streams" in "\n".join(fp.lines())
    assert fingerprint(WORKLOADS["seed-bench"]).prefix_reuse == 0.0
    json.dumps(fp.as_dict())  # stored with the study's spec: must be JSON


def test_multi_turn_reuse_is_high_and_every_turn_carries_the_one_before() -> None:
    w = WORKLOADS["multi-turn"]
    plan = plan_requests(w, w.requests_per_window, seed=1)
    by_session: dict[str, list[PlannedRequest]] = {}
    for p in plan:
        assert p.session is not None
        by_session.setdefault(p.session, []).append(p)
    for turns in by_session.values():
        assert [p.turn for p in turns] == list(range(1, len(turns) + 1))
        for before, after in itertools.pairwise(turns):
            assert after.prompt_tokens > before.prompt_tokens + before.output_tokens
            assert after.think_s > 0
    fp = fingerprint(w)
    assert fp.sessions == len(by_session) == 32
    assert fp.prefix_reuse > 0.6
    assert fp.prefix_reuse > fingerprint(WORKLOADS["chat"]).prefix_reuse + 0.3
    assert w.max_request_tokens >= max(p.prompt_tokens + p.output_tokens for p in plan)


def test_burstiness_tells_bursts_from_poisson_and_a_constant_rate() -> None:
    poisson = fingerprint(
        WORKLOADS["seed-bench"].replace(request_rate=10.0, requests_per_window=2000)
    )
    assert poisson.burstiness == pytest.approx(1.0, abs=0.1)
    assert poisson.mean_rate == pytest.approx(10.0, rel=0.1)

    def traced(times: list[float]) -> Workload:
        rows = tuple(TraceRequest(100, 10, t) for t in times)
        return Workload("t", 100, 10, trace=rows, requests_per_window=len(rows), length_jitter=0)

    steady = fingerprint(traced([float(i) for i in range(20)]))
    assert steady.burstiness == pytest.approx(0.0) and steady.peak_rate == 1
    bursts = fingerprint(traced([b * 10 + i * 0.01 for b in range(4) for i in range(10)]))
    assert bursts.burstiness is not None and bursts.burstiness > 2
    assert bursts.peak_rate == 10


def test_prefix_reuse_counts_the_longest_earlier_match_only() -> None:
    def req(n: int, segments: tuple[tuple[str, int], ...]) -> PlannedRequest:
        return PlannedRequest(n, 1, 0, None, segments)

    plan = [
        req(100, (("a", 60), ("b", 40))),
        req(100, (("a", 60), ("c", 30))),  # repeats a's 60, then differs
        req(100, (("a", 50),)),  # the first 50 of a
        req(100, (("a", 60), ("b", 20))),  # a's 60 and b's first 20
    ]
    assert prefix_reuse(plan) == pytest.approx((60 + 50 + 80) / 400)


def test_a_trace_fingerprint_names_its_source_and_arrivals() -> None:
    fp = fingerprint(get_workload(f"mooncake:{TRACES / 'mooncake.jsonl'}"))
    assert fp.requests == 4 and fp.arrival == "trace"
    assert fp.duration_s == pytest.approx(3.0) and fp.mean_rate == pytest.approx(1.0)
    assert "mooncake trace" in fp.source
    text = "\n".join(fp.lines())
    assert "prefix reuse: 53%" in text and "burstiness" in text
