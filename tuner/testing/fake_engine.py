"""The fake server's engine: a small performance model of vLLM's scheduler (decode slots,
step time growing with the batch, prefill per uncached prompt token, a prefix cache) and the
constants that describe what the fake accepts. Used by :mod:`tuner.testing.fake_server`."""

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

FAULTS = (
    "hang",
    "crash_at_start",
    "oom_at_start",
    "kv_at_start",
    "crash_mid_load",
    "stranger",
    "dies_on_short_first_prompt",
)
ENGINE_CORE_MARKER = "tuner-fake-engine-core"
FAKE_VLLM_VERSION = "0.32.0+fake"
STRANGER_MODEL = "someone-elses-model"
AUTO_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION")
KNOWN_BACKENDS = (*AUTO_BACKENDS, "CPU_ATTN", "TORCH_SDPA", "TREE_ATTN")
KV_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
KV_TOKENS_AT_FULL_MEMORY = 500_000  # fake KV capacity at --gpu-memory-utilization 1.0
PREFIX_BLOCK = 16  # prefix-cache block size in tokens
CHILD_CODE = (
    "import signal, sys, time\n"
    "if sys.argv[1] == '1': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "while True: time.sleep(3600)\n"
)


@dataclass
class FakeEngine:
    """Scheduler and counters behind the fake API: slots, queueing, prefix cache."""

    max_num_seqs: int
    step_s: float
    prefill_s_per_token: float = 20e-6
    kv_cache_tokens: int = 450_000
    enable_prefix_caching: bool = True
    running: int = 0
    waiting: int = 0
    tokens_in_use: int = 0
    counters: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(
            (
                "prompt_tokens",
                "generation_tokens",
                "num_preemptions",
                "prefix_cache_queries",
                "prefix_cache_hits",
            ),
            0.0,
        )
    )
    _seen: set[int] = field(default_factory=set)
    _slots: asyncio.Semaphore | None = None

    def _cached_tokens(self, prompt: Sequence[str]) -> int:
        if not self.enable_prefix_caching:
            return 0
        hits, h, hitting = 0, 0, True
        for start in range(0, len(prompt) - PREFIX_BLOCK + 1, PREFIX_BLOCK):
            h = hash((h, tuple(prompt[start : start + PREFIX_BLOCK])))
            hitting = hitting and h in self._seen
            hits += PREFIX_BLOCK if hitting else 0
            self._seen.add(h)
        return hits

    async def generate(self, prompt: Sequence[str], max_tokens: int) -> AsyncIterator[str]:
        """Yield ``max_tokens`` token texts, paced like a batching engine."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_num_seqs)
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        held = len(prompt)  # KV tokens this request holds
        self.tokens_in_use += held
        try:
            cached = self._cached_tokens(prompt)
            self.counters["prefix_cache_queries"] += len(prompt)
            self.counters["prefix_cache_hits"] += cached
            self.counters["prompt_tokens"] += len(prompt)
            await asyncio.sleep((len(prompt) - cached) * self.prefill_s_per_token)
            for i in range(max_tokens):
                await asyncio.sleep(self.step_s * (1.0 + 0.02 * (self.running - 1)))
                self.counters["generation_tokens"] += 1
                held += 1
                self.tokens_in_use += 1
                yield f" t{(len(prompt) * 31 + i * 7) % 1000}"
        finally:
            self.tokens_in_use -= held
            self.running -= 1
            self._slots.release()

    def metrics_text(self, model_name: str) -> str:
        labels = f'{{engine="0",model_name="{model_name}"}}'
        gauges = {
            "num_requests_running": self.running,
            "num_requests_waiting": self.waiting,
            "kv_cache_usage_perc": min(1.0, self.tokens_in_use / self.kv_cache_tokens),
        }
        lines = []
        for name, value in gauges.items():
            lines += [f"# TYPE vllm:{name} gauge", f"vllm:{name}{labels} {float(value)}"]
        for name, value in self.counters.items():
            lines += [f"# TYPE vllm:{name} counter", f"vllm:{name}_total{labels} {value}"]
        return "\n".join(lines) + "\n"
