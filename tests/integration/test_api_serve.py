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


def test_a_taken_port_is_a_usage_error(tmp_path: Path) -> None:
    taken = bind_socket("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        url = f"sqlite:///{tmp_path / 'serve.db'}"
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
