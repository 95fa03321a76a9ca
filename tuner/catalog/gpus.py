"""GPU profiles: memory, compute capability and what vLLM supports on each.

The support rules follow vLLM's own checks (read in vLLM 0.32's source; 0.26, the GPU
machine's version, has the same ones):

- ``FLASH_ATTN``: compute capability 8.0 or newer. FlashAttention 3 only on Hopper (sm90);
  elsewhere version 2. With an fp8 KV cache it needs FA3 on Hopper, and never takes fp8_e5m2
  (``fa_utils.flash_attn_supports_kv_cache_dtype``).
- ``FLASHINFER``: sm80 to sm121 (vLLM raised its floor from sm75 to sm80). All fp8 KV dtypes.
- ``TRITON_ATTN``: any capability. All fp8 KV dtypes.
- ``FLEX_ATTENTION``: any capability; KV cache auto/float16/bfloat16 only.
- fp8 KV caches are offered on sm89+ (Ada, Hopper), which have fp8 hardware.
- CPU: the only backend is ``CPU_ATTN`` (``CPUAttentionBackend.get_name()``); any other
  ``--attention-backend`` is ignored with "Cannot use ... backend on CPU". Its fp8 KV cache
  needs x86 with AVX-512 or AMX (``cpu_attn._get_attn_isa``), which the 2-core CI machines
  lack, so the cpu profile offers ``auto`` only.

Memory sizes are what NVML reports as the device total, in GiB.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tuner.domain import GpuProfile
from tuner.errors import UsageError

FLASH_ATTN = "FLASH_ATTN"
FLASHINFER = "FLASHINFER"
TRITON_ATTN = "TRITON_ATTN"
FLEX_ATTENTION = "FLEX_ATTENTION"
CPU_ATTN = "CPU_ATTN"

FP8_KV_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")

# KV cache dtypes each backend accepts (besides auto), from its supported_kv_cache_dtypes.
# FLASH_ATTN's fp8 additionally needs FA3 on Hopper: see tuner.space.
BACKEND_KV_CACHE_DTYPES: Mapping[str, frozenset[str]] = {
    FLASH_ATTN: frozenset({"auto", "float16", "bfloat16", "fp8", "fp8_e4m3"}),
    FLASHINFER: frozenset({"auto", "float16", "bfloat16", *FP8_KV_DTYPES}),
    TRITON_ATTN: frozenset({"auto", "float16", "bfloat16", *FP8_KV_DTYPES}),
    FLEX_ATTENTION: frozenset({"auto", "float16", "bfloat16"}),
    CPU_ATTN: frozenset({"auto", *FP8_KV_DTYPES}),
}

_CUDA_BACKENDS = (FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION)


def _cuda(
    name: str, display: str, memory_gib: float, cc: tuple[int, int], nvml: tuple[str, ...]
) -> GpuProfile:
    hopper = cc[0] == 9
    fp8 = cc >= (8, 9)
    return GpuProfile(
        name=name,
        display_name=display,
        memory_gib=memory_gib,
        compute_capability=cc,
        attention_backends=_CUDA_BACKENDS,
        flash_attn_versions=(2, 3) if hopper else (2,),
        kv_cache_dtypes=("auto", *FP8_KV_DTYPES) if fp8 else ("auto",),
        nvml_names=nvml,
    )


def _host_memory_gib() -> float:
    # For the cpu profile "device memory" is this host's RAM: the KV cache fraction
    # (--gpu-memory-utilization) is taken of it.
    try:
        import psutil

        return round(psutil.virtual_memory().total / 1024**3, 1)
    except Exception:  # psutil missing or /proc unreadable: a conservative guess
        return 16.0


GPUS: dict[str, GpuProfile] = {
    p.name: p
    for p in (
        _cuda("a10g", "NVIDIA A10G", 22.5, (8, 6), ("A10G",)),
        _cuda("rtx3090", "NVIDIA GeForce RTX 3090", 24.0, (8, 6), ("RTX 3090",)),
        _cuda("rtx4090", "NVIDIA GeForce RTX 4090", 24.0, (8, 9), ("RTX 4090",)),
        _cuda("l4", "NVIDIA L4", 22.5, (8, 9), ("L4",)),
        _cuda("a100-40g", "NVIDIA A100 40GB", 40.0, (8, 0), ("A100-SXM4-40GB", "A100-PCIE-40GB")),
        _cuda("a100-80g", "NVIDIA A100 80GB", 80.0, (8, 0), ("A100-SXM4-80GB", "A100 80GB")),
        # The SXM5 card alone: NVIDIA's H100 data sheet gives the PCIe card HBM2e at 2.0 TB/s
        # and the NVL 94 GB at 3.9 TB/s, neither this profile's bandwidth nor its price.
        _cuda("h100", "NVIDIA H100 SXM5", 79.6, (9, 0), ("H100 80GB HBM3",)),
        _cuda("h200", "NVIDIA H200", 140.4, (9, 0), ("H200",)),
        GpuProfile(
            name="cpu",
            display_name="CPU (host memory)",
            memory_gib=_host_memory_gib(),
            compute_capability=None,
            attention_backends=(CPU_ATTN,),
            flash_attn_versions=(),
            kv_cache_dtypes=("auto",),
        ),
    )
}


# Peak memory bandwidth in GB/s, from NVIDIA's data sheets (the SXM part where there are two):
# what a decode step reads its weights and KV cache at, at best (tuner.study.plan.predict).
MEMORY_BANDWIDTH_GBS: Mapping[str, float] = {
    "a10g": 600.0,
    "rtx3090": 936.0,
    "rtx4090": 1008.0,
    "l4": 300.0,
    "a100-40g": 1555.0,
    "a100-80g": 2039.0,
    "h100": 3350.0,
    "h200": 4800.0,
}


@dataclass(frozen=True)
class GpuPrice:
    """What one GPU of a profile costs per hour, and where that number comes from."""

    usd_per_hour: float
    source: str
    catalog_default: bool = False

    def label(self) -> str:
        x = self.usd_per_hour
        amount = f"{x:,.2f}" if x == 0 or x >= 0.01 else f"{x:.2g}"
        return f"${amount}/GPU-hour ({self.source})"


# On-demand list prices per GPU-hour: an assumption, not a quote. The middle of the "specialty
# cloud" range of https://www.mercatus-ai.com/blog/cloud-gpu-pricing as read in May 2026
# (A100 80GB $1.10-1.50, H100 SXM $2.50-3.50, H200 SXM $3.50-4.50). Hyperscalers charge more,
# spot and reserved capacity less. Profiles without a read price have no default: give one.
PRICE_SOURCE = (
    "catalog default: list-price assumption, mid-range of specialty clouds' on-demand rates, "
    "mercatus-ai.com/blog/cloud-gpu-pricing, May 2026"
)
CATALOG_PRICES: Mapping[str, float] = {"a100-80g": 1.30, "h100": 3.00, "h200": 4.00}


# US dollars per GPU-hour: far above what any GPU rents for; a larger figure is a typo.
MAX_GPU_PRICE = 1000.0


def price_problem(value: float) -> str | None:
    """Why ``value`` is no price per GPU-hour (negative, not finite, past MAX_GPU_PRICE)."""
    if math.isfinite(value) and 0 <= value <= MAX_GPU_PRICE:
        return None
    return f"{value} $/hour is not a price per GPU-hour: give 0 to {MAX_GPU_PRICE:,.0f}"


def gpu_price(profile: str, override: float | None = None) -> GpuPrice | None:
    """The price per GPU-hour for ``profile``: ``override`` (``--gpu-price`` or the spec's
    ``gpu_price``: a "given price") when given, else the catalog default, labelled as one;
    None when neither."""
    if override is not None:
        if problem := price_problem(override):
            raise UsageError(problem, hint="give US dollars per GPU-hour, e.g. --gpu-price 3.5")
        return GpuPrice(float(override), "given price")
    default = CATALOG_PRICES.get(profile.strip().lower())
    if default is None:
        return None
    return GpuPrice(default, PRICE_SOURCE, catalog_default=True)


def get_gpu(name: str) -> GpuProfile:
    """The profile called ``name`` (case-insensitive); :class:`UsageError` listing them if none."""
    profile = GPUS.get(name.strip().lower())
    if profile is None:
        raise UsageError(f"unknown GPU profile {name!r}", hint="known profiles: " + ", ".join(GPUS))
    return profile


def match_detected(profile: GpuProfile, detected_names: Sequence[str]) -> bool:
    """Whether the devices NVML reported (``detected_names``) are of ``profile``'s kind.

    A GPU profile matches when any detected name contains one of its ``nvml_names`` as a
    whole word ("L4" matches "NVIDIA L4" but not "NVIDIA L40S"). The cpu profile matches any
    machine: every host has a CPU.
    """
    return profile.is_cpu or any(
        re.search(rf"(?<![A-Za-z0-9]){re.escape(wanted)}(?![A-Za-z0-9])", name, re.IGNORECASE)
        for name in detected_names
        for wanted in profile.nvml_names
    )
