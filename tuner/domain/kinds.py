"""What happened to a trial, why it failed, and what a study optimises: the small enums."""

from __future__ import annotations

import enum


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
    # The server died or answered wrongly on a request shape of the canary
    # (tuner.load.canary): it would fail a real client, so it is never recommended.
    CANARY_FAILED = "canary_failed"
    START_FAILED = "start_failed"  # exited during start-up for another reason
    TIMEOUT = "timeout"  # not ready before the deadline
    CRASHED = "crashed"  # died while under load
    STRANGER = "stranger"  # the port was answered by a server that is not ours
    LOAD_ERRORS = "load_errors"  # too many requests failed to count as a measurement
    INTERRUPTED = "interrupted"  # the tuner itself stopped mid-trial
    # Measured at its first load point only: clearly worse than the best so far there, beyond
    # the noise (tuner.scoring.early_stop); PRUNED, with its partial numbers.
    STOPPED_EARLY = "stopped_early"
    INFRA = "infra"  # anything else outside the configuration
    # Drawn again by the sampler after an earlier trial of the study measured it: not launched
    # again (PRUNED), told to Optuna as FAIL, counted.
    REPEATED = "repeated"

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
        FailureClass.CANARY_FAILED,
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
    # The lowest dollars per million output tokens meeting the SLO (tuner.scoring.cost).
    COST = "cost"


class Regime(enum.StrEnum):
    """What limits a server under a workload, as :mod:`tuner.scoring.regime` names it from one
    trial's telemetry; the lever plan (:mod:`tuner.study.plan`) searches what moves it."""

    FRONTEND = "frontend-bound"  # the API server's CPU (HTTP, detokenizing) is saturated
    SCHEDULER = "scheduler-bound"  # the engine core's CPU (scheduling, launches) is saturated
    KV_CACHE = "kv-cache-bound"  # the KV cache is full: requests wait or are preempted
    PREFILL = "prefill-bound"  # prompt processing dominates the requests' time
    DECODE = "decode-bound"  # the accelerator is busy generating: the model's own speed
    LIGHT_LOAD = "light-load"  # few requests in flight: per-request latency, not capacity
    UNKNOWN = "unknown"  # the telemetry says too little to name one
