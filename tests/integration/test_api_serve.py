"""`tuner serve` as a user runs it: a real uvicorn on a loopback port, and a clear error when
the port is taken."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.studykit import make_repo
from tuner.cli.serve import bind_socket


def _tuner(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tuner", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def test_serve_answers_on_loopback_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, "TUNER_API_KEY": "k1"}
    url = f"sqlite:///{tmp_path / 'serve.db'}"
    make_repo(url)  # an empty store, as `tuner db upgrade` makes it
    proc = _tuner("serve", "--port", "0", "--storage", url, env=env)
    try:
        assert proc.stdout is not None
        # Banner, storage and writes lines, printed once the socket is bound. Read all three here:
        # communicate() reads the pipe itself and would miss lines already in stdout's buffer.
        banner = "".join(proc.stdout.readline() for _ in range(3))
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", banner)
        assert match, banner
        base = f"http://127.0.0.1:{match.group(1)}"
        deadline = time.monotonic() + 20
        while True:
            try:
                health = httpx.get(f"{base}/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "server did not answer in 20 s"
                time.sleep(0.1)
        assert health.json()["status"] == "ok" and health.json()["studies"] == 0
        spec = {"study": {"name": "q", "model": "tiny-ernie", "gpu": "h100", "workload": "chat"}}
        created = httpx.post(f"{base}/v1/studies", json=spec, headers={"X-API-Key": "k1"})
        assert created.status_code == 201, created.text
        assert httpx.get(f"{base}/v1/studies/q").json()["status"] == "queued"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    # uvicorn shuts down cleanly, then re-raises the signal so the parent sees it.
    assert proc.returncode in (0, -signal.SIGTERM), out
    assert "Application shutdown complete" in out
    assert "writes: on" in banner
    assert "warning:" not in banner + out  # loopback: nobody else reaches the reads


def test_a_taken_port_is_a_usage_error(tmp_path: Path) -> None:
    taken = bind_socket("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        url = f"sqlite:///{tmp_path / 'serve.db'}"
        make_repo(url)
        proc = _tuner("serve", "--port", str(port), "--storage", url, env=dict(os.environ))
        out, _ = proc.communicate(timeout=60)
    finally:
        taken.close()
    assert proc.returncode == 2, out
    assert f"cannot listen on 127.0.0.1:{port}" in out and "--port" in out


def test_bind_socket_listens_on_ipv4_loopback_without_nagle() -> None:
    sock = bind_socket("127.0.0.1", 0)
    try:
        assert sock.family == socket.AF_INET and sock.getsockname()[0] == "127.0.0.1"
        # Inherited by accepted connections; without it every answer waits ~40 ms.
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        sock.close()


def test_a_database_file_that_does_not_exist_is_refused_not_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    proc = _tuner("serve", "--port", "0", "--storage", url, env=dict(os.environ))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out
    assert f"database {tmp_path / 'typo.db'} does not exist" in out
    assert f"tuner db upgrade --storage {url}" in out and "Traceback" not in out
    assert not (tmp_path / "typo.db").exists()


def test_an_address_other_hosts_reach_is_said_on_stderr(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'serve.db'}"
    make_repo(url)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner", "serve", "--host", "0.0.0.0", "--port", "0",
         "--storage", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k != "TUNER_API_KEY"} | {"COLUMNS": "300"},
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        warning = proc.stderr.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, rest = proc.communicate(timeout=20)
    assert warning.startswith("warning: listening on 0.0.0.0"), warning + rest
    assert "every read" in warning and "needs no key" in warning and "none is set" in warning
    assert "warning" not in out


def test_a_missing_database_s_hint_pastes_whole(tmp_path: Path) -> None:
    """`tuner serve --storage "sqlite:///sp ace/nope.db"` hinted an unquoted URL: two words."""
    import shlex

    from typer.testing import CliRunner

    from tuner.cli.app import app
    from tuner.errors import UsageError

    url = f"sqlite:///{tmp_path / 'sp ace' / 'nope.db'}"
    run = CliRunner().invoke(app, ["serve", "--port", "0", "--storage", url])
    assert isinstance(run.exception, UsageError), run.output
    hint = run.exception.hint or ""
    assert shlex.split(hint.split(": ", 1)[1]) == ["tuner", "db", "upgrade", "--storage", url]
    bad = CliRunner().invoke(
        app, ["serve", "--port", "0", "--storage", f"sqlite:///{tmp_path / 'c.db'}",
              "--cors-origin", "http://localhost:3000/ui"],
    )  # fmt: skip
    assert isinstance(bad.exception, UsageError) and "has a path" in bad.exception.message
