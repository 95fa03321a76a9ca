"""Energy the measured GPU draws during one measurement window, through NVML.

The first choice is NVML's total energy counter (``nvmlDeviceGetTotalEnergyConsumption``:
millijoules since the driver loaded, Volta and later), read as the window begins and as it
ends. The counter is a 64-bit unsigned integer: an end reading below the start one is taken as
a wrap-around when the difference modulo 2**64 is a plausible energy for the window (an
average below :data:`MAX_PLAUSIBLE_W`), otherwise as a reset (the driver reloaded), which the
counter cannot measure across.

Meanwhile the GPU's power (``nvmlDeviceGetPowerUsage``, milliwatts) is sampled every
``interval_s`` and integrated over time (trapezoids): where the counter is missing
(``NVML_ERROR_NOT_SUPPORTED`` on older GPUs) or was reset, that integral is the window's
energy, and the reading says so (``method="power_samples"`` with a ``note``). Where neither
works the window has no energy: None, logged; nothing is made up.

Only the GPU the server runs on is read (by UUID, or NVML index), never the whole host.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tuner.domain import WindowEnergy
from tuner.telemetry.nvml import Nvml, load_nvml, shutdown
from tuner.telemetry.periodic import Periodic

log = logging.getLogger(__name__)

COUNTER_MODULUS = 2**64  # nvmlDeviceGetTotalEnergyConsumption returns an unsigned long long
# One GPU's average power above this over a window is no measurement (an H200 is capped at
# 700 W, a B200 at 1,000 W): a counter difference implying more is a reset, not a wrap.
MAX_PLAUSIBLE_W = 5_000.0
COUNTER = "counter"
POWER_SAMPLES = "power_samples"


def _code(exc: BaseException) -> str:
    value = getattr(exc, "value", None)
    return f" (NVML code {value})" if isinstance(value, int) else ""


class _PowerSamples(Periodic):
    """``(time, watts)`` of one GPU every ``interval_s`` while it runs; failed reads are
    counted and skipped."""

    thread_name = "tuner-gpu-power"

    def __init__(
        self, api: Nvml, handle: Any, interval_s: float, clock: Callable[[], float]
    ) -> None:
        super().__init__(interval_s)
        self._api, self._handle, self._clock = api, handle, clock
        self.samples: list[tuple[float, float]] = []
        self.failed: str | None = None

    def _tick(self) -> None:
        try:
            watts = float(self._api.nvmlDeviceGetPowerUsage(self._handle)) / 1000.0
        except Exception as exc:  # a lost sample must not stop the others
            self.failed = f"{exc}{_code(exc)}"
            return
        with self._lock:
            self.samples.append((self._clock(), watts))

    def taken(self) -> list[tuple[float, float]]:
        with self._lock:
            return list(self.samples)


def integrate(samples: list[tuple[float, float]], seconds: float) -> float | None:
    """Joules over ``seconds`` from ``(time, watts)`` samples: the trapezoid average power
    between the first and the last sample, times ``seconds``; None with fewer than two samples
    or no time between them."""
    if len(samples) < 2:
        return None
    span = samples[-1][0] - samples[0][0]
    if not span > 0:
        return None
    times, watts = zip(*samples, strict=True)
    return float(np.trapezoid(watts, times)) / span * seconds


def counter_joules(start_mj: int, end_mj: int, seconds: float) -> tuple[float | None, str]:
    """The joules between two counter readings and a note: a wrap-around is undone (modulo
    2**64) when it gives a plausible energy; otherwise ``(None, why)``."""
    delta = end_mj - start_mj
    note = ""
    if delta < 0:
        delta += COUNTER_MODULUS
        note = "the energy counter wrapped around during the window"
    joules = delta / 1000.0
    if seconds > 0 and joules / seconds > MAX_PLAUSIBLE_W:
        return None, (
            f"the energy counter went from {start_mj} to {end_mj} mJ in {seconds:.1f} s "
            "(reset by a driver reload?)"
        )
    return joules, note


class GpuEnergyMeter:
    """Energy of one GPU per window: ``begin()`` as a window starts, ``end()`` as it ends
    (None when NVML cannot say; never raises). ``uuid`` (or ``index``) names the measured GPU;
    ``nvml`` a fake for tests (None: ``pynvml``); ``clock`` the time source (seconds)."""

    def __init__(
        self,
        uuid: str | None = None,
        *,
        index: int | None = None,
        nvml: Nvml | None = None,
        interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if uuid is None and index is None:
            raise ValueError("GpuEnergyMeter needs the measured GPU's uuid or index")
        self.uuid, self.index = uuid, index
        self._nvml = nvml
        self._interval_s = interval_s
        self._clock = clock
        self._api: Nvml | None = None
        self._handle: Any = None
        self._start: tuple[float, int | None, str] | None = None
        self._power: _PowerSamples | None = None
        self._warned = False

    def _warn(self, message: str) -> None:
        # Once per meter at WARNING: every window of a GPU without a counter would repeat it.
        log.log(logging.DEBUG if self._warned else logging.WARNING, "GPU energy: %s", message)
        self._warned = True

    def _counter(self) -> tuple[int | None, str]:
        assert self._api is not None
        try:
            return int(self._api.nvmlDeviceGetTotalEnergyConsumption(self._handle)), ""
        except Exception as exc:
            return None, f"NVML has no energy counter for this GPU: {exc}{_code(exc)}"

    def begin(self) -> None:
        self.close()
        api = load_nvml(self._nvml)
        if api is None:
            self._warn("pynvml (nvidia-ml-py) is not installed: energy not measured")
            return
        try:
            api.nvmlInit()
        except Exception as exc:
            self._warn(f"NVML did not initialise ({exc}): energy not measured")
            return
        try:
            if self.uuid is not None:
                self._handle = api.nvmlDeviceGetHandleByUUID(self.uuid)
            else:
                assert self.index is not None
                self._handle = api.nvmlDeviceGetHandleByIndex(self.index)
        except Exception as exc:
            shutdown(api)
            self._warn(f"NVML does not find GPU {self.uuid or self.index} ({exc})")
            return
        self._api = api
        mj, why = self._counter()
        self._start = (self._clock(), mj, why)
        power = _PowerSamples(api, self._handle, self._interval_s, self._clock)
        try:
            power.start()
        except Exception as exc:  # cannot happen with a working NVML; keep the counter
            self._warn(f"power sampling did not start: {exc}")
        else:
            self._power = power

    def end(self) -> WindowEnergy | None:
        """The energy since ``begin()``, or None (logged) when neither the counter nor the
        power samples measured it."""
        if self._api is None or self._start is None:
            return None
        t0, start_mj, why = self._start
        end_mj, end_why = self._counter()
        seconds = max(self._clock() - t0, 0.0)
        power = self._power
        self.close()
        samples = power.taken() if power is not None else []
        if start_mj is not None and end_mj is not None:
            joules, note = counter_joules(start_mj, end_mj, seconds)
            if joules is not None:
                return self._reading(joules, seconds, COUNTER, note=note)
            why = note
        why = why or end_why
        joules = integrate(samples, seconds)
        if joules is None:
            lost = f"; power readings failed: {power.failed}" if power and power.failed else ""
            self._warn(f"{why}{lost}: energy not measured for this window")
            return None
        self._warn(f"{why}: using power samples instead")
        note = f"{why}; integrated {len(samples)} power samples instead"
        return self._reading(joules, seconds, POWER_SAMPLES, samples=len(samples), note=note)

    def _reading(
        self, joules: float, seconds: float, method: str, *, samples: int = 0, note: str = ""
    ) -> WindowEnergy:
        return WindowEnergy(
            joules=joules,
            seconds=seconds,
            watts=joules / seconds if seconds > 0 else float("nan"),
            method=method,
            gpu_uuid=self.uuid,
            samples=samples,
            note=note,
        )

    def close(self) -> None:
        """Stop sampling and release NVML; safe at any point."""
        power, self._power = self._power, None
        if power is not None:
            power.stop()
        api, self._api = self._api, None
        if api is not None:
            shutdown(api)
