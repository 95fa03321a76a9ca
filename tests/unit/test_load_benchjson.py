"""vLLM's ``bench serve`` result format from hand-made records, every number worked out by hand
(vLLM 0.32's ``calculate_metrics``: TPOT per request, ITL pooled, population std, linear
percentiles, goodput on TTFT/TPOT/E2EL, failed requests with output length 0)."""

from __future__ import annotations

import json
import math
from datetime import datetime

import pytest

from tuner.domain import ClientHealth, RequestRecord, Slo
from tuner.load.benchjson import (
    PER_REQUEST_FIELDS,
    bench_result,
    benchmark_metrics,
    finite,
    goodput_bounds,
    percentile_key,
    result_filename,
    summary,
)

# ok, 4 tokens: TTFT 100 ms, gaps 100/100/100 ms, E2EL 400 ms, TPOT (400-100)/3 = 100 ms
R1 = RequestRecord(True, 10, 4, 0.0, 0.1, 0.4, (0.1, 0.1, 0.1))
# ok, 2 tokens: TTFT 200 ms, one gap of 300 ms, E2EL 500 ms, TPOT 300/1 = 300 ms
R2 = RequestRecord(True, 10, 2, 0.5, 0.2, 0.5, (0.3,))
# ok, 1 token: TTFT = E2EL = 300 ms, no gap, no TPOT sample (TPOT 0 for goodput)
R3 = RequestRecord(True, 20, 1, 1.0, 0.3, 0.3, ())
# failed after 3 chunks: output length 0 for vLLM, no sample anywhere
R4 = RequestRecord(False, 10, 3, 1.2, None, None, (), error="HTTP 500: boom")
RECORDS = (R1, R2, R3, R4)
SQRT_20000_3 = math.sqrt(20000 / 3)  # std of (100, 200, 300)

VLLM_KEYS = (
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
    "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls",
    "latencies", "start_times", "errors", "max_output_tokens_per_s", "max_concurrent_requests",
    "rtfx",
    *(f"{stat}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
      for stat in ("mean", "median", "std", "p50", "p90", "p99")),
)  # fmt: skip


def test_counts_and_throughputs_as_vllm_counts_them() -> None:
    m = benchmark_metrics(RECORDS, 2.0)
    assert m["completed"] == 3 and m["failed"] == 1
    assert m["total_input_tokens"] == 40  # successful requests only
    assert m["output_lens"] == [4, 2, 1, 0]  # the failed request's 3 chunks count as 0
    assert m["total_output_tokens"] == 7
    assert m["duration"] == 2.0
    assert m["request_throughput"] == pytest.approx(1.5)
    assert m["output_throughput"] == pytest.approx(3.5)
    assert m["total_token_throughput"] == pytest.approx(23.5)
    assert m["request_goodput"] is None  # no bounds


def test_latency_statistics_ttft_tpot_pooled_itl_e2el() -> None:
    m = benchmark_metrics(RECORDS, 2.0)
    expected = {
        # TTFT per ok request: 100, 200, 300
        "ttft": (200.0, 200.0, SQRT_20000_3, 200.0, 280.0, 298.0),
        # TPOT per ok request with > 1 token: 100, 300 (R3 has none)
        "tpot": (200.0, 200.0, 100.0, 200.0, 280.0, 298.0),
        # ITL pooled over every gap: 100, 100, 100, 300 -> mean 150, std sqrt(7500);
        # P90 at index 2.7 = 100 + 0.7 * 200, P99 at 2.97 = 100 + 0.97 * 200
        "itl": (150.0, 100.0, math.sqrt(7500), 100.0, 240.0, 294.0),
        # E2EL per ok request: 400, 500, 300
        "e2el": (400.0, 400.0, SQRT_20000_3, 400.0, 480.0, 498.0),
    }
    for metric, values in expected.items():
        got = [m[f"{stat}_{metric}_ms"] for stat in ("mean", "median", "std", "p50", "p90", "p99")]
        assert got == pytest.approx(values), metric


def test_goodput_checks_ttft_tpot_and_e2el_per_request() -> None:
    # R1 meets all three; R2's TPOT (300) and R3's TTFT (300) break them; R4 failed.
    all_three = {"ttft": 250.0, "tpot": 150.0, "e2el": 450.0}
    assert benchmark_metrics(RECORDS, 2.0, goodput=all_three)["request_goodput"] == 0.5
    # One output token is TPOT 0: R3 meets any TPOT bound.
    assert benchmark_metrics(RECORDS, 2.0, goodput={"tpot": 150.0})["request_goodput"] == 1.0
    # Bounds are inclusive (vLLM: slo >= value): R2's E2EL of exactly 500 ms is good.
    assert benchmark_metrics(RECORDS, 2.0, goodput={"e2el": 500.0})["request_goodput"] == 1.5
    assert benchmark_metrics(RECORDS, 2.0, goodput={"e2el": 450.0})["request_goodput"] == 1.0
    with pytest.raises(ValueError, match="itl"):
        benchmark_metrics(RECORDS, 2.0, goodput={"itl": 50.0})


def test_slo_as_goodput_bounds() -> None:
    assert goodput_bounds(None) == {} and goodput_bounds(Slo()) == {}
    slo = Slo(ttft_p99_ms=500, itl_p99_ms=50, e2e_p99_ms=10_000)
    assert goodput_bounds(slo) == {"ttft": 500, "tpot": 50, "e2el": 10_000}
    assert goodput_bounds(Slo(itl_p99_ms=50)) == {"tpot": 50}


