"""Telemetry: GPU memory and utilisation through NVML, host RSS and CPU use through psutil,
vLLM's Prometheus metrics.

:class:`TelemetryProbe` is what a trial runner uses; the pieces are usable on their own.
"""

from tuner.telemetry.host import (
    ENGINE_MARKERS,
    ProcessTreeCpuSampler,
    ProcessTreeRssSampler,
    is_engine_core,
)
from tuner.telemetry.nvml import (
    DetectedGpu,
    GpuMemorySampler,
    GpuUtilizationSampler,
    detect_gpus,
)
from tuner.telemetry.probe import TelemetryProbe
from tuner.telemetry.prometheus import MetricsPoller, parse_text, scrape, summarize_vllm

__all__ = [
    "ENGINE_MARKERS",
    "DetectedGpu",
    "GpuMemorySampler",
    "GpuUtilizationSampler",
    "MetricsPoller",
    "ProcessTreeCpuSampler",
    "ProcessTreeRssSampler",
    "TelemetryProbe",
    "detect_gpus",
    "is_engine_core",
    "parse_text",
    "scrape",
    "summarize_vllm",
]
