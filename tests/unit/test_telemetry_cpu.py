"""CPU use of a server's process tree, API server against engine core, on real processes.

The trees stand in for vLLM's: an idle root (the API server) with children, one of them marked
as an engine core the way tuner's fake server marks its own. Work is a fixed amount of CPU
time (``time.process_time``) started once the sampler runs, so that the assertions hold on a
busy machine too: cores x wall time is then at least that amount.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tuner.telemetry import host
from tuner.telemetry.host import ENGINE_MARKERS, ProcessTreeCpuSampler, is_engine_core

INTERVAL_S = 0.05
BURN_S = 0.6  # CPU seconds the busy process uses while watched

# argv: go-file, done-file. Waits for go, burns BURN_S of CPU time, says done, idles.
BURNER = textwrap.dedent(
    """
    import os, sys, time
    go, done = sys.argv[1], sys.argv[2]
    while not os.path.exists(go):
        time.sleep(0.01)
    start = time.process_time()
    while time.process_time() - start < float(sys.argv[3]):
        pass
    open(done, "w").close()
    time.sleep(60)
    """
)

# The server: an idle API-server child, an engine core (the burner, marked in its argv) that
# has an idle child of its own; the root itself idles. The marker is put together at run time:
# spelt out here, it would stand in the root's own command line and make it an engine core.
SERVER = textwrap.dedent(
    """
    import subprocess, sys, time
    burner, go, done, burn = sys.argv[1:5]
    idle = [sys.executable, "-c", "import time; time.sleep(60)"]
    engine_script = (
        "import subprocess, sys\\n"
        f"subprocess.Popen({idle!r})\\n"
        f"exec({burner!r})\\n"
    )
    engine = subprocess.Popen(
        [sys.executable, "-c", engine_script, go, done, burn, "tuner-fake-" + "engine-core"]
    )
    api = subprocess.Popen(idle)
    print("ready", flush=True)
    time.sleep(60)
    """
)

# A root that, once told to, starts a child which burns CPU and exits; the root reaps it.
LATE = textwrap.dedent(
    """
    import os, subprocess, sys, time
    burner_exit, go, done, reaped = sys.argv[1:5]
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.01)
    subprocess.run([sys.executable, "-c", burner_exit, go, done, sys.argv[5]])
    open(reaped, "w").close()
    time.sleep(60)
    """
)
# It idles 1 s before it exits, so that the sampler's last sight of it holds its whole burn
# even when the sampler's thread waits a few hundred ms for the CPU.
BURN_AND_EXIT = BURNER.replace("time.sleep(60)", "time.sleep(1.0)")


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not leaked, f"threads left running: {leaked}"


@contextlib.contextmanager
def tree(script: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """Run ``script`` as a process-tree root; every process of its group is killed after."""
    root = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert root.stdout is not None
        assert root.stdout.readline().strip() == "ready"
        yield root
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(root.pid, 9)
        root.wait(timeout=10)
        if root.stdout is not None:
            root.stdout.close()


def wait_until(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def wait_for_tree(root_pid: int, processes: int) -> None:
    def complete() -> bool:
        return len(psutil.Process(root_pid).children(recursive=True)) + 1 >= processes

    wait_until(complete)


def test_engine_core_and_its_children_are_told_from_the_api_server(tmp_path: Path) -> None:
    go, done = tmp_path / "go", tmp_path / "done"
    with tree(SERVER, BURNER, str(go), str(done), str(BURN_S)) as root:
        wait_for_tree(root.pid, 4)  # root, API child, engine core, the engine's child
        sampler = ProcessTreeCpuSampler(root.pid, interval_s=INTERVAL_S)
        began = time.monotonic()
        sampler.start()
        go.touch()
        wait_until(done.exists)
        time.sleep(3 * INTERVAL_S)  # a tick or more after the work ended
        sampler.stop()
        elapsed = time.monotonic() - began
    cpu = sampler.result()
    assert cpu["engine_core_processes"] == 2.0  # the engine core's child counts with it
    assert cpu["api_server_processes"] == 2.0  # the root and its idle child
    assert cpu["engine_core_cpu"] * elapsed >= BURN_S * 0.9
    assert cpu["api_server_cpu"] < 0.2  # both idle
    assert 0.0 <= cpu["server_cpu_peak_process"] <= cpu["api_server_cpu"]
    assert set(cpu) == {
        "api_server_cpu",
        "api_server_processes",
        "server_cpu_peak_process",
        "engine_core_cpu",
        "engine_core_processes",
    }


def test_a_process_born_and_gone_during_the_phase_counts_for_what_was_seen(
    tmp_path: Path,
) -> None:
    go, done, reaped = tmp_path / "go", tmp_path / "done", tmp_path / "reaped"
    burn_s = 0.3
    with tree(LATE, BURN_AND_EXIT, str(go), str(done), str(reaped), str(burn_s)) as root:
        sampler = ProcessTreeCpuSampler(root.pid, interval_s=INTERVAL_S)
        began = time.monotonic()
        sampler.start()
        go.touch()
        wait_until(reaped.exists)  # the child idled through several ticks, then exited
        time.sleep(2 * INTERVAL_S)
        sampler.stop()
        elapsed = time.monotonic() - began
    cpu = sampler.result()
    assert cpu["api_server_processes"] == 2.0  # the root and the child that is gone
    # Born while watched, the child counts from its start: all of its burn is in.
    assert cpu["server_cpu_peak_process"] * elapsed >= burn_s * 0.9
    assert cpu["api_server_cpu"] >= cpu["server_cpu_peak_process"]
    assert "engine_core_cpu" not in cpu and "engine_core_processes" not in cpu


@pytest.mark.parametrize("start_reads", ["in-phase", "before-phase"])
def test_a_process_born_between_ticks_counts_from_its_birth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start_reads: str
) -> None:
    if start_reads == "before-phase":
        # The kernel stamps a process's start in 10 ms ticks: a child forked a few ms after the
        # first sample can read as born before it. Here every start time reads as one second
        # after boot, long before the phase: the child still counts from its birth, because the
        # first tick did not see it (a CI run lost the first 50 ms of a 0.3 s burn to a rule
        # that compared start times with the clock).
        monkeypatch.setattr(host, "since_boot", lambda pid: 1.0)
    go, done = tmp_path / "go", tmp_path / "done"
    burn_s = 0.3
    # The child lives on after its burn (BURNER idles): only the last tick, at stop(), sees it.
    with tree(LATE, BURNER, str(go), str(done), str(tmp_path / "never"), str(burn_s)) as root:
        sampler = ProcessTreeCpuSampler(root.pid, interval_s=3600)
        began = time.monotonic()
        sampler.start()
        go.touch()
        wait_until(done.exists)
        sampler.stop()
        elapsed = time.monotonic() - began
    cpu = sampler.result()
    assert cpu["api_server_processes"] == 2.0
    assert cpu["server_cpu_peak_process"] * elapsed >= burn_s * 0.9


def test_cpu_before_the_phase_does_not_count(tmp_path: Path) -> None:
    go, done = tmp_path / "go", tmp_path / "done"
    with tree(SERVER, BURNER, str(go), str(done), str(BURN_S)) as root:
        wait_for_tree(root.pid, 4)
        go.touch()
        wait_until(done.exists)  # the engine core burnt its CPU before the sampler started
        with ProcessTreeCpuSampler(root.pid, interval_s=INTERVAL_S) as sampler:
            time.sleep(4 * INTERVAL_S)
    cpu = sampler.result()
    assert cpu["engine_core_processes"] == 2.0
    assert cpu["engine_core_cpu"] < 0.2


def test_nothing_measured_means_no_keys() -> None:
    assert ProcessTreeCpuSampler(os.getpid()).result() == {}  # never started
    with ProcessTreeCpuSampler(os.getpid(), interval_s=INTERVAL_S) as too_short:
        pass  # two ticks a moment apart: CPU ticks of 10 ms would be all there is
    assert too_short.result() == {}
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=10)
    with ProcessTreeCpuSampler(gone.pid, interval_s=INTERVAL_S) as sampler:
        time.sleep(2 * INTERVAL_S)
    assert sampler.result() == {}


def test_engine_cores_are_recognised_by_name_or_command_line() -> None:
    assert "EngineCore" in ENGINE_MARKERS
    script = "import time; time.sleep(30)"
    marked = subprocess.Popen([sys.executable, "-c", script, "tuner-fake-engine-core"])
    plain = subprocess.Popen([sys.executable, "-c", script, "tuner-fake-api-server"])
    try:
        procs = [psutil.Process(marked.pid), psutil.Process(plain.pid)]
        # Until the exec the children still carry this process's command line.
        wait_until(lambda: all(script in p.cmdline() for p in procs))
        assert is_engine_core(procs[0])
        assert not is_engine_core(procs[1])
    finally:
        for child in (marked, plain):
            child.kill()
            child.wait(timeout=10)
    assert not is_engine_core(procs[0])  # gone: not an engine core, and no error


def test_a_process_start_is_read_in_ticks_after_boot_and_a_missing_one_is_no_such_process() -> None:
    me = psutil.Process()
    assert abs(host.since_boot(me.pid) - (me.create_time() - psutil.boot_time())) <= 0.02
    assert host.since_boot(me.pid) * os.sysconf("SC_CLK_TCK") == pytest.approx(
        round(host.since_boot(me.pid) * os.sysconf("SC_CLK_TCK"))
    ), "whole clock ticks"
    for pid in (-1, 0, 2**22 + 7):  # no process has these
        with pytest.raises(psutil.NoSuchProcess):
            host.since_boot(pid)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    born = host.since_boot(child.pid)
    child.wait()
    assert born >= host.since_boot(me.pid)
    with pytest.raises(psutil.NoSuchProcess):
        host.since_boot(child.pid)
