"""GPU energy per window (tuner.telemetry.energy) against a fake NVML with known counters, and
the energy's way into a window, a trial's metrics, the database codec and the load generator."""

from __future__ import annotations

import logging
import math
import threading

import pytest

from tests.sseserver import FakeVllm, serving
from tuner.db.codec import decode_window, encode
from tuner.domain import RequestRecord, Slo, WindowEnergy, Workload
from tuner.load.generator import LoadGenerator
from tuner.load.prompts import PromptFactory
from tuner.load.stats import ENERGY_METRICS, summarize, window_metrics
from tuner.telemetry.energy import (
    COUNTER,
    COUNTER_MODULUS,
    POWER_SAMPLES,
    GpuEnergyMeter,
    counter_joules,
    integrate,
)

NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"fake NVML error {value}")
        self.value = value


class Clock:
    """A time source the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeNvml:
    """Two GPUs with scripted energy counters (mJ) and power readings (mW): each read takes
    the next value, the last one repeats. ``counter[uuid] = None``: the GPU has no counter
    (NOT_SUPPORTED, as pre-Volta GPUs answer); ``power[uuid] = None``: power reads fail too."""

    NVMLError = FakeNVMLError

    def __init__(
        self,
        counter: dict[str, list[int] | None],
        power: dict[str, list[int] | None] | None = None,
        *,
        init_error: int | None = None,
    ) -> None:
        self.uuids = ["GPU-aaaa", "GPU-bbbb"]
        self.counter = counter
        self.power = power or {}
        self.init_error = init_error
        self.reads: dict[str, int] = {}
        self.inits = 0
        self.shutdowns = 0
        self._lock = threading.Lock()

    def _next(self, kind: str, uuid: str, script: list[int] | None) -> int:
        if script is None:
            raise FakeNVMLError(NOT_SUPPORTED)
        with self._lock:
            n = self.reads.get(f"{kind}:{uuid}", 0)
            self.reads[f"{kind}:{uuid}"] = n + 1
        return script[min(n, len(script) - 1)]

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.uuids)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return self.uuids[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid not in self.uuids:
            raise FakeNVMLError(13)
        return uuid

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        return self._next("energy", handle, self.counter.get(handle, [0]))

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return self._next("power", handle, self.power.get(handle, [100_000]))


def _window(fake: FakeNvml, uuid: str = "GPU-aaaa", seconds: float = 10.0) -> WindowEnergy | None:
    """One window of ``seconds`` on the fake clock; the power thread only ticks at the start
    and at the end (its interval is an hour)."""
    clock = Clock()
    meter = GpuEnergyMeter(uuid, nvml=fake, interval_s=3600, clock=clock)
    meter.begin()
    clock.now = seconds
    return meter.end()


def test_the_counter_gives_joules_and_watts_of_the_window() -> None:
    fake = FakeNvml({"GPU-aaaa": [1_000_000, 4_500_000]})
    energy = _window(fake)
    assert energy is not None
    assert energy.method == COUNTER and energy.note == ""
    assert energy.joules == pytest.approx(3500.0)
    assert energy.watts == pytest.approx(350.0) and energy.seconds == 10.0
    assert energy.gpu_uuid == "GPU-aaaa"
    assert fake.inits == fake.shutdowns == 1  # NVML released at the end of the window


def test_a_counter_that_wrapped_around_is_undone() -> None:
    start = COUNTER_MODULUS - 500_000  # 500 J before the 64-bit counter wraps
    fake = FakeNvml({"GPU-aaaa": [start, 1_500_000]})
    energy = _window(fake)
    assert energy is not None and energy.method == COUNTER
    assert energy.joules == pytest.approx(2000.0)
    assert "wrapped" in energy.note


def test_a_counter_that_was_reset_falls_back_to_power_samples() -> None:
    # Backwards by far more than a wrap could explain in 10 s: the driver reloaded.
    fake = FakeNvml({"GPU-aaaa": [9_000_000_000, 1_000]}, {"GPU-aaaa": [200_000, 400_000]})
    energy = _window(fake)
    assert energy is not None and energy.method == POWER_SAMPLES
    assert energy.joules == pytest.approx(3000.0)  # 300 W on average over 10 s
    assert energy.samples == 2 and "reset" in energy.note


def test_a_missing_counter_falls_back_to_power_samples_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeNvml({"GPU-aaaa": None}, {"GPU-aaaa": [250_000, 350_000]})
    with caplog.at_level(logging.WARNING, logger="tuner.telemetry.energy"):
        energy = _window(fake)
    assert energy is not None and energy.method == POWER_SAMPLES
    assert energy.joules == pytest.approx(3000.0) and energy.watts == pytest.approx(300.0)
    assert "no energy counter" in energy.note and f"code {NOT_SUPPORTED}" in energy.note
    assert "power samples" in caplog.text


def test_without_counter_or_power_there_is_no_energy(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml({"GPU-aaaa": None}, {"GPU-aaaa": None})
    with caplog.at_level(logging.WARNING, logger="tuner.telemetry.energy"):
        assert _window(fake) is None
    assert "energy not measured" in caplog.text
    assert fake.inits == fake.shutdowns


def test_only_the_measured_gpu_is_read() -> None:
    fake = FakeNvml({"GPU-aaaa": [0, 9_000_000], "GPU-bbbb": [2_000_000, 3_000_000]})
    energy = _window(fake, "GPU-bbbb")
    assert energy is not None and energy.joules == pytest.approx(1000.0)
    assert energy.gpu_uuid == "GPU-bbbb"
    assert not any(key.endswith("GPU-aaaa") for key in fake.reads)


def test_the_gpu_may_be_named_by_index() -> None:
    fake = FakeNvml({"GPU-bbbb": [0, 700_000]})
    clock = Clock()
    meter = GpuEnergyMeter(index=1, nvml=fake, interval_s=3600, clock=clock)
    meter.begin()
    clock.now = 1.0
    energy = meter.end()
    assert energy is not None and energy.joules == pytest.approx(700.0)


def test_nvml_that_does_not_start_measures_nothing_and_raises_nothing() -> None:
    assert _window(FakeNvml({}, init_error=9)) is None
    assert _window(FakeNvml({"GPU-aaaa": [0, 1]}), uuid="GPU-zzzz") is None


def test_end_without_begin_and_repeated_windows() -> None:
    fake = FakeNvml({"GPU-aaaa": [0, 1_000_000, 1_000_000, 3_000_000]})
    clock = Clock()
    meter = GpuEnergyMeter("GPU-aaaa", nvml=fake, interval_s=3600, clock=clock)
    assert meter.end() is None
    readings = []
    for _ in range(2):
        meter.begin()
        clock.now += 5.0
        readings.append(meter.end())
    assert [r.joules if r else None for r in readings] == [1000.0, 2000.0]
    assert meter.end() is None  # the window is over: nothing is read twice
    assert fake.inits == fake.shutdowns == 2
    assert not [t for t in threading.enumerate() if t.name == "tuner-gpu-power"]


def test_power_sampling_runs_between_begin_and_end() -> None:
    # A real clock and a short interval: the thread takes many samples of a constant 300 W.
    fake = FakeNvml({"GPU-aaaa": None}, {"GPU-aaaa": [300_000]})
    meter = GpuEnergyMeter("GPU-aaaa", nvml=fake, interval_s=0.01)
    meter.begin()
    threading.Event().wait(0.2)
    energy = meter.end()
    assert energy is not None and energy.samples >= 5
    assert energy.watts == pytest.approx(300.0)
    assert energy.joules == pytest.approx(300.0 * energy.seconds)


def test_the_arithmetic_helpers() -> None:
    assert integrate([(0.0, 100.0)], 1.0) is None
    assert integrate([(0.0, 100.0), (0.0, 100.0)], 1.0) is None
    # Trapezoids over 0-2 s (100 -> 300 -> 300 W: 200 + 300 = 500 J), scaled to 4 s.
    assert integrate([(0.0, 100.0), (1.0, 300.0), (2.0, 300.0)], 4.0) == pytest.approx(1000.0)
    assert counter_joules(5_000, 7_000, 1.0) == (2.0, "")
    joules, why = counter_joules(10**12, 0, 1.0)
    assert joules is None and "reset" in why


def _records(tokens: int, n: int) -> list[RequestRecord]:
    return [
        RequestRecord(True, 10, tokens, 0.0, 0.01, 0.1 + i / 100, (0.01,) * (tokens - 1))
        for i in range(n)
    ]


def _energy(joules: float, seconds: float = 10.0) -> WindowEnergy:
    return WindowEnergy(joules=joules, seconds=seconds, watts=joules / seconds, method=COUNTER)


def test_a_window_divides_its_energy_by_its_output_tokens() -> None:
    w = window_metrics(_records(50, 20), 2.0, None, energy=_energy(500.0))
    assert w.energy is not None
    assert w.energy.joules_per_output_token == pytest.approx(500.0 / 1000)
    assert window_metrics(_records(50, 20), 2.0, None).energy is None


def test_a_trial_summarizes_energy_only_when_every_window_measured_it() -> None:
    windows = [
        window_metrics(_records(50, 20), 2.0, None, energy=_energy(j)) for j in (400, 500, 900)
    ]
    s = summarize(windows)
    per_token = s["joules_per_output_token"]
    assert (per_token.median, per_token.low, per_token.high) == pytest.approx((0.5, 0.4, 0.9))
    assert s["gpu_power_w"].median == pytest.approx(50.0)
    # A CPU run (no energy), or one window without it: absent, never estimated.
    cpu = [window_metrics(_records(50, 20), 2.0, None) for _ in range(3)]
    assert not set(ENERGY_METRICS) & set(summarize(cpu))
    assert not set(ENERGY_METRICS) & set(summarize([*windows[:2], cpu[0]]))


def test_energy_survives_the_database_codec() -> None:
    w = window_metrics(_records(8, 4), 1.0, Slo(ttft_p99_ms=100), energy=_energy(12.0))
    back = decode_window(encode(w))
    assert back == w
    assert encode(w)["energy"]["joules_per_output_token"] == pytest.approx(12.0 / 32)
    old = encode(window_metrics(_records(8, 4), 1.0, None))
    del old["energy"]  # a row written before tuner measured energy
    assert decode_window(old).energy is None


class _ScriptedMeter:
    """An energy meter as the generator sees it (tuner.load.selfcheck.EnergyMeter)."""

    def __init__(self) -> None:
        self.begun = 0
        self.ended = 0

    def begin(self) -> None:
        self.begun += 1

    def end(self) -> WindowEnergy | None:
        self.ended += 1
        if self.ended > self.begun:
            return None
        return _energy(100.0 * self.ended, 1.0)


def test_the_generator_reads_energy_around_every_window() -> None:
    meter = _ScriptedMeter()
    workload = Workload(
        name="unit", prompt_tokens=20, output_tokens=4, concurrency=2, requests_per_window=4,
        windows=3, warmup_requests=1,
    )  # fmt: skip
    with serving(FakeVllm()) as url:
        report = LoadGenerator(
            url, "tuner-trial-1", PromptFactory(1024, synthetic=True, seed=0), energy=meter
        ).run(workload)
    assert meter.begun == 3  # the warm-up is not measured
    joules = [w.energy.joules if w.energy else math.nan for w in report.windows]
    assert joules == [100.0, 200.0, 300.0]
    for w in report.windows:
        assert w.energy is not None and w.energy.joules_per_output_token == pytest.approx(
            w.energy.joules / w.output_tokens
        )


def test_the_real_pynvml_without_that_gpu_measures_nothing() -> None:
    # No driver here (or, on a GPU machine, no GPU of this UUID): None, and nothing raised.
    meter = GpuEnergyMeter("GPU-00000000-0000-0000-0000-000000000000", interval_s=3600)
    meter.begin()
    assert meter.end() is None
