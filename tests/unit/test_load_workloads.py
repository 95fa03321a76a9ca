"""Workload presets, trace loading and request planning."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tuner.domain import Workload
from tuner.errors import UsageError
from tuner.load.workloads import WORKLOADS, get_workload, plan_requests


def test_presets_have_the_promised_shapes() -> None:
    assert set(WORKLOADS) >= {"chat", "rag", "code", "seed-bench", "smoke"}
    chat = WORKLOADS["chat"]
    assert (chat.prompt_tokens, chat.output_tokens, chat.concurrency) == (512, 256, 16)
    assert chat.shared_prefix_tokens == 128
    bench = WORKLOADS["seed-bench"]
    assert (bench.prompt_tokens, bench.output_tokens, bench.concurrency) == (512, 256, 8)
    assert bench.length_jitter == 0
    smoke = WORKLOADS["smoke"]
    assert (smoke.prompt_tokens, smoke.shared_prefix_tokens, smoke.output_tokens) == (128, 32, 64)
    assert (smoke.requests_per_window, smoke.windows, smoke.warmup_requests) == (48, 3, 8)
    for name, w in WORKLOADS.items():
        assert w.name == name
        assert w.windows >= 3, "fewer windows give no usable interval"
        plan_requests(w, 4, seed=1)  # every preset is a valid plan


def test_get_workload_by_name_and_unknown_name() -> None:
    assert get_workload("rag") is WORKLOADS["rag"]
    with pytest.raises(UsageError) as info:
        get_workload("chatt")
    text = str(info.value)
    assert "chatt" in text and "seed-bench" in text and "trace:" in text


def test_plan_is_deterministic_and_stays_within_jitter() -> None:
    w = WORKLOADS["chat"]
    plan = plan_requests(w, 500, seed=3)
    assert plan == plan_requests(w, 500, seed=3)
    assert plan != plan_requests(w, 500, seed=4)
    for p in plan:
        assert p.shared_prefix_tokens == 128
        assert p.arrival_s is None
        assert 128 + 288 <= p.prompt_tokens <= 128 + 480  # own part 384 +- 25 %
        assert 192 <= p.output_tokens <= 320
        assert p.prompt_tokens + p.output_tokens <= w.max_request_tokens
    mean_prompt = sum(p.prompt_tokens for p in plan) / len(plan)
    assert abs(mean_prompt - 512) < 10
    assert len({p.prompt_tokens for p in plan}) > 50


def test_zero_jitter_gives_exact_lengths_and_tiny_means_stay_positive() -> None:
    plan = plan_requests(WORKLOADS["seed-bench"], 20, seed=1)
    assert {(p.prompt_tokens, p.output_tokens) for p in plan} == {(512, 256)}
    tiny = Workload(name="tiny", prompt_tokens=1, output_tokens=1, length_jitter=0.9)
    assert all(p.prompt_tokens >= 1 and p.output_tokens >= 1 for p in plan_requests(tiny, 50, 0))


def test_poisson_arrivals_have_the_requested_rate() -> None:
    w = WORKLOADS["seed-bench"].replace(request_rate=10.0)
    arrivals = [p.arrival_s for p in plan_requests(w, 2000, seed=1)]
    assert all(a is not None for a in arrivals)
    times = [a for a in arrivals if a is not None]
    assert times == sorted(times)
    rate = len(times) / times[-1]
    assert 9.0 < rate < 11.0
    # Exactly the rate labelled, whatever the seed and however few the requests, as `vllm bench
    # serve` scales its gaps: 64 requests with seed 1 offered 13 % more, at every rung alike.
    for count, seed in ((64, 1), (100, 2), (7, 3)):
        times = [p.arrival_s or 0.0 for p in plan_requests(w, count, seed=seed)]
        assert times == sorted(times)
        assert count / times[-1] == pytest.approx(10.0, rel=1e-12)
    gaps = np.diff([p.arrival_s or 0.0 for p in plan_requests(w, 2000, seed=1)])
    assert 0.9 < np.std(gaps) / np.mean(gaps) < 1.1  # still exponential: CV 1


def test_poisson_arrivals_are_timed_as_vllm_bench_serve_times_them() -> None:
    """vLLM's bench draws a gap before every request, the first included, and scales them so
    that the last is sent at n / rate. tuner sent the first at 0 and the last at
    (n - 1) / rate: it offered n / (n - 1) of the rate labelled, 3 % more for 32 requests."""
    w = WORKLOADS["seed-bench"].replace(request_rate=8.0)
    for count, seed in ((32, 1), (5, 2)):
        times = [p.arrival_s or 0.0 for p in plan_requests(w, count, seed=seed)]
        assert 0.0 < times[0] < times[-1]  # the first waits its own gap
        assert times[-1] == pytest.approx(count / 8.0, rel=1e-12)
    assert [p.arrival_s for p in plan_requests(w, 1, seed=1)] == [pytest.approx(1 / 8.0)]


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"shared_prefix_tokens": 512}, "shared_prefix_tokens"),
        ({"length_jitter": 1.5}, "length_jitter"),
        ({"request_rate": 0.0}, "request_rate"),
    ],
)
def test_invalid_workloads_are_usage_errors(changes: dict[str, object], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        plan_requests(WORKLOADS["chat"].replace(**changes), 1, seed=0)


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f"trace:{path}"


def test_trace_loads_sorts_and_cycles(tmp_path: Path) -> None:
    rows = [
        {"prompt_tokens": 100, "output_tokens": 10, "arrival_s": 2.0},
        {"prompt_tokens": 300, "output_tokens": 30, "arrival_s": 1.0},
        {"prompt_tokens": 200, "output_tokens": 20, "arrival_s": 0.0},
    ]
    w = get_workload(_write(tmp_path / "t.jsonl", [json.dumps(r) for r in rows] + [""]))
    assert w.trace is not None and len(w.trace) == 3
    assert (w.prompt_tokens, w.output_tokens) == (200, 20)
    assert w.requests_per_window == 3
    assert w.max_request_tokens == 330
    plan = plan_requests(w, 7, seed=5)
    assert [p.prompt_tokens for p in plan] == [200, 300, 100, 200, 300, 100, 200]
    # Cycles follow one another one mean gap (1 s) apart: 0 1 2 | 3 4 5 | 6.
    assert [p.arrival_s for p in plan] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"prompt_tokens": 5, "output_tokens": 5}', "arrival_s"),
        ('{"prompt_tokens": 0, "output_tokens": 5, "arrival_s": 0}', "prompt_tokens"),
        ('{"prompt_tokens": 5, "output_tokens": 2.5, "arrival_s": 0}', "output_tokens"),
        ('{"prompt_tokens": 5, "output_tokens": 5, "arrival_s": -1}', "arrival_s"),
    ],
)
def test_bad_trace_lines_name_the_line(tmp_path: Path, line: str, needle: str) -> None:
    good = '{"prompt_tokens": 5, "output_tokens": 5, "arrival_s": 0}'
    name = _write(tmp_path / "bad.jsonl", [good, "", line])
    with pytest.raises(UsageError, match=needle) as info:
        get_workload(name)
    assert "bad.jsonl:3" in str(info.value)


def test_missing_or_empty_trace_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read trace"):
        get_workload(f"trace:{tmp_path / 'nope.jsonl'}")
    with pytest.raises(UsageError, match="no requests"):
        get_workload(_write(tmp_path / "empty.jsonl", [""]))


def test_conversations_refuse_a_request_rate_they_would_not_follow() -> None:
    """multi-turn planned every conversation as a closed loop whatever the rate: a run at
    2 req/s and one at 200 req/s sent the same burst, each labelled with its rate."""
    from tuner.load.workloads import check_shapes

    turns = WORKLOADS["multi-turn"]
    for changes in ({"request_rate": 2.0}, {"rate_ladder": (2.0, 200.0)}):
        with pytest.raises(UsageError) as info:
            check_shapes(turns.replace(**changes))
        assert "conversations of 4 turns are paced by their streams and think time" in str(
            info.value
        )
        assert "--concurrency with tuner load" in (info.value.hint or "")
    with pytest.raises(UsageError, match="request rate"):
        check_shapes(WORKLOADS["chat-heavy"].replace(turns=2))  # its 60 req/s
    with pytest.raises(UsageError, match="request rate"):  # each point's plan, too
        plan_requests(turns.replace(request_rate=2.0), 8, seed=1)
    # Streams set the load: a concurrency ladder's points drop the preset's rate.
    check_shapes(WORKLOADS["chat-heavy"].replace(turns=2, concurrency_ladder=(4, 16)))
    check_shapes(turns.replace(concurrency_ladder=(4, 16)))
    check_shapes(turns.replace(turns=1, request_rate=2.0))


def test_a_think_time_past_any_float_is_refused_not_a_crash() -> None:
    """The API's fuzzing sent turns = 25,646 and think_time_s = 6.5e307: the window's span
    overflowed while its message was written (a 500). An integer past any float did too."""
    import dataclasses

    from tuner.load.workloads import check_shapes

    base = WORKLOADS["multi-turn"]
    for turns, think in ((25_646, 6.539468903548053e307), (3, 10**400)):
        with pytest.raises(UsageError, match="think"):
            check_shapes(dataclasses.replace(base, turns=turns, think_time_s=think))
