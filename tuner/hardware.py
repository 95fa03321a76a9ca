"""Checks the ``--gpu`` a user asked for against what this machine really has."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from pathlib import Path

from tuner.catalog.gpus import GPUS, match_detected
from tuner.domain import GpuProfile
from tuner.errors import HardwareMismatch
from tuner.runner import Hardware
from tuner.telemetry.nvml import DetectedGpu


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def describe(detected: Sequence[DetectedGpu]) -> str:
    if not detected:
        return f"no NVIDIA GPU (NVML found none; CPU: {cpu_name()})"
    names = ", ".join(f"{g.name} ({g.memory_total_bytes / 1024**3:.0f} GiB)" for g in detected)
    return f"{len(detected)} GPU(s): {names}"


def check_hardware(profile: GpuProfile, detected: Sequence[DetectedGpu]) -> Hardware:
    """The hardware trials will run on, or HardwareMismatch naming what was found instead."""
    if profile.is_cpu:
        return Hardware(name=f"cpu: {cpu_name()}", is_gpu=False)
    matching = [g for g in detected if match_detected(profile, [g.name])]
    if not matching:
        here = describe(detected)
        options = "--gpu cpu to tune CPU vLLM here" if not detected else _suggest(detected)
        raise HardwareMismatch(
            f"--gpu {profile.name} asks for an {profile.display_name}, but this machine has {here}",
            hint=f"run tuner on a machine with an {profile.display_name}, or use {options}",
        )
    gpu = matching[0]
    return Hardware(
        name=gpu.name,
        uuid=gpu.uuid,
        driver_version=gpu.driver_version,
        cuda_version=gpu.cuda_driver_version,
        is_gpu=True,
    )


def _suggest(detected: Sequence[DetectedGpu]) -> str:
    names = [p.name for p in GPUS.values() if any(match_detected(p, [g.name]) for g in detected)]
    return f"--gpu {names[0]} (the GPU found here)" if names else "--gpu cpu"
