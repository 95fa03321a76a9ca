"""The fake server's engine: a small performance model of vLLM's scheduler (decode slots,
step time growing with the batch, prefill per uncached prompt token, a prefix cache, a KV cache
of fixed capacity with preemption) and the constants that describe what the fake accepts. Used
by :mod:`tuner.testing.fake_server`."""

import asyncio
import time
from collections import deque
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
# Which resource runs out first (TUNER_FAKE_REGIME): "" none in particular (the fake as it always
# was), "frontend" the API server's CPU, "kv" the KV cache.
REGIMES = ("", "frontend", "kv")
ENGINE_CORE_MARKER = "tuner-fake-engine-core"
FAKE_VLLM_VERSION = "0.32.0+fake"
STRANGER_MODEL = "someone-elses-model"
AUTO_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION")
KNOWN_BACKENDS = (*AUTO_BACKENDS, "CPU_ATTN", "TORCH_SDPA", "TREE_ATTN")
KV_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
KV_TOKENS_AT_FULL_MEMORY = 500_000  # fake KV capacity at --gpu-memory-utilization 1.0
# The "kv" regime's default TUNER_FAKE_KV_SCALE: 7,500 KV tokens at utilization 0.9, where the
# "chat" workload's 16 streams (512 + 256 tokens each at their longest) need 12,288.
KV_REGIME_SCALE = 1 / 60
FRONTEND_CHUNK_CPU_MS = 1.5  # the "frontend" regime's default TUNER_FAKE_CHUNK_CPU_MS
ASYNC_SCHEDULING_STEP = 0.85  # a step's time with --async-scheduling, relative to without
PREFIX_BLOCK = 16  # prefix-cache block size in tokens
# vLLM 0.32's buckets for its request-latency histograms (vllm.v1.metrics.loggers), seconds.
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
# vLLM's counters the fake keeps (exposed with ``_total``).
COUNTERS = (
    "prompt_tokens",
    "generation_tokens",
    "num_preemptions",
    "prefix_cache_queries",
    "prefix_cache_hits",
)
# The histograms vLLM keeps per finished request, by name, with vLLM's help text.
HISTOGRAMS = {
    "e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
    "request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
}
CHILD_CODE = (
    "import signal, sys, time\n"
    "if sys.argv[1] == '1': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "while True: time.sleep(3600)\n"
)


@dataclass
class Histogram:
    """A Prometheus histogram over :data:`LATENCY_BUCKETS`: cumulative counts, sum, count."""

    buckets: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for i, bound in enumerate(LATENCY_BUCKETS):
            if value <= bound:
                self.buckets[i] += 1

    def lines(self, name: str, labels: str) -> list[str]:
        """The exposition lines after ``# TYPE``; ``labels`` is ``key="value",...``."""
        out = [
            f'{name}_bucket{{{labels},le="{bound}"}} {float(n)}'
            for bound, n in zip(LATENCY_BUCKETS, self.buckets, strict=True)
        ]
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(self.count)}')
        out.append(f"{name}_count{{{labels}}} {float(self.count)}")
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        return out


@dataclass(eq=False)
class _Sequence:
    """One request's place in the KV cache: the tokens it holds, whether it was preempted."""

    held: int = 0
    preempted: bool = False


