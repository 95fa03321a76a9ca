"""Log parsing against snippets shaped like real vLLM output (0.11, 0.13, 0.26, 0.32)."""

from __future__ import annotations

import pytest

from tuner.domain import FailureClass
from tuner.vllm.logparse import classify_start_failure, effective_backend, kv_cache_capacity

AUTO_032 = (
    "(EngineCore_DP0 pid=4011) INFO 11-30 12:40:19 [cuda.py:507] Using FLASH_ATTN attention "
    "backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', "
    "'FLEX_ATTENTION'].\n"
    "(EngineCore_DP0 pid=4011) INFO 11-30 12:40:20 [flash_attn.py:1118] Using FlashAttention "
    "version 3\n"
)
EXPLICIT_032 = (
    "(EngineCore_DP0 pid=77) INFO 11-30 12:40:19 [cuda.py:446] Using "
    "AttentionBackendEnum.FLASHINFER backend.\n"
)
OLD_0112 = (
    "(EngineCore_DP0 pid=61652) INFO 12-03 06:17:19 [cuda.py:418] Valid backends: "
    "['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION']\n"
    "(EngineCore_DP0 pid=61652) INFO 12-03 06:17:19 [cuda.py:427] Using FLASH_ATTN backend.\n"
)
CPU_032 = (
    "INFO 11-30 12:39:02 [__init__.py:291] Automatically detected platform cpu.\n"
    "(EngineCore pid=900) INFO 11-30 12:40:30 [kv_cache_utils.py:2328] CPU KV cache size: "
    "349,440 tokens, Maximum concurrency for 2,048 tokens per request: 170.62x\n"
)


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (AUTO_032, ("FLASH_ATTN", 3)),
        (EXPLICIT_032, ("FLASHINFER", None)),
        (OLD_0112, ("FLASH_ATTN", None)),
        (CPU_032, ("CPU_ATTN", None)),
        ("INFO x [cpu.py:175] Using CPU_MLA backend.\n" + CPU_032, ("CPU_MLA", None)),
        # a GPU backend asked for on CPU: vLLM says so and runs CPU_ATTN anyway
        (
            "INFO [cpu.py:178] Cannot use AttentionBackendEnum.TRITON_ATTN backend on CPU.\n"
            + CPU_032,
            ("CPU_ATTN", None),
        ),
        ("", (None, None)),
    ],
)
def test_effective_backend(log: str, expected: tuple[str | None, int | None]) -> None:
    assert effective_backend(log) == expected


def test_vit_and_prose_mentions_are_not_the_backend() -> None:
    log = (
        "INFO [rocm.py:894] Using Flash Attention backend for ViT model.\n"
        "INFO [interface.py:430] Using default backend AttentionBackendEnum.TORCH_SDPA for vit "
        "attention\n"
        "INFO [xpu.py:153] Using TurboQuant attention backend.\n"
    )
    assert effective_backend(log) == (None, None)
    assert effective_backend(log + OLD_0112) == ("FLASH_ATTN", None)


def test_kv_cache_capacity_one_line_032() -> None:
    assert kv_cache_capacity(CPU_032) == (349_440, 170.62)


def test_kv_cache_capacity_two_lines_older() -> None:
    log = (
        "(EngineCore_DP0 pid=1) INFO 07-01 10:00:00 [kv_cache_utils.py:1229] GPU KV cache size: "
        "1,234,567 tokens\n"
        "(EngineCore_DP0 pid=1) INFO 07-01 10:00:00 [kv_cache_utils.py:1235] Maximum "
        "concurrency for 4,096 tokens per request: 301.41x\n"
    )
    assert kv_cache_capacity(log) == (1_234_567, 301.41)


def test_kv_cache_capacity_absent() -> None:
    assert kv_cache_capacity("INFO nothing here\n") == (None, None)


ENGINE_WRAPPER = (
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.11/site-packages/vllm/v1/engine/utils.py", line 1432\n'
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
    "proc(s): {}\n"
)
CPU_OOM = (
    "(EngineCore pid=2) ERROR 11-30 12:41:00 [core.py:1120] EngineCore failed to start.\n"
    "(EngineCore pid=2) ERROR 11-30 12:41:00 [core.py:1120] ValueError: Available memory on "
    "node 0 (10.79/23.43 GiB) on startup is less than desired CPU memory utilization (0.92, "
    "21.56 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls the "
    "fraction of CPU memory reserved (despite its name).\n" + ENGINE_WRAPPER
)
GPU_FREE = (
    "(EngineCore_DP0 pid=3) ERROR 11-30 12:41:00 [core.py:1120] ValueError: Free memory on "
    "device cuda:0 (60.1/139.8 GiB) on startup is less than desired GPU memory utilization "
    "(0.92, 128.6 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
    "processes.\n" + ENGINE_WRAPPER
)
CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 139.81 GiB of which 1.02 GiB is free.\n" + ENGINE_WRAPPER
)
KV_NEW = (
    "(EngineCore_DP0 pid=4) ERROR 11-30 12:41:00 [core.py:1120] ValueError: To serve at least "
    "one request with the model's max seq len (131072), (16.0 GiB KV cache is needed, which is "
    "larger than the available KV cache memory (4.2 GiB). Based on the available memory, the "
    "estimated maximum model length is 34000.\n" + ENGINE_WRAPPER
)
KV_OLD = (
    "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
    "that can be stored in KV cache (12000). Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine.\n"
)
NOT_VALID = (
    "ValueError: Selected backend AttentionBackendEnum.FLASHINFER is not valid for this "
    "configuration. Reason: ['kv_cache_dtype not supported']\n" + ENGINE_WRAPPER
)
UNKNOWN = (
    "ValueError: Unknown attention backend: 'FLASH'. Valid options are: FLASH_ATTN, TRITON_ATTN\n"
)
BAD_DTYPE = (
    "api_server.py: error: argument --kv-cache-dtype: invalid choice: 'fp4' (choose from "
    "'auto', 'fp8')\n"
)
BAD_ATTN_CONFIG = (
    "-: error: argument --attention-config/-ac: 1 validation error for AttentionConfig\n"
    "flash_attn_version\n  Input should be 2, 3 or 4 [type=literal_error, input_value=7]\n"
)


