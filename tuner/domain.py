"""The nouns of tuner: frozen records and small enums, no I/O.

Every other module speaks in these types. They are plain dataclasses so that they can be
built in tests without any machinery, compared by value and turned into JSON with
:func:`to_jsonable`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class TrialStatus(enum.StrEnum):
    """Outcome of one trial as tuner sees it."""

    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    # Never launched: the validity rules or an earlier failure ruled the config out.
    PRUNED = "pruned"

    def is_finished(self) -> bool:
        return self is not TrialStatus.RUNNING


class FailureClass(enum.StrEnum):
    """Why a trial did not produce a measurement.

    *Findings* say something about the configuration (it does not fit, it is not valid) and
    are reported to the sampler as infeasible; they are never retried. The other classes are
    faults of the environment or the server, which may be retried.
    """

    INVALID_CONFIG = "invalid_config"  # ruled out by the space rules before any launch
    DOMINATED = "dominated"  # at least as demanding as a config that already did not fit
    MEMORY_EXCEEDED = "memory_exceeded"  # requested memory (utilization) not available
    KV_CACHE_INSUFFICIENT = "kv_cache_insufficient"  # max-model-len does not fit the KV cache
    UNSUPPORTED = "unsupported"  # backend / dtype rejected by this vLLM on this hardware
    START_FAILED = "start_failed"  # exited during start-up for another reason
    TIMEOUT = "timeout"  # not ready before the deadline
    CRASHED = "crashed"  # died while under load
    STRANGER = "stranger"  # the port was answered by a server that is not ours
    LOAD_ERRORS = "load_errors"  # too many requests failed to count as a measurement
    INTERRUPTED = "interrupted"  # the tuner itself stopped mid-trial
    INFRA = "infra"  # anything else outside the configuration

    @property
    def is_finding(self) -> bool:
        return self in _FINDINGS


_FINDINGS = frozenset(
    {
        FailureClass.INVALID_CONFIG,
        FailureClass.DOMINATED,
        FailureClass.MEMORY_EXCEEDED,
        FailureClass.KV_CACHE_INSUFFICIENT,
        FailureClass.UNSUPPORTED,
    }
)


class Objective(enum.StrEnum):
    """Ranking presets; see :mod:`tuner.scoring.objectives` for the exact formulas."""

    BALANCED = "balanced"
    THROUGHPUT = "throughput"
    LATENCY = "latency"
    MEMORY = "memory"
    # The highest throughput of the launch's load curve whose P99 latencies meet the SLO.
    CAPACITY = "capacity"


@dataclass(frozen=True)
class ServingConfig:
    """The vLLM knobs tuner searches. ``None`` means "leave vLLM's default alone".

    ``ServingConfig()`` is therefore vLLM's defaults: the baseline trial of every study.
    """

    attention_backend: str | None = None  # e.g. FLASH_ATTN, FLASHINFER, TRITON_ATTN, CPU_ATTN
    flash_attn_version: int | None = None  # 2 or 3, only with FLASH_ATTN
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    enable_prefix_caching: bool | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str | None = None  # "auto", "fp8", "fp8_e4m3", "fp8_e5m2", ...
    enforce_eager: bool | None = None

    def is_default(self) -> bool:
        return self == ServingConfig()

    def to_dict(self) -> dict[str, Any]:
        """Only the knobs that are set; ``{}`` for the defaults."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServingConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown serving parameter(s) {unknown}; known: {sorted(names)}")
        return cls(**dict(data))

    def replace(self, **changes: Any) -> ServingConfig:
        return dataclasses.replace(self, **changes)

    def label(self) -> str:
        items = self.to_dict()
        if not items:
            return "defaults"
        return ",".join(f"{k}={v}" for k, v in items.items())


