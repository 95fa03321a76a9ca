"""TelemetryProbe: call order, GPU baseline and what it reports without a server.

The full lifecycle against a real process and a real /metrics endpoint is in
tests/integration/test_telemetry_scrape.py.
"""

from __future__ import annotations

import os
import threading
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


class OneGpuNvml:
    """One GPU whose used memory the test sets; ``present=False`` acts as a CPU machine."""

    NVMLError = FakeNVMLError

    def __init__(self, used: int = GIB, *, present: bool = True) -> None:
        self.used = used
        self.present = present

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
