"""--gpu against the hardware NVML found (tuner.hardware), with fabricated device lists."""

from __future__ import annotations

import pytest

from tuner.catalog.gpus import get_gpu
from tuner.errors import HardwareMismatch, UsageError
from tuner.hardware import check_hardware, describe
from tuner.telemetry.nvml import DetectedGpu

GIB = 1024**3


def gpu(name: str, index: int = 0, memory_gib: float = 140.4) -> DetectedGpu:
    return DetectedGpu(
        index=index,
        name=name,
        uuid=f"GPU-{index:04d}-uuid",
        memory_total_bytes=int(memory_gib * GIB),
        compute_capability=(9, 0),
        driver_version="575.57.08",
        cuda_driver_version="12.9",
    )


H200 = gpu("NVIDIA H200")


@pytest.mark.parametrize("detected", [[], [H200]], ids=["no-gpu", "h200"])
def test_cpu_profile_is_always_available(detected: list[DetectedGpu]) -> None:
    hardware = check_hardware(get_gpu("cpu"), detected)
    assert not hardware.is_gpu
    assert hardware.name.startswith("cpu: ")
    assert hardware.uuid is None


def test_a_gpu_profile_without_a_gpu_says_so_and_suggests_cpu() -> None:
    with pytest.raises(HardwareMismatch) as info:
        check_hardware(get_gpu("a10g"), [])
    error = info.value
    assert isinstance(error, UsageError) and error.exit_code == 2
    assert "--gpu a10g" in error.message and "NVIDIA A10G" in error.message
    assert "no NVIDIA GPU" in error.message
    assert "--gpu cpu" in error.hint


def test_the_wrong_gpu_names_the_one_found_and_suggests_it() -> None:
    with pytest.raises(HardwareMismatch) as info:
        check_hardware(get_gpu("a10g"), [H200])
    assert "NVIDIA H200" in info.value.message
    assert "140 GiB" in info.value.message
    assert "--gpu h200" in info.value.hint


def test_an_uncatalogued_gpu_falls_back_to_suggesting_cpu() -> None:
    # "L4" must not match an L40S, and no profile describes an L40S.
    with pytest.raises(HardwareMismatch) as info:
        check_hardware(get_gpu("l4"), [gpu("NVIDIA L40S", memory_gib=44.5)])
    assert "NVIDIA L40S" in info.value.message
    assert "--gpu cpu" in info.value.hint


def test_the_matching_gpu_gives_its_identity() -> None:
    hardware = check_hardware(get_gpu("h200"), [H200])
    assert hardware.is_gpu
    assert hardware.name == "NVIDIA H200"
    assert hardware.uuid == "GPU-0000-uuid"
    assert hardware.driver_version == "575.57.08"
    assert hardware.cuda_version == "12.9"


def test_on_a_mixed_machine_the_matching_gpu_is_picked() -> None:
    detected = [gpu("NVIDIA A10G", index=0, memory_gib=22.5), gpu("NVIDIA H200", index=1)]
    assert check_hardware(get_gpu("h200"), detected).uuid == "GPU-0001-uuid"
    assert check_hardware(get_gpu("a10g"), detected).uuid == "GPU-0000-uuid"


def test_describe() -> None:
    assert describe([]).startswith("no NVIDIA GPU")
    two = describe([H200, gpu("NVIDIA H200", index=1)])
    assert two.startswith("2 GPU(s): ") and two.count("NVIDIA H200 (140 GiB)") == 2
