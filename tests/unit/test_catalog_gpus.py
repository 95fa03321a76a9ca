"""GPU profiles, lookup and NVML name matching."""

from __future__ import annotations

import pytest

from tuner.catalog.gpus import CPU_ATTN, FLASH_ATTN, GPUS, get_gpu, match_detected
from tuner.errors import UsageError


def test_catalog_lists_the_briefed_profiles() -> None:
    assert set(GPUS) == {
        "a10g",
        "rtx4090",
        "rtx3090",
        "l4",
        "a100-40g",
        "a100-80g",
        "h100",
        "h200",
        "cpu",
    }


@pytest.mark.parametrize("name", sorted(set(GPUS) - {"cpu"}))
def test_gpu_rules(name: str) -> None:
    gpu = GPUS[name]
    cc = gpu.compute_capability
    assert cc is not None and cc >= (8, 0)
    assert FLASH_ATTN in gpu.attention_backends and "TRITON_ATTN" in gpu.attention_backends
    assert gpu.flash_attn_versions == ((2, 3) if cc[0] == 9 else (2,))
    assert ("fp8" in gpu.kv_cache_dtypes) == (cc >= (8, 9))
    assert gpu.kv_cache_dtypes[0] == "auto"
    assert gpu.nvml_names


def test_cpu_profile() -> None:
    cpu = GPUS["cpu"]
    assert cpu.is_cpu
    assert cpu.attention_backends == (CPU_ATTN,)
    assert cpu.flash_attn_versions == ()
    assert cpu.kv_cache_dtypes == ("auto",)
    assert cpu.memory_gib > 0


def test_get_gpu_is_case_insensitive_and_lists_names_when_unknown() -> None:
    assert get_gpu("H200") is GPUS["h200"]
    with pytest.raises(UsageError) as info:
        get_gpu("tpu-v5")
    assert "h200" in info.value.hint and "a10g" in info.value.hint


@pytest.mark.parametrize(
    ("name", "detected", "expected"),
    [
        ("h200", ["NVIDIA H200"], True),
        ("h200", ["NVIDIA H100 80GB HBM3"], False),
        ("h100", ["NVIDIA H100 80GB HBM3"], True),
        ("l4", ["NVIDIA L4"], True),
        ("l4", ["NVIDIA L40S"], False),  # a substring, not the same card
        ("a10g", ["NVIDIA A10G"], True),
        ("rtx4090", ["NVIDIA GeForce RTX 4090"], True),
        ("rtx3090", ["NVIDIA GeForce RTX 4090"], False),
        ("a100-80g", ["NVIDIA A100-SXM4-80GB"], True),
        ("a100-80g", ["NVIDIA A100 80GB PCIe"], True),
        ("a100-40g", ["NVIDIA A100-SXM4-80GB"], False),
        ("h200", [], False),
        ("h200", ["NVIDIA A10G", "NVIDIA H200"], True),
        ("cpu", [], True),
        ("cpu", ["NVIDIA H200"], True),
    ],
)
def test_match_detected(name: str, detected: list[str], expected: bool) -> None:
    assert match_detected(GPUS[name], detected) is expected
