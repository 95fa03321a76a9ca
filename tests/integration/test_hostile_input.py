"""Hostile names are inert: shell metacharacters in a model path, extra vLLM arguments or a knob
value reach the server as literal argv elements, never through a shell, and the one shell line
tuner writes (the ready ``vllm serve`` command) quotes them; a hostile study name is refused.

Every payload tries to create a marker file in /tmp; the tests prove the marker never appears
and that each payload arrives byte for byte where it was sent: in the live server's
/proc/PID/cmdline, in the argv tuner records, in the fake server's own log of its arguments,
in the database and in the JSON of `tuner trials --json`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import ApiSettings
from tests.studykit import (
    TINY_WORKLOAD,
    fake_server_runner,
    make_context,
    make_repo,
    processes_mentioning,
)
from tuner.domain import FailureClass, ServingConfig
from tuner.runner.leases import read_lease
from tuner.runner.vllm import VllmTrialRunner
from tuner.study.loop import run_study
from tuner.testing.contract import check_complete, check_failed
from tuner.testing.fake_runner import FakeRunner

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def marker() -> Iterator[Path]:
    path = Path(f"/tmp/pwned-{uuid.uuid4().hex}")
    yield path
    existed = path.exists()
    path.unlink(missing_ok=True)
    assert not existed, f"a shell ran a payload: {path} was created"


def payloads(marker: Path) -> list[str]:
    """Strings a shell would turn into `touch MARKER`, one way or another."""
    return [
        f"; touch {marker}",
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"x\ntouch {marker}",
        f"| touch {marker} &",
        f"' \"; touch {marker}; echo \" '",
        "${IFS}$(id)",
    ]


def test_hostile_model_path_and_extra_args_arrive_as_literal_argv(
    tmp_path: Path, marker: Path
) -> None:
    hostile = payloads(marker)
    model_path = f"{tmp_path}/model" + "".join(hostile)
    extra: list[str] = []
    for p in hostile:
        extra += ["--revision", p]
    extra.append(f"--code-revision=$(touch {marker})")
    base = fake_server_runner(tmp_path)
    settings = dataclasses.replace(base.settings, model_path=model_path, extra_args=tuple(extra))
    runner = VllmTrialRunner(settings, base.model, base.hardware)

    live: list[list[str]] = []

    def look_at_the_live_server(phase: str, _detail: str) -> None:
        if phase == "measuring" and not live:
            (lease_file,) = (tmp_path / "leases").glob("server-*.json")
            lease = read_lease(lease_file)
            assert lease is not None
            live.append(psutil.Process(lease.pid).cmdline())

    result = runner.run(ServingConfig(), TINY_WORKLOAD, on_phase=look_at_the_live_server)
    check_complete(result)
    assert result.server is not None
    (cmdline,) = live
    assert cmdline[cmdline.index("--model") + 1] == model_path
    tail = cmdline[-len(extra) :]
    assert tail == extra, "the extra arguments must arrive as the same separate elements"
    assert list(result.server.argv) == cmdline[cmdline.index("--model") :]
    log = (tmp_path / "logs" / f"{result.server.served_model_name}.log").read_text()
    assert f"'model': {model_path!r}" in log, "the fake server parsed the path intact"
    assert not marker.exists()
    assert processes_mentioning(str(tmp_path)) == []


def test_a_hostile_knob_value_is_refused_by_the_server_as_it_was_sent(
    tmp_path: Path, marker: Path
) -> None:
    value = f"auto; touch {marker}"
    result = fake_server_runner(tmp_path).run(ServingConfig(kv_cache_dtype=value), TINY_WORKLOAD)
    check_failed(result)
    assert result.failure is not FailureClass.CRASHED
    assert f"invalid choice: '{value}'" in result.log_tail, "the value reached argparse intact"
    assert result.server is not None and value in result.server.argv
    assert not marker.exists()
    assert processes_mentioning(str(tmp_path)) == []


def test_hostile_study_name_and_extra_args_through_the_cli(tmp_path: Path, marker: Path) -> None:
    """A hostile study name is refused at once by tuner's one rule for names (it would be
    a path segment of the API and a word in a shell); hostile extra arguments reach the server
    as one literal argv element."""
    hostile = f"s$(touch {marker});`touch {marker}`"
    arg = f"; touch {marker}"
    spec = """
[study]
name = NAME
model = "tiny-ernie"
gpu = "cpu"
workload = "smoke"
trials = 1

[workload]
requests_per_window = 4
warmup_requests = 1
concurrency = 2
output_tokens = 4

[runner]
startup_timeout_s = 20
extra_args = ["--revision", ARG]

[confirm]
launches = 0
""".replace("ARG", json.dumps(arg))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TUNER_DB_URL": f"sqlite:///{tmp_path / 'tuner.db'}",
        "TUNER_HOME": str(tmp_path / "home"),
        "TUNER_SERVER_MODULE": "tuner.testing.fake_server",
        "TUNER_FAKE_STARTUP_S": "0.1",
        "COLUMNS": "200",
    }

    def tuner(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tuner", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    (tmp_path / "hostile.toml").write_text(spec.replace("NAME", json.dumps(hostile)))
    for refused in (tuner("run", "hostile.toml"), tuner("run", "--study", hostile)):
        assert refused.returncode == 2, refused.stdout + refused.stderr
        text = " ".join(refused.stderr.split())
        assert "is not a letter, digit or '_'" in text and "Traceback" not in text
    assert not (tmp_path / "tuner.db").exists() and not (tmp_path / "home").exists()

    name = "hostile-args"
    (tmp_path / "spec.toml").write_text(spec.replace("NAME", json.dumps(name)))
    ran = tuner("run", "spec.toml")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    listed = tuner("trials", name, "--json")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    (trial,) = json.loads(listed.stdout)
    assert trial["study_name"] == name and trial["status"] == "complete"
    argv = trial["server"]["argv"]
    assert argv[argv.index("--revision") + 1] == arg
    assert not marker.exists()
    assert processes_mentioning(str(tmp_path)) == []


def test_the_ready_serve_line_of_a_hostile_model_source_is_inert_in_a_shell(
    tmp_path: Path, marker: Path
) -> None:
    db_url = f"sqlite:///{tmp_path / 'r.db'}"
    repo = make_repo(db_url)
    source = f"{tmp_path}/weights" + "".join(payloads(marker))
    ctx = dataclasses.replace(make_context(db_url, trials=3), serve_model=source)
    run_study(ctx, FakeRunner(max_utilization=0.9), repo)
    with TestClient(create_app(ApiSettings(storage=repo))) as client:
        r = client.get("/v1/recommendations?model=tiny-ernie&gpu=h100&workload=smoke")
    assert r.status_code == 200, r.text
    line = r.json()["serve_command"]
    assert line.startswith("vllm serve ")
    # Paste the line into bash with `vllm` standing for a program that prints its argv.
    shell = subprocess.run(
        ["bash", "-c", 'vllm() { printf "%s\\0" "$@"; }\n' + line],
        capture_output=True,
        timeout=10,
        cwd=tmp_path,
    )
    assert shell.returncode == 0, shell.stderr
    received = shell.stdout.decode().split("\0")[:-1]
    assert received[:2] == ["serve", source], "the shell must see the model source as one word"
    # tiny-ernie has no published weights: the line keeps random weights and the tokenizer
    # tuner wrote beside them, whose path carries the payloads too.
    synthetic = ["--load-format", "dummy", "--tokenizer", f"{source}/tokenizer"]
    assert received[2:] == synthetic + r.json()["flags"]
    assert not marker.exists()
