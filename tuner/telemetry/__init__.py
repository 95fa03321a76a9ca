"""Telemetry: GPU memory and utilisation through NVML, host RSS and CPU use through psutil,
vLLM's Prometheus metrics.

:class:`tuner.telemetry.probe.TelemetryProbe` is what a trial runner uses; the pieces are usable
on their own.
"""
