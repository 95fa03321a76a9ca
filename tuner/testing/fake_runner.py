"""An in-process fake :class:`tuner.runner.vllm.TrialRunner` for fast study tests.

It answers from a small performance model instead of a server, with seeded noise, and fails the
way vLLM does for configurations that do not fit: utilization above what is free
(MEMORY_EXCEEDED) and a max-model-len whose KV cache does not fit (KV_CACHE_INSUFFICIENT). Its
fake GPU draws power as a real one reports it per window (more with more sequences in flight),
so its trials carry energy as the real runner's do on a GPU. It passes the same runner contract
as the real runner (tests/integration/test_runner_contract.py).
"""

from __future__ import annotations

import math
import random
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tuner.domain import (
    FailureClass,
    MemoryUsage,
    Provenance,
    RequestRecord,
    ServerInfo,
    ServingConfig,
    Slo,
    TrialResult,
    TrialStatus,
    WindowEnergy,
    WindowMetrics,
    Workload,
    stopped_early,
)
from tuner.load import QUICK, FirstPointCheck, first_point_windows, trial_metrics, window_metrics
from tuner.runner import PhaseCallback

GIB = 1024**3


@dataclass(kw_only=True, eq=False)
class FakeRunner:
    """Deterministic for a given (seed, config); ``calls`` records what it was asked to run and
    ``canaries`` the canary shapes of each call. ``canary_breaks`` maps a configuration to the
    canary shape that breaks its server: a launch asked for that shape fails CANARY_FAILED.

    Known noise on top of the performance model, for tests of the decision design: every time
    of a launch (TTFT, ITL, E2E, and so a window's duration) is scaled by exp(N(0, launch_sd))
    per launch times exp(N(0, window_sd)) per window, and divided by ``speedup[config]``: the
    throughput of a configuration with speedup 1.2 is exactly 1.2 times another's in
    expectation on the log scale."""

    memory_gib: float = 24.0
    max_utilization: float = 0.9
    kv_bytes_per_token: int = 16384
    seed: int = 0
    backend: str = "FAKE_ATTN"
    launch_spread: float = 0.05
    canary_breaks: Mapping[ServingConfig, str] | None = None
    launch_sd: float = 0.0
    window_sd: float = 0.0
    speedup: Mapping[ServingConfig, float] | None = None
    # The GPU it measures on (its NVML UUID in provenance) and that card's speed: every
    # configuration's times divided by it, as between two cards of one model.
    card: str = "GPU-fake"
    card_speed: float = 1.0
    calls: list[ServingConfig] = field(default_factory=list, init=False)
    canaries: list[tuple[str, ...]] = field(default_factory=list, init=False)

    def run(
        self,
        config: ServingConfig,
        workload: Workload,
        *,
        slo: Slo | None = None,
        on_phase: PhaseCallback | None = None,
        canary: Sequence[str] = QUICK,
        first_point: FirstPointCheck | None = None,
    ) -> TrialResult:
        self.calls.append(config)
        self.canaries.append(tuple(canary))
        phase = on_phase or (lambda _p, _d: None)
        started = time.time()
        phase("starting", "fake")
        util = config.gpu_memory_utilization or 0.9
        info = ServerInfo(
            argv=("fake", *(f"--{k}={v}" for k, v in config.to_dict().items())),
            env={},
            port=0,
            served_model_name="fake",
            vllm_version="0.0.0+fake",
            startup_s=0.0,
            effective_backend=config.attention_backend or self.backend,
            canary=tuple(canary),
        )
        prov = Provenance(
            gpu_name="fake GPU",
            gpu_uuid=self.card,
            driver_version=None,
            vllm_version="0.0.0+fake",
            model="fake",
            workload=workload.name,
        )
        kv_tokens = int(util * self.memory_gib * GIB * 0.5 / self.kv_bytes_per_token)
        failure: tuple[FailureClass, str] | None = None
        if util > self.max_utilization:
            failure = (
                FailureClass.MEMORY_EXCEEDED,
                f"ValueError: Free memory on device is less than desired GPU memory utilization "
                f"({util}, {self.memory_gib * util:.1f} GiB)",
            )
        elif config.max_model_len is not None and config.max_model_len > kv_tokens:
            failure = (
                FailureClass.KV_CACHE_INSUFFICIENT,
                f"ValueError: max_model_len ({config.max_model_len}) is larger than the maximum "
                f"number of tokens that can be stored in KV cache ({kv_tokens})",
            )
        broken = (self.canary_breaks or {}).get(config)
        if failure is None and broken is not None and broken in canary:
            failure = (
                FailureClass.CANARY_FAILED,
                f"canary failed at {broken!r}: HTTP 500: EngineDeadError (the server answers, "
                "but GET /health says HTTP 500)",
            )
        if failure is not None:
            return TrialResult(
                config=config,
                status=TrialStatus.FAILED,
                failure=failure[0],
                failure_detail=failure[1],
                log_tail=f"INFO starting fake server\n{failure[1]}",
                server=info,
                provenance=prov,
                started_at=started,
                finished_at=time.time(),
            )
        # Seeded by config and launch count: reproducible, yet each launch differs a little,
        # like a real server (launch_spread is the launch-to-launch noise).
        key = f"{self.seed}:{config.label()}:{len(self.calls)}"
        rng = random.Random(zlib.crc32(key.encode()))
        launch = rng.uniform(1.0 - self.launch_spread, 1.0 + self.launch_spread)
        known = random.Random(zlib.crc32(f"{key}:known-noise".encode()))  # leaves rng's draws
        speedup = (self.speedup or {}).get(config, 1.0) * self.card_speed
        launch_scale = math.exp(known.gauss(0.0, self.launch_sd)) / speedup
        seqs = config.max_num_seqs or 256
        per_token_s = 0.002 * launch * (1.0 + 0.5 * (config.enforce_eager or False))
        windows: list[WindowMetrics] = []
        points = workload.load_points()
        total = len(points) * workload.windows
        first = first_point_windows(workload)
        stop: str | None = None
        for point in [p for p in points for _ in range(workload.windows)]:
            batch = min(seqs, point.concurrency)
            phase("measuring", f"window {len(windows) + 1}/{total}")
            scale = launch_scale * math.exp(known.gauss(0.0, self.window_sd))
            records = []
            for i in range(point.requests_per_window):
                noise = rng.uniform(0.9, 1.1)
                queue = (point.concurrency / batch - 1.0) * point.output_tokens * per_token_s
                ttft = (0.01 + point.prompt_tokens * 1e-5) * noise + queue
                e2e = ttft + point.output_tokens * per_token_s * noise
                records.append(
                    RequestRecord(
                        ok=True,
                        prompt_tokens=point.prompt_tokens,
                        output_tokens=point.output_tokens,
                        start_s=i * 0.01,
                        ttft_s=ttft * scale,
                        e2e_s=e2e * scale,
                        itl_s=(per_token_s * noise * scale,) * (point.output_tokens - 1),
                    )
                )
            duration = point.requests_per_window / batch * max(r.e2e_s or 0 for r in records)
            watts = min(700.0, 150.0 + 4.0 * batch) * rng.uniform(0.98, 1.02)
            energy = WindowEnergy(
                joules=watts * duration,
                seconds=duration,
                watts=watts,
                method="counter",
                gpu_uuid=self.card,
            )
            windows.append(
                window_metrics(
                    records,
                    duration,
                    slo,
                    concurrency=point.concurrency,
                    request_rate=point.request_rate,
                    energy=energy,
                )
            )
            if first_point is not None and len(windows) == first:
                stop = first_point(tuple(windows))
                if stop is not None:
                    break  # after the first load point, as the real generator stops
        memory = MemoryUsage(
            gpu_peak_bytes={self.card: int(util * self.memory_gib * GIB)},
            gpu_baseline_bytes={self.card: 0},
        )
        result = TrialResult(
            config=config,
            status=TrialStatus.COMPLETE,
            windows=tuple(windows),
            metrics=trial_metrics(workload, windows, slo),
            memory=memory,
            server=info,
            provenance=prov,
            log_tail="INFO fake server ready",
            started_at=started,
            finished_at=time.time(),
        )
        return result if stop is None else stopped_early(result, stop)
