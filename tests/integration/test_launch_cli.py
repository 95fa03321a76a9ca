"""``tuner launch`` for real, as a process: the printed command, the error when nothing was
measured, and a whole serve cycle on the fake server (base URL, the example client, SIGINT,
no process left). :func:`insert_measured_study` is shared with the e2e test."""

from __future__ import annotations

import dataclasses
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.studykit import processes_mentioning
from tuner.db.migrate import upgrade
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import Objective, Provenance, ServingConfig
from tuner.load.workloads import get_workload
from tuner.runner.ports import free_port
from tuner.runner.procgroup import group_members
from tuner.scoring.objectives import objective_values
from tuner.testing.fake_runner import FakeRunner

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "openai_client.py"
LAUNCH = ("launch", "--model", "tiny-ernie", "--gpu", "cpu")
FAKE_SERVER = ("--server-module", "tuner.testing.fake_server")
E2E_CONFIG = ServingConfig(enforce_eager=True, gpu_memory_utilization=0.1, max_num_seqs=8)


def insert_measured_study(
    db_url: str,
    configs: Sequence[ServingConfig],
    *,
    name: str = "measured",
    model: str = "tiny-ernie",
    model_source: str | None = None,
    gpu: str = "cpu",
    workload: str = "smoke",
    objective: str = "balanced",
    vllm_version: str = "0.32.0",
    emulated: bool = False,
    extra_args: Sequence[str] = (),
    fresh_runner: bool = False,
    workload_overrides: Mapping[str, Any] | None = None,
    rate_ladder: Sequence[float] = (),
) -> Repository:
    """A finished study whose trials (numbered from 0) are complete, with metrics from the
    in-process FakeRunner, as if measured on this CPU with ``vllm_version``. With
    ``fresh_runner`` each trial gets a new FakeRunner: equal configurations measure the same.
    A ``rate_ladder`` is measured (a load curve of request rates) and stored with the spec."""
    if rate_ladder:
        workload_overrides = {**(workload_overrides or {}), "rate_ladder": list(rate_ladder)}
    upgrade(db_url)
    repo = Repository(make_engine(db_url))
    repo.create_study(
        name=name,
        optuna_study_name=name,
        model=model,
        model_source=model_source,
        gpu=gpu,
        workload=workload,
        objective=objective,
        slo={},
        spec={"extra_args": list(extra_args), "workload_overrides": dict(workload_overrides or {})},
        emulated=emulated,
        vllm_version=vllm_version,
        n_trials_requested=len(configs),
        status="finished",
    )
    ladder = {"rate_ladder": tuple(rate_ladder)} if rate_ladder else {}
    shape = get_workload(workload).replace(requests_per_window=8, windows=3, **ladder)
    runner = FakeRunner()
    for number, config in enumerate(configs):
        runner = FakeRunner() if fresh_runner else runner
        result = dataclasses.replace(
            runner.run(config, shape),
            provenance=Provenance(
                gpu_name=f"{gpu}: test host",
                gpu_uuid=None,
                driver_version=None,
                vllm_version=vllm_version,
                model=model,
                workload=workload,
            ),
        )
        trial_id = repo.start_trial(name, number, config, is_baseline=config.is_default())
        values = objective_values(result, memory_ceiling_gib=64.0, objective=Objective(objective))
        repo.finish_trial(trial_id, result, 1.0, values)
    return repo


def insert_ladder_study(
    db_url: str, *, name: str = "ladder", gpu: str = "h200", objective: str = "capacity"
) -> Repository:
    """A study of chat-heavy on a rate ladder of 1 and 2 req/s (:func:`insert_measured_study`):
    trial #0, vLLM's defaults (the best), kept up with the top rate, so its capacity is only a
    lower bound; #1 (max_num_seqs=64) served less at 2 req/s, so its capacity, at 1 req/s, is
    bracketed by a higher load."""
    return insert_measured_study(
        db_url,
        [ServingConfig(), ServingConfig(max_num_seqs=64)],
        name=name,
        gpu=gpu,
        workload="chat-heavy",
        objective=objective,
        rate_ladder=(1.0, 2.0),
    )


