"""Read what a vLLM server said about itself from its captured log. Pure functions.

The patterns are vLLM's own wording, taken from its source (0.11.2, 0.13.0, 0.26 per the GPU
notes, and the installed 0.32.0); each one names where it comes from. vLLM prefixes lines
with ``(EngineCore_DP0 pid=N) INFO 11-30 12:00:00 [file.py:123]``, so every pattern searches
inside a line rather than anchoring at its start.
"""

from __future__ import annotations

import re

from tuner.domain import FailureClass

# platforms/cuda.py, automatic choice (0.13+):
#   "Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', ...]."
# platforms/cuda.py, explicit choice: "Using FLASH_ATTN backend." (0.11-0.13, the enum's
#   name) or "Using AttentionBackendEnum.FLASH_ATTN backend." (0.32, the enum itself).
# platforms/cpu.py (0.32) for MLA models: "Using CPU_MLA backend.".
# Upper-case names only: "Using Flash Attention backend for ViT model" is not it.
_BACKEND = re.compile(
    r"\bUsing (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]*) (?:attention )?backend\b"
    r"(?!\s+for (?:vit|ViT))"
)
# v1/attention/backends/flash_attn.py (0.32): "Using FlashAttention version %s".
_FA_VERSION = re.compile(r"\bFlashAttention version (\d+)")
# vLLM 0.32's CPU platform logs nothing when it picks CPU_ATTN for an ordinary model
# (platforms/cpu.py get_attn_backend_cls returns it silently), so a CPU server is
# recognised by platforms/__init__.py ("Automatically detected platform cpu.") or by
# v1/core/kv_cache_utils.py naming the pool after the device ("CPU KV cache size: ...").
_CPU_PLATFORM = re.compile(r"Automatically detected platform cpu\b|\bCPU KV cache size:")
CPU_DEFAULT_BACKEND = "CPU_ATTN"

# v1/core/kv_cache_utils.py: 0.11-0.26 log "GPU KV cache size: 1,234 tokens" and
# "Maximum concurrency for 2,048 tokens per request: 12.34x" on two lines; 0.32 logs both
# on one line and names the device ("CPU KV cache size: ...", "GPU + host KV cache ...").
_KV_TOKENS = re.compile(r"\b[A-Z]+(?: \+ host)? KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x")

# Start-up failures, most specific first; the first class with a matching line wins.
_FAILURES: tuple[tuple[FailureClass, re.Pattern[str]], ...] = (
    (
        FailureClass.MEMORY_EXCEEDED,
        re.compile(
            # v1/worker/cpu_worker.py: "Available memory on node 0 (..) on startup is less
            #   than desired CPU memory utilization (0.92, 21.5 GiB)."
            # v1/worker/utils.py: "Free memory on device cuda:0 (..) on startup is less
            #   than desired GPU memory utilization (0.9, 120 GiB)."
            r"is less than desired (?:CPU|GPU) memory utilization"
            # torch / gpu_model_runner.py: "CUDA out of memory", "Failed to load model -
            #   not enough GPU memory", torch.OutOfMemoryError
            r"|CUDA out of memory|not enough GPU memory|OutOfMemoryError"
        ),
    ),
    (
        FailureClass.KV_CACHE_INSUFFICIENT,
        re.compile(
            # v1/core/kv_cache_utils.py (0.11-0.32): "To serve at least one request with the
            #   model's max seq len (N), (X GiB KV cache is needed, which is larger than the
            #   available KV cache memory (Y GiB)."
            r"KV cache is needed, which is larger than the available KV cache memory"
            # older engines: "The model's max seq len (N) is larger than the maximum number
            #   of tokens that can be stored in KV cache (M)."
            r"|larger than the maximum number of tokens that can be stored in KV cache"
            # kv_cache_utils.py: nothing left for the cache once weights are loaded
            r"|No available memory for the cache blocks"
        ),
    ),
    (
        FailureClass.UNSUPPORTED,
        re.compile(
            # platforms/cuda.py: "Selected backend X is not valid for this configuration."
            r"Selected backend \S+ is not valid for this configuration"
            r"|No valid attention backend found"
            # v1/attention/backends/registry.py: "Unknown attention backend: 'X'."
            r"|Unknown attention backend"
            # older platforms: "Invalid attention backend for cuda"
            r"|Invalid attention backend"
            # argparse: "argument --kv-cache-dtype: invalid choice: 'x' (choose from ...)",
            #   "argument --attention-config/-ac: 1 validation error for AttentionConfig"
            r"|argument --(?:attention-backend|kv-cache-dtype|attention-config)\b"
            r"[^\n]*(?:invalid|validation error)"
            # v1/attention/backend.py validate_configuration reason
            r"|kv_cache_dtype not supported"
        ),
    ),
)

# v1/worker/cpu_worker.py (0.32): "Available memory on node 0 (..) on kv cache allocation is
#   less than requested memory for kv (X/Y GiB)". X is what is left for the KV cache after the
#   weights: X <= 0 means the utilization is too *small* (nothing left for the cache), a positive
#   X more than is free means it is too large. The two need opposite fixes, so they get
#   different classes (and different dominance).
_CPU_KV_REQUEST = re.compile(r"less than requested memory for kv \((-?[\d.]+)/[\d.]+ GiB\)")

