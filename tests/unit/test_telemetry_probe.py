"""TelemetryProbe: call order, GPU baseline and what it reports without a server.

The full lifecycle against a real process and a real /metrics endpoint is in
tests/integration/test_telemetry_scrape.py.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tuner.domain import MemoryUsage
from tuner.errors import EnvironmentProblem
from tuner.telemetry.probe import TelemetryProbe

GIB = 1024**3
UNUSED_URL = "http://127.0.0.1:9/metrics"  # never scraped in these tests


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"fake NVML error {value}")
        self.value = value


@dataclass
class FakeMemory:
    total: int
    used: int


@dataclass
class FakeUtilization:
    gpu: int
    memory: int


class OneGpuNvml:
    """One GPU whose used memory and utilisation (percent) the test sets; ``present=False``
    acts as a CPU machine. ``utilization_reads`` counts the utilisation reads."""

    NVMLError = FakeNVMLError

    def __init__(self, used: int = GIB, *, present: bool = True, busy: int = 0) -> None:
        self.used = used
        self.present = present
        self.busy = busy
        self.utilization_reads = 0

    def nvmlInit(self) -> None:
        if not self.present:
            raise FakeNVMLError(12)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.95.05"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12080

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return "GPU-only"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return uuid

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        return handle

    def nvmlDeviceGetName(self, handle: str) -> str:
        return "NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetCudaComputeCapability(self, handle: str) -> tuple[int, int]:
        return (8, 0)

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> FakeMemory:
        return FakeMemory(total=80 * GIB, used=self.used)

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> FakeUtilization:
        self.utilization_reads += 1
        return FakeUtilization(gpu=self.busy, memory=0)


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not leaked, f"threads left running: {leaked}"


def test_attach_before_baseline_is_refused_on_gpu() -> None:
    probe = TelemetryProbe(gpu=True, metrics_url=UNUSED_URL, nvml=OneGpuNvml())
    with pytest.raises(RuntimeError, match="before_launch"):
        probe.attach(os.getpid())


def test_start_load_without_server_is_refused() -> None:
    probe = TelemetryProbe(gpu=False, metrics_url=UNUSED_URL)
    with pytest.raises(RuntimeError, match="attach"):
        probe.start_load()


def test_gpu_probe_without_nvml_fails_before_launch() -> None:
    probe = TelemetryProbe(gpu=True, metrics_url=UNUSED_URL, nvml=OneGpuNvml(present=False))
    with pytest.raises(EnvironmentProblem):
        probe.before_launch()


def test_fresh_probe_reports_nothing_and_closes_cleanly() -> None:
    with TelemetryProbe(gpu=True, metrics_url=UNUSED_URL, nvml=OneGpuNvml()) as probe:
        probe.before_launch()
    memory, metrics = probe.result()
    assert memory == MemoryUsage(gpu_peak_bytes={}, gpu_baseline_bytes={"GPU-only": GIB})
    assert metrics == {}


def test_gpu_memory_is_sampled_from_attach_over_the_baseline() -> None:
    nvml = OneGpuNvml(used=2 * GIB)
    probe = TelemetryProbe(gpu=True, metrics_url=UNUSED_URL, nvml=nvml, gpu_interval_s=0.001)
    probe.before_launch()
    nvml.used = 30 * GIB  # the server allocated at start-up
    probe.attach(os.getpid())  # this test process stands in for the server
    nvml.used = 10 * GIB  # ...and freed some before the load
    probe.close()
    memory, _ = probe.result()
    assert memory.gpu_baseline_bytes == {"GPU-only": 2 * GIB}
    assert memory.gpu_peak_bytes == {"GPU-only": 28 * GIB}
    assert memory.headline_bytes == 28 * GIB
    assert memory.host_peak_rss_bytes is not None and memory.host_peak_rss_bytes > 0


CPU_KEYS = {"api_server_cpu", "api_server_processes", "server_cpu_peak_process"}
GPU_KEYS = {"gpu_utilization_mean", "gpu_utilization_samples"}


def test_load_phase_adds_cpu_and_gpu_utilization_to_the_server_metrics() -> None:
    nvml = OneGpuNvml(busy=75)
    probe = TelemetryProbe(
        gpu=True,
        metrics_url=UNUSED_URL,
        nvml=nvml,
        gpu_interval_s=0.01,
        cpu_interval_s=0.01,
        utilization_interval_s=0.01,
    )
    probe.before_launch()
    probe.attach(os.getpid())  # this test process stands in for the server
    assert nvml.utilization_reads == 0  # not before the load
    probe.start_load()
    began = time.monotonic()
    # Some CPU for the API-server figure, over more than the shortest phase given cores.
    while time.monotonic() - began < 0.2 or nvml.utilization_reads < 3:
        sum(range(10_000))
    probe.stop_load()
    reads = nvml.utilization_reads
    _, metrics = probe.result()
    assert set(metrics) >= CPU_KEYS | GPU_KEYS
    assert metrics["gpu_utilization_mean"] == pytest.approx(0.75)
    assert metrics["gpu_utilization_samples"] == float(reads) >= 3
    assert metrics["api_server_processes"] >= 1.0
    assert metrics["api_server_cpu"] > 0.0
    probe.close()
    assert nvml.utilization_reads == reads  # nothing sampled after stop_load()


def test_cpu_probe_measures_cpu_and_no_gpu_utilization() -> None:
    probe = TelemetryProbe(gpu=False, metrics_url=UNUSED_URL, cpu_interval_s=0.01)
    with probe:
        probe.attach(os.getpid())
        probe.start_load()
        time.sleep(0.2)
    _, metrics = probe.result()
    assert set(metrics) >= CPU_KEYS
    assert not GPU_KEYS & set(metrics)