@dataclass
class FakeEngine:
    """Scheduler and counters behind the fake API: slots, queueing, KV cache, prefix cache.

    At most ``max_num_seqs`` requests hold a slot. A request with a slot is admitted once its
    prompt fits in the ``kv_cache_tokens`` left (first come, first served; preempted requests
    first); each token it generates takes one more KV token. When none is left, the request
    admitted last is preempted, as vLLM's scheduler does: it gives back all its KV tokens and
    waits to be admitted again with its whole sequence, then recomputes it (prefill time per
    token, the prefix cache not consulted)."""

    max_num_seqs: int
    step_s: float
    prefill_s_per_token: float = 20e-6
    kv_cache_tokens: int = 450_000
    enable_prefix_caching: bool = True
    waiting: int = 0
    tokens_in_use: int = 0
    counters: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0.0))
    histograms: dict[str, Histogram] = field(
        default_factory=lambda: {name: Histogram() for name in HISTOGRAMS}
    )
    _seen: set[int] = field(default_factory=set)
    _slots: asyncio.Semaphore | None = None
    _admitted: list[_Sequence] = field(default_factory=list)  # admission order
    _queue: deque[tuple[_Sequence, int, asyncio.Future[None]]] = field(default_factory=deque)

    @property
    def running(self) -> int:
        """Requests admitted to the KV cache and not preempted."""
        return len(self._admitted)

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

    def _take(self, seq: _Sequence, tokens: int) -> None:
        seq.held, seq.preempted = tokens, False
        self.tokens_in_use += tokens
        self._admitted.append(seq)

    def _admit_waiting(self) -> None:
        """Admit queued requests in order while the first one's tokens fit."""
        while self._queue:
            seq, tokens, admitted = self._queue[0]
            if admitted.done():  # its request was cancelled while queued
                self._queue.popleft()
                continue
            if self.tokens_in_use + tokens > self.kv_cache_tokens and self._admitted:
                return  # (with nothing admitted, even a sequence too long for the cache goes)
            self._queue.popleft()
            self._take(seq, tokens)
            admitted.set_result(None)

    async def _admission(self, seq: _Sequence, tokens: int, *, first: bool) -> None:
        """Wait until ``seq`` holds ``tokens`` KV tokens; ``first`` puts it ahead of the queue."""
        if not self._queue and self.tokens_in_use + tokens <= self.kv_cache_tokens:
            self._take(seq, tokens)
            return
        admitted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (seq, tokens, admitted)
        if first:
            self._queue.appendleft(entry)
        else:
            self._queue.append(entry)
        self._admit_waiting()
        await admitted

    def _grow(self, seq: _Sequence) -> bool:
        """One more KV token for ``seq``, preempting the request admitted last while none is
        free; False when that request was ``seq`` itself."""
        preempted = False
        while self.tokens_in_use >= self.kv_cache_tokens and len(self._admitted) > 1:
            victim = self._admitted.pop()
            self.tokens_in_use -= victim.held
            victim.held, victim.preempted = 0, True
            self.counters["num_preemptions"] += 1
            preempted = True
            if victim is seq:
                return False
        seq.held += 1
        self.tokens_in_use += 1
        if not preempted:  # vLLM admits no waiting request in a step that preempted
            self._admit_waiting()
        return True

    def _leave(self, seq: _Sequence) -> None:
        if seq in self._admitted:
            self._admitted.remove(seq)
            self.tokens_in_use -= seq.held
            seq.held = 0
        self._admit_waiting()

    async def generate(self, prompt: Sequence[str], max_tokens: int) -> AsyncIterator[str]:
        """Yield ``max_tokens`` token texts, paced like a batching engine; a request that runs
        to its end adds its phases' times to :attr:`histograms`."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_num_seqs)
        arrived = time.perf_counter()
        seq = _Sequence()
        self.waiting += 1
        try:
            await self._slots.acquire()
            try:
                await self._admission(seq, len(prompt), first=False)
            except BaseException:
                self._leave(seq)
                self._slots.release()
                raise
        finally:
            self.waiting -= 1
        scheduled = time.perf_counter()
        first_token = None
        try:
            cached = self._cached_tokens(prompt)
            self.counters["prefix_cache_queries"] += len(prompt)
            self.counters["prefix_cache_hits"] += cached
            self.counters["prompt_tokens"] += len(prompt)
            await asyncio.sleep((len(prompt) - cached) * self.prefill_s_per_token)
            made = 0
            while made < max_tokens:
                await asyncio.sleep(self.step_s * (1.0 + 0.02 * (self.running - 1)))
                if seq.preempted:
                    await self._resume(seq, len(prompt) + made)
                    continue
                if not self._grow(seq):
                    continue  # preempted itself: no token this step
                made += 1
                self.counters["generation_tokens"] += 1
                if first_token is None:
                    first_token = time.perf_counter()
                yield f" t{(len(prompt) * 31 + (made - 1) * 7) % 1000}"
            self._observe(arrived, scheduled, first_token)
        finally:
            self._leave(seq)
            self._slots.release()

    async def _resume(self, seq: _Sequence, tokens: int) -> None:
        """Readmit a preempted request with its whole sequence, then recompute it."""
        self.waiting += 1
        try:
            await self._admission(seq, tokens, first=True)
        finally:
            self.waiting -= 1
        await asyncio.sleep(tokens * self.prefill_s_per_token)

    def _observe(self, arrived: float, scheduled: float, first_token: float | None) -> None:
        done = time.perf_counter()
        first = done if first_token is None else first_token
        for name, seconds in (
            ("e2e_request_latency_seconds", done - arrived),
            ("request_queue_time_seconds", scheduled - arrived),
            ("request_inference_time_seconds", done - scheduled),
            ("request_prefill_time_seconds", first - scheduled),
            ("request_decode_time_seconds", done - first),
        ):
            self.histograms[name].observe(seconds)

    def metrics_text(self, model_name: str) -> str:
        inner = f'engine="0",model_name="{model_name}"'
        labels = f"{{{inner}}}"
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
        for name, histogram in self.histograms.items():
            lines += [f"# HELP vllm:{name} {HISTOGRAMS[name]}", f"# TYPE vllm:{name} histogram"]
            lines += histogram.lines(f"vllm:{name}", inner)
        return "\n".join(lines) + "\n"
