"""JSON encoding of domain records for tuner's tables, and decoding them back."""

from __future__ import annotations

import json
import math

from tuner.db import codec
from tuner.domain import (
    Estimate,
    LatencyStats,
    MemoryUsage,
    Provenance,
    ServerInfo,
    WindowMetrics,
)


def _latency(p99: float) -> LatencyStats:
    return LatencyStats(count=64, mean=p99 / 3, p50=p99 / 4, p90=p99 / 2, p99=p99, max=p99 * 1.5)


def _window(goodput: float | None = 1.5) -> WindowMetrics:
    return WindowMetrics(
        duration_s=12.5,
        requests_ok=63,
        requests_failed=1,
        prompt_tokens=32_768,
        output_tokens=16_384,
        request_throughput=5.04,
        output_throughput=1310.7,
        total_throughput=3932.2,
        ttft_ms=_latency(240.0),
        itl_ms=_latency(12.0),
        e2e_ms=_latency(3100.0),
        goodput=goodput,
    )


def test_encode_is_strict_json_even_for_non_finite_floats() -> None:
    encoded = codec.encode({"a": Estimate(math.nan, -math.inf, math.inf, (1.0, math.nan))})
    # allow_nan=False is what PostgreSQL's JSON parser amounts to.
    text = json.dumps(encoded, allow_nan=False)
    back = codec.decode_estimate(json.loads(text)["a"])
    assert math.isnan(back.median)
    assert back.low == -math.inf and back.high == math.inf
    assert back.values[0] == 1.0 and math.isnan(back.values[1])


def test_window_round_trips_through_json_text() -> None:
    for window in (_window(), _window(goodput=None)):
        text = json.dumps(codec.encode(window))
        assert codec.decode_window(json.loads(text)) == window


def test_metrics_memory_server_and_provenance_round_trip() -> None:
    metrics = {"output_throughput": Estimate(1300.0, 1200.0, 1400.0, (1200.0, 1300.0, 1400.0))}
    memory = MemoryUsage(
        gpu_peak_bytes={"GPU-1": 40 * 2**30},
        gpu_baseline_bytes={"GPU-1": 2**20},
        host_peak_rss_bytes=3 * 2**30,
    )
    server = ServerInfo(
        argv=("python", "-m", "vllm.entrypoints.openai.api_server", "--port", "8123"),
        env={"VLLM_LOGGING_LEVEL": "INFO"},
        port=8123,
        served_model_name="tuner-7-3",
        vllm_version="0.26.0",
        startup_s=41.2,
        effective_backend="FLASH_ATTN",
        flash_attn_version=3,
        kv_cache_tokens=1_234_567,
        max_concurrency=301.4,
    )
    prov = Provenance(
        gpu_name="NVIDIA H200",
        gpu_uuid="GPU-1",
        driver_version="580.1",
        vllm_version="0.26.0",
        model="ernie-0.3b",
        workload="chat",
        emulated=False,
        hostname="h200-1",
        tuner_version="0.1.0",
        cuda_version="13.0",
    )
    back = json.loads(json.dumps(codec.encode([metrics, memory, server, prov])))
    assert codec.decode_metrics(back[0]) == metrics
    assert codec.decode_memory(back[1]) == memory
    assert codec.decode_server(back[2]) == server
    assert codec.decode_provenance(back[3]) == prov
    assert codec.decode_server(None) is None
    assert codec.decode_provenance(None) is None


def test_decoding_ignores_fields_a_record_no_longer_has() -> None:
    data = codec.encode(_window())
    data["retired_field"] = 3
    data["ttft_ms"]["p999"] = 1.0
    assert codec.decode_window(data) == _window()
    prov = {"gpu_name": "cpu", "vllm_version": "0.32.0", "model": "m", "workload": "w"}
    # Fields added after the row was written take their defaults.
    decoded = codec.decode_provenance({**prov, "gpu_uuid": None, "driver_version": None})
    assert decoded == Provenance(
        gpu_name="cpu",
        gpu_uuid=None,
        driver_version=None,
        vllm_version="0.32.0",
        model="m",
        workload="w",
    )