@dataclass(frozen=True)
class ModelSpec:
    """A model as tuner needs it: what to pass to vLLM and the architecture facts.

    ``config`` holds the ``config.json`` facts. A catalogued model runs with random weights
    (``--load-format dummy``) from a directory tuner writes; ``source`` set to a local
    directory or hub id makes vLLM load the real weights instead.
    """

    alias: str
    hub_id: str
    config: Mapping[str, Any]
    source: str | None = None  # a local directory or hub id with real weights
    dtype: str = "bfloat16"
    notes: str = ""
    # False for test architectures that exist only as config facts (tiny-ernie): there are no
    # weights to load, so a ready `vllm serve` line must keep --load-format dummy.
    weights_available: bool = True

    @property
    def architecture(self) -> str:
        archs = self.config.get("architectures") or ["?"]
        return str(archs[0])

    @property
    def max_position_embeddings(self) -> int:
        return int(self.config.get("max_position_embeddings", 2048))

    @property
    def vocab_size(self) -> int:
        return int(self.config["vocab_size"])

    @property
    def num_layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def num_kv_heads(self) -> int:
        c = self.config
        return int(c.get("num_key_value_heads", c["num_attention_heads"]))

    @property
    def head_dim(self) -> int:
        c = self.config
        return int(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])

    def kv_bytes_per_token(self, kv_dtype_bytes: int = 2) -> int:
        """Bytes of KV cache one token occupies across all layers (K and V)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * kv_dtype_bytes

    def parameter_count(self) -> int:
        """Approximate parameter count of a dense decoder from its config."""
        c = self.config
        h = int(c["hidden_size"])
        inter = int(c.get("intermediate_size", 4 * h))
        n_heads = int(c["num_attention_heads"])
        attn = h * (n_heads * self.head_dim) * 2 + h * (self.num_kv_heads * self.head_dim) * 2
        mlp = 3 * h * inter
        per_layer = attn + mlp + 2 * h
        emb = self.vocab_size * h
        lm_head = 0 if c.get("tie_word_embeddings", False) else emb
        return self.num_layers * per_layer + emb + lm_head + h

    def weight_bytes(self) -> int:
        per_param = 4 if self.dtype in ("float32", "float") else 2
        return self.parameter_count() * per_param


@dataclass(frozen=True)
class GpuProfile:
    """What tuner knows about a kind of accelerator (or ``cpu``)."""

    name: str  # catalog key: a10g, h100, cpu, ...
    display_name: str
    memory_gib: float
    compute_capability: tuple[int, int] | None  # None for cpu
    attention_backends: tuple[str, ...]
    flash_attn_versions: tuple[int, ...]
    kv_cache_dtypes: tuple[str, ...]
    nvml_names: tuple[str, ...] = ()  # substrings of NVML's device name that identify it

    @property
    def is_cpu(self) -> bool:
        return self.compute_capability is None

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * 1024**3)


@dataclass(frozen=True)
class TraceRequest:
    prompt_tokens: int
    output_tokens: int
    arrival_s: float  # offset from the start of the replay


@dataclass(frozen=True)
class Workload:
    """A load shape. Token counts are means; lengths vary by ``length_jitter`` around them.

    ``request_rate`` None means closed-loop at ``concurrency`` streams; a number means Poisson
    arrivals at that many requests per second (``concurrency`` then caps requests in flight).
    """

    name: str
    prompt_tokens: int
    output_tokens: int
    shared_prefix_tokens: int = 0  # e.g. a system prompt shared by every request
    concurrency: int = 8
    request_rate: float | None = None
    requests_per_window: int = 64
    windows: int = 3
    warmup_requests: int = 16
    length_jitter: float = 0.25
    seed: int = 0
    trace: tuple[TraceRequest, ...] | None = None
    # A load curve: the same server measured at several concurrency levels (closed loop) or
    # Poisson request rates, lowest first; empty means the one load point above.
    concurrency_ladder: tuple[int, ...] = ()
    rate_ladder: tuple[float, ...] = ()

    def replace(self, **changes: Any) -> Workload:
        return dataclasses.replace(self, **changes)

    def load_points(self) -> tuple[Workload, ...]:
        """This workload at each point of its ladder, lowest load first; itself when there
        is no ladder. A rate ladder keeps ``concurrency`` as the cap on requests in flight.

        A closed-loop window sends at least four requests per stream: with fewer, most of it
        would be ramp-up and drain, and the point would never hold its concurrency."""
        if self.concurrency_ladder:
            return tuple(
                self.replace(
                    concurrency=c,
                    request_rate=None,
                    requests_per_window=max(self.requests_per_window, 4 * c),
                    concurrency_ladder=(),
                    rate_ladder=(),
                )
                for c in sorted(set(self.concurrency_ladder))
            )
        if self.rate_ladder:
            return tuple(
                self.replace(request_rate=r, concurrency_ladder=(), rate_ladder=())
                for r in sorted(set(self.rate_ladder))
            )
        return (self,)

    @property
    def max_request_tokens(self) -> int:
        """Longest prompt+output a request of this workload can need."""
        if self.trace:
            return max(r.prompt_tokens + r.output_tokens for r in self.trace)
        grow = 1.0 + self.length_jitter
        return int(self.prompt_tokens * grow) + int(self.output_tokens * grow) + 1


@dataclass(frozen=True)
class Slo:
    """Service-level objectives, in milliseconds; None means unconstrained."""

    ttft_p99_ms: float | None = None
    itl_p99_ms: float | None = None
    e2e_p99_ms: float | None = None

    def is_empty(self) -> bool:
        return self == Slo()


@dataclass(frozen=True)
class LatencyStats:
    """One latency in milliseconds over the requests (or chunk gaps) of one window.

    Definitions follow ``vllm bench serve``: mean, median (``p50``), population ``std``, and
    linearly interpolated percentiles.
    """

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float
    std: float | None = None  # None in records written before tuner kept it


@dataclass(frozen=True)
class RequestRecord:
    """One request as the client saw it. Times in seconds; ``start_s`` from the window start.

    ``itl_s`` holds every gap between two streamed chunks with choices, in order (vLLM's ITL,
    pooled over requests); ``ttft_s`` is the first such chunk, ``e2e_s`` the end of the stream.
    """

    ok: bool
    prompt_tokens: int
    output_tokens: int
    start_s: float
    ttft_s: float | None
    e2e_s: float | None
    itl_s: tuple[float, ...] = ()
    error: str | None = None

    @property
    def itl_mean_s(self) -> float | None:
        return sum(self.itl_s) / len(self.itl_s) if self.itl_s else None

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: ``(E2E - TTFT) / (output tokens - 1)``, as
        ``vllm bench serve`` defines it; None for one output token or a failed request."""
        if self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(frozen=True)
