"""Scraping a real HTTP /metrics endpoint (http.server in a thread), polling it, and the probe's
whole lifecycle against it and a real child process."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tuner.telemetry.probe import TelemetryProbe
from tuner.telemetry.prometheus import MetricsPoller, scrape


def snapshot(*, running: float, waiting: float, prompt: float, hits: float, queries: float) -> str:
    labels = '{engine="0",model_name="tuner-test"}'
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{labels} {running}\n"
        f"vllm:num_requests_waiting{labels} {waiting}\n"
        f"vllm:kv_cache_usage_perc{labels} {running / 100}\n"
        f"vllm:prompt_tokens_total{labels} {prompt}\n"
        f"vllm:generation_tokens_total{labels} {prompt / 4}\n"
        f"vllm:num_preemptions_total{labels} 0.0\n"
        f"vllm:prefix_cache_hits_total{labels} {hits}\n"
        f"vllm:prefix_cache_queries_total{labels} {queries}\n"
    )


# What the server says to successive scrapes: idle, busy, idle again with counters advanced.
BEFORE = snapshot(running=0, waiting=0, prompt=1000, hits=0, queries=1000)
BUSY = snapshot(running=32, waiting=6, prompt=3000, hits=500, queries=3000)
AFTER = snapshot(running=0, waiting=0, prompt=5000, hits=1000, queries=5000)


class MetricsServer:
    """Serves ``pages`` in turn on /metrics (the last one repeats); anything else is a 404."""

    def __init__(self, pages: list[str]) -> None:
        self.pages = pages
        self.requests = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                with lock:
                    page = outer.pages[min(outer.requests, len(outer.pages) - 1)]
                    outer.requests += 1
                body = page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        # A short poll interval so that shutdown() returns at once.
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    def __enter__(self) -> MetricsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 2.0  # ThreadingHTTPServer's handler threads end just after
    while True:
        leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert not leaked, f"threads left running: {leaked}"


def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_scrape_parses_a_live_endpoint() -> None:
    with MetricsServer([BUSY]) as server:
        metrics = scrape(server.url)
        missing = scrape(server.url.replace("/metrics", "/nope"))
    assert metrics is not None
    assert metrics["vllm:num_requests_running"] == 32.0
    assert metrics["vllm:prefix_cache_hits_total"] == 500.0
    assert missing is None  # a 404 is "no metrics", not an exception


def test_scrape_of_nothing_listening_is_none() -> None:
    assert scrape(f"http://127.0.0.1:{closed_port()}/metrics", timeout_s=1.0) is None


def test_poller_summarises_first_last_and_peaks() -> None:
    with MetricsServer([BEFORE, BUSY, AFTER]) as server:
        poller = MetricsPoller(server.url, interval_s=0.01)
        with poller:
            wait_until(lambda: server.requests >= 3)
    assert poller.scrapes >= 3
    assert poller.summary() == {
        "kv_cache_usage_peak": 0.32,
        "requests_waiting_peak": 6.0,
        "requests_running_peak": 32.0,
        "preemptions": 0.0,
        "prompt_tokens": 4000.0,
        "generation_tokens": 1000.0,
        "prefix_cache_hit_rate": 0.25,
    }


def test_poller_with_unreachable_server_summarises_nothing() -> None:
    poller = MetricsPoller(f"http://127.0.0.1:{closed_port()}/metrics", interval_s=0.01)
    with poller:
        time.sleep(0.05)
    assert poller.scrapes == 0
    assert poller.summary() == {}


def test_probe_lifecycle_on_cpu() -> None:
    server_proc = subprocess.Popen(
        [sys.executable, "-c", "import time; b = bytearray(40 * 2**20); time.sleep(30)"]
    )
    try:
        with MetricsServer([BEFORE, BUSY, AFTER]) as server:
            probe = TelemetryProbe(
                gpu=False,
                metrics_url=server.url,
                rss_interval_s=0.01,
                metrics_interval_s=0.01,
            )
            with probe:
                probe.before_launch()  # no GPU: nothing to do, but allowed
                probe.attach(server_proc.pid)
                probe.start_load()
                wait_until(lambda: server.requests >= 3)
                probe.stop_load()
            memory, metrics = probe.result()
    finally:
        server_proc.kill()
        server_proc.wait(timeout=10)
    assert memory.gpu_peak_bytes == {} and memory.gpu_baseline_bytes == {}
    assert memory.host_peak_rss_bytes is not None and memory.host_peak_rss_bytes > 0
    assert memory.headline_bytes == memory.host_peak_rss_bytes
    assert metrics["prompt_tokens"] == 4000.0
    assert metrics["requests_running_peak"] == 32.0
