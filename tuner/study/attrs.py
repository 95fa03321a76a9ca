"""What Optuna's own storage says about a tuner study, for optuna-dashboard and other readers:
the study's metric names (:func:`metric_names`, so the dashboard does not show "Objective
0/1/2") and each trial's user attributes (:func:`trial_attrs`), both written by the study loop.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tuner.domain import Objective, TrialResult
from tuner.scoring import objectives as scoring

# Metric key (tuner.load.stats / tuner.load.curve) -> user attribute name, with its unit.
HEADLINE_METRICS: Mapping[str, str] = {
    "output_throughput": "output_throughput_tok_s",
    "ttft_p99_ms": "ttft_p99_ms",
    "itl_p99_ms": "itl_p99_ms",
    "e2e_p99_ms": "e2e_p99_ms",
    "error_rate": "error_rate",
    "capacity_output_throughput": "capacity_output_throughput_tok_s",
    "capacity_load": "capacity_load",
}
_ARROWS = {"maximize": "↑", "minimize": "↓"}


def metric_names(objective: Objective) -> list[str]:
    """Names of the study's three objectives, in :data:`scoring.DIRECTIONS` order, e.g.
    ``output_throughput_tok_s ↑``. The capacity preset's first objective is the curve's
    capacity. Peak memory is GPU memory where the trial saw GPUs, the server's host RSS
    otherwise (a trial's ``gpu_memory_gib`` or ``host_rss_gib`` attribute says which)."""
    throughput = "capacity_output_throughput" if objective is Objective.CAPACITY else None
    keys = (HEADLINE_METRICS[throughput or "output_throughput"], "peak_memory_gib", "e2e_p99_ms")
    assert len(keys) == len(scoring.OBJECTIVE_NAMES) == len(scoring.DIRECTIONS)
    return [f"{key} {_ARROWS[d]}" for key, d in zip(keys, scoring.DIRECTIONS, strict=True)]


def trial_attrs(result: TrialResult) -> dict[str, Any]:
    """The user attributes of one told trial: tuner's status and failure class, the headline
    metrics (medians over the windows), peak memory and the attention backend the server used;
    metrics it did not measure are left out."""
    attrs: dict[str, Any] = {"tuner_status": result.status.value}
    if result.failure is not None:
        attrs["failure_class"] = result.failure.value
    for key, name in HEADLINE_METRICS.items():
        if key in result.metrics:
            attrs[name] = _number(result.metrics[key].median)
    memory = result.memory
    if memory.gpu_peak_bytes:
        attrs["gpu_memory_gib"] = _number(memory.gpu_total_peak_bytes / scoring.GIB)
    if memory.host_peak_rss_bytes is not None:
        attrs["host_rss_gib"] = _number(memory.host_peak_rss_bytes / scoring.GIB)
    server = result.server
    if server is not None and server.effective_backend:
        attrs["attention_backend"] = server.effective_backend
        if server.flash_attn_version is not None:
            attrs["flash_attn_version"] = server.flash_attn_version
    return attrs


def _number(value: float) -> float | None:
    """``value`` to six significant digits (the dashboard shows it as is); None when NaN/inf."""
    if not math.isfinite(value):
        return None
    return float(f"{value:.6g}")