class ClientHealth:
    """How the load generator itself fared during one window (see :mod:`tuner.load.selfcheck`).

    ``client_cpu`` is the generator's CPU time over the window's wall time (1.0 = one core
    busy); ``loop_lag_*`` how late its event loop woke up. ``others_cpu`` is host CPU used by
    processes that are neither the generator nor the server (None when the server's processes
    are unknown), ``other_gpu_processes`` processes on the measured GPUs that are not the
    server's. ``client_bound`` and ``disturbed`` are the verdicts, ``notes`` say why.
    """

    client_cpu: float
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    host_cpu: float
    host_cores: int
    others_cpu: float | None = None
    other_gpu_processes: int = 0
    client_bound: bool = False
    disturbed: bool = False
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class WindowMetrics:
    """One measurement window of a trial, at one load point.

    ``itl_ms`` is pooled over every chunk gap of the window's requests and ``tpot_ms`` over
    requests, as ``vllm bench serve`` computes them. ``concurrency`` / ``request_rate`` name the
    load point (``request_rate`` None: closed loop); ``client`` the generator's self-check.
    """

    duration_s: float
    requests_ok: int
    requests_failed: int
    prompt_tokens: int
    output_tokens: int
    request_throughput: float  # req/s
    output_throughput: float  # tok/s
    total_throughput: float  # (prompt+output) tok/s
    ttft_ms: LatencyStats
    itl_ms: LatencyStats
    e2e_ms: LatencyStats
    goodput: float | None = None  # req/s meeting the SLO, None without SLO
    tpot_ms: LatencyStats | None = None
    concurrency: int | None = None
    request_rate: float | None = None
    client: ClientHealth | None = None

    @property
    def error_rate(self) -> float:
        n = self.requests_ok + self.requests_failed
        return self.requests_failed / n if n else 1.0

    @property
    def client_bound(self) -> bool:
        return self.client is not None and self.client.client_bound

    @property
    def disturbed(self) -> bool:
        return self.client is not None and self.client.disturbed


