"""CPU placement on real processes: the real runner pins the fake server's API process and its
engine-core child to their sets and tuner's own threads to the load generator's while it
measures, records the plan with the launch, and gives tuner its CPUs back afterwards."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from tests.studykit import TINY_WORKLOAD, fake_server_runner, processes_mentioning
from tuner.abtest.profile import noise_key
from tuner.catalog import resolve_model
from tuner.domain import ServingConfig
from tuner.runner import placement
from tuner.runner.placement import CpuPlan
from tuner.testing.contract import check_complete
from tuner.testing.fake_engine import ENGINE_CORE_MARKER

MINE = sorted(os.sched_getaffinity(0))


def _threads_affinity(pid: int) -> set[frozenset[int]]:
    return {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")}


@pytest.mark.skipif(len(MINE) < 2, reason="needs two CPUs to tell the sets apart")
def test_a_pinned_launch_places_server_engine_and_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two CPUs suffice to tell the sets apart: the API server and the client on the first, the
    # engine core on the second (a real plan keeps all three disjoint; see test_placement).
    cpu_plan = CpuPlan(api=(MINE[0],), engine=(MINE[1],), client=(MINE[0],), source="process")
    monkeypatch.setattr(placement, "plan", lambda mode, local, **_kw: cpu_plan)
    seen: dict[str, object] = {}
    pin_server = placement.pin_server

    def pin_and_look(plan: CpuPlan, root_pid: int) -> dict[str, str]:
        done = pin_server(plan, root_pid)
        root = psutil.Process(root_pid)
        engines = [p for p in root.children(recursive=True) if ENGINE_CORE_MARKER in p.cmdline()]
        seen["engine"] = set().union(*(_threads_affinity(p.pid) for p in engines))
        seen["api"] = _threads_affinity(root_pid)
        return done

    monkeypatch.setattr(placement, "pin_server", pin_and_look)

    def on_phase(phase: str, _detail: str) -> None:
        if phase == "measuring":
            seen.setdefault("client", _threads_affinity(os.getpid()))

    monkeypatch.setenv(placement.ENV, "pinned")
    runner = fake_server_runner(tmp_path)
    result = runner.run(ServingConfig(), TINY_WORKLOAD, on_phase=on_phase)
    check_complete(result)
    assert seen["engine"] == {frozenset({MINE[1]})}
    assert seen["api"] == {frozenset({MINE[0]})}
    assert seen["client"] == {frozenset({MINE[0]})}
    assert result.server is not None and result.server.placement is not None
    record = dict(result.server.placement)
    assert record["mode"] == "pinned" and record["engine_processes"] == "1"
    assert record["engine_core"] == str(MINE[1]) and record["load_generator"] == str(MINE[0])
    # Every thread of tuner has its CPUs back.
    assert _threads_affinity(os.getpid()) == {frozenset(MINE)}
    assert processes_mentioning(str(tmp_path)) == []
    # Its noise is a key of its own.
    key = noise_key(result, resolve_model("tiny-ernie"), TINY_WORKLOAD.name)
    assert key is not None and key.placement == "pinned" and "CPU placement pinned" in key.text()


def test_placement_off_records_so_and_touches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(placement.ENV, "off")
    result = fake_server_runner(tmp_path).run(ServingConfig(), TINY_WORKLOAD)
    check_complete(result)
    assert result.server is not None and dict(result.server.placement or {}) == {"mode": "off"}
    key = noise_key(result, resolve_model("tiny-ernie"), TINY_WORKLOAD.name)
    assert key is not None and key.placement == "off"
    assert _threads_affinity(os.getpid()) == {frozenset(MINE)}


@pytest.mark.skipif(len(MINE) < 2, reason="needs two CPUs to tell the sets apart")
def test_the_processes_under_an_engine_core_go_on_the_engine_set() -> None:
    """CPU vLLM runs the model in a worker under its engine core (VLLM::EngineCore, then
    VLLM::Worker): the pin went by each process's own name, so the worker, which does the
    model's compute, landed on the API server's quarter of the cores."""
    import subprocess
    import sys
    import time

    from tuner.telemetry import process_tree

    worker = "import time; time.sleep(60)"
    engine = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {worker!r}]); time.sleep(60)"  # noqa: E501
    # the marker from the environment: in the API server's own command line it would make it
    # an engine core too
    api = f"import os, subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {engine!r}, os.environ['MARK']]); time.sleep(60)"  # noqa: E501
    root = subprocess.Popen(
        [sys.executable, "-c", api], env={**os.environ, "MARK": ENGINE_CORE_MARKER}
    )
    try:
        deadline = time.monotonic() + 30

        def marked() -> int:  # a child forked but not yet exec'd still has its parent's line
            tree = process_tree(root.pid)
            return sum(ENGINE_CORE_MARKER in p.cmdline() for p in tree[1:]) if len(tree) > 2 else 0

        while marked() != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        api_proc, *children = process_tree(root.pid)
        (engine_proc,) = [p for p in children if ENGINE_CORE_MARKER in p.cmdline()]
        (worker_proc,) = [p for p in children if p is not engine_proc]
        cpu_plan = CpuPlan(api=(MINE[0],), engine=(MINE[1],), client=(MINE[0],), source="process")
        done = placement.pin_server(cpu_plan, root.pid)
        assert _threads_affinity(engine_proc.pid) == {frozenset({MINE[1]})}
        assert _threads_affinity(worker_proc.pid) == {frozenset({MINE[1]})}
        assert _threads_affinity(api_proc.pid) == {frozenset({MINE[0]})}
        assert done["engine_processes"] == "2" and done["api_processes"] == "1"
    finally:
        for proc in reversed(process_tree(root.pid)):
            proc.kill()
        root.wait()


def test_auto_leaves_cpu_vllm_to_bind_its_own_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine without a GPU the model computes on the CPUs, its worker's threads bound
    by vLLM: auto split them as for a GPU server (from 6 cores up), halving the model's CPUs.
    `pinned` still pins (the test above)."""
    cpu_plan = CpuPlan(api=(MINE[0],), engine=(MINE[-1],), client=(MINE[0],), source="process")
    monkeypatch.setattr(placement, "plan", lambda mode, local, **_kw: cpu_plan)  # 6+ cores
    monkeypatch.setenv(placement.ENV, "auto")
    result = fake_server_runner(tmp_path).run(ServingConfig(), TINY_WORKLOAD)
    check_complete(result)
    assert result.server is not None and dict(result.server.placement or {}) == {"mode": "off"}
