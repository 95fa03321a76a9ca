"""The trial runner seam: ``TrialRunner.run(config, workload) -> TrialResult``.

:class:`VllmTrialRunner` is the real one: it launches a vLLM server (or anything that speaks the
same argv and HTTP, such as :mod:`tuner.testing.fake_server`) in its own process group, waits for
it, checks the server answering is the one it launched, warms it up and drives the workload,
samples memory and ``/metrics`` meanwhile, and always tears the group down. Every way a trial can
go wrong comes back as a FAILED :class:`TrialResult` with its class and the log tail; only an
interrupt of the tuner itself propagates (after the server is stopped).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import tuner
from tuner.catalog import VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
from tuner.domain import (
    FailureClass,
    ModelSpec,
    Provenance,
    ServerInfo,
    ServingConfig,
    Slo,
    TrialResult,
    TrialStatus,
    Workload,
    stopped_early,
)
from tuner.errors import LoadFailure, ServerFailure, TrialFailure
from tuner.load import (
    QUICK,
    FirstPointCheck,
    LoadGenerator,
    LoadReport,
    PromptFactory,
    run_canary,
    trial_metrics,
)
from tuner.runner import placement
from tuner.runner.hardware import Hardware
from tuner.runner.ports import free_port
from tuner.runner.procgroup import still_running
from tuner.runner.server import VllmServer
from tuner.telemetry import (
    GpuEnergyMeter,
    HostNeighbours,
    TelemetryProbe,
    local_cpus,
    nvml_compute_pids,
    since_boot,
)
from tuner.vllm import CacheDir, argv, cache_dir, cache_key, logparse

PhaseCallback = Callable[[str, str], None]
"""Called with (phase, detail): phase is one of starting, warming up, measuring, stopping."""

VLLM_MODULE = argv.VLLM_API_SERVER_MODULE
CANARY_TIMEOUT_S = 120.0  # one canary request (a CPU server prefills max-model-len slowly)


class TrialRunner(Protocol):
    """The one seam the study sees. Implementations never raise for a failed trial."""

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
        """One launch of ``config``, measured with ``workload``. Before its warm-up the server
        answers the ``canary`` shapes (:mod:`tuner.load.canary`); one that breaks it makes the
        trial a CANARY_FAILED finding. ``first_point`` may stop the measurement after the
        first load point (:class:`tuner.load.generator.FirstPointCheck`): the result is then
        PRUNED/STOPPED_EARLY with the numbers measured so far."""
        ...


@dataclass(frozen=True)
class RunnerSettings:
    python: str  # the interpreter that has vLLM
    vllm_version: str
    model_path: str  # what --model gets: a materialized dummy dir, a local dir or a hub id
    load_format: str | None = "dummy"
    tokenizer: str | None = None
    dtype: str | None = None
    module: str = VLLM_MODULE
    host: str = "127.0.0.1"
    startup_timeout_s: float = 900.0
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    log_dir: Path = Path(".tuner/logs")  # one log file per server
    lease_dir: Path = Path.home() / ".cache" / "tuner" / "leases"  # see tuner.runner.leases
    synthetic_tokenizer: bool = True
    # Compile and kernel caches (tuner.vllm.caches): "shared" per cache key under cache_root,
    # "cold" (a fresh directory per launch) or "system" (vLLM's own); no root: "system".
    compile_cache: str = "shared"
    cache_root: Path | None = None
    # CPU placement of the server's processes and the load generator (tuner.runner.placement):
    # "auto", "pinned" or "off"; TUNER_CPU_PLACEMENT in the environment overrides it.
    cpu_placement: str = "auto"


@dataclass
class _Launch:
    """One trial's server launch as it goes: ``info`` gains what the server's log says once it
    is ready, and a failure after that keeps it."""

    config: ServingConfig
    server: VllmServer
    probe: TelemetryProbe
    info: ServerInfo
    provenance: Provenance
    started: float
    cache: CacheDir
    cpus: placement.CpuPlan | None = None


class VllmTrialRunner:
    """Launch, check, warm up, measure, tear down. See the module docstring."""

    def __init__(self, settings: RunnerSettings, model: ModelSpec, hardware: Hardware) -> None:
        self.settings = settings
        self.model = model
        self.hardware = hardware

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
        phase = on_phase or (lambda _p, _d: None)
        launch = self._prepare(config, workload)
        try:
            with launch.server:
                self._start(launch, phase)
                self._canary(launch, workload, canary, phase)
                report = self._measure(launch, workload, slo, phase, first_point)
        except LoadFailure as exc:
            if not launch.server.is_alive() and exc.failure is not FailureClass.CRASHED:
                exc = LoadFailure(FailureClass.CRASHED, f"server died under load: {exc.message}")
            return self._failed(launch, exc)
        except TrialFailure as exc:
            return self._failed(launch, exc)
        finally:
            launch.probe.close()
            launch.cache.release()
        result = self._complete(launch, workload, slo, report)
        return (
            result if report.stopped_early is None else stopped_early(result, report.stopped_early)
        )

    # -- the steps of a trial ------------------------------------------------------------------

    def _prepare(self, config: ServingConfig, workload: Workload) -> _Launch:
        """Everything about the launch decided before the server starts: its argv and
        environment, its port and served name, its telemetry probe, the provenance."""
        s = self.settings
        started = time.time()
        served = f"tuner-{uuid.uuid4().hex[:12]}"
        port = free_port(s.host)
        flags = argv.render_flags(self._launch_config(config), s.vllm_version)
        args = (
            *argv.base_args(
                s.model_path,
                served_model_name=served,
                host=s.host,
                port=port,
                load_format=s.load_format,
                tokenizer=s.tokenizer,
                dtype=s.dtype,
                extra=s.extra_args,
            ),
            *flags.args,
        )
        cache = self._cache(config)
        env = {**os.environ, **cache.env(), **s.env, **flags.env, **self.hardware.device_env()}
        server = VllmServer(
            argv.server_command(s.python, args, module=s.module),
            env=env,
            host=s.host,
            port=port,
            served_model_name=served,
            log_path=s.log_dir / f"{served}.log",
            lease_dir=s.lease_dir,
        )
        info = ServerInfo(
            argv=tuple(args),
            env=dict(flags.env),
            port=port,
            served_model_name=served,
            vllm_version=s.vllm_version,
            compile_cache=cache.label,
        )
        return _Launch(
            config=config,
            server=server,
            probe=TelemetryProbe(
                gpu=self.hardware.is_gpu,
                gpu_uuids=(self.hardware.uuid,) if self.hardware.uuid else None,
                metrics_url=f"{server.base_url}/metrics",
            ),
            info=info,
            provenance=self._provenance(workload),
            started=started,
            cache=cache,
            cpus=self._cpu_plan(),
        )

    def _cpu_plan(self) -> placement.CpuPlan | None:
        mode = placement.resolve_mode(self.settings.cpu_placement)
        if mode == "off":
            return None
        hw = self.hardware
        if not hw.is_gpu and mode == "auto":
            # CPU vLLM computes the model on these CPUs, its worker's threads bound by vLLM
            # itself (VLLM_CPU_OMP_THREADS_BIND): a split made for a GPU server's three Python
            # loops would halve its compute. `pinned` still pins where a user asks.
            return None
        local = local_cpus(hw.uuid) if hw.is_gpu and hw.uuid else None
        return placement.plan(mode, local)

    def _cache(self, config: ServingConfig) -> CacheDir:
        s = self.settings
        if s.cache_root is None:
            return cache_dir(Path("."), "system", "")
        key = cache_key(
            config,
            vllm_version=s.vllm_version,
            model=s.model_path,
            gpu=self.hardware.name,
            dtype=s.dtype,
            extra_args=s.extra_args,
        )
        if s.compile_cache == "cold":
            _sweep_cold(s.cache_root)
        me = f"{os.getpid()}.{since_boot(os.getpid()):.2f}"
        return cache_dir(s.cache_root, s.compile_cache, key, owner=me)

    def _start(self, launch: _Launch, phase: PhaseCallback) -> None:
        """Launch the server and wait until it is ready and is the one launched; what its log
        says about itself (backend, KV cache, start-up time) goes into ``launch.info``."""
        server, probe = launch.server, launch.probe
        phase("starting", f"port {launch.info.port}")
        probe.before_launch()
        server.start()
        assert server.pid is not None
        if launch.cpus is not None:  # its children inherit the server's CPUs, not tuner's
            placement.set_affinity(server.pid, launch.cpus.server)
        probe.attach(server.pid)
        startup_s = server.wait_ready(self.settings.startup_timeout_s)
        server.verify_identity()
        placed = (
            placement.pin_server(launch.cpus, server.pid)
            if launch.cpus is not None
            else placement.NOT_PINNED
        )
        launch.info = dataclasses.replace(
            _with_log_facts(launch.info, server.log_text(), startup_s=startup_s), placement=placed
        )

    def _canary(
        self, launch: _Launch, workload: Workload, shapes: Sequence[str], phase: PhaseCallback
    ) -> None:
        """The canary's shapes on the fresh server; CANARY_FAILED naming the shape that broke
        it (and whether the server survived), else ``launch.info.canary`` lists them."""
        if not shapes:
            return
        phase("canary", f"{len(shapes)} request shapes")
        server = launch.server
        report = run_canary(
            server.base_url,
            launch.info.served_model_name,
            shapes=shapes,
            prompts=self._prompts(workload),
            timeout_s=CANARY_TIMEOUT_S,
            alive=server.is_alive,
        )
        try:
            report.raise_if_failed()
        except ServerFailure as exc:
            cause = logparse.engine_death(server.log_text())
            if cause is None:
                raise
            raise ServerFailure(exc.failure, f"{exc} ({cause})", log_tail=exc.log_tail) from None
        launch.info = dataclasses.replace(launch.info, canary=tuple(shapes))

    def _prompts(self, workload: Workload) -> PromptFactory:
        return PromptFactory(
            self.model.facts.get("vocab_size"),
            synthetic=self.settings.synthetic_tokenizer,
            seed=workload.seed,
        )

    def _measure(
        self,
        launch: _Launch,
        workload: Workload,
        slo: Slo | None,
        phase: PhaseCallback,
        first_point: FirstPointCheck | None = None,
    ) -> LoadReport:
        """Warm up and drive the workload, the probe's load phase starting with the first
        measured window; the server must still be alive, and the same, at the end."""
        server, probe = launch.server, launch.probe

        def report_phase(name: str, done: int, total: int) -> None:
            if name == "warmup":
                phase("warming up", f"{done}/{total} requests")
            else:
                phase("measuring", f"window {done + 1}/{total}")
                if done == 0:
                    probe.start_load()

        try:
            with placement.client_pinned(launch.cpus):
                report = self._generator(launch, workload).run(
                    workload,
                    slo,
                    on_phase=report_phase,
                    should_abort=lambda: not server.is_alive(),
                    first_point=first_point,
                )
        finally:
            probe.stop_load()
        if not server.is_alive():
            raise ServerFailure(FailureClass.CRASHED, "the server exited during the load")
        server.verify_identity()
        phase("stopping", "")
        return report

    def _generator(self, launch: _Launch, workload: Workload) -> LoadGenerator:
        s, server = self.settings, launch.server
        uuids = (self.hardware.uuid,) if self.hardware.uuid else ()
        return LoadGenerator(
            f"http://{s.host}:{launch.info.port}",
            launch.info.served_model_name,
            self._prompts(workload),
            neighbours=HostNeighbours(
                server_pid=lambda: server.pid,
                gpu_pids=nvml_compute_pids(uuids) if self.hardware.is_gpu else None,
            ),
            energy=self._energy_meter(),
        )

    def _energy_meter(self) -> GpuEnergyMeter | None:
        """The measured GPU's energy per window; None on a CPU (energy is not measured there)."""
        hw = self.hardware
        if not hw.is_gpu or (hw.uuid is None and hw.index is None):
            return None
        return GpuEnergyMeter(hw.uuid, index=hw.index)

    def _failed(self, launch: _Launch, exc: TrialFailure) -> TrialResult:
        """The FAILED result: the failure's class and message, the log's tail and facts."""
        server = launch.server
        return TrialResult(
            config=launch.config,
            status=TrialStatus.FAILED,
            failure=exc.failure,
            failure_detail=exc.message,
            log_tail=exc.log_tail or server.log_tail(),
            server=_with_log_facts(launch.info, server.log_text()),
            provenance=launch.provenance,
            started_at=launch.started,
            finished_at=time.time(),
        )

    def _complete(
        self, launch: _Launch, workload: Workload, slo: Slo | None, report: LoadReport
    ) -> TrialResult:
        """The COMPLETE result: the windows and their metrics, the probe's samples."""
        memory, server_metrics = launch.probe.result()
        return TrialResult(
            config=launch.config,
            status=TrialStatus.COMPLETE,
            windows=report.windows,
            metrics=trial_metrics(
                workload, report.windows, slo, records=report.records, turns=report.turns
            ),
            requests=report.records,
            memory=memory,
            server=launch.info,
            server_metrics=server_metrics,
            provenance=launch.provenance,
            log_tail=launch.server.log_tail(20),
            started_at=launch.started,
            finished_at=time.time(),
        )

    def _launch_config(self, config: ServingConfig) -> ServingConfig:
        """The config as launched: utilization rescaled when emulating a smaller GPU."""
        scale = self.hardware.memory_scale
        if scale is None:
            return config
        asked = config.gpu_memory_utilization or VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
        return config.replace(gpu_memory_utilization=round(asked * scale, 4))

    def _provenance(self, workload: Workload) -> Provenance:
        hw = self.hardware
        return Provenance(
            gpu_name=hw.name,
            gpu_uuid=hw.uuid,
            driver_version=hw.driver_version,
            cuda_version=hw.cuda_version,
            vllm_version=self.settings.vllm_version,
            model=self.model.alias,
            workload=workload.name,
            emulated=hw.emulated,
            hostname=socket.gethostname(),
            tuner_version=tuner.__version__,
        )


def _with_log_facts(info: ServerInfo, log: str, *, startup_s: float | None = None) -> ServerInfo:
    backend, fa_version = logparse.effective_backend(log)
    tokens, concurrency = logparse.kv_cache_capacity(log)
    return dataclasses.replace(
        info,
        startup_s=startup_s if startup_s is not None else info.startup_s,
        effective_backend=backend,
        flash_attn_version=fa_version,
        kv_cache_tokens=tokens,
        max_concurrency=concurrency,
    )


def _sweep_cold(root: Path) -> None:
    """Remove the "cold" compile caches whose tuner is gone: each is removed when its launch
    ends, so one still here outlived a killed tuner (``kill -9``), and nothing else would
    ever remove it (a full set of compile artefacts per kill on real vLLM)."""
    for path in root.glob("cold-*"):
        pid, _, start = path.name.split("-")[1].partition(".")
        try:
            alive = still_running(int(pid), float(start))
        except ValueError:  # an older tuner's name: no owner in it
            continue
        if not alive:
            shutil.rmtree(path, ignore_errors=True)