def test_per_request_arrays_with_vllm_defaults_for_failures() -> None:
    m = benchmark_metrics(RECORDS, 2.0)
    assert m["input_lens"] == [10, 10, 20, 10]
    assert m["ttfts"] == [0.1, 0.2, 0.3, 0.0]
    assert m["latencies"] == [0.4, 0.5, 0.3, 0.0]
    assert m["itls"] == [[0.1, 0.1, 0.1], [0.3], [], []]
    assert m["start_times"] == [0.0, 0.5, 1.0, 1.2]
    assert m["errors"] == ["", "", "", "HTTP 500: boom"]
    assert all(len(m[f]) == len(RECORDS) for f in PER_REQUEST_FIELDS)


def test_peak_tokens_and_running_requests_per_second() -> None:
    # Tokens at 0.1, 0.3, 0.5 s and 0.75, 1.25 s: four in the first second, one in the next;
    # both requests run during the first second.
    a = RequestRecord(True, 5, 3, 0.0, 0.1, 0.5, (0.2, 0.2))
    b = RequestRecord(True, 5, 2, 0.25, 0.5, 1.0, (0.5,))
    m = benchmark_metrics([a, b], 1.25)
    assert m["max_output_tokens_per_s"] == 4.0
    assert m["max_concurrent_requests"] == 2


def test_percentile_keys_as_vllm_names_them() -> None:
    assert percentile_key(99, "ttft") == "p99_ttft_ms"
    assert percentile_key(99.9, "itl") == "p99.9_itl_ms"
    m = benchmark_metrics(RECORDS, 2.0, percentiles=(25, 99.9))
    assert m["p25_ttft_ms"] == pytest.approx(150.0)
    assert m["p99.9_itl_ms"] == pytest.approx(100 + 0.997 * 200)  # index 0.999 * 3
    assert "p99_ttft_ms" not in m


def test_all_failed_gives_null_statistics_and_strict_json() -> None:
    failed = [RequestRecord(False, 8, 0, 0.0, None, None, (), error="timed out after 5 s")] * 2
    health = ClientHealth(0.2, 1.0, 2.0, float("nan"), 2)  # host CPU unknown: NaN
    result = bench_result(failed, 5.0, model="m", concurrency=2, request_rate=None, client=health)
    assert result["completed"] == 0 and result["failed"] == 2
    assert result["total_output_tokens"] == 0 and result["output_lens"] == [0, 0]
    for metric in ("ttft", "tpot", "itl", "e2el"):
        assert result[f"mean_{metric}_ms"] is None and result[f"p99_{metric}_ms"] is None
    assert result["tuner_client"]["host_cpu"] is None
    json.dumps(result, allow_nan=False)  # raises on NaN or infinity


def test_bench_result_header_keys_and_tuner_extras() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5)
    health = ClientHealth(0.95, 30.0, 40.0, 1.5, 2, client_bound=True, notes=("saturated",))
    result = bench_result(
        RECORDS, 2.0, model="org/My Model", concurrency=16, request_rate=None,
        goodput={"ttft": 250.0}, client=health, date=when, tuner_version="9.9",
        extra={"tuner_load_point": "16 streams"},
    )  # fmt: skip
    assert list(result)[: len(VLLM_KEYS)] == list(VLLM_KEYS)
    assert [k for k in result if k not in VLLM_KEYS] == [
        "tuner_version", "tuner_goodput", "tuner_client", "tuner_load_point",
    ]  # fmt: skip
    assert result["date"] == "20260102-030405"
    assert result["backend"] == result["endpoint_type"] == "openai"
    assert result["request_rate"] == "inf" and result["max_concurrency"] == 16
    assert result["burstiness"] == 1.0 and result["num_prompts"] == 4
    assert result["request_goodput"] == 1.0  # R1 and R2 have TTFT <= 250 ms
    assert result["tuner_goodput"] == {"ttft": 250.0}
    assert result["tuner_client"]["client_bound"] is True
    assert result["tuner_client"]["notes"] == ["saturated"]
    assert result_filename(result) == "openai-infqps-concurrency16-My_Model-20260102-030405.json"
    rate = bench_result(RECORDS, 2.0, model="m", concurrency=256, request_rate=4, date=when)
    assert rate["request_rate"] == 4
    assert result_filename(rate) == "openai-4.0qps-concurrency256-m-20260102-030405.json"
    with pytest.raises(ValueError, match="tuner_"):
        bench_result(RECORDS, 2.0, model="m", concurrency=1, request_rate=None, extra={"x": 1})


def test_summary_drops_the_per_request_arrays() -> None:
    result = bench_result(RECORDS, 2.0, model="m", concurrency=4, request_rate=None)
    short = summary(result)
    assert not set(PER_REQUEST_FIELDS) & set(short)
    assert short["completed"] == 3 and "p99_itl_ms" in short


def test_finite_turns_nan_and_infinity_into_null() -> None:
    nan, inf = float("nan"), float("inf")
    assert finite({"a": [1.0, nan, {"b": inf}], "c": "inf", "d": 2}) == {
        "a": [1.0, None, {"b": None}],
        "c": "inf",
        "d": 2,
    }
