"""What tuner knows about the ``vllm serve`` flags that matter beside its nine typed knobs: the
candidate values it tries, the rules that rule a combination out before launch, which vLLM
versions have the flag, and what each trades off.

Any flag of the installed vLLM can be searched (``--search FLAG=V1,V2``); the flags listed here
can also be searched with these candidates (``--search FLAG``, or ``[space] params``). None is
searched unless a study asks: the default space stays the nine typed knobs. ``versions`` says
what tuner checked against the flag lists it ships (``tuner/vllm/flag_lists``: 0.26.0, the H200
machine, and 0.32.0, the CPU build); whether the installed vLLM has the flag is asked of it.

A knob is a flag's dest (``stream_interval``) or a key inside a JSON-valued flag
(``compilation_config.cudagraph_mode``, rendered into one ``--compilation-config`` JSON).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from tuner.catalog.rules import effective_max_model_len
from tuner.domain import GpuProfile, ModelSpec, Regime, ServingConfig, Workload
from tuner.domain.config import Scalar

_BOTH = "0.26.0 and 0.32.0"
_NGRAM = (
    '{"method":"ngram","num_speculative_tokens":%d,"prompt_lookup_max":4,"prompt_lookup_min":2}'
)


@dataclass(frozen=True)
class Lever:
    knob: str
    tradeoff: str  # what it buys and what it costs, in a sentence or two
    gpu: tuple[Scalar, ...]  # candidates on a GPU (vLLM's default is always tried too)
    cpu: tuple[Scalar, ...] = ()  # candidates on the CPU build; () = not searched there
    versions: str = _BOTH  # the shipped flag lists that have it
    changes_outputs: bool = False  # opt-in only; every result and recommendation says so
    smoothness: bool = False  # makes streaming burstier: the chunk gap (P99 ITL) grows
    multi_gpu: bool = False  # one server over several GPUs
    # What tuner measured with it, where: confirmed ratios with their intervals, never a single
    # launch's figure as an effect (a single launch is said to be one).
    measured: str = ""

    def candidates(self, gpu: GpuProfile) -> tuple[Scalar, ...]:
        return self.cpu if gpu.is_cpu else self.gpu


LEVERS: Mapping[str, Lever] = {
    lever.knob: lever
    for lever in (
        Lever(
            "stream_interval",
            "sends N tokens per streamed chunk instead of one: less API-server work per token "
            "(detokenizing, JSON, HTTP), so more throughput and lower end-to-end latency at "
            "high concurrency; the text arrives N tokens at a time, so the gap between chunks "
            "(P99 ITL as tuner measures it) grows about N-fold",
            gpu=(2, 4, 8, 16),
            cpu=(4, 8),
            versions=f"{_BOTH}; added by vllm-project/vllm PR #27869 (Nov 2025)",
            smoothness=True,
            measured="H200, vLLM 0.26, ernie-0.3b, 256 streams (docs/results/"
            "ernie-0.3b-h200-heavy.md): confirmed with --async-scheduling at --stream-interval 4, "
            "three launches a side: output tok/s +35 % [-4, +92] (95 %, not significant), P99 "
            "TTFT -77 % [-80, -72] and P99 E2E -27 % [-44, -6] (significant), P99 chunk gap "
            "x2.5 [1.6, 3.8] (significantly worse); --stream-interval 8 alone was never "
            "confirmed (single-launch observations only: 1.2-2.3x the defaults' output tok/s in "
            "one launch each, within what launch noise and the winner's curse give)",
        ),
        Lever(
            "async_scheduling",
            "schedules the next step while the GPU runs the current one: fewer idle gaps "
            "between steps (throughput, ITL); not every feature combines with it",
            gpu=(True, False),
        ),
        Lever(
            "api_server_count",
            "runs N API-server processes that share the HTTP, tokenizing and detokenizing "
            "work: helps when the frontend, not the GPU, is the bottleneck (many streams, small "
            "model); each costs a CPU core and its memory",
            gpu=(2, 4),
        ),
        Lever(
            "max_num_partial_prefills",
            "lets N prompts be part-way through chunked prefill at once, so short prompts need "
            "not wait behind a long one: lower TTFT for mixed prompt lengths, for some "
            "throughput",
            gpu=(2, 4),
            versions="0.26.0; not in 0.32.0",
        ),
        Lever(
            "long_prefill_token_threshold",
            "with chunked prefill, caps the tokens a long prompt gets per step (0: no cap): "
            "decodes and short prompts keep moving beside long prompts (ITL, TTFT of short "
            "prompts) while long prompts take longer to their first token",
            gpu=(256, 1024),
        ),
        Lever(
            "enable_chunked_prefill",
            "splits long prompts across steps, mixed with decodes (vLLM's default: on): "
            "smoother ITL; off, each prompt is prefilled whole, which can raise throughput for "
            "short prompts but stalls decodes behind long ones",
            gpu=(False,),
        ),
        Lever(
            "block_size",
            "tokens per KV-cache block: larger blocks mean smaller block tables and less "
            "per-step bookkeeping, but more memory wasted at the end of every sequence and "
            "coarser prefix-cache hits",
            gpu=(16, 32, 64, 128),
        ),
        Lever(
            "optimization_level",
            "how much vLLM compiles before serving (-O0: nothing, eager; -O3: most; vLLM's "
            "default: -O2): higher levels trade startup time for faster steps",
            gpu=(0, 1, 3),
        ),
        Lever(
            "compilation_config.cudagraph_mode",
            "which steps replay CUDA graphs (NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, "
            "FULL_AND_PIECEWISE): full graphs cut kernel-launch overhead most, at more graph "
            "memory and startup time; not every attention backend supports them",
            gpu=("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"),
        ),
        Lever(
            "compilation_config.max_cudagraph_capture_size",
            "the largest batch captured as a CUDA graph (vLLM's default: min(2 x "
            "max_num_seqs, 512)): larger batches run without graphs; capturing more costs "
            "startup time and GPU memory taken from the KV cache",
            gpu=(128, 256, 512, 1024),
        ),
        Lever(
            "speculative_config",
            "n-gram speculative decoding (no draft model): proposes tokens by matching the "
            "prompt and verifies them in one step; faster decode when outputs repeat the prompt "
            "(code edits, quoting RAG), wasted verification compute otherwise and at large "
            "batches. On random weights (tuner's dummy checkpoints) acceptance is not a real "
            "model's: measure it with real weights",
            gpu=(_NGRAM % 3, _NGRAM % 5),
        ),
        Lever(
            "data_parallel_size",
            "N engine replicas behind one server, one per GPU: up to N times the throughput "
            "for N times the GPUs, on hosts with several GPUs",
            gpu=(2, 4, 8),
            multi_gpu=True,
        ),
        Lever(
            "quantization",
            "quantizes the weights at load time (fp8: half the weight memory of bf16, faster "
            "matrix multiplies on GPUs with fp8 units), which changes the model's outputs: "
            "opt-in only, and labelled so in every result",
            gpu=("fp8",),
            changes_outputs=True,
        ),
    )
}
_GRAPH_KNOBS = (
    "compilation_config.cudagraph_mode",
    "compilation_config.max_cudagraph_capture_size",
    "max_cudagraph_capture_size",
)
_DRAFTLESS = (None, "ngram", "ngram_gpu", "suffix")  # speculative methods without a draft model


def get(knob: str) -> Lever | None:
    return LEVERS.get(knob)


def vllm_default(
    knob: str,
    gpu: GpuProfile,
    fixed: Mapping[str, object] | None = None,
    declared: Mapping[str, object] | None = None,
) -> Scalar | None:
    """What vLLM's ``serve`` resolves ``knob`` to on ``gpu`` when no flag sets it, with the
    knobs ``fixed`` set as given, where that depends on the hardware (and, for CUDA graphs, on
    the compilation level) and tuner knows it; None where it does not. Checked against vLLM
    0.32.0's ``EngineArgs`` defaults and vLLM 0.26.0's start-up log on the H200 (its engine
    config: ``cudagraph_mode`` FULL_AND_PIECEWISE, ``max_num_batched_tokens=8192``): 80 GiB
    class GPUs other than the A100 batch up to 1,024 sequences and 8,192 tokens a step, GPUs of
    160 GiB or more 1,024 and 16,384, others 256 and 2,048, the CPU build 128 and 2,048.

    ``declared``: the defaults the installed vLLM's ``serve`` declares, by dest (its flag
    list). Where it declares ``async_scheduling`` None (0.26.0 does), vLLM decides, and on a GPU
    it turns async scheduling on: every server of 0.26.0 on the H200 started without the flag
    logged "Asynchronous scheduling is enabled" (docs/results/plan-h200.md §9). A vLLM that
    declares False does not; with speculative decoding or pipeline parallelism tuner cannot
    tell."""
    if gpu.is_cpu:
        return {"max_num_seqs": 128, "max_num_batched_tokens": 2048}.get(knob)
    fixed = fixed or {}
    if knob == "async_scheduling":
        if fixed.get("speculative_config") or fixed.get("pipeline_parallel_size", 1) != 1:
            return None
        said = (declared or {}).get(knob, "unknown")
        return True if said is None else said if isinstance(said, bool) else None
    if knob == "compilation_config.cudagraph_mode":
        if fixed.get("enforce_eager") or fixed.get("optimization_level") not in (None, 2):
            return None  # the default holds at -O2 (vLLM's default level) with graphs on
        return "FULL_AND_PIECEWISE"
    big = gpu.memory_gib >= 160 or (gpu.memory_gib >= 70 and "a100" not in gpu.name.lower())
    if knob == "max_num_seqs":
        return 1024 if big else 256
    if knob == "max_num_batched_tokens":
        return 16384 if gpu.memory_gib >= 160 else 8192 if big else 2048
    return None


def output_changing(config: ServingConfig) -> list[str]:
    """The set knobs of ``config`` that change the model's outputs (``quantization=fp8``)."""
    return [f"{k}={v}" for k, v in config.extra.items() if (lv := get(k)) and lv.changes_outputs]


