"""Parsing vLLM's /metrics text and summarising a trial from two scrapes."""

from __future__ import annotations

import pytest

from tuner.telemetry.prometheus import parse_text, summarize_vllm

# Modelled on vLLM 0.32 served by prometheus_client 0.26: labels model_name and engine,
# counters exposed with _total plus _created, histograms with _bucket/_sum/_count.
VLLM_METRICS = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12094.0
python_gc_objects_collected_total{generation="1"} 2771.0
python_gc_objects_collected_total{generation="2"} 511.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.234567168e+09
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tuner-7f3a"} 12.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tuner-7f3a"} 4.0
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="tuner-7f3a",reason="capacity"} 3.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tuner-7f3a",reason="deferred"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tuner-7f3a"} 0.4375
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tuner-7f3a"} 20480.0
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="tuner-7f3a"} 1.7645e+09
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tuner-7f3a"} 4096.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tuner-7f3a"} 2.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tuner-7f3a"} 20480.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tuner-7f3a"} 5120.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tuner-7f3a"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tuner-7f3a"} 77.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="tuner-7f3a"} 0.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="tuner-7f3a"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="tuner-7f3a"} 51.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tuner-7f3a"} 80.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tuner-7f3a"} 80.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tuner-7f3a"} 9.5
vllm:time_to_first_token_seconds_created{engine="0",model_name="tuner-7f3a"} 1.7645e+09
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",prefix="a \\"quoted\\", {odd}"} 1.0
"""


def test_parse_text_sums_label_sets_under_the_bare_name() -> None:
    m = parse_text(VLLM_METRICS)
    assert m["vllm:num_requests_running"] == 12.0
    assert m["vllm:kv_cache_usage_perc"] == 0.4375
    assert m["vllm:request_success_total"] == 80.0
    assert m["vllm:num_requests_waiting_by_reason"] == 4.0
    assert m["python_gc_objects_collected_total"] == 12094.0 + 2771.0 + 511.0
    assert m["process_resident_memory_bytes"] == 1234567168.0
    assert m["vllm:cache_config_info"] == 1.0  # escaped quotes, commas, braces in a value


def test_parse_text_keeps_labelled_histogram_sum_and_count() -> None:
    m = parse_text(VLLM_METRICS)
    assert m["vllm:time_to_first_token_seconds_count"] == 80.0
    assert m["vllm:time_to_first_token_seconds_sum"] == 9.5
    labelled = 'vllm:time_to_first_token_seconds_sum{engine="0",model_name="tuner-7f3a"}'
    assert m[labelled] == 9.5
    # only _sum/_count get labelled keys
    assert not any(k.startswith("vllm:num_requests_running{") for k in m)


def test_parse_text_skips_buckets_created_and_comments() -> None:
    m = parse_text(VLLM_METRICS)
    assert not any(k.endswith(("_bucket", "_created")) or "_bucket{" in k for k in m)
    assert not any(k.startswith("#") for k in m)


def test_parse_text_sorts_labels_in_labelled_keys() -> None:
    text = 'lat_count{b="2",a="1"} 3\nlat_count{a="1",b="2"} 4\n'
    assert parse_text(text) == {"lat_count": 7.0, 'lat_count{a="1",b="2"}': 7.0}


@pytest.mark.parametrize(
    "line",
    [
        "no_value",
        "bad_value abc",
        'unterminated{a="1" 3',
        "missing_quote{a=1} 3",
        "too many fields 1 2 3",
        "1starts_with_digit 3",
        'glued{a="1"}3',
        "nan_value NaN",
    ],
)
def test_parse_text_skips_malformed_lines(line: str) -> None:
    assert parse_text(f'ok 1\n{line}\nalso_ok{{x="y"}} 2 1700000000000\n') == {
        "ok": 1.0,
        "also_ok": 2.0,
    }


def test_parse_text_reads_special_floats() -> None:
    m = parse_text("up +Inf\ndown -Inf\nsci 1.5e3\n")
    assert m == {"up": float("inf"), "down": float("-inf"), "sci": 1500.0}


def test_summarize_vllm_takes_deltas_and_peaks() -> None:
    before = parse_text(VLLM_METRICS)
    after = dict(before)
    after.update(
        {
            "vllm:prefix_cache_queries_total": 20480.0 + 10000.0,
            "vllm:prefix_cache_hits_total": 4096.0 + 2500.0,
            "vllm:num_preemptions_total": 5.0,
            "vllm:prompt_tokens_total": 20480.0 + 10000.0,
            "vllm:generation_tokens_total": 5120.0 + 800.0,
            "vllm:num_requests_running": 0.0,
            "vllm:num_requests_waiting": 0.0,
            "vllm:kv_cache_usage_perc": 0.0,
        }
    )
    peaks = {
        "vllm:num_requests_running": 64.0,
        "vllm:num_requests_waiting": 9.0,
        "vllm:kv_cache_usage_perc": 0.91,
    }
    assert summarize_vllm(before, after, peaks) == {
        "kv_cache_usage_peak": 0.91,
        "requests_waiting_peak": 9.0,
        "requests_running_peak": 64.0,
        "preemptions": 3.0,
        "prompt_tokens": 10000.0,
        "generation_tokens": 800.0,
        "prefix_cache_hit_rate": 0.25,
    }


def test_summarize_vllm_understands_older_names() -> None:
    before = {
        "vllm:gpu_prefix_cache_queries_total": 100.0,
        "vllm:gpu_prefix_cache_hits_total": 0.0,
        "vllm:num_preemptions": 1.0,
        "vllm:gpu_cache_usage_perc": 0.1,
    }
    after = {
        "vllm:gpu_prefix_cache_queries_total": 300.0,
        "vllm:gpu_prefix_cache_hits_total": 150.0,
        "vllm:num_preemptions": 1.0,
        "vllm:gpu_cache_usage_perc": 0.2,
    }
    assert summarize_vllm(before, after, {"vllm:gpu_cache_usage_perc": 0.7}) == {
        "kv_cache_usage_peak": 0.7,
        "preemptions": 0.0,
        "prefix_cache_hit_rate": 0.75,
    }


def test_summarize_vllm_leaves_out_what_it_cannot_know() -> None:
    before = {"vllm:prefix_cache_queries_total": 50.0, "vllm:prefix_cache_hits_total": 10.0}
    after = {
        "vllm:prefix_cache_queries_total": 50.0,  # no queries during the load
        "vllm:prefix_cache_hits_total": 10.0,
        "vllm:prompt_tokens_total": 99.0,  # missing before: no delta
        "vllm:generation_tokens_total": 5.0,
    }
    before["vllm:generation_tokens_total"] = 20.0  # went backwards: the server restarted
    assert summarize_vllm(before, after, {}) == {}
    assert summarize_vllm({}, {}, {}) == {}


def test_parse_text_writes_labelled_keys_as_the_exposition_escapes_them() -> None:
    text = 'lat_sum{path="C:\\\\tmp",q="say \\"hi\\"",n="a\\nb"} 2\n'
    assert parse_text(text)['lat_sum{n="a\\nb",path="C:\\\\tmp",q="say \\"hi\\""}'] == 2.0


def _phase_histograms(scale: float) -> str:
    """The four request-phase histograms of vLLM, two engines each, sums times ``scale``."""
    lines = []
    for metric, base in (
        ("vllm:request_queue_time_seconds", 1.0),
        ("vllm:request_prefill_time_seconds", 2.0),
        ("vllm:request_decode_time_seconds", 5.0),
        ("vllm:request_inference_time_seconds", 7.0),
    ):
        lines.append(f"# TYPE {metric} histogram")
        for engine in ("0", "1"):
            labels = f'engine="{engine}",model_name="tuner-7f3a"'
            lines.append(f'{metric}_bucket{{{labels},le="+Inf"}} {10 * scale}')
            lines.append(f"{metric}_count{{{labels}}} {10 * scale}")
            lines.append(f"{metric}_sum{{{labels}}} {base * scale}")
    return "\n".join(lines) + "\n"


def test_parse_text_sums_histogram_sums_over_engines_under_the_bare_name() -> None:
    m = parse_text(_phase_histograms(1.0))
    assert m["vllm:request_prefill_time_seconds_sum"] == 4.0  # 2.0 from each engine
    assert m["vllm:request_inference_time_seconds_count"] == 20.0
    assert m['vllm:request_decode_time_seconds_sum{engine="1",model_name="tuner-7f3a"}'] == 5.0


def test_summarize_vllm_reports_time_spent_per_request_phase() -> None:
    before = parse_text(VLLM_METRICS + _phase_histograms(1.0))
    after = parse_text(VLLM_METRICS + _phase_histograms(3.0))
    summary = summarize_vllm(before, after, {})
    # Each sum triples: the delta is twice the "before" total over both engines.
    assert summary["queue_time_s"] == pytest.approx(4.0)
    assert summary["prefill_time_s"] == pytest.approx(8.0)
    assert summary["decode_time_s"] == pytest.approx(20.0)
    assert summary["inference_time_s"] == pytest.approx(28.0)


def test_summarize_vllm_leaves_out_phase_times_it_cannot_know() -> None:
    before = {
        "vllm:request_prefill_time_seconds_sum": 10.0,
        "vllm:request_decode_time_seconds_sum": 50.0,
    }
    after = {
        "vllm:request_prefill_time_seconds_sum": 12.5,
        "vllm:request_decode_time_seconds_sum": 40.0,  # went backwards: a restart
        "vllm:request_queue_time_seconds_sum": 3.0,  # missing before
    }
    assert summarize_vllm(before, after, {}) == {"prefill_time_s": 2.5}


def test_a_scrape_goes_straight_to_the_server_whatever_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With HTTP_PROXY set (and no NO_PROXY for 127.0.0.1) every scrape went to the proxy and
    failed: the trial kept no server metrics (KV cache, preemptions, phase times), and the
    diagnosis had nothing to read. The server, the load and the canary clients ignore it."""
    import http.server
    import threading

    from tuner.telemetry.prometheus import MetricsPoller, scrape

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"vllm:prompt_tokens_total 5.0\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        assert scrape(url, 2.0) == {"vllm:prompt_tokens_total": 5.0}
        poller = MetricsPoller(url, interval_s=60.0, timeout_s=2.0)
        poller.start()
        poller.stop()
        assert poller.scrapes >= 1
    finally:
        server.shutdown()
        server.server_close()
