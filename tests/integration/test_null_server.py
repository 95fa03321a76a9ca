"""tuner's null server as a measuring stick: as fast as possible, and with a known schedule."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest

from tuner.domain import Workload
from tuner.load.generator import LoadGenerator
from tuner.load.prompts import PromptFactory
from tuner.runner.ports import free_port

W = Workload(
    name="null",
    prompt_tokens=8,
    output_tokens=10,
    concurrency=4,
    requests_per_window=16,
    windows=1,
    warmup_requests=0,
    length_jitter=0.0,
)


def _server(*extra: str) -> Iterator[str]:
    port = free_port("127.0.0.1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner.testing.null_server", "--port", str(port), *extra],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert "null server" in proc.stdout.readline().decode()
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()  # type: ignore[union-attr]


@pytest.fixture
def engine_url() -> Iterator[str]:
    yield from _server("--step-ms", "5", "--prefill-ms", "20")


@pytest.fixture
def null_url() -> Iterator[str]:
    yield from _server("--events-per-write", "4")


def test_the_null_server_streams_what_was_asked(null_url: str) -> None:
    report = LoadGenerator(null_url, "null", PromptFactory(1024, synthetic=True)).run(W)
    records = report.records[0]
    assert all(r.ok and r.output_tokens == 10 and r.prompt_tokens == 8 for r in records)
    assert all(len(r.itl_s) == 9 for r in records)


def test_measured_ttft_and_itl_match_the_servers_known_schedule(engine_url: str) -> None:
    report = LoadGenerator(engine_url, "null", PromptFactory(1024, synthetic=True)).run(W)
    with urllib.request.urlopen(f"{engine_url}/stats", timeout=5) as resp:
        truth = np.asarray(json.loads(resp.read())["ttft_ms"])
    assert truth.size == 16
    window = report.windows[0]
    # The server writes the first chunk 20-25 ms after arrival, then one chunk per 5 ms step.
    assert 20.0 <= float(np.median(truth)) <= 27.0
    measured = window.ttft_ms.p50
    assert float(np.median(truth)) - 1.0 <= measured <= float(np.median(truth)) + 15.0
    assert window.itl_ms.p50 == pytest.approx(5.0, abs=2.0)
    assert window.tpot_ms is not None and window.tpot_ms.p50 == pytest.approx(5.0, abs=1.5)
    assert window.client is not None and not window.client_bound