def smoothness_knobs(config: ServingConfig) -> list[str]:
    """The set knobs of ``config`` that make streaming burstier (``stream_interval=8``)."""
    return [f"{k}={v}" for k, v in config.extra.items() if (lv := get(k)) and lv.smoothness]


def violations(
    model: ModelSpec, gpu: GpuProfile, workload: Workload, config: ServingConfig
) -> list[str]:
    """Why the extra knobs of ``config`` cannot work here, one sentence each (the typed knobs'
    rules are :func:`tuner.catalog.rules.violations`)."""
    x = config.extra
    out: list[str] = []
    chunked = x.get("enable_chunked_prefill", True)
    max_len = effective_max_model_len(model, config)
    batched = config.max_num_batched_tokens
    if chunked is False and batched is not None and max_len is not None and batched < max_len:
        out.append(
            f"without chunked prefill vLLM refuses max_num_batched_tokens ({batched}) below "
            f"max_model_len ({max_len}): a whole prompt must fit in one step"
        )
    partial = x.get("max_num_partial_prefills")
    if chunked is False and (partial not in (None, 1) or x.get("long_prefill_token_threshold")):
        out.append(
            "max_num_partial_prefills and long_prefill_token_threshold apply to chunked "
            "prefill only, and enable_chunked_prefill is false"
        )
    threshold = x.get("long_prefill_token_threshold")
    if isinstance(threshold, int) and max_len is not None and threshold > max_len:
        out.append(
            f"vLLM refuses long_prefill_token_threshold ({threshold}) above max_model_len "
            f"({max_len})"
        )
    graphs = [k for k in _GRAPH_KNOBS if k in x]
    eager = bool(config.enforce_eager) or x.get("optimization_level") == 0
    if graphs and eager:
        why = "enforce_eager" if config.enforce_eager else "optimization_level 0 (-O0)"
        out.append(f"{why} turns CUDA graphs off, so {', '.join(graphs)} would change nothing")
    if gpu.is_cpu and "async_scheduling" in x:
        out.append("vLLM's CPU build turns async scheduling off whatever the flag says")
    if gpu.is_cpu and graphs:
        out.append(f"vLLM's CPU build captures no CUDA graphs, so {', '.join(graphs)} does nothing")
    dp = x.get("data_parallel_size")
    if isinstance(dp, int) and dp > 1 and not gpu.is_cpu:
        out.append(
            f"data_parallel_size={dp} needs {dp} GPUs for one server, and tuner measures one "
            "GPU per launch (the runner pins each server to the measured GPU)"
        )
    speculative = x.get("speculative_config")
    if isinstance(speculative, str) and json.loads(speculative).get("method") not in _DRAFTLESS:
        out.append(
            "tuner searches speculative decoding without a draft model only (method ngram): "
            "a draft model or head is a different deployment, not a serving knob"
        )
    return out


