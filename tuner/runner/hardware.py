"""The hardware a trial runs on (:class:`Hardware`) and the check of the ``--gpu`` a user asked
for against what this machine really has."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.catalog import GPUS, match_detected
from tuner.domain import GpuProfile
from tuner.errors import HardwareMismatch
from tuner.telemetry import DetectedGpu


@dataclass(frozen=True)
class Hardware:
    """The hardware a trial runs on, for provenance (from NVML, or the CPU)."""

    name: str
    uuid: str | None = None
    index: int | None = None  # NVML index (PCI bus order): the server is pinned to it
    driver_version: str | None = None
    cuda_version: str | None = None
    is_gpu: bool = False
    emulated: bool = False
    # Emulation of a smaller GPU: its memory / this GPU's memory. Every trial's
    # --gpu-memory-utilization (vLLM's default included) is multiplied by it, so vLLM budgets
    # exactly the share of the smaller GPU's memory the configuration asks for. Compute speed
    # is this GPU's: emulation is of memory only, and results say so.
    memory_scale: float | None = None

    def device_env(self) -> dict[str, str]:
        """The environment that pins a server to this GPU: on a host with several GPUs vLLM
        would otherwise take CUDA's first (fastest first, not the one checked or measured).
        By UUID where NVML gave one: it names the same GPU in every process, whatever the
        order or the CUDA_VISIBLE_DEVICES a worker of `tuner run --parallel` was given."""
        if not self.is_gpu or (self.index is None and not self.uuid):
            return {}
        device = self.uuid or str(self.index)
        return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": device}


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


def visible_gpus(detected: Sequence[DetectedGpu], cuda_visible: str | None) -> list[DetectedGpu]:
    """The GPUs of ``detected`` that ``CUDA_VISIBLE_DEVICES`` (``cuda_visible``) leaves to tuner.

    ``None`` leaves all of them. Otherwise a comma-separated list of NVML indices (the PCI bus
    order that ``nvidia-smi`` shows; tuner launches vLLM with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
    so that CUDA counts the same way) or UUIDs (``GPU-…``, a unique prefix is enough), as CUDA
    reads it: the list ends at the first entry that names no GPU, and an empty value hides all.
    """
    if cuda_visible is None:
        return list(detected)
    chosen: list[DetectedGpu] = []
    for raw in cuda_visible.split(","):
        item = raw.strip()
        if item.isdigit():
            found = [g for g in detected if g.index == int(item)]
        elif item.startswith("GPU-"):
            found = [g for g in detected if g.uuid.startswith(item)]
        else:
            found = []
        if len(found) != 1:
            break
        if found[0] not in chosen:
            chosen.append(found[0])
    return chosen


def check_hardware(
    profile: GpuProfile,
    detected: Sequence[DetectedGpu],
    *,
    emulate: bool = False,
    cuda_visible: str | None = None,
) -> Hardware:
    """The hardware trials will run on, or HardwareMismatch naming what was found instead.

    ``emulate``: run on a larger GPU found here, limited to ``profile``'s memory (see
    :func:`memory_scale`); the result is labelled emulated and is never mixed with real results.
    ``cuda_visible``: the value of ``CUDA_VISIBLE_DEVICES`` (see :func:`visible_gpus`); trials
    run on the first GPU it leaves that matches, and only that GPU is measured.
    """
    if cuda_visible is not None and "MIG-" in cuda_visible and not profile.is_cpu:
        raise HardwareMismatch(
            f"CUDA_VISIBLE_DEVICES={cuda_visible!r} names a MIG slice: tuner measures whole GPUs "
            "(NVML's memory and energy counters are the parent GPU's, not the slice's)",
            hint="set it to a GPU index (nvidia-smi's) or a GPU- UUID of a GPU not split by MIG",
        )
    if cuda_visible is not None:
        found = len(detected)
        detected = visible_gpus(detected, cuda_visible)
        if found and not detected and not profile.is_cpu:
            raise HardwareMismatch(
                f"CUDA_VISIBLE_DEVICES={cuda_visible!r} names none of this machine's "
                f"{found} GPU(s) (indices 0-{found - 1})",
                hint="set it to GPU indices as nvidia-smi numbers them (e.g. 0 or 1) or to UUIDs, "
                "or unset it",
            )
    if profile.is_cpu:
        if emulate:
            raise HardwareMismatch("--emulate needs a GPU to emulate on; --gpu cpu is not emulated")
        return Hardware(name=f"cpu: {cpu_name()}", is_gpu=False)
    if emulate:
        return _emulating(profile, detected)
    matching = [g for g in detected if match_detected(profile, [g.name])]
    if not matching:
        here = describe(detected)
        options = "--gpu cpu to tune CPU vLLM here" if not detected else _suggest(profile, detected)
        raise HardwareMismatch(
            f"--gpu {profile.name} asks for an {profile.display_name}, but this machine has {here}",
            hint=f"run tuner on a machine with an {profile.display_name}, or use {options}",
        )
    return _on_gpu(matching[0])


def matching_gpus(
    profile: GpuProfile,
    detected: Sequence[DetectedGpu],
    cuda_visible: str | None,
    *,
    emulate: bool = False,
) -> list[DetectedGpu]:
    """The visible GPUs a study of ``profile`` can run a worker on (``tuner run --parallel``):
    those of that kind, or when emulating, those with at least its memory."""
    visible = visible_gpus(detected, cuda_visible)
    if emulate:
        return [g for g in visible if g.memory_total_bytes >= profile.memory_bytes]
    return [g for g in visible if match_detected(profile, [g.name])]


def _emulating(profile: GpuProfile, detected: Sequence[DetectedGpu]) -> Hardware:
    big = [g for g in detected if g.memory_total_bytes >= profile.memory_bytes]
    if not big:
        raise HardwareMismatch(
            f"--emulate {profile.name} needs a GPU with at least {profile.memory_gib:g} GiB, but "
            f"this machine has {describe(detected)}",
            hint="emulate a smaller GPU, or run on the real one without --emulate",
        )
    gpu = max(big, key=lambda g: g.memory_total_bytes)  # the first of the largest
    return replace(
        _on_gpu(gpu),
        name=f"{gpu.name} emulating {profile.display_name} ({profile.memory_gib:g} GiB)",
        emulated=True,
        memory_scale=profile.memory_bytes / gpu.memory_total_bytes,
    )


def _on_gpu(gpu: DetectedGpu) -> Hardware:
    return Hardware(
        name=gpu.name,
        uuid=gpu.uuid,
        index=gpu.index,
        driver_version=gpu.driver_version,
        cuda_version=gpu.cuda_driver_version,
        is_gpu=True,
    )


def _suggest(profile: GpuProfile, detected: Sequence[DetectedGpu]) -> str:
    gpus = [p for p in GPUS.values() if not p.is_cpu]  # cpu matches any machine
    names = [p.name for p in gpus if any(match_detected(p, [g.name]) for g in detected)]
    if names:
        return f"--gpu {names[0]} (the GPU found here)"
    if any(g.memory_total_bytes >= profile.memory_bytes for g in detected):
        return (
            "--emulate where the command has it (this GPU held to the profile's memory, "
            "labelled emulated), or --gpu cpu"
        )
    return "--gpu cpu"
