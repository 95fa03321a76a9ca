"""SearchSpace.violations (validity rules) and dominated_by (hopeless after a failure)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tuner.catalog.gpus import GPUS
from tuner.catalog.models import MODELS
from tuner.domain import FailureClass, GpuProfile, ModelSpec, ServingConfig, Workload
from tuner.space import SearchSpace

WORKLOAD = Workload("chat", prompt_tokens=400, output_tokens=200)  # longest request: 751
CPU = dataclasses.replace(GPUS["cpu"], memory_gib=24.0)
H200, A10G, L4 = GPUS["h200"], GPUS["a10g"], GPUS["l4"]
ERNIE, TINY, LLAMA = MODELS["ernie-0.3b"], MODELS["tiny-ernie"], MODELS["llama-3.1-8b"]


def check(gpu: GpuProfile = H200, model: ModelSpec = ERNIE, **knobs: Any) -> list[str]:
    return SearchSpace(model, gpu, WORKLOAD).violations(ServingConfig(**knobs))


def one(gpu: GpuProfile = H200, model: ModelSpec = ERNIE, **knobs: Any) -> str:
    found = check(gpu, model, **knobs)
    assert len(found) == 1, found
    return found[0]


def test_defaults_are_valid_where_they_fit() -> None:
    assert check(H200, ERNIE) == []
    assert check(A10G, MODELS["qwen2.5-7b"]) == []
    assert check(CPU, TINY, gpu_memory_utilization=0.1) == []


# -- backends and FlashAttention -------------------------------------------------------------


def test_backend_must_exist_on_the_gpu() -> None:
    assert check(H200, attention_backend="FLASHINFER") == []
    assert "not available on NVIDIA H200" in one(H200, attention_backend="CPU_ATTN")
    message = one(CPU, TINY, attention_backend="FLASH_ATTN", gpu_memory_utilization=0.1)
    assert "has only CPU_ATTN" in message
    assert check(CPU, TINY, attention_backend="CPU_ATTN", gpu_memory_utilization=0.1) == []


def test_flash_attn_version_needs_the_flash_attn_backend() -> None:
    assert check(H200, attention_backend="FLASH_ATTN", flash_attn_version=2) == []
    message = one(H200, attention_backend="TRITON_ATTN", flash_attn_version=2)
    assert "only applies to the FLASH_ATTN backend" in message and "TRITON_ATTN" in message
    assert "vLLM's default" in one(H200, flash_attn_version=3)


def test_flash_attention_3_needs_hopper() -> None:
    assert check(H200, attention_backend="FLASH_ATTN", flash_attn_version=3) == []
    message = one(A10G, attention_backend="FLASH_ATTN", flash_attn_version=3)
    assert "Hopper" in message and "8.6" in message
    assert check(A10G, attention_backend="FLASH_ATTN", flash_attn_version=2) == []


# -- KV cache dtypes -------------------------------------------------------------------------


def test_fp8_kv_cache_needs_sm89() -> None:
    assert check(L4, kv_cache_dtype="fp8") == []
    message = one(A10G, kv_cache_dtype="fp8")
    assert "8.9" in message and "8.6" in message
    assert "AVX-512" in one(CPU, TINY, kv_cache_dtype="fp8", gpu_memory_utilization=0.1)
    assert check(A10G, kv_cache_dtype="auto") == []


@pytest.mark.parametrize(
    ("gpu", "backend", "dtype", "version", "valid"),
    [
        (H200, "FLEX_ATTENTION", "fp8", None, False),  # flex takes no fp8 at all
        (H200, "FLASH_ATTN", "fp8_e5m2", None, False),  # FA never takes e5m2
        (H200, "FLASH_ATTN", "fp8", None, True),  # FA3 is Hopper's default
        (H200, "FLASH_ATTN", "fp8_e4m3", 3, True),
        (H200, "FLASH_ATTN", "fp8", 2, False),  # fp8 needs FA3
        (L4, "FLASH_ATTN", "fp8", None, False),  # no FA3 before Hopper
        (L4, "FLASHINFER", "fp8_e5m2", None, True),
        (L4, "TRITON_ATTN", "fp8_e4m3", None, True),
    ],
)
def test_fp8_kv_cache_per_backend(
    gpu: GpuProfile, backend: str, dtype: str, version: int | None, valid: bool
) -> None:
    found = check(gpu, attention_backend=backend, kv_cache_dtype=dtype, flash_attn_version=version)
    assert (found == []) is valid, found
    if not valid:
        assert len(found) == 1 and backend in found[0]


# -- lengths and batches ---------------------------------------------------------------------


def test_max_model_len_within_the_model_positions() -> None:
    assert check(H200, TINY, max_model_len=4096) == []
    message = one(H200, TINY, max_model_len=8192)
    assert "exceeds the model's 4096 positions" in message


def test_max_model_len_must_hold_the_longest_request() -> None:
    assert check(H200, ERNIE, max_model_len=1024) == []
    message = one(H200, ERNIE, max_model_len=512)
    assert "512" in message and "751" in message
    long_workload = Workload("long", prompt_tokens=4000, output_tokens=1000)
    found = SearchSpace(TINY, H200, long_workload).violations(ServingConfig())
    assert len(found) == 1 and "vLLM's default" in found[0]


def test_batched_tokens_at_least_max_num_seqs() -> None:
    assert check(max_num_batched_tokens=128, max_num_seqs=128) == []
    assert check(max_num_batched_tokens=64) == []  # vLLM lowers its own default seqs
    message = one(max_num_batched_tokens=64, max_num_seqs=128)
    assert "64" in message and "128" in message


# -- memory ----------------------------------------------------------------------------------


def test_weights_must_fit_in_the_utilization_share() -> None:
    message = one(A10G, LLAMA, gpu_memory_utilization=0.5, max_model_len=8192)
    assert "16.06 GB" in message and "0.5 × 24.16 GB" in message and "12.08 GB" in message
    assert check(A10G, LLAMA, gpu_memory_utilization=0.95, max_model_len=8192) == []


def test_one_full_length_request_must_fit_in_the_kv_cache() -> None:
    # Llama 3.1 8B on a 24 GB card: 6.2 GB of KV room, 128 KiB of KV per token in bf16.
    message = one(L4, LLAMA, max_model_len=65536)
    assert "8.59 GB of KV cache" in message and "6.17 GB" in message
    assert check(L4, LLAMA, max_model_len=65536, kv_cache_dtype="fp8") == []  # half the bytes
    assert "131072" in one(A10G, LLAMA)  # vLLM's defaults do not start there


def test_unknown_facts_skip_model_rules() -> None:
    unknown = ModelSpec(alias="x", hub_id="org/x", config={}, source="org/x")
    assert check(A10G, unknown, max_model_len=10**7, gpu_memory_utilization=0.01) == []
    assert check(A10G, unknown, kv_cache_dtype="fp8") != []  # hardware rules still apply


# -- dominance -------------------------------------------------------------------------------


def dominated(config: ServingConfig, failed: ServingConfig, failure: FailureClass) -> bool:
    space = SearchSpace(ERNIE, H200, WORKLOAD)
    return space.dominated_by(config, [(failed, failure)]) == failed


def test_memory_exceeded_dominates_equal_or_higher_utilization() -> None:
    failed = ServingConfig(gpu_memory_utilization=0.7)
    mem = FailureClass.MEMORY_EXCEEDED
    assert dominated(ServingConfig(gpu_memory_utilization=0.85), failed, mem)
    assert dominated(ServingConfig(gpu_memory_utilization=0.7, max_num_seqs=8), failed, mem)
    assert dominated(ServingConfig(), failed, mem)  # default 0.92
    assert not dominated(ServingConfig(gpu_memory_utilization=0.5), failed, mem)
    # a failure at the default dominates 0.95 but not 0.9
    assert dominated(ServingConfig(gpu_memory_utilization=0.95), ServingConfig(), mem)
    assert not dominated(ServingConfig(gpu_memory_utilization=0.9), ServingConfig(), mem)


def test_memory_exceeded_with_one_backend_leaves_the_others_alone() -> None:
    # Seen on the H200: FLEX_ATTENTION ran out of memory at 0.95, TRITON_ATTN served there.
    mem = FailureClass.MEMORY_EXCEEDED
    flex = ServingConfig(attention_backend="FLEX_ATTENTION", gpu_memory_utilization=0.95)
    triton = ServingConfig(attention_backend="TRITON_ATTN", gpu_memory_utilization=0.95)
    assert not dominated(triton, flex, mem)
    assert dominated(flex.replace(max_num_seqs=64), flex, mem)


def test_kv_cache_insufficient_dominates_longer_or_tighter_configs() -> None:
    kv = FailureClass.KV_CACHE_INSUFFICIENT
    failed = ServingConfig(max_model_len=4096, gpu_memory_utilization=0.5)
    assert dominated(ServingConfig(max_model_len=8192, gpu_memory_utilization=0.5), failed, kv)
    assert dominated(ServingConfig(max_model_len=4096, gpu_memory_utilization=0.4), failed, kv)
    assert dominated(ServingConfig(gpu_memory_utilization=0.5), failed, kv)  # default: 131072
    assert not dominated(ServingConfig(max_model_len=8192, gpu_memory_utilization=0.7), failed, kv)
    assert not dominated(ServingConfig(max_model_len=2048, gpu_memory_utilization=0.5), failed, kv)
    assert not dominated(ServingConfig(max_model_len=4096), failed, kv)  # default util 0.92
    other_dtype = ServingConfig(
        max_model_len=8192, gpu_memory_utilization=0.5, kv_cache_dtype="fp8"
    )
    assert not dominated(other_dtype, failed, kv)
    explicit_auto = ServingConfig(
        max_model_len=4096, gpu_memory_utilization=0.5, kv_cache_dtype="auto"
    )
    assert dominated(explicit_auto, failed, kv)


def test_eager_may_fit_where_cuda_graphs_did_not() -> None:
    kv = FailureClass.KV_CACHE_INSUFFICIENT
    graphs = ServingConfig(max_model_len=4096, gpu_memory_utilization=0.5)
    eager = graphs.replace(enforce_eager=True)
    assert not dominated(eager, graphs, kv)
    assert dominated(graphs, eager, kv)


def test_unsupported_dominates_the_same_backend_version_and_dtype() -> None:
    bad = FailureClass.UNSUPPORTED
    failed = ServingConfig(attention_backend="FLASHINFER", kv_cache_dtype="fp8")
    assert dominated(failed.replace(max_num_seqs=64, gpu_memory_utilization=0.5), failed, bad)
    assert not dominated(failed.replace(attention_backend="TRITON_ATTN"), failed, bad)
    assert not dominated(failed.replace(kv_cache_dtype=None), failed, bad)
    fa3 = ServingConfig(attention_backend="FLASH_ATTN", flash_attn_version=3)
    assert not dominated(fa3.replace(flash_attn_version=2), fa3, bad)
    assert dominated(
        ServingConfig(attention_backend="FLEX_ATTENTION", kv_cache_dtype="auto"),
        ServingConfig(attention_backend="FLEX_ATTENTION"),
        bad,
    )


@pytest.mark.parametrize(
    "failure",
    [
        f
        for f in FailureClass
        if f
        not in {
            FailureClass.MEMORY_EXCEEDED,
            FailureClass.KV_CACHE_INSUFFICIENT,
            FailureClass.UNSUPPORTED,
        }
    ],
)
def test_other_failures_never_dominate(failure: FailureClass) -> None:
    config = ServingConfig(gpu_memory_utilization=0.7)
    assert not dominated(config, config, failure)


def test_the_earliest_dominating_failure_is_returned() -> None:
    space = SearchSpace(ERNIE, H200, WORKLOAD)
    first = ServingConfig(gpu_memory_utilization=0.85)
    second = ServingConfig(gpu_memory_utilization=0.7)
    failures = [
        (ServingConfig(gpu_memory_utilization=0.5), FailureClass.CRASHED),
        (first, FailureClass.MEMORY_EXCEEDED),
        (second, FailureClass.MEMORY_EXCEEDED),
    ]
    assert space.dominated_by(ServingConfig(gpu_memory_utilization=0.95), failures) == first
    assert space.dominated_by(ServingConfig(gpu_memory_utilization=0.75), failures) == second
    assert space.dominated_by(ServingConfig(gpu_memory_utilization=0.6), failures) is None
    assert space.dominated_by(ServingConfig(), []) is None
