"""NVML discovery and GPU memory sampling against a hand-written fake NVML."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tuner.errors import EnvironmentProblem
from tuner.telemetry.nvml import (
    DetectedGpu,
    GpuMemorySampler,
    GpuUtilizationSampler,
    detect_gpus,
)

GIB = 1024**3


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"fake NVML error {value}")
        self.value = value


@dataclass
class FakeMemory:
    total: int
    free: int
    used: int


@dataclass
class FakeUtilization:
    gpu: int  # percent
    memory: int


class FakeNvml:
    """Two GPUs. ``used[uuid]`` is a script: each memory read takes the next value (the last
    one repeats); an ``int`` in ``errors`` at a read's position raises that code instead.
    ``busy[uuid]`` scripts the utilisation reads (percent) the same way, with
    ``busy_errors`` for GPU 0's."""

    NVMLError = FakeNVMLError

    def __init__(
        self,
        used: dict[str, list[int]] | None = None,
        *,
        init_error: int | None = None,
        name_error: int | None = None,
        errors: dict[int, int] | None = None,
        busy: dict[str, list[int]] | None = None,
        busy_errors: dict[int, int] | None = None,
    ) -> None:
        self.uuids = ["GPU-aaaa", "GPU-bbbb"]
        self.used = used or {u: [GIB] for u in self.uuids}
        self.busy = busy or {u: [0] for u in self.uuids}
        self.busy_errors = busy_errors or {}
        self.busy_reads = {u: 0 for u in self.uuids}
        self.init_error = init_error
        self.name_error = name_error
        self.errors = errors or {}  # read number (0-based, per GPU 0) -> error code
        self.reads = {u: 0 for u in self.uuids}
        self.inits = 0
        self.shutdowns = 0
        self._lock = threading.Lock()

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"580.95.05"  # old pynvml returns bytes

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        return len(self.uuids)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return self.uuids[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid not in self.uuids:
            raise FakeNVMLError(13)  # NVML_ERROR_NOT_FOUND is 6; any code will do
        return uuid

    def nvmlDeviceGetName(self, handle: str) -> str:
        if self.name_error is not None:
            raise FakeNVMLError(self.name_error)
        return "NVIDIA H200" if handle == "GPU-aaaa" else "NVIDIA A10G"

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        return handle

    def nvmlDeviceGetCudaComputeCapability(self, handle: str) -> tuple[int, int]:
        return (9, 0) if handle == "GPU-aaaa" else (8, 6)

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> FakeMemory:
        with self._lock:
            n = self.reads[handle]
            self.reads[handle] += 1
        if handle == self.uuids[0] and n in self.errors:
            raise FakeNVMLError(self.errors[n])
        script = self.used[handle]
        used = script[min(n, len(script) - 1)]
        total = 141 * GIB if handle == "GPU-aaaa" else 24 * GIB
        return FakeMemory(total=total, free=total - used, used=used)

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> FakeUtilization:
        with self._lock:
            n = self.busy_reads[handle]
            self.busy_reads[handle] += 1
        if handle == self.uuids[0] and n in self.busy_errors:
            raise FakeNVMLError(self.busy_errors[n])
        script = self.busy[handle]
        return FakeUtilization(gpu=script[min(n, len(script) - 1)], memory=0)


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not leaked, f"threads left running: {leaked}"


def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_detect_gpus_reports_both_gpus_and_balances_init() -> None:
    nvml = FakeNvml()
    gpus = detect_gpus(nvml)
    assert gpus == [
        DetectedGpu(0, "NVIDIA H200", "GPU-aaaa", 141 * GIB, (9, 0), "580.95.05", "13.0"),
        DetectedGpu(1, "NVIDIA A10G", "GPU-bbbb", 24 * GIB, (8, 6), "580.95.05", "13.0"),
    ]
    assert nvml.inits == nvml.shutdowns == 1


@pytest.mark.parametrize("code", [9, 12])  # driver not loaded, library not found
def test_detect_gpus_without_driver_is_empty(code: int) -> None:
    assert detect_gpus(FakeNvml(init_error=code)) == []


def test_detect_gpus_translates_other_nvml_errors() -> None:
    nvml = FakeNvml(name_error=15)  # GPU is lost
    with pytest.raises(EnvironmentProblem) as info:
        detect_gpus(nvml)
    assert "code 15" in str(info.value)
    assert "nvidia-smi" in info.value.hint
    assert isinstance(info.value.__cause__, FakeNVMLError)
    assert nvml.inits == nvml.shutdowns == 1


def test_detect_gpus_init_failure_other_than_absence_raises() -> None:
    with pytest.raises(EnvironmentProblem, match="initialising"):
        detect_gpus(FakeNvml(init_error=4))  # no permission


def test_sampler_peak_is_over_baseline_per_uuid() -> None:
    nvml = FakeNvml(
        used={
            # read 0 is the baseline, then samples
            "GPU-aaaa": [1 * GIB, 3 * GIB, 9 * GIB, 4 * GIB],
            "GPU-bbbb": [2 * GIB, 2 * GIB, 5 * GIB, 3 * GIB],
        }
    )
    sampler = GpuMemorySampler(interval_s=0.001, nvml=nvml)
    assert sampler.baseline() == {"GPU-aaaa": 1 * GIB, "GPU-bbbb": 2 * GIB}
    sampler.start()
    wait_until(lambda: nvml.reads["GPU-aaaa"] >= 4)
    sampler.stop()
    peak, baseline = sampler.result()
    assert peak == {"GPU-aaaa": 8 * GIB, "GPU-bbbb": 3 * GIB}
    assert baseline == {"GPU-aaaa": 1 * GIB, "GPU-bbbb": 2 * GIB}
    assert nvml.inits == nvml.shutdowns == 2  # baseline() and start()/stop()


def test_sampler_only_watches_requested_uuids_and_clamps_at_zero() -> None:
    nvml = FakeNvml(used={"GPU-aaaa": [GIB], "GPU-bbbb": [5 * GIB, 1 * GIB]})
    with GpuMemorySampler(["GPU-bbbb"], interval_s=0.001, nvml=nvml) as sampler:
        pass  # start() takes the baseline itself when it was not taken
    peak, baseline = sampler.result()
    assert baseline == {"GPU-bbbb": 5 * GIB}
    assert peak == {"GPU-bbbb": 0}  # memory was freed: no negative peaks
    assert nvml.reads["GPU-aaaa"] == 0


def test_sampler_keeps_going_after_a_failed_sample(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml(
        used={"GPU-aaaa": [GIB, 2 * GIB, 2 * GIB, 7 * GIB], "GPU-bbbb": [GIB]},
        errors={2: 999},  # the first sample in the thread fails
    )
    sampler = GpuMemorySampler(interval_s=0.001, nvml=nvml)
    sampler.baseline()
    sampler.start()
    wait_until(lambda: nvml.reads["GPU-aaaa"] >= 4)
    sampler.stop()
    assert sampler.result()[0]["GPU-aaaa"] == 6 * GIB
    assert "GPU memory sample failed" in caplog.text


def test_sampler_without_any_good_sample_reports_no_peak() -> None:
    nvml = FakeNvml(errors={n: 999 for n in range(1, 10_000)})
    sampler = GpuMemorySampler(interval_s=0.001, nvml=nvml)
    sampler.baseline()
    sampler.start()
    sampler.stop()
    peak, baseline = sampler.result()
    assert "GPU-aaaa" not in peak and "GPU-aaaa" in baseline


def test_sampler_unknown_uuid_is_a_clear_error() -> None:
    nvml = FakeNvml()
    with pytest.raises(EnvironmentProblem, match="GPU-zzzz") as info:
        GpuMemorySampler(["GPU-zzzz"], nvml=nvml).baseline()
    assert "nvidia-smi -L" in info.value.hint
    assert nvml.inits == nvml.shutdowns


def test_sampler_without_nvml_library_raises_environment_problem() -> None:
    with pytest.raises(EnvironmentProblem, match="initialising"):
        GpuMemorySampler(nvml=FakeNvml(init_error=12)).baseline()


def test_sampler_rejects_bad_interval() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        GpuMemorySampler(interval_s=0)


def test_without_pynvml_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    assert detect_gpus() == []
    with pytest.raises(EnvironmentProblem, match="nvidia-ml-py"):
        GpuMemorySampler().baseline()


def test_utilization_is_the_mean_per_gpu_averaged_over_gpus() -> None:
    # One read per GPU a round: at start(), in the thread, at stop(); a script repeats its end.
    nvml = FakeNvml(busy={"GPU-aaaa": [100, 80, 60, 40], "GPU-bbbb": [0, 0, 20, 20]})
    sampler = GpuUtilizationSampler(interval_s=0.001, nvml=nvml)
    sampler.start()
    wait_until(lambda: nvml.busy_reads["GPU-bbbb"] >= 3)
    sampler.stop()
    rounds = sampler.samples
    assert rounds >= 4 and nvml.busy_reads["GPU-aaaa"] == rounds
    # Reads past the script repeat its last value (40 % and 20 %).
    mean_a = (100 + 80 + 60 + 40 * (rounds - 3)) / 100 / rounds
    mean_b = (0 + 0 + 20 * (rounds - 2)) / 100 / rounds
    assert sampler.means() == {
        "GPU-aaaa": pytest.approx(mean_a),
        "GPU-bbbb": pytest.approx(mean_b),
    }
    assert sampler.summary() == {
        "gpu_utilization_mean": pytest.approx((mean_a + mean_b) / 2),
        "gpu_utilization_samples": float(rounds),
    }
    assert nvml.inits == nvml.shutdowns == 1


def test_utilization_drops_a_round_with_a_failed_read(caplog: pytest.LogCaptureFixture) -> None:
    # GPU 0 fails its second read: that round is dropped for both GPUs.
    nvml = FakeNvml(busy={"GPU-aaaa": [50, 100, 50], "GPU-bbbb": [10]}, busy_errors={1: 999})
    sampler = GpuUtilizationSampler(interval_s=0.001, nvml=nvml)
    sampler.start()
    wait_until(lambda: nvml.busy_reads["GPU-aaaa"] >= 3)
    sampler.stop()
    reads = nvml.busy_reads["GPU-aaaa"]
    assert sampler.samples == reads - 1
    assert sampler.means()["GPU-aaaa"] == pytest.approx(0.5)  # the 100 % read was lost
    assert "GPU utilisation sample failed" in caplog.text


def test_utilization_without_support_reports_nothing() -> None:
    nvml = FakeNvml(busy_errors={n: 3 for n in range(10_000)})  # NVML_ERROR_NOT_SUPPORTED
    with GpuUtilizationSampler(["GPU-aaaa"], interval_s=0.001, nvml=nvml) as sampler:
        pass
    assert sampler.samples == 0
    assert sampler.means() == {} and sampler.summary() == {}
    assert nvml.busy_reads["GPU-bbbb"] == 0  # not watched


def test_utilization_sampler_setup_errors_are_environment_problems() -> None:
    with pytest.raises(EnvironmentProblem, match="GPU-zzzz"):
        GpuUtilizationSampler(["GPU-zzzz"], nvml=FakeNvml()).start()
    with pytest.raises(EnvironmentProblem, match="initialising"):
        GpuUtilizationSampler(nvml=FakeNvml(init_error=12)).start()


def test_memory_sampler_names_the_gpus_it_found() -> None:
    sampler = GpuMemorySampler(nvml=FakeNvml())
    assert sampler.uuids is None
    sampler.baseline()
    assert sampler.uuids == ("GPU-aaaa", "GPU-bbbb")
