"""Domain records to JSON columns and back.

Writing goes through :func:`tuner.domain.to_jsonable`. Two things are added here:

- non-finite floats (a NaN percentile, an infinite penalty) become the strings ``"nan"``,
  ``"inf"``, ``"-inf"``, because PostgreSQL's JSON rejects them; ``float()`` reads them back;
- reading ignores keys a record no longer has, so rows written by an older tuner still load
  as long as new fields have defaults.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, TypeVar

from tuner.domain import (
    ClientHealth,
    Estimate,
    FailureClass,
    LatencyStats,
    MemoryUsage,
    Provenance,
    RequestRecord,
    ServerInfo,
    ServingConfig,
    TrialResult,
    TrialStatus,
    WindowEnergy,
    WindowMetrics,
    to_jsonable,
)

T = TypeVar("T")


def encode(obj: Any) -> Any:
    """``obj`` as JSON values that every supported database accepts."""
    return _finite(to_jsonable(obj))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf", "-inf"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _known(cls: type[T], data: Mapping[str, Any]) -> dict[str, Any]:
    assert dataclasses.is_dataclass(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _floats(values: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


def decode_estimate(data: Mapping[str, Any]) -> Estimate:
    return Estimate(
        median=float(data["median"]),
        low=float(data["low"]),
        high=float(data["high"]),
        values=_floats(data.get("values", ())),
    )


def decode_metrics(data: Mapping[str, Any]) -> dict[str, Estimate]:
    return {name: decode_estimate(est) for name, est in data.items()}


def decode_latency(data: Mapping[str, Any]) -> LatencyStats:
    fields = _known(LatencyStats, data)
    std = fields.get("std")
    return LatencyStats(
        count=int(fields["count"]),
        mean=float(fields["mean"]),
        p50=float(fields["p50"]),
        p90=float(fields["p90"]),
        p99=float(fields["p99"]),
        max=float(fields["max"]),
        std=None if std is None else float(std),
    )


def decode_client(data: Mapping[str, Any] | None) -> ClientHealth | None:
    if data is None:
        return None
    fields = _known(ClientHealth, data)
    fields["notes"] = tuple(fields.get("notes") or ())
    for name in ("client_cpu", "loop_lag_p99_ms", "loop_lag_max_ms", "host_cpu"):
        fields[name] = float(fields[name])
    if fields.get("others_cpu") is not None:
        fields["others_cpu"] = float(fields["others_cpu"])
    return ClientHealth(**fields)


def decode_energy(data: Mapping[str, Any] | None) -> WindowEnergy | None:
    if data is None:
        return None
    fields = _known(WindowEnergy, data)
    for name in ("joules", "seconds", "watts"):
        fields[name] = float(fields[name])
    if fields.get("joules_per_output_token") is not None:
        fields["joules_per_output_token"] = float(fields["joules_per_output_token"])
    fields["samples"] = int(fields.get("samples") or 0)
    return WindowEnergy(**fields)


def decode_window(data: Mapping[str, Any]) -> WindowMetrics:
    fields = _known(WindowMetrics, data)
    for name in ("ttft_ms", "itl_ms", "e2e_ms"):
        fields[name] = decode_latency(fields[name])
    if fields.get("tpot_ms") is not None:
        fields["tpot_ms"] = decode_latency(fields["tpot_ms"])
    if fields.get("request_rate") is not None:
        fields["request_rate"] = float(fields["request_rate"])
    fields["client"] = decode_client(fields.get("client"))
    fields["energy"] = decode_energy(fields.get("energy"))
    for name in ("duration_s", "request_throughput", "output_throughput", "total_throughput"):
        fields[name] = float(fields[name])
    if fields.get("goodput") is not None:
        fields["goodput"] = float(fields["goodput"])
    return WindowMetrics(**fields)


def decode_memory(data: Mapping[str, Any]) -> MemoryUsage:
    rss = data.get("host_peak_rss_bytes")
    return MemoryUsage(
        gpu_peak_bytes={k: int(v) for k, v in (data.get("gpu_peak_bytes") or {}).items()},
        gpu_baseline_bytes={k: int(v) for k, v in (data.get("gpu_baseline_bytes") or {}).items()},
        host_peak_rss_bytes=None if rss is None else int(rss),
    )


def decode_server(data: Mapping[str, Any] | None) -> ServerInfo | None:
    if data is None:
        return None
    fields = _known(ServerInfo, data)
    fields["argv"] = tuple(fields.get("argv") or ())
    fields["env"] = dict(fields.get("env") or {})
    fields["canary"] = tuple(fields.get("canary") or ())
    return ServerInfo(**fields)


def decode_provenance(data: Mapping[str, Any] | None) -> Provenance | None:
    if data is None:
        return None
    return Provenance(**_known(Provenance, data))


def decode_result(data: Mapping[str, Any]) -> TrialResult:
    """A :class:`TrialResult` from ``encode(result)`` (the inverse, for results kept outside
    the trials table, e.g. the launches of an interrupted comparison)."""
    failure = data.get("failure")
    started, finished = data.get("started_at"), data.get("finished_at")
    return TrialResult(
        config=ServingConfig.from_dict(data.get("config") or {}),
        status=TrialStatus(data["status"]),
        failure=None if failure is None else FailureClass(failure),
        failure_detail=str(data.get("failure_detail") or ""),
        log_tail=str(data.get("log_tail") or ""),
        windows=tuple(decode_window(w) for w in data.get("windows") or ()),
        metrics=decode_metrics(data.get("metrics") or {}),
        memory=decode_memory(data.get("memory") or {}),
        server=decode_server(data.get("server")),
        server_metrics={k: float(v) for k, v in (data.get("server_metrics") or {}).items()},
        provenance=decode_provenance(data.get("provenance")),
        started_at=None if started is None else float(started),
        finished_at=None if finished is None else float(finished),
    )


def encode_requests(windows: tuple[tuple[RequestRecord, ...], ...]) -> list[Any]:
    """Per-request records as the compact rows of ``tuner_trial_requests``."""

    def num(v: float | None) -> float | None:
        return None if v is None or not math.isfinite(v) else round(v, 6)

    return [
        [
            [
                num(r.start_s),
                num(r.ttft_s),
                num(r.e2e_s),
                r.prompt_tokens,
                r.output_tokens,
                r.error,
                [round(g * 1e6) for g in r.itl_s],
            ]
            for r in window
        ]
        for window in windows
    ]


def decode_requests(data: list[Any]) -> tuple[tuple[RequestRecord, ...], ...]:
    def one(row: list[Any]) -> RequestRecord:
        start, ttft, e2e, prompt, output, error, gaps = row
        return RequestRecord(
            ok=error is None,
            prompt_tokens=int(prompt),
            output_tokens=int(output),
            start_s=float(start or 0.0),
            ttft_s=None if ttft is None else float(ttft),
            e2e_s=None if e2e is None else float(e2e),
            itl_s=tuple(g / 1e6 for g in gaps),
            error=error,
        )

    return tuple(tuple(one(row) for row in window) for window in data)
