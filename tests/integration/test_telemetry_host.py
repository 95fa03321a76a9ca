"""RSS of a real process tree, and NVML discovery on this machine."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import psutil
import pytest

from tuner.telemetry.host import ProcessTreeRssSampler, tree_rss_bytes
from tuner.telemetry.nvml import DetectedGpu, detect_gpus

MB = 1024**2

# The child starts a grandchild that allocates and touches 150 MB, reports both pids, then
# waits for the grandchild so that it reaps it.
CHILD = textwrap.dedent(
    """
    import subprocess, sys
    grandchild = subprocess.Popen(
        [sys.executable, "-c", GRANDCHILD], stdout=subprocess.PIPE, text=True
    )
    line = grandchild.stdout.readline()
    print(grandchild.pid, line.strip(), flush=True)
    grandchild.wait()
    """
)
GRANDCHILD = textwrap.dedent(
    """
    import sys, time
    block = bytearray(150 * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    print("ready", flush=True)
    time.sleep(60)
    """
)


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not leaked, f"threads left running: {leaked}"


@pytest.fixture
def process_tree() -> Iterator[tuple[subprocess.Popen[str], int]]:
    child = subprocess.Popen(
        [sys.executable, "-c", f"GRANDCHILD = {GRANDCHILD!r}\n{CHILD}"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, so cleanup can reach every process
    )
    try:
        assert child.stdout is not None
        pid, word = child.stdout.readline().split()
        assert word == "ready"
        yield child, int(pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, 9)
        child.wait(timeout=10)
        if child.stdout is not None:
            child.stdout.close()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_peak_includes_the_grandchild(process_tree: tuple[subprocess.Popen[str], int]) -> None:
    child, grandchild = process_tree
    sampler = ProcessTreeRssSampler(child.pid, interval_s=0.02)
    with sampler:
        time.sleep(0.1)
    peak = sampler.peak_bytes
    assert peak is not None and peak >= 150 * MB
    own = tree_rss_bytes(child.pid)
    assert own is not None and own >= 150 * MB
    assert psutil.Process(grandchild).ppid() == child.pid


def test_sampler_survives_processes_vanishing(
    process_tree: tuple[subprocess.Popen[str], int],
) -> None:
    child, grandchild = process_tree
    sampler = ProcessTreeRssSampler(child.pid, interval_s=0.01)
    sampler.start()
    try:
        os.kill(grandchild, 9)  # the child reaps it and exits
        child.wait(timeout=10)
        time.sleep(0.05)  # several samples with the tree gone
    finally:
        sampler.stop()
    assert sampler.peak_bytes is not None and sampler.peak_bytes >= 150 * MB
    assert _gone(grandchild) and _gone(child.pid)
    assert tree_rss_bytes(child.pid) is None


def test_detect_gpus_here_is_fast_and_never_raises() -> None:
    started = time.monotonic()
    gpus = detect_gpus()
    # No retry, no wait on a driver that is not there: a few ms idle; 10 s allows a busy CI
    # machine its first import of pynvml.
    assert time.monotonic() - started < 10.0
    # a CPU machine gives [], a GPU machine real devices
    assert all(isinstance(g, DetectedGpu) and g.uuid.startswith("GPU-") for g in gpus)