def tuner(
    args: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TUNER_DB_URL", "TUNER_VLLM_PYTHON")}
    return {**env, "PYTHONPATH": str(REPO), "TUNER_HOME": str(tmp_path / "home")}


class Lines:
    """A process's stdout, line by line, read in a thread so that waiting has a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        assert proc.stdout is not None
        stream = proc.stdout

        def pump() -> None:
            for line in stream:
                self._queue.put(line)
            self._queue.put(None)

        self._stream = stream
        self._thread = threading.Thread(target=pump, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """After the process ended: let the reader reach the end, then close the pipe."""
        self._thread.join(timeout=10)
        self._stream.close()

    def wait_for(self, text: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} within {timeout_s} s:\n{''.join(self.seen)}")

    def rest(self, timeout_s: float = 5.0) -> str:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
        return "".join(self.seen)


def serve_and_stop(
    args: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    marker: str,
    *,
    ready_timeout_s: float,
    model: str = "tiny-ernie",
    stop: signal.Signals = signal.SIGINT,
    run_client: bool = True,
    while_serving: Callable[[str], None] | None = None,
) -> tuple[str, str]:
    """Run ``tuner launch ARGS``, wait for its base URL, run the example client against it
    (``run_client``) and ``while_serving(base URL)``, send it ``stop``; check it exits 0 and
    leaves no process (their command lines contain ``marker``). Returns (tuner's output, the
    client's)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner", "launch", *args],
        cwd=cwd,
        env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = Lines(proc)
    try:
        url = lines.wait_for("base URL: ", ready_timeout_s).split("base URL: ")[1].strip()
        servers = processes_mentioning(marker)
        assert servers, "the server's command line should name the model directory"
        groups = {os.getpgid(p.pid) for p in servers}
        assert os.getpgid(proc.pid) not in groups  # the server has a group of its own
        client = ""
        if run_client:
            done = subprocess.run(
                [sys.executable, str(EXAMPLE), "--base-url", url, "--model", model],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            client = done.stdout
        if while_serving is not None:
            while_serving(url)
        proc.send_signal(stop)
        assert proc.wait(timeout=60) == 0, lines.rest()
        output = lines.rest()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        lines.close()
    assert processes_mentioning(marker) == []
    for group in groups:
        assert group_members(group) == []
    return output, client


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tuner.db'}"


def test_print_gives_the_exact_command_under_the_model_alias(tmp_path: Path, db_url: str) -> None:
    insert_measured_study(db_url, [ServingConfig(), E2E_CONFIG], extra_args=["--seed", "7"])
    env = clean_env(tmp_path)
    python = str(tmp_path / "no-vllm-here" / "python")
    run = tuner(
        [*LAUNCH, "--storage", db_url, "--print", "--vllm-python", python, "--port", "8123"],
        tmp_path,
        env,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    argv = shlex.split(run.stdout)
    assert argv[:3] == [python, "-m", "vllm.entrypoints.openai.api_server"]
    flags = " ".join(argv[3:])
    assert "--served-model-name tiny-ernie" in flags and "--port 8123" in flags
    assert "--host 127.0.0.1" in flags and "--load-format dummy" in flags
    assert f"--model {tmp_path / 'home' / 'models'}" in flags and "--tokenizer" in flags
    # The measured trial's flags (the defaults scored lower), and the study's extra arguments.
    assert flags.endswith(
        "--seed 7 --gpu-memory-utilization 0.1 --max-num-seqs 8 --enforce-eager"
    ), flags
    assert "no Python interpreter" in run.stderr  # why the flags are spelled as measured
    # What is printed and where it was measured, on stderr: stdout is the line alone.
    assert len(run.stdout.splitlines()) == 1
    assert "best measured for tiny-ernie: trial #1 of study measured" in run.stderr
    assert "with vLLM 0.32.0" in run.stderr and "study's extra arguments: --seed 7" in run.stderr


def test_nothing_measured_is_exit_2_naming_what_is_there(tmp_path: Path, db_url: str) -> None:
    insert_measured_study(db_url, [E2E_CONFIG], gpu="h100", workload="chat")
    env = clean_env(tmp_path)
    run = tuner([*LAUNCH, "--storage", db_url], tmp_path, env)
    text = " ".join(run.stderr.split())
    assert run.returncode == 2, run.stdout + run.stderr
    assert "nothing measured for tiny-ernie on cpu" in text and "tiny-ernie/h100/chat" in text
    assert "tuner run --model tiny-ernie --gpu cpu" in text

    missing = tuner(
        [*LAUNCH, "--storage", "sqlite:///nope.db"],
        tmp_path,
        env,
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert not (tmp_path / "nope.db").exists()


def test_busy_port_is_refused_before_anything_starts(tmp_path: Path, db_url: str) -> None:
    insert_measured_study(db_url, [E2E_CONFIG])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        run = tuner(
            [*LAUNCH, "--storage", db_url, "--port", str(port), *FAKE_SERVER],
            tmp_path,
            clean_env(tmp_path),
        )
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in " ".join(run.stderr.split())


@pytest.mark.parametrize(
    ("option", "words"),
    [
        (["--host", "999.1.1.1"], "--host '999.1.1.1' is not an IP address or a host name"),
        (["--host", "bad host"], "is not an IP address or a host name"),
        (["--startup-timeout", "-1"], "--startup-timeout must be > 0 seconds"),
        (["--startup-timeout", "0"], "--startup-timeout must be > 0 seconds"),
    ],
)
def test_a_bad_host_or_startup_timeout_is_refused_before_anything_starts(
    tmp_path: Path, db_url: str, option: list[str], words: str
) -> None:
    """Refused as usage errors, not found out after a launch (a traceback from the HTTP
    client for 999.1.1.1; 'not ready within -1.0 s')."""
    insert_measured_study(db_url, [E2E_CONFIG])
    run = tuner(
        [*LAUNCH, "--storage", db_url, *option, *FAKE_SERVER], tmp_path, clean_env(tmp_path)
    )
    text = " ".join(run.stderr.split())
    assert run.returncode == 2 and words in text, run.stdout + run.stderr
    assert "Traceback" not in text and "starting vLLM" not in run.stdout + text


@pytest.mark.parametrize(("stop", "run_client"), [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_serves_the_fake_server_until_stopped_and_leaves_nothing(
    tmp_path: Path, db_url: str, stop: signal.Signals, run_client: bool
) -> None:
    insert_measured_study(db_url, [ServingConfig(), E2E_CONFIG])
    port = free_port()
    output, client = serve_and_stop(
        [*LAUNCH[1:], "--storage", db_url, "--port", str(port), *FAKE_SERVER],
        tmp_path,
        clean_env(tmp_path),
        str(tmp_path / "home"),
        ready_timeout_s=60,
        stop=stop,
        run_client=run_client,
    )
    assert f"base URL: http://127.0.0.1:{port}/v1" in output
    # Provenance: study, trial, where and with what it was measured, metrics with intervals.
    assert "trial #1 of study measured" in output
    assert "measured on cpu: test host with vLLM 0.32.0" in output
    assert re.search(r"output tok/s: [\d.,]+ \[[\d.,]+, [\d.,]+\]", output), output
    assert "stopped: the server's process group has ended" in output
    if run_client:
        assert re.search(r"chat \(streamed\):\s+\S", client), client
        assert re.search(r"completion:\s+\S", client), client
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_ready_counts_the_warm_up_and_the_canary(tmp_path: Path, db_url: str) -> None:
    """After "up in 0 s; not announced before its warm-up and canary" it said "ready in 0 s"
    however long they took: the start-up's seconds again."""
    insert_measured_study(db_url, [ServingConfig()])
    output, _ = serve_and_stop(
        [*LAUNCH[1:], "--storage", db_url, "--port", str(free_port()), *FAKE_SERVER],
        tmp_path,
        {**clean_env(tmp_path), "TUNER_FAKE_STEP_MS": "40"},  # a warm-up of seconds
        str(tmp_path / "home"),
        ready_timeout_s=120,
        run_client=False,
    )
    up = re.search(r"up in (\d+) s; not announced before its warm-up and canary", output)
    ready = re.search(r"ready in (\d+) s", output)
    assert up is not None and ready is not None, output
    assert int(ready.group(1)) >= int(up.group(1)) + 2, output


def test_a_server_that_fails_is_reported_with_its_log(tmp_path: Path, db_url: str) -> None:
    insert_measured_study(db_url, [E2E_CONFIG])
    env = clean_env(tmp_path)
    args = [*LAUNCH, "--storage", db_url, "--port", str(free_port()), *FAKE_SERVER]
    start = tuner(args, tmp_path, {**env, "TUNER_FAKE_FAULT": "crash_at_start"})
    assert start.returncode == 1, start.stdout + start.stderr
    tail = [line for line in start.stdout.splitlines() if line.startswith("  | ")]
    assert any("RuntimeError: fake engine core crashed" in line for line in tail)
    text = " ".join(start.stderr.split())
    assert "exited with code 1 during start-up" in text and "whole log: .tuner/logs/" in text
    assert "--startup-timeout" not in text  # waiting longer would not help a crash
    slow = tuner(
        [*args[: -len(FAKE_SERVER)], "--startup-timeout", "1", *FAKE_SERVER],
        tmp_path,
        {**env, "TUNER_FAKE_STARTUP_S": "30"},
    )  # a start that outlasts the timeout: the hint says how to wait longer
    text = " ".join(slow.stderr.split())
    assert slow.returncode == 1 and "not ready within 1.0 s" in text, slow.stdout + slow.stderr
    assert "raise --startup-timeout (was 1 s)" in text

    # Dies on a client's first request, once announced (after the 3 quick canary shapes, the
    # smoke workload's 8 warm-up requests and the 11 of the full canary): tuner notices, shows
    # the log, exits 1, leaves nothing.
    port = free_port()
    crash = {**env, "TUNER_FAKE_FAULT": "crash_mid_load", "TUNER_FAKE_CRASH_AFTER": "22"}
    command = [sys.executable, "-m", "tuner", *LAUNCH, "--storage", db_url]
    proc = subprocess.Popen(
        [*command, "--port", str(port), *FAKE_SERVER],
        cwd=tmp_path,
        env=crash,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = Lines(proc)
    try:
        lines.wait_for("base URL: ", 60)
        with pytest.raises(httpx.HTTPError):
            httpx.post(
                f"http://127.0.0.1:{port}/v1/completions",
                json={"model": "tiny-ernie", "prompt": "hi", "max_tokens": 2},
                timeout=10,
            )
        assert proc.wait(timeout=30) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        lines.close()
    assert "vLLM exited by itself" in lines.rest()
    assert processes_mentioning(str(tmp_path / "home")) == []


def test_the_launched_server_is_pinned_to_the_gpu_checked(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tuner launch` checked that the host has the GPU measured, then started vLLM without
    naming it: on a host with two kinds of GPU, vLLM took CUDA's first (fastest first), which
    may be the other one. Trials were always pinned (the runner's device environment)."""
    from typer.testing import CliRunner

    import tuner.cli.launch as launch_cli
    from tuner.cli.app import app
    from tuner.runner.hardware import Hardware

    insert_measured_study(db_url, [E2E_CONFIG])
    checked = Hardware(name="NVIDIA A10G", uuid="GPU-5f3c", index=1, is_gpu=True)
    monkeypatch.setattr("tuner.runner.check_hardware", lambda *_a, **_kw: checked)
    started: list[dict[str, str]] = []
    monkeypatch.setattr(launch_cli, "serve", lambda launch, *_a: started.append(launch.env) or 0)
    monkeypatch.chdir(tmp_path)
    run = CliRunner().invoke(app, [*LAUNCH, "--storage", db_url, *FAKE_SERVER])
    assert run.exit_code == 0, run.output
    assert started and started[0]["CUDA_VISIBLE_DEVICES"] == "GPU-5f3c"
    assert started[0]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_a_busy_ipv6_port_is_said_to_be_in_use() -> None:
    """`tuner launch --host ::1` on a port taken: the hint's free port was looked for with an
    IPv4 socket, which cannot bind ::1, and the error read "cannot find a free port on ::1 ...
    check the --host setting" instead of "port P is already in use"."""
    from tuner.catalog import get_gpu
    from tuner.cli.launch import _check_can_serve
    from tuner.errors import UsageError

    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    with sock:
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(UsageError) as refused:
            _check_can_serve(get_gpu("cpu"), "::1", port)
    assert refused.value.message == f"port {port} on ::1 is already in use"
    assert "pass another --port (e.g. " in (refused.value.hint or "")
