"""Telemetry: GPU memory, utilisation and energy through NVML, host RSS and CPU use through
psutil, vLLM's Prometheus metrics; :class:`TelemetryProbe` is what a trial runner wraps around
one server."""

from typing import TYPE_CHECKING

from tuner import face

if TYPE_CHECKING:
    from tuner.telemetry.energy import GpuEnergyMeter
    from tuner.telemetry.host import engine_tree, process_tree, since_boot
    from tuner.telemetry.interference import HostNeighbours, nvml_compute_pids
    from tuner.telemetry.nvml import DetectedGpu, Nvml, detect_gpus, local_cpus
    from tuner.telemetry.probe import TelemetryProbe

__all__ = [
    "DetectedGpu",
    "GpuEnergyMeter",
    "HostNeighbours",
    "Nvml",
    "TelemetryProbe",
    "detect_gpus",
    "engine_tree",
    "local_cpus",
    "nvml_compute_pids",
    "process_tree",
    "since_boot",
]

__getattr__, __dir__ = face(__name__)
