"""Host memory: the resident memory of a server's process tree, and the machine's totals."""

from __future__ import annotations

import logging
import threading

import psutil

from tuner.telemetry.periodic import Periodic

log = logging.getLogger(__name__)

# A process that exits, turns zombie or hides from us between listing and reading simply
# does not count in that sample.
_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)


def host_memory() -> tuple[int, int]:
    """``(total, available)`` bytes of host memory, as the kernel reports them now."""
    vm = psutil.virtual_memory()
    return int(vm.total), int(vm.available)


def tree_rss_bytes(root_pid: int) -> int | None:
    """Summed RSS of ``root_pid`` and all its descendants, or None when the root is gone.

    RSS counts pages shared between the processes (libraries, fork copy-on-write) once per
    process, so the sum over-states the tree's footprint a little; it does so the same way for
    every trial, which is what comparisons need.
    """
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except _GONE:
        return None
    total = 0
    for proc in procs:
        try:
            total += int(proc.memory_info().rss)
        except _GONE:
            continue
    return total


class ProcessTreeRssSampler(Periodic):
    """Peak summed RSS of a process and its descendants, sampled in a background thread.

    vLLM runs the model in an engine-core child process, so the whole tree is summed.
    ``start()`` takes one sample at once; ``stop()`` takes a last one and joins the thread.
    Sampling never raises into the caller's thread.
    """

    thread_name = "tuner-rss-sampler"

    def __init__(self, root_pid: int, interval_s: float = 0.2) -> None:
        super().__init__(interval_s)
        self.root_pid = root_pid
        self._peak: int | None = None
        self._lock = threading.Lock()

    @property
    def peak_bytes(self) -> int | None:
        """Highest summed RSS seen so far; None before any successful sample."""
        with self._lock:
            return self._peak

    def _tick(self) -> None:
        try:
            rss = tree_rss_bytes(self.root_pid)
        except Exception as exc:  # e.g. /proc unreadable: lose the sample, keep going
            log.warning("RSS sample of pid %d failed: %s", self.root_pid, exc)
            return
        if rss is None:
            return
        with self._lock:
            self._peak = rss if self._peak is None else max(self._peak, rss)
