"""Load: workload shapes, prompts of exact token length, the streaming load generator and
the statistics of what it measured."""

from tuner.load.generator import LoadGenerator, LoadReport
from tuner.load.prompts import PromptFactory
from tuner.load.stats import (
    HIGHER_IS_BETTER,
    METRIC_NAMES,
    estimate,
    latency_stats,
    summarize,
    window_metrics,
)
from tuner.load.workloads import WORKLOADS, PlannedRequest, get_workload, plan_requests

__all__ = [
    "HIGHER_IS_BETTER",
    "METRIC_NAMES",
    "WORKLOADS",
    "LoadGenerator",
    "LoadReport",
    "PlannedRequest",
    "PromptFactory",
    "estimate",
    "get_workload",
    "latency_stats",
    "plan_requests",
    "summarize",
    "window_metrics",
]