@dataclass(frozen=True)
class Move:
    """A knob worth searching in a regime: ``screen`` is the value measured once against the
    defaults when the plan is screened (the lever's likeliest pay-off), ``why`` says what it
    does about the bottleneck, ``way`` which side of vLLM's own default on the GPU pays
    (+1 above it, -1 below it, 0 either): "larger batches" at 512 sequences would be smaller
    ones on an H200, whose default is 1,024."""

    knob: str
    screen: Scalar | None  # None: the knob's first built-in candidate
    why: str
    way: int = 0


# What moves each bottleneck, likeliest first (typed knobs and levers alike). The defaults'
# trial names the regime (tuner.scoring.regime); the plan searches these (tuner.study.plan).
MOVES: Mapping[Regime, tuple[Move, ...]] = {
    Regime.FRONTEND: (
        Move("stream_interval", 8, "N tokens per streamed chunk: N times less API-server work"),
        Move("api_server_count", 4, "the HTTP and detokenizing work spread over processes"),
        Move("async_scheduling", True, "the engine schedules while the GPU runs"),
        Move("max_num_seqs", 512, "larger batches once the frontend keeps up", +1),
    ),
    Regime.SCHEDULER: (
        Move("async_scheduling", True, "scheduling overlapped with the GPU's step"),
        Move("compilation_config.cudagraph_mode", "FULL_AND_PIECEWISE", "fewer kernel launches"),
        Move("stream_interval", 8, "less output processing per token"),
        Move("max_num_seqs", 512, "more work per scheduled step", +1),
    ),
    Regime.KV_CACHE: (
        Move("gpu_memory_utilization", 0.95, "more memory for the KV cache"),
        Move("kv_cache_dtype", "fp8", "twice the KV tokens in the same memory"),
        Move("max_num_seqs", 64, "fewer sequences competing for the cache: fewer preemptions", -1),
        Move("max_model_len", None, "a shorter context limit, near the longest request"),
        Move("block_size", 32, "less memory lost to half-empty blocks"),
    ),
    Regime.PREFILL: (
        Move("max_num_batched_tokens", 16384, "more prompt tokens per step", +1),
        Move("enable_prefix_caching", True, "shared prefixes prefilled once"),
        Move("long_prefill_token_threshold", 1024, "long prompts stop blocking short ones"),
        Move("max_num_partial_prefills", 4, "several prompts prefilled side by side"),
        Move("enable_chunked_prefill", False, "whole prompts in one step"),
    ),
    Regime.DECODE: (
        Move("max_num_seqs", 512, "larger decode batches", +1),
        Move("compilation_config.cudagraph_mode", "FULL_AND_PIECEWISE", "graphs for decode"),
        Move("kv_cache_dtype", "fp8", "less KV memory read per decoded token"),
        Move("async_scheduling", True, "no idle gap between decode steps"),
        Move("attention_backend", "FLASHINFER", "another attention kernel"),
    ),
    Regime.LIGHT_LOAD: (
        Move("async_scheduling", True, "no idle gap between steps of a small batch"),
        Move("compilation_config.cudagraph_mode", "FULL", "one graph per small decode step"),
        Move("attention_backend", "FLASHINFER", "another attention kernel"),
        Move("max_num_batched_tokens", 16384, "a prompt prefilled in fewer steps", +1),
    ),
}

# Knobs of the card that no plan searches, and why (the plan prints these beside its own).
NOT_PLANNED: Mapping[str, str] = {
    "enforce_eager": "no CUDA graphs is never faster under load",
    "flash_attn_version": "one FlashAttention per GPU generation is the fast one",
}
