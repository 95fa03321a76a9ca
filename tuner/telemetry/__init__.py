"""Telemetry: GPU memory through NVML, host RSS through psutil, vLLM's Prometheus metrics.

:class:`TelemetryProbe` is what a trial runner uses; the pieces are usable on their own.
"""

from tuner.telemetry.host import ProcessTreeRssSampler, host_memory
from tuner.telemetry.nvml import DetectedGpu, GpuMemorySampler, detect_gpus, system_info
from tuner.telemetry.probe import TelemetryProbe
from tuner.telemetry.prometheus import MetricsPoller, parse_text, scrape, summarize_vllm

__all__ = [
    "DetectedGpu",
    "GpuMemorySampler",
    "MetricsPoller",
    "ProcessTreeRssSampler",
    "TelemetryProbe",
    "detect_gpus",
    "host_memory",
    "parse_text",
    "scrape",
    "summarize_vllm",
    "system_info",
]
