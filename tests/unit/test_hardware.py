"""--gpu against the hardware NVML found (tuner.runner.hardware), with fabricated device lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.catalog.gpus import get_gpu
from tuner.catalog.models import resolve_model
from tuner.errors import HardwareMismatch, UsageError
from tuner.runner.hardware import Hardware, check_hardware, describe, matching_gpus, visible_gpus
from tuner.runner.vllm import RunnerSettings, VllmTrialRunner
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


@pytest.mark.parametrize(("card", "memory_gib"), [("NVIDIA H100 PCIe", 79.6),
                                                    ("NVIDIA H100 NVL", 93.6)])  # fmt: skip
def test_an_h100_pcie_or_nvl_is_not_taken_for_the_sxm5(card: str, memory_gib: float) -> None:
    """The h100 profile matched every card named H100: a PCIe card (HBM2e, 2.0 TB/s) or an NVL
    (94 GB, 3.9 TB/s) ran as the SXM5, with its bandwidth and price, labelled as measured."""
    h100 = get_gpu("h100")
    assert check_hardware(h100, [gpu("NVIDIA H100 80GB HBM3", memory_gib=79.6)]).is_gpu
    with pytest.raises(HardwareMismatch) as info:
        check_hardware(h100, [gpu(card, memory_gib=memory_gib)])
    assert f"NVIDIA H100 SXM5, but this machine has 1 GPU(s): {card}" in info.value.message
    assert "--emulate" in info.value.hint and "found here" not in info.value.hint
    assert check_hardware(h100, [gpu(card, memory_gib=memory_gib)], emulate=True).emulated


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


# --- hosts with several GPUs: CUDA_VISIBLE_DEVICES chooses, and only that GPU is measured -----

TWO = [gpu("NVIDIA H200", 0), gpu("NVIDIA H200", 1)]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, [0, 1]),
        ("1", [1]),
        ("1,0", [1, 0]),
        (" 0 , 1", [0, 1]),
        ("GPU-0001", [1]),  # a unique UUID prefix
        ("GPU-0001-uuid,0", [1, 0]),
        ("", []),
        ("-1", []),
        ("0,7,1", [0]),  # CUDA stops at the first entry naming no device
        ("GPU-000", []),  # a prefix of both names neither
        ("0,0", [0]),
    ],
)
def test_visible_gpus_reads_cuda_visible_devices_as_cuda_does(
    value: str | None, expected: list[int]
) -> None:
    assert [g.index for g in visible_gpus(TWO, value)] == expected


def test_cuda_visible_devices_picks_the_gpu_trials_run_on() -> None:
    hardware = check_hardware(get_gpu("h200"), TWO, cuda_visible="1")
    assert (hardware.index, hardware.uuid) == (1, "GPU-0001-uuid")
    assert check_hardware(get_gpu("h200"), TWO).index == 0


def test_emulation_uses_the_visible_gpu() -> None:
    hardware = check_hardware(get_gpu("a10g"), TWO, emulate=True, cuda_visible="1")
    assert hardware.emulated and hardware.index == 1


def test_cuda_visible_devices_naming_no_gpu_is_a_clear_error() -> None:
    with pytest.raises(HardwareMismatch) as info:
        check_hardware(get_gpu("h200"), TWO, cuda_visible="5")
    assert "CUDA_VISIBLE_DEVICES='5'" in info.value.message
    assert "indices 0-1" in info.value.message
    assert "nvidia-smi" in (info.value.hint or "")


def test_the_cpu_profile_ignores_cuda_visible_devices() -> None:
    assert not check_hardware(get_gpu("cpu"), TWO, cuda_visible="").is_gpu


def test_the_server_is_pinned_to_the_measured_gpu(tmp_path: Path) -> None:
    settings = RunnerSettings(python="python3", vllm_version="0.26.0", model_path=str(tmp_path))
    pinned = VllmTrialRunner(
        settings, resolve_model("tiny-ernie"), Hardware(name="H200", index=1, is_gpu=True)
    )
    pin = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"}
    assert pinned.hardware.device_env() == pin
    by_uuid = VllmTrialRunner(
        settings,
        resolve_model("tiny-ernie"),
        Hardware(name="H200", index=1, uuid="GPU-bbbb", is_gpu=True),
    )
    assert by_uuid.hardware.device_env()["CUDA_VISIBLE_DEVICES"] == "GPU-bbbb"
    cpu = VllmTrialRunner(settings, resolve_model("tiny-ernie"), Hardware(name="cpu"))
    assert cpu.hardware.device_env() == {}


def test_parallel_workers_get_the_visible_gpus_of_the_profile() -> None:
    mixed = [gpu("NVIDIA H200", 0), gpu("NVIDIA A10G", 1, 22.0), gpu("NVIDIA H200", 2)]
    assert [g.index for g in matching_gpus(get_gpu("h200"), mixed, None)] == [0, 2]
    assert [g.index for g in matching_gpus(get_gpu("h200"), mixed, "2,1")] == [2]
    # Emulating a 24 GB GPU: any visible GPU with at least that much memory.
    assert [g.index for g in matching_gpus(get_gpu("a10g"), mixed, None, emulate=True)] == [0, 2]
    assert matching_gpus(get_gpu("h200"), mixed, "") == []


def test_emulation_is_suggested_only_where_this_gpu_could_hold_the_profile() -> None:
    """`--gpu h200` on an H100 PCIe was told to use --emulate, which then failed: an H200
    needs 140.4 GiB and the card has 80."""
    with pytest.raises(HardwareMismatch) as info:
        check_hardware(get_gpu("h200"), [gpu("NVIDIA H100 PCIe", memory_gib=79.6)])
    assert "--emulate" not in info.value.hint and info.value.hint.endswith("or use --gpu cpu")


def test_a_mig_slice_is_refused_as_what_it_is() -> None:
    """CUDA_VISIBLE_DEVICES=MIG-... was read as naming no GPU of this machine ("names none of
    this machine's 2 GPU(s)"): NVML lists the parents' GPU- UUIDs, which a MIG UUID never
    matches. Say that a slice is not measured, and what to set instead."""
    with pytest.raises(HardwareMismatch) as info:
        check_hardware(
            get_gpu("h200"), TWO, cuda_visible="MIG-7a1b2c3d-0000-1111-2222-333344445555"
        )
    assert "names a MIG slice" in info.value.message and "GPU- UUID" in (info.value.hint or "")
