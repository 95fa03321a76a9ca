"""The runner contract: what every TrialRunner's results must satisfy.

The same checks run against the in-process fake runner, the real runner driving the fake server,
and the real runner driving real vLLM, so a fake can never drift from what the study relies on.
Each check raises AssertionError with a message saying which promise was broken.
"""

from __future__ import annotations

import math

from tuner.domain import FailureClass, TrialResult, TrialStatus
from tuner.load import CAPACITY_METRICS, load_points

REQUIRED_METRICS = (
    "request_throughput",
    "output_throughput",
    "total_throughput",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "error_rate",
)


def check_complete(result: TrialResult, *, min_windows: int = 3) -> None:
    """A measured trial: windows, positive throughput and latencies, memory, provenance."""
    assert result.status is TrialStatus.COMPLETE, (
        f"expected a complete trial, got {result.status.value} "
        f"({result.failure}): {result.failure_detail}\n{result.log_tail[-2000:]}"
    )
    assert result.failure is None
    assert len(result.windows) >= min_windows, f"only {len(result.windows)} windows"
    points = load_points(result.windows)
    per_point = {len(p.windows) for p in points}
    for name in REQUIRED_METRICS:
        assert name in result.metrics, f"metric {name} missing"
        est = result.metrics[name]
        # The fixed-load metrics summarise the windows of one load point (the headline one).
        assert len(est.values) in per_point, f"{name}: one value per window of its load point"
        assert est.low <= est.median <= est.high, f"{name}: range does not hold its median"
        assert all(math.isfinite(v) for v in est.values), f"{name}: non-finite values"
    if len(points) > 1:
        for name in CAPACITY_METRICS:
            assert name in result.metrics, f"a load curve without {name}"
        loads = {p.load for p in points} | {0.0}
        assert result.metrics["capacity_load"].median in loads, "capacity at no measured load"
    for name in ("output_throughput", "request_throughput", "ttft_p99_ms", "e2e_p99_ms"):
        assert result.metrics[name].median > 0, f"{name} must be positive"
    assert result.metrics["e2e_p99_ms"].median >= result.metrics["ttft_p99_ms"].median * 0.5
    assert result.metrics["error_rate"].median <= 0.01, "a measurement with failing requests"
    mem = result.memory.headline_bytes
    assert mem is not None and mem > 0, "peak memory was not measured"
    _check_provenance(result)
    assert result.server is not None and result.server.effective_backend, (
        "the effective attention backend was not parsed"
    )
    assert result.started_at is not None and result.finished_at is not None
    assert result.finished_at >= result.started_at


def check_stopped_early(result: TrialResult, seen: list[int], first: int) -> None:
    """A trial stopped at its first load point: PRUNED/STOPPED_EARLY with the ``first``
    windows the check saw (``seen``: the window counts it was called with) and their numbers."""
    assert seen == [first], f"the first-point check ran at {seen} windows, expected [{first}]"
    assert result.status is TrialStatus.PRUNED and result.failure is FailureClass.STOPPED_EARLY
    assert result.failure_detail, "a stop needs its reason"
    assert len(result.windows) == first, f"{len(result.windows)} windows kept, not {first}"
    assert result.metrics["output_throughput"].median > 0, "the partial numbers are kept"
    _check_provenance(result)


def check_failed(result: TrialResult, *expected: FailureClass) -> None:
    """A trial that could not be measured: its class, a detail and the log tail, no metrics."""
    assert result.status is TrialStatus.FAILED, f"expected failed, got {result.status.value}"
    assert result.failure is not None
    if expected:
        assert result.failure in expected, (
            f"failure class {result.failure.value}, expected one of "
            f"{[e.value for e in expected]}: {result.failure_detail}\n{result.log_tail[-2000:]}"
        )
    assert result.failure_detail, "a failure needs a human-readable detail"
    assert result.log_tail.strip(), "a failure needs the server's log tail"
    assert not result.metrics, "partial metrics must not be presented as results"
    _check_provenance(result)


def _check_provenance(result: TrialResult) -> None:
    assert result.provenance is not None, "no provenance"
    assert result.provenance.vllm_version, "provenance lacks the vLLM version"
    assert result.provenance.gpu_name, "provenance lacks the hardware"
    assert result.provenance.workload, "provenance lacks the workload"
    assert result.server is not None, "no server info"
