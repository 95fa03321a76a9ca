"""Validity rules: what vLLM accepts for a model on a GPU, checked before any server starts.

Pure functions of the catalog facts (:mod:`tuner.catalog.gpus`, the model's config) and a
:class:`ServingConfig`; :class:`tuner.space.SearchSpace` exposes them, together with
:func:`dominated_by` (which configs an earlier failure makes hopeless). Every rule returns a
sentence saying what is wrong and why, so a pruned trial explains itself. Knobs left at
``None`` are judged at the value vLLM will actually use.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.catalog.gpus import BACKEND_KV_CACHE_DTYPES, CPU_ATTN, FLASH_ATTN, FP8_KV_DTYPES
from tuner.catalog.models import has_facts
from tuner.domain import FailureClass, GpuProfile, ModelSpec, ServingConfig, Workload

VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vllm.config.cache.CacheConfig


def effective_utilization(config: ServingConfig) -> float:
    value = config.gpu_memory_utilization
    return VLLM_DEFAULT_GPU_MEMORY_UTILIZATION if value is None else value


def effective_max_model_len(model: ModelSpec, config: ServingConfig) -> int | None:
    """The max_model_len vLLM uses (the model's positions by default); None if unknown."""
    if config.max_model_len is not None:
        return config.max_model_len
    return model.max_position_embeddings if has_facts(model) else None


def kv_dtype(config: ServingConfig) -> str:
    """The KV cache dtype vLLM uses ("auto": the model's dtype)."""
    return config.kv_cache_dtype or "auto"


def effective_flash_attn_version(gpu: GpuProfile, config: ServingConfig) -> int:
    """FlashAttention version vLLM picks: 3 where the GPU has it (Hopper), else 2."""
    if config.flash_attn_version is not None:
        return config.flash_attn_version
    return 3 if 3 in gpu.flash_attn_versions else 2


def violations(
    model: ModelSpec, gpu: GpuProfile, workload: Workload, config: ServingConfig
) -> list[str]:
    """Every broken rule of ``config`` as a sentence; an empty list when it may run."""
    return [
        *_backend_rules(gpu, config),
        *_kv_dtype_rules(gpu, config),
        *_length_rules(model, workload, config),
        *_batch_rules(config),
        *_memory_rules(model, gpu, config),
    ]


def _sm(gpu: GpuProfile) -> str:
    cc = gpu.compute_capability
    return f"compute capability {cc[0]}.{cc[1]}" if cc else "no CUDA"


def _backend_rules(gpu: GpuProfile, c: ServingConfig) -> list[str]:
    out: list[str] = []
    backend = c.attention_backend
    if backend is not None and backend not in gpu.attention_backends:
        if gpu.is_cpu:
            out.append(
                f"attention backend {backend} is not available on CPU: vLLM's CPU build has only "
                f"{CPU_ATTN} (it falls back to it from any other --attention-backend)"
            )
        else:
            out.append(
                f"attention backend {backend} is not available on {gpu.display_name} "
                f"({_sm(gpu)}): vLLM offers {', '.join(gpu.attention_backends)} there"
            )
    version = c.flash_attn_version
    if version is None:
        return out
    if backend != FLASH_ATTN:
        shown = backend or "vLLM's default"
        out.append(
            f"flash_attn_version={version} only applies to the {FLASH_ATTN} backend, but "
            f"attention_backend is {shown}"
        )
    if version not in gpu.flash_attn_versions:
        if gpu.is_cpu:
            out.append("FlashAttention does not run on CPU: flash_attn_version must stay default")
        elif version == 3:
            out.append(
                f"FlashAttention 3 needs a Hopper GPU (compute capability 9.0); "
                f"{gpu.display_name} has {_sm(gpu)}"
            )
        else:
            versions = ", ".join(map(str, gpu.flash_attn_versions))
            out.append(
                f"FlashAttention {version} is not available on {gpu.display_name} "
                f"(versions there: {versions})"
            )
    return out


def _kv_dtype_rules(gpu: GpuProfile, c: ServingConfig) -> list[str]:
    dtype = kv_dtype(c)
    if dtype == "auto":
        return []
    out: list[str] = []
    if dtype not in gpu.kv_cache_dtypes:
        if gpu.is_cpu and dtype in FP8_KV_DTYPES:
            out.append(
                f"KV cache dtype {dtype} is not offered on CPU: vLLM's CPU fp8 KV cache needs "
                "x86 with AVX-512 or AMX"
            )
        elif dtype in FP8_KV_DTYPES:
            out.append(
                f"KV cache dtype {dtype} needs compute capability 8.9 or newer (Ada, Hopper); "
                f"{gpu.display_name} has {_sm(gpu)}"
            )
        else:
            out.append(
                f"KV cache dtype {dtype} is not one of {', '.join(gpu.kv_cache_dtypes)} "
                f"offered on {gpu.display_name}"
            )
    backend = c.attention_backend
    accepted = BACKEND_KV_CACHE_DTYPES.get(backend or "")
    if accepted is not None and dtype not in accepted:
        out.append(
            f"the {backend} backend does not support a {dtype} KV cache "
            f"(it takes {', '.join(sorted(accepted))})"
        )
    elif backend == FLASH_ATTN and dtype in FP8_KV_DTYPES:
        version = effective_flash_attn_version(gpu, c)
        hopper = gpu.compute_capability is not None and gpu.compute_capability[0] == 9
        if not (hopper and version == 3):
            out.append(
                f"{FLASH_ATTN} takes an fp8 KV cache only with FlashAttention 3 on Hopper; "
                f"here it would run FlashAttention {version} with {_sm(gpu)}"
            )
    return out


def _length_rules(model: ModelSpec, workload: Workload, c: ServingConfig) -> list[str]:
    out: list[str] = []
    known = has_facts(model)
    positions = model.max_position_embeddings
    if known and c.max_model_len is not None and c.max_model_len > positions:
        out.append(
            f"max_model_len {c.max_model_len} exceeds the model's {positions} positions "
            "(max_position_embeddings in its config.json)"
        )
    length = effective_max_model_len(model, c)
    need = workload.max_request_tokens
    if length is not None and length < need:
        which = "" if c.max_model_len is not None else " (the model's positions, vLLM's default)"
        out.append(
            f"max_model_len {length}{which} is below the workload's longest request "
            f"({need} tokens of prompt and output): vLLM would reject such requests"
        )
    return out


def _batch_rules(c: ServingConfig) -> list[str]:
    tokens, seqs = c.max_num_batched_tokens, c.max_num_seqs
    if tokens is not None and seqs is not None and tokens < seqs:
        return [
            f"max_num_batched_tokens {tokens} is below max_num_seqs {seqs}: vLLM refuses to "
            "start, every scheduled sequence needs at least one token of the batch"
        ]
    return []


def _memory_rules(model: ModelSpec, gpu: GpuProfile, c: ServingConfig) -> list[str]:
    if not has_facts(model):
        return []
    util = effective_utilization(c)
    budget = util * gpu.memory_bytes
    quantization = c.extra.get("quantization")
    weights = model.weight_bytes(quantization if isinstance(quantization, str) else None)
    where = "of host memory" if gpu.is_cpu else f"of {gpu.display_name}"
    budget_text = f"gpu_memory_utilization {util} × {_gb(gpu.memory_bytes)} {where} = {_gb(budget)}"
    if weights > budget:
        return [f"the model weights ({_gb(weights)}) do not fit in {budget_text}"]
    length = effective_max_model_len(model, c)
    if length is None:
        return []
    element = 1 if kv_dtype(c) in FP8_KV_DTYPES else (4 if model.dtype == "float32" else 2)
    kv = model.kv_bytes_per_token(element) * length
    if weights + kv > budget:
        return [
            f"one request of max_model_len {length} needs {_gb(kv)} of KV cache, but "
            f"{budget_text} leaves at most {_gb(budget - weights)} after {_gb(weights)} of "
            "weights: vLLM would refuse to start"
        ]
    return []


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def dominated_by(
    model: ModelSpec,
    config: ServingConfig,
    failures: Sequence[tuple[ServingConfig, FailureClass]],
) -> ServingConfig | None:
    """The earliest failed config that makes ``config`` hopeless, or None.

    MEMORY_EXCEEDED at utilization u: any config with the same attention backend asking for u
    or more (backends differ in the workspace they take beside the budget: on the H200,
    FLEX_ATTENTION ran out of memory at 0.95 where TRITON_ATTN served). KV_CACHE_INSUFFICIENT
    at (max_model_len L, utilization u, kv dtype d): configs with the same d, a length of L or
    more and a utilization of u or less, except an eager config after a failure with CUDA
    graphs (graphs take memory from the KV cache). UNSUPPORTED: the same backend,
    FlashAttention version and kv dtype. Other failures never dominate. ``None`` knobs count
    as the values vLLM uses.
    """
    for failed, failure in failures:
        if failure is FailureClass.MEMORY_EXCEEDED:
            same_backend = config.attention_backend == failed.attention_backend
            if same_backend and effective_utilization(config) >= effective_utilization(failed):
                return failed
        elif failure is FailureClass.KV_CACHE_INSUFFICIENT:
            if _kv_dominates(model, failed, config):
                return failed
        elif failure is FailureClass.UNSUPPORTED and _support_key(config) == _support_key(failed):
            return failed
    return None


def _kv_dominates(model: ModelSpec, failed: ServingConfig, config: ServingConfig) -> bool:
    if kv_dtype(config) != kv_dtype(failed):
        return False
    if effective_utilization(config) > effective_utilization(failed):
        return False
    if bool(config.enforce_eager) and not bool(failed.enforce_eager):
        return False
    have = effective_max_model_len(model, config)
    had = effective_max_model_len(model, failed)
    if have is None or had is None:
        return have is None and had is None  # both "the model's positions", unknown
    return have >= had


def _support_key(config: ServingConfig) -> tuple[str | None, int | None, str]:
    return (config.attention_backend, config.flash_attn_version, kv_dtype(config))
