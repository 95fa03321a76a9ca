"""CPU placement of a launch's processes: the plan from the GPU's local CPUs, and NVML's mask."""

from __future__ import annotations

import pytest

from tuner.errors import UsageError
from tuner.runner import placement
from tuner.runner.placement import CpuPlan, cores_of, format_cpulist, parse_cpulist, plan, split
from tuner.telemetry.nvml import local_cpus


def smt_pairs(cpu: int) -> tuple[int, ...]:
    """A 16-thread host of 8 cores whose hyper-threads are CPU n and n + 8 (Linux's usual)."""
    return (cpu % 8, cpu % 8 + 8)


def test_cpulists_read_and_write_the_kernels_format() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpulist("5") == (5,)
    assert format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert format_cpulist([4]) == "4"
    assert parse_cpulist(format_cpulist(range(0, 64, 3))) == tuple(range(0, 64, 3))


def test_hyperthreads_of_a_core_stay_together() -> None:
    cores = cores_of(range(16), smt_pairs)
    assert cores == [(c, c + 8) for c in range(8)]
    # CPUs outside the allowed set are not invented back.
    assert cores_of([0, 1, 9], smt_pairs) == [(0,), (1, 9)]


def test_the_plan_splits_whole_cores_into_disjoint_sets() -> None:
    got = plan("pinned", None, available=range(16), siblings=smt_pairs)
    assert got is not None
    sets = [set(got.api), set(got.engine), set(got.client)]
    assert sum(len(s) for s in sets) == 16 and set().union(*sets) == set(range(16))
    assert all(a.isdisjoint(b) for i, a in enumerate(sets) for b in sets[i + 1 :])
    # 8 cores: 2 for the API server, 2 for the load generator, 4 for the engine core.
    assert (len(got.api), len(got.engine), len(got.client)) == (4, 8, 4)
    for cpus in sets:  # no core split between two sets
        assert all(smt_pairs(c)[1] in cpus and smt_pairs(c)[0] in cpus for c in cpus)
    assert got.server == tuple(sorted({*got.api, *got.engine}))
    assert got.source == "process"
    record = got.describe()
    assert record["mode"] == "pinned" and record["engine_core"] == format_cpulist(got.engine)


def test_the_gpus_local_cpus_are_preferred() -> None:
    local = tuple(range(8, 16))  # the GPU's NUMA node: the second half
    got = plan("pinned", local, available=range(32))
    assert got is not None and got.source == "nvml"
    assert set(got.api) | set(got.engine) | set(got.client) == set(local)
    # A local list that shares nothing with what this process may use: every allowed CPU.
    fallback = plan("pinned", (40, 41), available=range(8))
    assert fallback is not None and fallback.source == "process"


def test_auto_leaves_a_small_machine_to_the_kernel_and_off_never_pins() -> None:
    assert plan("auto", None, available=[0, 1]) is None
    assert plan("auto", None, available=range(5)) is None
    assert plan("auto", None, available=range(6)) is not None
    assert plan("off", None, available=range(64)) is None
    with pytest.raises(UsageError, match="cannot pin three processes to 2"):
        plan("pinned", None, available=[0, 1])
    # Two cores of two threads: threads split, each set a CPU of its own.
    two_cores = split(cores_of(range(4), lambda c: (c % 2, c % 2 + 2)), "process")
    assert len({*two_cores.api, *two_cores.engine, *two_cores.client}) == 4


def test_the_environment_overrides_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(placement.ENV, raising=False)
    assert placement.resolve_mode("auto") == "auto"
    monkeypatch.setenv(placement.ENV, "off")
    assert placement.resolve_mode("pinned") == "off"
    monkeypatch.setenv(placement.ENV, "sometimes")
    with pytest.raises(UsageError, match="none of auto, pinned, off"):
        placement.resolve_mode("auto")


class FakeNVMLError(Exception):
    pass


class AffinityNvml:
    """The three calls local_cpus makes, with a CPU mask of 64-bit words."""

    NVMLError = FakeNVMLError

    def __init__(self, mask: list[int] | None) -> None:
        self.mask = mask
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != "GPU-1":
            raise FakeNVMLError("no such GPU")
        return uuid

    def nvmlDeviceGetCpuAffinity(self, handle: str, words: int) -> list[int]:
        if self.mask is None:
            raise FakeNVMLError("not supported")
        return self.mask


def test_nvml_cpu_masks_become_cpu_numbers() -> None:
    # CPUs 0-3 in the first word, 64 and 70 in the second.
    nvml = AffinityNvml([0b1111, (1 << 0) | (1 << 6)])
    assert local_cpus("GPU-1", nvml) == (0, 1, 2, 3, 64, 70)  # type: ignore[arg-type]
    assert nvml.shutdowns == 1
    assert local_cpus("GPU-2", nvml) is None  # type: ignore[arg-type]
    assert local_cpus("GPU-1", AffinityNvml(None)) is None  # type: ignore[arg-type]
    assert local_cpus("GPU-1", AffinityNvml([0])) is None  # type: ignore[arg-type]


def test_a_plan_is_a_frozen_record() -> None:
    cpu_plan = CpuPlan(api=(0,), engine=(1, 2), client=(3,), source="nvml")
    assert cpu_plan.describe() == {
        "mode": "pinned",
        "source": "nvml",
        "api_server": "0",
        "engine_core": "1-2",
        "load_generator": "3",
    }