@pytest.mark.parametrize(
    ("log", "failure", "needle"),
    [
        (CPU_OOM, FailureClass.MEMORY_EXCEEDED, "ValueError: Available memory on node 0"),
        (GPU_FREE, FailureClass.MEMORY_EXCEEDED, "ValueError: Free memory on device cuda:0"),
        (CUDA_OOM, FailureClass.MEMORY_EXCEEDED, "torch.OutOfMemoryError: CUDA out of memory"),
        (KV_NEW, FailureClass.KV_CACHE_INSUFFICIENT, "ValueError: To serve at least one"),
        (KV_OLD, FailureClass.KV_CACHE_INSUFFICIENT, "ValueError: The model's max seq len"),
        (NOT_VALID, FailureClass.UNSUPPORTED, "ValueError: Selected backend"),
        (UNKNOWN, FailureClass.UNSUPPORTED, "ValueError: Unknown attention backend: 'FLASH'"),
        (BAD_DTYPE, FailureClass.UNSUPPORTED, "argument --kv-cache-dtype: invalid choice"),
        (BAD_ATTN_CONFIG, FailureClass.UNSUPPORTED, "1 validation error for AttentionConfig"),
    ],
)
def test_known_failures(log: str, failure: FailureClass, needle: str) -> None:
    got, summary = classify_start_failure(log)
    assert got is failure
    assert needle in summary
    # the vLLM log prefix is stripped from the summary
    assert not summary.startswith("(") and "[core.py" not in summary


def test_other_failure_names_the_root_cause_not_the_wrapper() -> None:
    log = (
        "(EngineCore_DP0 pid=5) ERROR 11-30 [core.py:1] Traceback (most recent call last):\n"
        "(EngineCore_DP0 pid=5) ERROR 11-30 12:00:00 [core.py:1] OSError: /models/x does not "
        "appear to have a file named config.json\n" + ENGINE_WRAPPER
    )
    failure, summary = classify_start_failure(log)
    assert failure is FailureClass.START_FAILED
    assert summary == "OSError: /models/x does not appear to have a file named config.json"


def test_only_the_wrapper_is_still_a_summary() -> None:
    failure, summary = classify_start_failure(ENGINE_WRAPPER)
    assert failure is FailureClass.START_FAILED
    assert summary.startswith("RuntimeError: Engine core initialization failed")


def test_no_exception_uses_last_line_and_empty_log_says_so() -> None:
    assert classify_start_failure("starting\nKilled\n\n") == (FailureClass.START_FAILED, "Killed")
    failure, summary = classify_start_failure("")
    assert failure is FailureClass.START_FAILED
    assert "without any output" in summary


def test_summary_is_one_bounded_line() -> None:
    _, summary = classify_start_failure("RuntimeError: " + "x" * 5000)
    assert "\n" not in summary
    assert len(summary) <= 400


def test_cpu_kv_request_too_small_is_kv_insufficient_not_memory_exceeded() -> None:
    log = (
        "(EngineCore pid=7) ERROR 11-30 12:00:00 [core.py:1] ValueError: Available memory on "
        "node 0 (20.1/23.4 GiB) on kv cache allocation is less than requested memory for kv "
        "(-0.30/0.23 GiB). Reduce CPU memory used by other processes.\n"
    )
    failure, summary = classify_start_failure(log)
    assert failure is FailureClass.KV_CACHE_INSUFFICIENT
    assert "requested memory for kv" in summary


def test_cpu_kv_request_too_large_is_memory_exceeded() -> None:
    log = (
        "ValueError: Available memory on node 0 (2.1/23.4 GiB) on kv cache allocation is less "
        "than requested memory for kv (9.50/10.0 GiB). Reduce CPU memory used by other processes."
    )
    assert classify_start_failure(log)[0] is FailureClass.MEMORY_EXCEEDED


def test_a_validation_error_is_summarised_with_its_reason() -> None:
    """vLLM 0.32 refuses a bad configuration with a pydantic ValidationError whose reason is on
    the next line: the summary said only which config class failed (seen on CPU vLLM with
    --max-num-batched-tokens 8 --max-num-seqs 16)."""
    log = (
        "(APIServer pid=1) Traceback (most recent call last):\n"
        "(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error "
        "for SchedulerConfig\n"
        "(APIServer pid=1)   Value error, max_num_batched_tokens (8) must be greater than or "
        "equal to max_num_seqs (16). [type=value_error, input_value=ArgsKwargs((), {}), "
        "input_type=ArgsKwargs]\n"
        "(APIServer pid=1)     For further information visit "
        "https://errors.pydantic.dev/2.11/v/value_error\n"
    )
    failure, summary = classify_start_failure(log)
    assert failure is FailureClass.START_FAILED
    assert summary == (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig: "
        "Value error, max_num_batched_tokens (8) must be greater than or equal to max_num_seqs "
        "(16)."
    )
    field = "ValidationError: 1 validation error for ModelConfig\nmax_model_len\n  Input " + (
        "should be a valid integer [type=int_parsing, input_value='x']\n"
    )
    assert classify_start_failure(field)[1] == (
        "ValidationError: 1 validation error for ModelConfig: max_model_len: Input should be a "
        "valid integer"
    )
