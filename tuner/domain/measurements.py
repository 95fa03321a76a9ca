"""What a trial measured: per-request records, windows, estimates, memory, server facts,
provenance and the trial's result."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from tuner.domain.config import ServingConfig
from tuner.domain.kinds import FailureClass, TrialStatus


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
    server's. ``held_p99_ms`` is how long timed arrivals (Poisson, a trace's own times) waited,
    once due, for one of the in-flight slots the workload's concurrency caps, at the 99th
    percentile (0 for a closed loop, or where none waited): not a verdict on the client, the
    server's backlog at that cap (:mod:`tuner.load.selfcheck`). ``client_bound`` and
    ``disturbed`` are the verdicts, ``notes`` say why.
    """

    client_cpu: float
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    host_cpu: float
    host_cores: int
    others_cpu: float | None = None
    other_gpu_processes: int = 0
    held_p99_ms: float = 0.0
    client_bound: bool = False
    disturbed: bool = False
    notes: tuple[str, ...] = ()
    # The requests in flight this process's open files allowed (its hard limit, ulimit -Hn),
    # where they held the window below its load; None where they did not.
    files_room: int | None = None


@dataclass(frozen=True)
class WindowEnergy:
    """What the measured GPU drew during one window, read through NVML (never estimated).

    ``method`` says how: ``"counter"`` (NVML's total energy counter, read as the window starts
    and as it ends) or ``"power_samples"`` (the GPU's power readings, every few tenths of a
    second, integrated over the window: used where the counter is missing, or went backwards),
    and ``note`` why, when it is not the counter. ``seconds`` is the time between the two
    readings; ``watts`` is ``joules / seconds``. ``joules_per_output_token`` divides by the
    window's output tokens (None when it had none). One GPU only: the one the server runs on.
    """

    joules: float
    seconds: float
    watts: float
    method: str  # "counter" | "power_samples"
    gpu_uuid: str | None = None
    joules_per_output_token: float | None = None
    samples: int = 0  # power readings integrated (method "power_samples")
    note: str = ""

    def per_tokens(self, output_tokens: int) -> WindowEnergy:
        """This reading with ``joules_per_output_token`` for a window of ``output_tokens``."""
        per = self.joules / output_tokens if output_tokens > 0 else None
        return dataclasses.replace(self, joules_per_output_token=per)


@dataclass(frozen=True)
class WindowMetrics:
    """One measurement window of a trial, at one load point.

    ``itl_ms`` is pooled over every chunk gap of the window's requests and ``tpot_ms`` over
    requests, as ``vllm bench serve`` computes them. ``concurrency`` / ``request_rate`` name the
    load point (``request_rate`` None: closed loop); ``client`` the generator's self-check;
    ``energy`` the measured GPU's energy over the window (None: not measured, e.g. on a CPU).
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
    energy: WindowEnergy | None = None

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

    def figures(self) -> str:
        """'0.300 [0.287, 0.310]': three significant figures each, trailing zeros kept, so
        that the ends of a range read at one precision ($ per 1M tokens, J per token)."""

        def three(x: float) -> str:
            return f"{x:#.3g}".rstrip(".")

        return f"{three(self.median)} [{three(self.low)}, {three(self.high)}]"

    def text(self) -> str:
        """'13,476 [13,057, 14,339]', '52.6 [51.0, 56.0]', '0.0452 [0.0441, 0.0463]': each
        value as :func:`number` writes it, so a small rate keeps its figures."""
        return f"{number(self.median)} [{number(self.low)}, {number(self.high)}]"


def number(x: float) -> str:
    """A measured value for a line of text: '2,363', '46.2', '0.512', '0.0450' (three
    significant figures below 100, trailing zeros kept)."""
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:#.3g}".rstrip(".")


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
    # The canary shapes (tuner.load.canary) this launch answered before it was measured.
    canary: tuple[str, ...] = ()
    # How its compile caches started (tuner.vllm.caches): "warm", "cold" or "system".
    compile_cache: str | None = None
    # Where its processes and the load generator ran (tuner.runner.placement): {"mode": "off"}
    # or the pinned CPU sets; None for launches recorded before tuner placed them.
    placement: Mapping[str, str] | None = None


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
        partial = self.failure is FailureClass.STOPPED_EARLY  # its first load point's numbers
        if self.status is not TrialStatus.COMPLETE and self.metrics and not partial:
            raise ValueError("only a complete trial (or one stopped early) carries metrics")


def interrupted(config: ServingConfig, detail: str) -> TrialResult:
    """The result recorded for a launch the tuner stopped itself during (Ctrl-C, SIGTERM)."""
    return TrialResult(
        config=config,
        status=TrialStatus.FAILED,
        failure=FailureClass.INTERRUPTED,
        failure_detail=detail,
    )


def stopped_early(result: TrialResult, reason: str) -> TrialResult:
    """A measured ``result`` that stopped after its first load point: PRUNED/STOPPED_EARLY,
    its partial numbers kept (never ranked beside whole trials)."""
    return dataclasses.replace(
        result, status=TrialStatus.PRUNED, failure=FailureClass.STOPPED_EARLY, failure_detail=reason
    )