@dataclass(frozen=True)
class Estimate:
    """A metric over several windows: the median, the range (``low`` = smallest, ``high`` =
    largest window value) and the raw values. Within one launch this is a range, not a
    confidence interval: three windows cannot support a 95 % claim. Intervals that are
    confidence intervals (across launches) live in :mod:`tuner.scoring.significance`."""

    median: float
    low: float
    high: float
    values: tuple[float, ...]

    def overlaps(self, other: Estimate) -> bool:
        return self.low <= other.high and other.low <= self.high


@dataclass(frozen=True)
class MemoryUsage:
    """Peak memory a trial used. GPU: per GPU UUID, over the pre-trial baseline."""

    gpu_peak_bytes: Mapping[str, int] = field(default_factory=dict)
    gpu_baseline_bytes: Mapping[str, int] = field(default_factory=dict)
    host_peak_rss_bytes: int | None = None

    @property
    def gpu_total_peak_bytes(self) -> int:
        return sum(self.gpu_peak_bytes.values())

    @property
    def headline_bytes(self) -> int | None:
        """GPU memory where there is a GPU, the server's RSS otherwise."""
        if self.gpu_peak_bytes:
            return self.gpu_total_peak_bytes
        return self.host_peak_rss_bytes


@dataclass(frozen=True)
class ServerInfo:
    """What the launched server said about itself."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    port: int
    served_model_name: str
    vllm_version: str
    startup_s: float | None = None
    effective_backend: str | None = None
    flash_attn_version: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None


@dataclass(frozen=True)
class Provenance:
    """Where a number comes from."""

    gpu_name: str
    gpu_uuid: str | None
    driver_version: str | None
    vllm_version: str
    model: str
    workload: str
    emulated: bool = False
    hostname: str = ""
    tuner_version: str = ""
    cuda_version: str | None = None


@dataclass(frozen=True)
class TrialResult:
    """Everything one trial produced. ``metrics`` is empty unless the status is COMPLETE."""

    config: ServingConfig
    status: TrialStatus
    failure: FailureClass | None = None
    failure_detail: str = ""
    log_tail: str = ""
    windows: tuple[WindowMetrics, ...] = ()
    metrics: Mapping[str, Estimate] = field(default_factory=dict)
    memory: MemoryUsage = field(default_factory=MemoryUsage)
    server: ServerInfo | None = None
    server_metrics: Mapping[str, float] = field(default_factory=dict)
    provenance: Provenance | None = None
    started_at: float | None = None  # unix time
    finished_at: float | None = None
    # The per-request records, one tuple per window (in ``windows`` order); stored apart.
    requests: tuple[tuple[RequestRecord, ...], ...] = field(
        default=(), compare=False, repr=False, metadata={"stored_apart": True}
    )

    def __post_init__(self) -> None:
        if self.status is TrialStatus.COMPLETE and self.failure is not None:
            raise ValueError("a complete trial has no failure class")
        if self.status in (TrialStatus.FAILED, TrialStatus.PRUNED) and self.failure is None:
            raise ValueError(f"a {self.status.value} trial needs a failure class")
        if self.status is not TrialStatus.COMPLETE and self.metrics:
            raise ValueError("only a complete trial carries metrics")


def interrupted(config: ServingConfig, detail: str) -> TrialResult:
    """The result recorded for a launch the tuner stopped itself during (Ctrl-C, SIGTERM)."""
    return TrialResult(
        config=config,
        status=TrialStatus.FAILED,
        failure=FailureClass.INTERRUPTED,
        failure_detail=detail,
    )


def to_jsonable(obj: Any) -> Any:
    """Turn domain records (nested dataclasses, enums, tuples, mappings) into JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: to_jsonable(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if not f.metadata.get("stored_apart")
        }
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    return obj
