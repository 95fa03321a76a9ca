"""What the rest of the host did during a load window: CPU taken by processes that are neither
the load generator nor the server, and processes on the measured GPUs that are not the server's.

Implements :class:`tuner.load.selfcheck.Neighbours` for the runner, which knows the server's
process tree; without one (``tuner load`` against a URL) only the host's total is known.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import psutil

from tuner.load.selfcheck import NeighbourReading
from tuner.telemetry.host import GONE, cpu_seconds, process_tree
from tuner.telemetry.nvml import load_nvml, shutdown


def _host_busy_s() -> float:
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    return float(sum(t) - idle)


def _cpu_s(procs: Iterable[psutil.Process]) -> dict[int, float]:
    out: dict[int, float] = {}
    for p in procs:
        try:
            out[p.pid] = cpu_seconds(p)
        except GONE:
            continue
    return out


class HostNeighbours:
    """CPU accounting of one window. ``server_pid`` roots the server's process tree (None:
    unknown, so ``others_cpu`` is None); ``gpu_pids`` lists the processes on the measured GPUs
    (None: no GPU)."""

    def __init__(
        self,
        server_pid: Callable[[], int | None] | None = None,
        gpu_pids: Callable[[], set[int]] | None = None,
    ) -> None:
        self._server_pid = server_pid
        self._gpu_pids = gpu_pids
        self._wall = 0.0
        self._host = 0.0
        self._server: dict[int, float] = {}

    def _server_tree(self) -> list[psutil.Process]:
        pid = self._server_pid() if self._server_pid is not None else None
        return process_tree(pid) if pid is not None else []

    def begin(self) -> None:
        self._server = _cpu_s(self._server_tree())
        self._host = _host_busy_s()
        self._wall = time.perf_counter()

    def end(self, client_cpu_s: float) -> NeighbourReading:
        wall = max(time.perf_counter() - self._wall, 1e-9)
        host_s = max(0.0, _host_busy_s() - self._host)
        tree = self._server_tree()
        now = _cpu_s(tree)
        # A server process that started during the window counts from zero.
        server_s = sum(v - self._server.get(pid, 0.0) for pid, v in now.items())
        others = None
        if self._server_pid is not None and tree:
            others = max(0.0, host_s - client_cpu_s - server_s) / wall
        strangers = 0
        if self._gpu_pids is not None:
            on_gpu = self._gpu_pids()
            server = {p.pid for p in tree}
            # In a container NVML may report the host's pids: when none of the server's own
            # processes is in the list, the two cannot be told apart, so nobody is counted.
            if on_gpu & server:
                strangers = len(on_gpu - server - {psutil.Process().pid})
        return NeighbourReading(
            host_cpu=host_s / wall, others_cpu=others, other_gpu_processes=strangers
        )


def nvml_compute_pids(uuids: Iterable[str]) -> Callable[[], set[int]]:
    """A reader of the pids running compute work on the GPUs ``uuids`` (empty when NVML
    cannot say: a failed read must not spoil a window)."""
    wanted = tuple(uuids)

    def read() -> set[int]:
        api = load_nvml(None)
        if api is None:
            return set()
        try:
            api.nvmlInit()
        except Exception:
            return set()
        try:
            pids: set[int] = set()
            for uuid in wanted:
                handle = api.nvmlDeviceGetHandleByUUID(uuid)
                for proc in api.nvmlDeviceGetComputeRunningProcesses(handle):
                    pids.add(int(proc.pid))
            return pids
        except Exception:
            return set()
        finally:
            shutdown(api)

    return read
