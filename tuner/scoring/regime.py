"""Name what limits a server from one trial's telemetry: the bottleneck regime.

The evidence is what every trial already records (:mod:`tuner.telemetry`): the CPU the API
server and the engine core used under load, the GPU's utilization (NVML), vLLM's own
``/metrics`` (KV-cache usage, preemptions, waiting and running requests, time in prefill and
decode) and the load the client offered. The rules, first match wins:

==================  ===========================================================================
regime              evidence
==================  ===========================================================================
kv-cache-bound      preemptions, or the KV cache full (>= 95 %) with requests waiting
frontend-bound      the busiest API-server process >= 0.75 of a core, and the GPU (if any)
                    busy < 75 % of the time
scheduler-bound     on a GPU: the engine core >= 0.75 of a core while the GPU is busy < 75 %
light-load          at most 4 requests in flight (offered or running)
prefill-bound       prefill >= half the requests' time in the engine (or, without vLLM's phase
                    times, TTFT >= half of E2E)
decode-bound        decoding takes most of the time, the GPU busy >= 75 % (without GPU
                    telemetry, as on a CPU: decoding takes most of the time)
unknown             none of the above: too little telemetry, or a GPU mostly idle that no
                    rule above explains
==================  ===========================================================================

A diagnosis is one trial's, usually vLLM's defaults: it says where to look first, not what is
true of every configuration (a lever that removes one bottleneck reveals the next).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tuner.domain import Regime, TrialResult

BUSY_CORE = 0.75  # of one core: a single-threaded process this busy is the limit
GPU_BUSY = 0.75  # NVML's utilization: the share of time a kernel ran
KV_FULL = 0.95
LIGHT_STREAMS = 4
PHASE_SHARE = 0.5


@dataclass(frozen=True)
class Diagnosis:
    """The regime, the sentences that justify it, and the figures they quote."""

    regime: Regime
    evidence: tuple[str, ...]
    figures: Mapping[str, float] = field(default_factory=dict)
    streams: int | None = None  # the load it was diagnosed at (closed-loop concurrency)

    def summary(self) -> str:
        at = f" at {self.streams} streams" if self.streams else ""
        why = "; ".join(self.evidence) if self.evidence else "no telemetry"
        return f"{self.regime.value}{at}: {why}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "regime": self.regime.value,
            "evidence": list(self.evidence),
            "figures": dict(self.figures),
            "streams": self.streams,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Diagnosis:
        return cls(
            regime=Regime(data["regime"]),
            evidence=tuple(data.get("evidence") or ()),
            figures={k: float(v) for k, v in (data.get("figures") or {}).items()},
            streams=data.get("streams"),
        )


def _figures(result: TrialResult) -> dict[str, float]:
    m = result.server_metrics
    out = {k: float(m[k]) for k in _KEYS if k in m}
    if "server_cpu_peak_process" not in out and "api_server_cpu" in m:
        count = max(1.0, float(m.get("api_server_processes", 1.0)))
        out["server_cpu_peak_process"] = float(m["api_server_cpu"]) / count
    inference = m.get("inference_time_s") or (
        (m.get("prefill_time_s") or 0.0) + (m.get("decode_time_s") or 0.0)
    )
    if inference and "prefill_time_s" in m:
        out["prefill_share"] = float(m["prefill_time_s"]) / float(inference)
    windows = [w for w in result.windows if w.requests_ok]
    if windows:
        streams = [w.concurrency for w in windows if w.concurrency]
        if streams:
            out["streams"] = float(max(streams))
        ttft = sorted(w.ttft_ms.p50 for w in windows)
        e2e = sorted(w.e2e_ms.p50 for w in windows)
        if e2e[len(e2e) // 2] > 0:
            out["ttft_share"] = ttft[len(ttft) // 2] / e2e[len(e2e) // 2]
    return out


_KEYS = (
    "api_server_cpu",
    "api_server_processes",
    "server_cpu_peak_process",
    "engine_core_cpu",
    "gpu_utilization_mean",
    "kv_cache_usage_peak",
    "preemptions",
    "requests_waiting_peak",
    "requests_running_peak",
)


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def diagnose(result: TrialResult) -> Diagnosis:
    """The regime of ``result`` (a measured trial) by the rules of the module docstring."""
    f = _figures(result)
    streams = int(f["streams"]) if "streams" in f else None
    gpu = f.get("gpu_utilization_mean")
    gpu_idle = gpu is None or gpu < GPU_BUSY
    gpu_said = f"GPU busy {_pct(gpu)} of the time" if gpu is not None else "no GPU telemetry"

    def found(regime: Regime, *evidence: str) -> Diagnosis:
        return Diagnosis(regime, tuple(evidence), f, streams)

    kv, preempted = f.get("kv_cache_usage_peak"), f.get("preemptions", 0.0)
    waiting = f.get("requests_waiting_peak", 0.0)
    if preempted > 0 or (kv is not None and kv >= KV_FULL and waiting > 0):
        said = f"KV cache {_pct(kv)} full at peak" if kv is not None else "KV cache full"
        return found(
            Regime.KV_CACHE, said, f"{preempted:.0f} preemptions", f"{waiting:.0f} requests waiting"
        )
    api = f.get("server_cpu_peak_process")
    if api is not None and api >= BUSY_CORE and gpu_idle:
        return found(Regime.FRONTEND, f"API server at {api:.2f} of a core", gpu_said)
    engine = f.get("engine_core_cpu")
    if gpu is not None and engine is not None and engine >= BUSY_CORE and gpu_idle:
        return found(Regime.SCHEDULER, f"engine core at {engine:.2f} of a core", gpu_said)
    running = f.get("requests_running_peak")
    light = [x for x in (streams, running) if x is not None]
    if light and min(light) <= LIGHT_STREAMS:
        return found(Regime.LIGHT_LOAD, f"{min(light):.0f} requests in flight at most", gpu_said)
    share = f.get("prefill_share")
    if share is not None and share >= PHASE_SHARE:
        return found(Regime.PREFILL, f"prefill {_pct(share)} of the engine time")
    if share is None and f.get("ttft_share", 0.0) >= PHASE_SHARE:
        return found(Regime.PREFILL, f"TTFT {_pct(f['ttft_share'])} of E2E")
    decoding = f"decode {_pct(1 - share)} of the engine time" if share is not None else ""
    evidence = [x for x in (decoding, gpu_said) if x]
    if not gpu_idle or (gpu is None and share is not None):
        return found(Regime.DECODE, *evidence)
    # A GPU idle most of the time is not what limits decoding, whatever its share.
    return found(Regime.UNKNOWN, *(evidence if share is not None else ()))
