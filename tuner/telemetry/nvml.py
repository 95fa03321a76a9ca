"""GPU discovery, GPU memory and GPU utilisation through NVML (package ``nvidia-ml-py``, module
``pynvml``).

Every function takes an optional ``nvml`` argument: an object with the ``pynvml`` functions used
here and its ``NVMLError`` class. ``None`` means the real ``pynvml``. Tests pass a small fake.

``pynvml.NVMLError`` is translated into :class:`tuner.errors.EnvironmentProblem` here and
nowhere else. A machine without NVML (no package, no library, no driver) is not an error for
discovery: :func:`detect_gpus` returns ``[]``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tuner.errors import EnvironmentProblem
from tuner.telemetry.periodic import Periodic

log = logging.getLogger(__name__)

# NVML return codes that mean "there is no NVIDIA GPU to talk to here" (nvml.h).
_NVML_ERROR_DRIVER_NOT_LOADED = 9
_NVML_ERROR_LIBRARY_NOT_FOUND = 12
_ABSENT = frozenset({_NVML_ERROR_DRIVER_NOT_LOADED, _NVML_ERROR_LIBRARY_NOT_FOUND})

_HINT = (
    "check `nvidia-smi` works on this machine; without an NVIDIA GPU run tuner in CPU mode "
    "(no --gpu)"
)


class Nvml(Protocol):
    """The slice of ``pynvml`` tuner uses. Handles are opaque."""

    @property
    def NVMLError(self) -> type[Exception]: ...  # a class attribute does, too

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...  # has .total, .used
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...  # has .gpu, .memory (%)
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]: ...
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int: ...  # millijoules
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...  # milliwatts
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]: ...  # have .pid


@dataclass(frozen=True)
class DetectedGpu:
    """One GPU as NVML reports it."""

    index: int
    name: str
    uuid: str
    memory_total_bytes: int
    compute_capability: tuple[int, int]
    driver_version: str
    cuda_driver_version: str | None  # e.g. "13.0"; None when NVML cannot tell


def load_nvml(nvml: Nvml | None) -> Nvml | None:
    """``nvml``, else the real ``pynvml``; None when it is not installed."""
    if nvml is not None:
        return nvml
    try:
        import pynvml
    except ImportError:
        return None
    result: Nvml = pynvml
    return result


def _text(value: str | bytes) -> str:
    # Older pynvml releases return bytes.
    return value.decode() if isinstance(value, bytes) else str(value)


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _translate(exc: BaseException, doing: str) -> EnvironmentProblem:
    return EnvironmentProblem(f"NVML failed while {doing}: {exc} (code {_code(exc)})", hint=_HINT)


@contextlib.contextmanager
def _translated(api: Nvml, doing: str) -> Iterator[None]:
    """Turn ``NVMLError`` raised inside into :class:`EnvironmentProblem`."""
    try:
        yield
    except api.NVMLError as exc:
        raise _translate(exc, doing) from exc


def shutdown(api: Nvml) -> None:
    try:
        api.nvmlShutdown()
    except Exception as exc:  # nothing useful to do about it; the numbers are taken
        log.debug("nvmlShutdown failed: %s", exc)


def _cuda_driver_version(api: Nvml) -> str | None:
    try:
        raw = int(api.nvmlSystemGetCudaDriverVersion())
    except api.NVMLError:
        return None
    # NVML encodes 13.0 as 13000 and 12.4 as 12040.
    return f"{raw // 1000}.{(raw % 1000) // 10}"


def detect_gpus(nvml: Nvml | None = None) -> list[DetectedGpu]:
    """The GPUs NVML can see, in NVML index order.

    Returns ``[]`` when ``pynvml`` is not installed, the NVML library is missing or no driver is
    loaded (a CPU machine), or NVML finds no device. Raises :class:`EnvironmentProblem` when NVML
    is present but fails otherwise (permissions, a lost GPU, a driver/library mismatch).
    """
    api = load_nvml(nvml)
    if api is None:
        log.debug("pynvml is not installed: no GPUs")
        return []
    try:
        api.nvmlInit()
    except api.NVMLError as exc:
        if _code(exc) in _ABSENT:
            log.debug("NVML not available (%s): no GPUs", exc)
            return []
        raise _translate(exc, "initialising") from exc
    try:
        with _translated(api, "listing GPUs"):
            driver = _text(api.nvmlSystemGetDriverVersion())
            cuda = _cuda_driver_version(api)
            gpus = []
            for index in range(api.nvmlDeviceGetCount()):
                handle = api.nvmlDeviceGetHandleByIndex(index)
                major, minor = api.nvmlDeviceGetCudaComputeCapability(handle)
                gpus.append(
                    DetectedGpu(
                        index=index,
                        name=_text(api.nvmlDeviceGetName(handle)),
                        uuid=_text(api.nvmlDeviceGetUUID(handle)),
                        memory_total_bytes=int(api.nvmlDeviceGetMemoryInfo(handle).total),
                        compute_capability=(int(major), int(minor)),
                        driver_version=driver,
                        cuda_driver_version=cuda,
                    )
                )
            return gpus
    finally:
        shutdown(api)


def _handle(api: Nvml, uuid: str) -> Any:
    try:
        return api.nvmlDeviceGetHandleByUUID(uuid)
    except api.NVMLError as exc:
        raise EnvironmentProblem(
            f"no GPU with UUID {uuid!r}: {exc}",
            hint="list the GPUs and their UUIDs with `nvidia-smi -L`",
        ) from exc


class _GpuSampler(Periodic):
    """Samples the GPUs ``uuids`` (None: every GPU NVML sees, fixed when NVML is opened) from
    ``start()`` to ``stop()``, holding NVML open meanwhile. Setting up raises
    :class:`EnvironmentProblem` when NVML is unusable; a failed sample afterwards is logged
    (the first at WARNING) and dropped: sampling never raises into the caller's thread."""

    what = "GPU"  # in messages: "cannot sample {what}", "{what} sample failed"

    def __init__(self, uuids: Sequence[str] | None, interval_s: float, nvml: Nvml | None) -> None:
        super().__init__(interval_s)
        self._uuids: tuple[str, ...] | None = tuple(uuids) if uuids is not None else None
        self._nvml = nvml
        self._api: Nvml | None = None
        self._handles: dict[str, Any] = {}
        self._failures = 0

    def _open(self) -> Nvml:
        """nvmlInit, then a handle per watched GPU; the caller must ``_close()``. On an error
        NVML is shut down here and :class:`EnvironmentProblem` says what could not be sampled."""
        api = load_nvml(self._nvml)
        if api is None:
            raise EnvironmentProblem(
                f"cannot sample {self.what}: the nvidia-ml-py package (pynvml) is not installed",
                hint="pip install nvidia-ml-py, or run tuner in CPU mode (no --gpu)",
            )
        with _translated(api, "initialising"):
            api.nvmlInit()
        try:
            with _translated(api, "looking up GPUs"):
                uuids = self._uuids
                if uuids is None:
                    count = api.nvmlDeviceGetCount()
                    found = [api.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
                    uuids = tuple(_text(api.nvmlDeviceGetUUID(h)) for h in found)
                    handles = dict(zip(uuids, found, strict=True))
                else:
                    handles = {u: _handle(api, u) for u in uuids}
        except BaseException:
            shutdown(api)
            raise
        if not handles:
            shutdown(api)
            raise EnvironmentProblem(f"cannot sample {self.what}: NVML sees no GPU", hint=_HINT)
        self._api, self._uuids, self._handles = api, uuids, handles
        return api

    def _close(self) -> None:
        if self._api is not None:
            shutdown(self._api)
            self._api = None

    def _before_start(self) -> None:
        self._open()

    _after_stop = _close

    def _read(self, api: Nvml) -> dict[str, Any]:
        raise NotImplementedError

    def _record(self, reading: dict[str, Any]) -> None:
        raise NotImplementedError

    def _tick(self) -> None:
        api = self._api
        if api is None:
            return
        try:
            reading = self._read(api)
        except Exception as exc:  # keep sampling: one lost sample does not spoil the rest
            self._failures += 1
            level = logging.WARNING if self._failures == 1 else logging.DEBUG
            log.log(level, "%s sample failed (%d so far): %s", self.what, self._failures, exc)
            return
        with self._lock:
            self._record(reading)


class GpuMemorySampler(_GpuSampler):
    """Peak used GPU memory per GPU UUID, over a baseline taken before the server starts.

    Use: ``baseline()`` before launching the server, then ``start()`` ... ``stop()`` (or
    ``with sampler:``) around the part to measure, then ``result()``. Used memory is
    device-wide, so memory other processes take during the trial counts too: the baseline only
    removes what was there before.
    """

    thread_name = "tuner-gpu-sampler"
    what = "GPU memory"

    def __init__(
        self, uuids: Sequence[str] | None = None, interval_s: float = 0.1, nvml: Nvml | None = None
    ) -> None:
        super().__init__(uuids, interval_s, nvml)
        self._baseline: dict[str, int] | None = None
        self._peak: dict[str, int] = {}

    @property
    def uuids(self) -> tuple[str, ...] | None:
        """The GPUs watched: those asked for, or every GPU NVML saw at ``baseline()``; None
        before that when none were asked for."""
        return self._uuids

    def _read(self, api: Nvml) -> dict[str, int]:
        return {u: int(api.nvmlDeviceGetMemoryInfo(h).used) for u, h in self._handles.items()}

    def _record(self, reading: dict[str, int]) -> None:
        for uuid, value in reading.items():
            self._peak[uuid] = max(self._peak.get(uuid, 0), value)

    def baseline(self) -> dict[str, int]:
        """Record used memory per UUID now (before the server starts) and return it."""
        api = self._open()
        try:
            with _translated(api, "reading the memory baseline"):
                self._baseline = self._read(api)
        finally:
            self._close()
        return dict(self._baseline)

    def _before_start(self) -> None:
        if self._baseline is None:
            log.warning("GPU baseline taken at start(): memory allocated before is not counted")
            self.baseline()
        self._open()

    def result(self) -> tuple[dict[str, int], dict[str, int]]:
        """``(peak used memory over the baseline, baseline)``, both in bytes per GPU UUID.

        A GPU without a successful sample has no peak entry (rather than a made-up 0); a peak
        below the baseline counts as 0.
        """
        baseline = dict(self._baseline or {})
        with self._lock:
            peak = dict(self._peak)
        over = {u: max(0, peak[u] - base) for u, base in baseline.items() if u in peak}
        return over, baseline


class GpuUtilizationSampler(_GpuSampler):
    """How busy the GPUs are: NVML's utilisation rate (the share of the last sample period,
    1/6 s to 1 s by product, in which a kernel ran on the GPU). Some GPUs, MIG slices among
    them, do not report it: their samples fail and are dropped."""

    thread_name = "tuner-gpu-utilization-sampler"
    what = "GPU utilisation"

    def __init__(
        self, uuids: Sequence[str] | None = None, interval_s: float = 0.5, nvml: Nvml | None = None
    ) -> None:
        super().__init__(uuids, interval_s, nvml)
        self._sums: dict[str, float] = {}
        self._rounds = 0

    def _read(self, api: Nvml) -> dict[str, float]:
        # One round reads every GPU; a round with a failed read is dropped whole, so that
        # every GPU's mean is over the same instants.
        return {
            u: float(api.nvmlDeviceGetUtilizationRates(h).gpu) / 100.0
            for u, h in self._handles.items()
        }

    def _record(self, reading: dict[str, float]) -> None:
        self._rounds += 1
        for uuid, value in reading.items():
            self._sums[uuid] = self._sums.get(uuid, 0.0) + value

    @property
    def samples(self) -> int:
        """Successful sampling rounds (every GPU read once) so far."""
        with self._lock:
            return self._rounds

    def means(self) -> dict[str, float]:
        """Mean utilisation per GPU UUID, a fraction (1 = a kernel ran all the time); ``{}``
        before any successful round."""
        with self._lock:
            if self._rounds == 0:
                return {}
            return {u: total / self._rounds for u, total in self._sums.items()}

    def summary(self) -> dict[str, float]:
        """``gpu_utilization_mean`` (the per-GPU means averaged over the GPUs) and
        ``gpu_utilization_samples`` (the rounds behind it); ``{}`` without a successful one."""
        means = self.means()
        if not means:
            return {}
        return {
            "gpu_utilization_mean": sum(means.values()) / len(means),
            "gpu_utilization_samples": float(self.samples),
        }


def local_cpus(uuid: str, nvml: Nvml | None = None) -> tuple[int, ...] | None:
    """The CPUs NVML names as local to the GPU ``uuid`` (its NUMA node's, from
    ``nvmlDeviceGetCpuAffinity``), in order; None where NVML cannot tell (no NVML, an old
    driver, an unknown GPU): placement then falls back to the CPUs this process may use."""
    api = load_nvml(nvml)
    if api is None:
        return None
    words = max(1, ((os.cpu_count() or 1) + 63) // 64)
    try:
        api.nvmlInit()
    except api.NVMLError:
        return None
    try:
        handle = api.nvmlDeviceGetHandleByUUID(uuid)
        mask = getattr(api, "nvmlDeviceGetCpuAffinity")(handle, words)  # noqa: B009
    except (api.NVMLError, AttributeError) as exc:
        log.debug("no CPU affinity for %s from NVML: %s", uuid, exc)
        return None
    finally:
        shutdown(api)
    cpus = tuple(
        word_index * 64 + bit
        for word_index, word in enumerate(mask)
        for bit in range(64)
        if int(word) >> bit & 1
    )
    return cpus or None