# "ValueError: ...", "torch.OutOfMemoryError: ...", "RuntimeError: ..." at any prefix.
_EXCEPTION_LINE = re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception|Exit): \S")
# The API server's wrapper around the engine core's real error: never the best summary.
_GENERIC = re.compile(
    r"Engine core initialization failed|Frontend process failed|See root cause above"
)
_START_FAILED = re.compile(rf"EngineCore failed to start|{_GENERIC.pattern}")
# "(EngineCore_DP0 pid=12) ERROR 11-30 12:00:00 [core.py:1] " and similar.
_LOG_PREFIX = re.compile(
    r"^\s*(?:\([^)]*pid=\d+\)\s*)?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?"
    r"\s+\[[^\]]*\]\s*)?"
)
_SUMMARY_MAX = 400


def effective_backend(log: str) -> tuple[str | None, int | None]:
    """The attention backend and FlashAttention version the server reports using.

    The last report wins (a server may log a choice per engine process; they agree).
    ``(None, None)`` when the log does not say; a CPU server that logs no explicit choice
    is reported as ``CPU_ATTN``, the only backend vLLM's CPU platform runs for such models.
    """
    names = _BACKEND.findall(log)
    versions = _FA_VERSION.findall(log)
    backend = names[-1] if names else None
    if backend is None and _CPU_PLATFORM.search(log):
        backend = CPU_DEFAULT_BACKEND
    return backend, int(versions[-1]) if versions else None


def kv_cache_capacity(log: str) -> tuple[int | None, float | None]:
    """KV-cache capacity in tokens and the maximum concurrency at max-model-len."""
    tokens = _KV_TOKENS.findall(log)
    concurrency = _CONCURRENCY.findall(log)
    return (
        int(tokens[-1].replace(",", "")) if tokens else None,
        float(concurrency[-1]) if concurrency else None,
    )


def _clean(line: str) -> str:
    text = _LOG_PREFIX.sub("", line, count=1).strip()
    return text if len(text) <= _SUMMARY_MAX else text[: _SUMMARY_MAX - 3] + "..."


def start_failed(log: str) -> bool:
    """Whether vLLM has said that its start-up failed (the engine core's "EngineCore failed to
    start", the API server's wrapper), though its processes may still be going down."""
    return _START_FAILED.search(log) is not None


def classify_start_failure(log: str) -> tuple[FailureClass, str]:
    """Why a server exited during start-up, and the one log line that says so best.

    Known vLLM messages map to MEMORY_EXCEEDED, KV_CACHE_INSUFFICIENT or UNSUPPORTED
    (findings about the config); anything else is START_FAILED, summarised by the root
    exception line (not vLLM's generic "Engine core initialization failed" wrapper).
    """
    lines = log.splitlines()
    for line in lines:
        match = _CPU_KV_REQUEST.search(line)
        if match:
            too_small = float(match.group(1)) <= 0
            kind = FailureClass.KV_CACHE_INSUFFICIENT if too_small else FailureClass.MEMORY_EXCEEDED
            return kind, _clean(line)
    for failure, pattern in _FAILURES:
        for line in lines:
            if pattern.search(line):
                return failure, _clean(line)
    exceptions = [i for i, line in enumerate(lines) if _EXCEPTION_LINE.search(line)]
    specific = [i for i in exceptions if not _GENERIC.search(lines[i])]
    for candidates in (specific, exceptions, [i for i, line in enumerate(lines) if line.strip()]):
        if candidates:
            return FailureClass.START_FAILED, _clean(_with_reason(lines, candidates[-1]))
    return FailureClass.START_FAILED, "the server exited during start-up without any output"


# pydantic's "1 validation error for SchedulerConfig": the reason is on the lines below it
# ("Value error, max_num_batched_tokens (8) must be ... [type=value_error, ...]"), after the
# field's name for a field's error.
_VALIDATION = re.compile(r"\d+ validation errors? for \w+")


def _with_reason(lines: list[str], i: int) -> str:
    """``lines[i]``, with the reason of a pydantic validation error it announces."""
    head = lines[i]
    if not _VALIDATION.search(head):
        return head
    said: list[str] = []
    for line in lines[i + 1 : i + 6]:
        text = _LOG_PREFIX.sub("", line, count=1).strip()
        if "[type=" in text:
            said.append(text.split("[type=", 1)[0].strip())
            return f"{head.rstrip()}: {': '.join(said)}"
        if text:
            said.append(text)  # the field's name
    return head


# v1/executor/multiproc_executor.py: "Worker proc VllmWorker-0 died unexpectedly (exit code:
#   -4), shutting down executor." A negative code is the signal that ended the worker.
# Linux signal numbers of the deaths seen in practice.
_SIGNALS = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}
_WORKER_DIED = re.compile(r"Worker proc (\S+) died unexpectedly \(exit code: (-?\d+)\)")


def engine_death(log: str) -> str | None:
    """What ended a running server's engine, in one line, or None when its log does not say:
    the worker vLLM saw die, with its exit code and the signal's name (SIGILL: kernels the CPU
    cannot run; SIGKILL: most often the kernel's out-of-memory killer), else the root exception
    line of the engine core's traceback (not vLLM's generic wrapper)."""
    died = _WORKER_DIED.findall(log)
    if died:
        worker, code = died[0]
        number = int(code)
        name = f", {_SIGNALS[-number]}" if -number in _SIGNALS else ""
        return f"vLLM's worker {worker} died (exit code {number}{name})"
    engine = [line for line in log.splitlines() if "EngineCore" in line and " ERROR " in line]
    exceptions = [line for line in engine if _EXCEPTION_LINE.search(line)]
    specific = [line for line in exceptions if not _GENERIC.search(line)]
    if specific:
        return f"vLLM's engine core failed: {_clean(specific[0])}"
    return None
