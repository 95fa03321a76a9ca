"""The telemetry a trial runner wraps around one server: memory, CPU, GPU use, server metrics.

Order of calls::

    probe = TelemetryProbe(gpu=True, metrics_url=f"http://127.0.0.1:{port}/metrics")
    probe.before_launch()        # GPU baseline, before the server exists
    server = launch(...)
    probe.attach(server.pid)     # memory sampling from start-up on
    ...wait for readiness, warm up...
    probe.start_load()           # server metrics: the "before" scrape
    ...drive the load...
    probe.stop_load()            # last samples, the "after" scrape; all threads joined
    memory, server_metrics = probe.result()

Memory is sampled from ``attach()`` to ``stop_load()``, not only under load: vLLM takes most of
its memory at start-up (weights, KV cache, CUDA graphs), and a start-up peak is part of what a
config needs. On a GPU machine the GPU numbers come from NVML per GPU UUID over the baseline;
the server's host RSS is recorded on every machine. ``close()`` (or leaving a ``with`` block)
stops whatever still runs, for the error paths.

What tells where a configuration is bound is measured over the load phase only
(``start_load()`` to ``stop_load()``) and joins the ``/metrics`` summary in ``result()``: the
CPU cores the API-server and the engine-core processes use
(:meth:`tuner.telemetry.host.ProcessTreeCpuSampler.result`) on every machine, and on a GPU how
busy the measured GPUs were (:meth:`tuner.telemetry.nvml.GpuUtilizationSampler.summary`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from tuner.domain import MemoryUsage
from tuner.errors import EnvironmentProblem
from tuner.telemetry.host import ProcessTreeCpuSampler, ProcessTreeRssSampler
from tuner.telemetry.nvml import GpuMemorySampler, GpuUtilizationSampler, Nvml
from tuner.telemetry.prometheus import MetricsPoller

log = logging.getLogger(__name__)


class TelemetryProbe(contextlib.AbstractContextManager["TelemetryProbe"]):
    """Memory and ``/metrics`` telemetry for one trial; see the module docstring for the order.
    With ``gpu=True`` NVML must work: ``before_launch()`` raises
    :class:`tuner.errors.EnvironmentProblem` otherwise.
    """

    def __init__(
        self,
        *,
        gpu: bool,
        metrics_url: str,
        nvml: Nvml | None = None,
        gpu_uuids: Sequence[str] | None = None,
        gpu_interval_s: float = 0.1,
        rss_interval_s: float = 0.2,
        metrics_interval_s: float = 1.0,
        cpu_interval_s: float = 0.5,
        utilization_interval_s: float = 0.5,
    ) -> None:
        self._rss_interval_s = rss_interval_s
        self._cpu_interval_s = cpu_interval_s
        self._utilization_interval_s = utilization_interval_s
        self._nvml = nvml
        self._gpu_sampler = (
            GpuMemorySampler(gpu_uuids, interval_s=gpu_interval_s, nvml=nvml) if gpu else None
        )
        self._baseline_taken = False
        self._rss: ProcessTreeRssSampler | None = None
        self._cpu: ProcessTreeCpuSampler | None = None
        self._utilization: GpuUtilizationSampler | None = None
        self._poller = MetricsPoller(metrics_url, interval_s=metrics_interval_s)

    def before_launch(self) -> None:
        """Take the GPU memory baseline (no-op without GPU). Call before the server starts."""
        if self._rss is not None:
            raise RuntimeError("before_launch() must come before attach(): the server runs")
        if self._gpu_sampler is not None:
            self._gpu_sampler.baseline()
            self._baseline_taken = True

    def attach(self, server_pid: int) -> None:
        """Start memory sampling of the just-launched server (its process tree)."""
        if self._rss is not None:
            raise RuntimeError(f"probe already attached to pid {self._rss.root_pid}")
        if self._gpu_sampler is not None and not self._baseline_taken:
            raise RuntimeError("call before_launch() before starting the server: no GPU baseline")
        self._rss = ProcessTreeRssSampler(server_pid, interval_s=self._rss_interval_s)
        self._rss.start()
        if self._gpu_sampler is not None:
            try:
                self._gpu_sampler.start()
            except BaseException:
                self._rss.stop()
                raise

    def start_load(self) -> None:
        """Begin the load phase: the first ``/metrics`` scrape, then polling; CPU and GPU
        utilisation sampling."""
        if self._cpu is not None:
            raise RuntimeError("start_load() called twice")
        if self._rss is None:
            raise RuntimeError("no server to watch: call attach() first")
        self._poller.start()
        self._cpu = ProcessTreeCpuSampler(self._rss.root_pid, interval_s=self._cpu_interval_s)
        self._cpu.start()
        if self._gpu_sampler is not None:
            utilization = GpuUtilizationSampler(
                self._gpu_sampler.uuids, interval_s=self._utilization_interval_s, nvml=self._nvml
            )
            try:
                utilization.start()
            except EnvironmentProblem as exc:  # the memory samples still stand: go on without
                log.warning("GPU utilisation is not sampled: %s", exc)
            else:
                self._utilization = utilization

    def stop_load(self) -> None:
        """End the load phase: stop polling and sampling, joining every thread. Idempotent."""
        self._poller.stop()
        if self._cpu is not None:
            self._cpu.stop()
        if self._utilization is not None:
            self._utilization.stop()
        if self._gpu_sampler is not None:
            self._gpu_sampler.stop()
        if self._rss is not None:
            self._rss.stop()

    close = stop_load  # for the error paths: safe at any point, any number of times

    def result(self) -> tuple[MemoryUsage, dict[str, float]]:
        """Memory used (GPU peak over baseline per UUID, host RSS peak) and the server metrics:
        the ``/metrics`` summary with the load phase's CPU and GPU-utilisation figures.

        Meant for after ``stop_load()``; before, it reports what was seen so far.
        """
        gpu_peak: dict[str, int] = {}
        gpu_baseline: dict[str, int] = {}
        if self._gpu_sampler is not None and self._baseline_taken:
            gpu_peak, gpu_baseline = self._gpu_sampler.result()
        memory = MemoryUsage(
            gpu_peak_bytes=gpu_peak,
            gpu_baseline_bytes=gpu_baseline,
            host_peak_rss_bytes=self._rss.peak_bytes if self._rss is not None else None,
        )
        server_metrics = self._poller.summary()
        if self._cpu is not None:
            server_metrics.update(self._cpu.result())
        if self._utilization is not None:
            server_metrics.update(self._utilization.summary())
        return memory, server_metrics

    def __exit__(self, *exc_info: object) -> None:
        self.close()
