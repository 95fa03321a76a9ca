"""The real process lifecycle (ports, signals, crashes, deadlines) against the fake server,
through the same VllmServer that runs real vLLM."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tuner.domain import FailureClass
from tuner.errors import EnvironmentProblem, ServerFailure
from tuner.runner.leases import read_lease, reap_orphans, sockets_dir
from tuner.runner.ports import free_port, port_is_open
from tuner.runner.procgroup import group_members
from tuner.runner.server import VllmServer
from tuner.vllm.argv import base_args, server_command
from tuner.vllm.logparse import effective_backend, kv_cache_capacity

FAKE = "tuner.testing.fake_server"


def _command(port: int, served: str, *extra: str) -> list[str]:
    args = base_args("/models/fake", served_model_name=served, host="127.0.0.1", port=port,
                     load_format="dummy", tokenizer=None, dtype=None, extra=extra)  # fmt: skip
    return server_command(sys.executable, args, module=FAKE)


def _server(tmp_path: Path, fault: str = "", *extra: str, **env: str) -> VllmServer:
    port = free_port()
    return VllmServer(
        _command(port, "trial-1", *extra),
        env={"TUNER_FAKE_STARTUP_S": "0.05", "TUNER_FAKE_FAULT": fault, **env},
        host="127.0.0.1",
        port=port,
        served_model_name="trial-1",
        log_path=tmp_path / "server.log",
        lease_dir=tmp_path / "leases",
    )


def _engine_core_pid(log: str) -> int:
    match = re.search(r"EngineCore_DP0 pid=(\d+)", log)
    assert match, log
    return int(match.group(1))


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def servers() -> Iterator[list[VllmServer]]:
    """Every server a test makes is stopped even when the test fails."""
    made: list[VllmServer] = []
    yield made
    for server in made:
        server.stop(grace_s=1.0)


def test_ready_identity_and_clean_stop(tmp_path: Path, servers: list[VllmServer]) -> None:
    server = _server(tmp_path, "", "--max-num-seqs", "4")
    servers.append(server)
    server.start()
    assert (tmp_path / "leases" / f"server-{server.pid}.json").exists()
    ticks: list[float] = []
    startup_s = server.wait_ready(10.0, on_tick=ticks.append)
    assert 0.0 < startup_s < 10.0
    assert ticks == sorted(ticks)
    server.verify_identity()
    log = server.log_text()
    assert effective_backend(log) == ("FLASH_ATTN", 3)
    tokens, concurrency = kv_cache_capacity(log)
    assert tokens == 450_000 and concurrency == pytest.approx(219.73)
    child = _engine_core_pid(log)
    assert server.pid is not None and len(group_members(server.pid)) == 2
    server.stop(grace_s=5.0)
    assert not server.is_alive() and _gone(child) and group_members(server.pid) == []
    assert list((tmp_path / "leases").iterdir()) == []
    assert not port_is_open("127.0.0.1", server.port)
    server.stop()  # idempotent


def _sockets(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)]


def test_the_servers_socket_files_go_with_it(
    tmp_path: Path, servers: list[VllmServer], request: pytest.FixtureRequest
) -> None:
    # vLLM (and the fake, as it) binds socket files in VLLM_RPC_BASE_PATH and leaves them when
    # it is killed: each server gets a directory of its own, removed with the server.
    server = _server(tmp_path)
    servers.append(server)
    server.start()
    server.wait_ready(10.0)
    lease = read_lease(tmp_path / "leases" / f"server-{server.pid}.json")
    assert lease is not None
    folder = Path(lease.sockets)
    assert folder.parent == Path(tempfile.gettempdir())
    assert folder.name.startswith("tuner-vllm-") and len(_sockets(folder)) == 2
    server.stop(grace_s=5.0)
    assert not folder.exists()
    # One the user named is theirs: used, and left.
    mine = Path(tempfile.mkdtemp(dir="/tmp"))  # short: pytest's tmp_path may be too long
    request.addfinalizer(lambda: shutil.rmtree(mine))
    server = _server(tmp_path, VLLM_RPC_BASE_PATH=str(mine))
    servers.append(server)
    server.start()
    server.wait_ready(10.0)
    server.stop(grace_s=5.0)
    assert len(_sockets(mine)) == 2


def test_hang_times_out_and_leaves_no_process(tmp_path: Path, servers: list[VllmServer]) -> None:
    server = _server(tmp_path, "hang")
    servers.append(server)
    server.start()
    with pytest.raises(ServerFailure) as caught:
        server.wait_ready(1.0)
    assert caught.value.failure is FailureClass.TIMEOUT
    assert "Starting to load model" in caught.value.log_tail
    assert server.pid is not None and group_members(server.pid) == []
    assert _gone(_engine_core_pid(server.log_text()))


def test_interrupted_wait_still_ends_the_group(tmp_path: Path) -> None:
    server = _server(tmp_path, "hang")
    server.start()

    def interrupt(elapsed_s: float) -> None:
        if elapsed_s > 0.2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        server.wait_ready(10.0, on_tick=interrupt)
    assert server.pid is not None and group_members(server.pid) == []
    assert list((tmp_path / "leases").iterdir()) == []


@pytest.mark.parametrize(
    ("fault", "failure", "needle"),
    [
        ("crash_at_start", FailureClass.START_FAILED, "RuntimeError: fake engine core crashed"),
        ("oom_at_start", FailureClass.MEMORY_EXCEEDED, "less than desired CPU memory"),
        ("kv_at_start", FailureClass.KV_CACHE_INSUFFICIENT, "larger than the available KV"),
    ],
)
def test_start_failures_are_classified_and_cleaned_up(
    tmp_path: Path, servers: list[VllmServer], fault: str, failure: FailureClass, needle: str
) -> None:
    server = _server(tmp_path, fault)
    servers.append(server)
    server.start()
    with pytest.raises(ServerFailure) as caught:
        server.wait_ready(10.0)
    assert caught.value.failure is failure
    assert needle in caught.value.message
    assert "Traceback (most recent call last)" in caught.value.log_tail
    # the fake leaves its engine core behind on purpose; the launcher must have ended it
    assert _gone(_engine_core_pid(server.log_text()))
    assert server.pid is not None and group_members(server.pid) == []


@pytest.mark.parametrize(
    ("fault", "failure"),
    [("crash_at_start", FailureClass.START_FAILED), ("oom_at_start", FailureClass.MEMORY_EXCEEDED)],
)
def test_a_start_up_that_failed_before_the_deadline_is_not_a_timeout(
    tmp_path: Path, servers: list[VllmServer], fault: str, failure: FailureClass
) -> None:
    # vLLM says its start-up failed, then takes a while to go down (or hangs); the deadline
    # falls in between (CI saw it on a loaded machine): the failure is what it said, not a
    # timeout, and it is ended a few seconds later, not at the deadline.
    server = _server(tmp_path, fault, TUNER_FAKE_EXIT_DELAY_S="60")
    servers.append(server)
    server.start()
    for _ in range(100):  # until it has said so (the fake's start-up takes 0.05 s)
        if "Engine core initialization failed" in server.log_text():
            break
        time.sleep(0.1)
    started = time.monotonic()
    with pytest.raises(ServerFailure) as caught:
        server.wait_ready(120.0)
    assert time.monotonic() - started < 60.0  # not at the deadline
    assert caught.value.failure is failure
    assert "failed during start-up and had not exited 5 s later" in caught.value.message
    assert server.pid is not None and group_members(server.pid) == []
    assert _gone(_engine_core_pid(server.log_text()))


def test_unknown_backend_is_unsupported(tmp_path: Path, servers: list[VllmServer]) -> None:
    server = _server(tmp_path, "", "--attention-backend", "NO_SUCH_BACKEND")
    servers.append(server)
    server.start()
    with pytest.raises(ServerFailure) as caught:
        server.wait_ready(10.0)
    assert caught.value.failure is FailureClass.UNSUPPORTED


def test_stranger_serving_another_model(tmp_path: Path, servers: list[VllmServer]) -> None:
    server = _server(tmp_path, "stranger")
    servers.append(server)
    server.start()
    server.wait_ready(10.0)
    with pytest.raises(ServerFailure) as caught:
        server.verify_identity()
    assert caught.value.failure is FailureClass.STRANGER
    assert "someone-elses-model" in caught.value.message


def test_port_already_taken_is_refused(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        server = VllmServer(_command(port, "trial-1"), env={}, host="127.0.0.1", port=port,
                            served_model_name="trial-1", log_path=tmp_path / "s.log",
                            lease_dir=tmp_path / "leases")  # fmt: skip
        with pytest.raises(ServerFailure) as caught:
            server.start()
    assert caught.value.failure is FailureClass.STRANGER
    assert server.pid is None


@pytest.mark.parametrize("clock_step_s", [-1.0, 30.0])
def test_a_step_of_the_wall_clock_while_a_server_runs_does_not_stop_its_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock_step_s: float
) -> None:
    # A server's start is recorded as it starts and checked when it is stopped (a group with a
    # member older than its leader is not ours); the wall clock may move in between.
    server = _server(tmp_path)
    with server:
        server.start()
        server.wait_ready(10.0)
        child = _engine_core_pid(server.log_text())
        _step_the_clock(monkeypatch, clock_step_s)
        server.stop(grace_s=1.0)
        assert _gone(child)
        assert server.pid is not None and group_members(server.pid) == []


def test_stop_kills_members_that_ignore_sigterm(tmp_path: Path) -> None:
    server = _server(tmp_path, "", TUNER_FAKE_CHILD_IGNORES_TERM="1")
    with server:
        server.start()
        server.wait_ready(10.0)
        child = _engine_core_pid(server.log_text())
        server.stop(grace_s=0.3)  # the child ignores TERM: only the KILL after grace ends it
        assert _gone(child)
        assert not server.is_alive()
        assert server.pid is not None and group_members(server.pid) == []
    # __exit__ after an explicit stop() is a no-op


def test_a_second_interrupt_during_stop_still_ends_the_group(tmp_path: Path) -> None:
    """Ctrl-C twice: the second lands while stop() waits out the TERM grace of a member that
    ignores TERM. The engine child outlived tuner (its watchdog was killed just before the
    KILL it was about to send) and the lease that would have reaped it was deleted."""
    import os
    import signal
    import threading

    server = _server(tmp_path, "", TUNER_FAKE_CHILD_IGNORES_TERM="1")
    server.start()
    server.wait_ready(10.0)
    child = _engine_core_pid(server.log_text())
    second = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    second.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            server.stop(grace_s=5.0)
    finally:
        second.cancel()
    assert _gone(child)
    assert server.pid is not None and group_members(server.pid) == []
    assert list((tmp_path / "leases").iterdir()) == []  # gone with the group, not before it


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("phase", ["starting", "serving"])
def test_a_fake_server_signalled_alone_ends_its_engine_core(
    tmp_path: Path, phase: str, signum: int
) -> None:
    """A developer's `kill <pid>` or Ctrl-C reaches the fake server's pid alone (not its
    group, as tuner's stop does): like vLLM's API server, it ends its engine core on the way
    out. Its engine core outlived it before, while starting and while serving."""
    port, log_path = free_port(), tmp_path / "server.log"
    fault = "hang" if phase == "starting" else ""  # loading the model for ever
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            _command(port, "trial-1"),
            env={**os.environ, "TUNER_FAKE_STARTUP_S": "0.05", "TUNER_FAKE_FAULT": fault},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # only so that a failing test can clean up
        )
    try:
        deadline = time.monotonic() + 20.0
        ready = "Starting to load model" if phase == "starting" else "Starting vLLM server"
        while ready not in log_path.read_text() or not (fault or port_is_open("127.0.0.1", port)):
            assert time.monotonic() < deadline and proc.poll() is None, log_path.read_text()
            time.sleep(0.05)
        child = psutil.Process(_engine_core_pid(log_path.read_text()))
        os.kill(proc.pid, signum)
        proc.wait(timeout=10)
        _, alive = psutil.wait_procs([child], timeout=5)
        assert not alive, f"the engine core {child.pid} outlived its server {proc.pid}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_crash_mid_load_is_seen_as_crashed(tmp_path: Path, servers: list[VllmServer]) -> None:
    server = _server(tmp_path, "crash_mid_load", TUNER_FAKE_CRASH_AFTER="1")
    servers.append(server)
    server.start()
    server.wait_ready(10.0)
    body = {"model": "trial-1", "prompt": "a b", "max_tokens": 2}
    with httpx.Client(base_url=server.base_url, trust_env=False) as client:
        assert client.post("/v1/completions", json=body).status_code == 200
        with pytest.raises(httpx.HTTPError):
            client.post("/v1/completions", json=body)
    server._proc.wait(timeout=5)  # type: ignore[union-attr]
    with pytest.raises(ServerFailure) as caught:
        server.verify_identity()
    assert caught.value.failure is FailureClass.CRASHED


def test_missing_interpreter_is_an_environment_problem(tmp_path: Path) -> None:
    server = VllmServer(["/no/such/python", "-m", FAKE], env={}, host="127.0.0.1",
                        port=free_port(), served_model_name="x", log_path=tmp_path / "s.log",
                        lease_dir=None)  # fmt: skip
    with pytest.raises(EnvironmentProblem, match="cannot start"):
        server.start()


_OWNER = """
import sys, pathlib
from tuner.runner.server import VllmServer
command, port = sys.argv[1].split("\\x1f"), int(sys.argv[2])
lease_dir, log = sys.argv[3], sys.argv[4]
server = VllmServer(command, env={"TUNER_FAKE_STARTUP_S": "0.05"}, host="127.0.0.1", port=port,
                    served_model_name="trial-1", log_path=pathlib.Path(log),
                    lease_dir=pathlib.Path(lease_dir))
server.start()
server.wait_ready(10.0)
# Its watchdog dies first (as with kill -9 on both): else it ends the group the moment the
# owner exits, and there is no orphan for the leases to find.
server._watchdog.kill()
server._watchdog.wait()
print(server.pid, flush=True)
# the owner dies here without stop(): its server lives on, orphaned
"""


def _step_the_clock(monkeypatch: pytest.MonkeyPatch, step_s: float) -> None:
    """What NTP does to psutil: /proc/stat's boot time is the wall clock less the uptime, so
    a clock set ``step_s`` later moves every create_time psutil reads by as much."""
    booted = psutil.boot_time()
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: booted + step_s)
    assert psutil.boot_time() == booted + step_s


@pytest.mark.parametrize("clock_step_s", [0.0, -1.0, 30.0])
def test_reap_orphans_ends_a_group_whose_owner_died(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    clock_step_s: float,
) -> None:
    port, leases = free_port(), tmp_path / "leases"
    owner = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_OWNER), "\x1f".join(_command(port, "trial-1")),
         str(port), str(leases), str(tmp_path / "orphan.log")],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    pgid = int(owner.stdout.strip())
    child = _engine_core_pid((tmp_path / "orphan.log").read_text())
    try:
        lease = read_lease(leases / f"server-{pgid}.json")
        assert lease is not None and len(_sockets(Path(lease.sockets))) == 2
        assert len(group_members(pgid)) == 2 and port_is_open("127.0.0.1", port)
        _step_the_clock(monkeypatch, clock_step_s)  # between the lease and the resume
        assert reap_orphans(leases) == [pgid]
        assert f"ended the server trial-1 (process group {pgid})" in caplog.text
        assert group_members(pgid) == [] and _gone(child)
        assert list(leases.iterdir()) == []
        assert not Path(lease.sockets).exists()  # its socket files went with it
    finally:
        for proc in group_members(pgid):
            proc.kill()


def test_reap_orphans_spares_servers_of_a_live_owner(
    tmp_path: Path, servers: list[VllmServer]
) -> None:
    server = _server(tmp_path)
    servers.append(server)
    server.start()
    assert reap_orphans(tmp_path / "leases") == []
    assert server.is_alive()


_KILLED_BEFORE_ARMING = """
import os, subprocess, sys
from tuner.runner import watchdog
proc, fd = watchdog.spawn(1.0, sys.argv[1])
child = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(120)"],
    env={**os.environ, watchdog.ENV: str(proc.pid)}, start_new_session=True,
)
print(child.pid, proc.pid, flush=True)
os._exit(0)  # as a SIGKILL between starting the server and writing its group id would
"""


def test_a_tuner_killed_before_it_armed_the_watchdog_leaves_no_server() -> None:
    """The watchdog starts before its server, so the window a kill can land in between the
    server's start and the watchdog knowing its group is guarded too (seen once in CI: a
    tuner SIGKILLed while it started a confirmation launch left that server running). The
    server's socket directory goes with it."""
    folder = Path(sockets_dir({}))
    bound = socket.socket(socket.AF_UNIX)
    bound.bind(str(folder / "engine-socket"))
    bound.close()  # the file stays, as vLLM's do when its process is killed
    owner = subprocess.run(
        [sys.executable, "-c", _KILLED_BEFORE_ARMING, str(folder)],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    child, watchdog = (int(x) for x in owner.stdout.split())
    try:
        psutil.Process(watchdog).wait(timeout=30)  # it found the group by its environment
        assert _gone(child)
        assert not folder.exists()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if not _gone(child):
            psutil.Process(child).kill()
