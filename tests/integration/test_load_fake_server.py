"""The load generator over a real socket against the fake vLLM server (uvicorn in a thread)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.studykit import uvicorn_in_thread
from tuner.domain import FailureClass, Slo
from tuner.errors import LoadFailure
from tuner.load.generator import LoadGenerator
from tuner.load.prompts import PromptFactory
from tuner.load.stats import summarize
from tuner.load.workloads import WORKLOADS, plan_requests
from tuner.testing.fake_server import create_app

MODEL = "tuner-load-test"


@pytest.fixture
def base_url() -> Iterator[str]:
    # max_num_seqs below the workload's concurrency: some requests must queue in the server.
    with uvicorn_in_thread(create_app(MODEL, max_num_seqs=4, step_s=0.001)) as url:
        yield url


def test_smoke_workload_against_the_fake_server(base_url: str) -> None:
    workload = WORKLOADS["smoke"]
    prompts = PromptFactory(1024, synthetic=True, seed=workload.seed)
    report = LoadGenerator(base_url, MODEL, prompts, request_timeout_s=30).run(
        workload, Slo(ttft_p99_ms=60_000)
    )
    assert len(report.windows) == 3
    for index, (window, records) in enumerate(zip(report.windows, report.records, strict=True)):
        plan = plan_requests(workload, workload.requests_per_window, seed=index + 1)
        # The server's own usage counts equal the planned shapes: prompts have exact lengths.
        assert [r.prompt_tokens for r in records] == [p.prompt_tokens for p in plan]
        assert [r.output_tokens for r in records] == [p.output_tokens for p in plan]
        assert window.requests_ok == workload.requests_per_window
        assert window.requests_failed == 0
        assert window.goodput == pytest.approx(window.request_throughput)
    metrics = summarize(report.windows)
    assert metrics["output_throughput"].median > 0
    assert metrics["error_rate"].median == 0.0
    # 8 streams on 4 server slots: the P99 TTFT includes queueing behind whole requests.
    assert metrics["ttft_p99_ms"].median > metrics["itl_p50_ms"].median * 10

    wrong = LoadGenerator(base_url, "not-the-model", prompts, request_timeout_s=30)
    with pytest.raises(LoadFailure) as info:
        wrong.run(workload.replace(warmup_requests=2))
    assert info.value.failure is FailureClass.LOAD_ERRORS
    assert "HTTP 404" in info.value.message and "not-the-model" in info.value.message
