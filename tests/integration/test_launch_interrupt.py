"""Ctrl-C during `tuner launch`'s start-up is an interruption: exit 130 saying nothing was
served, and no process left; Ctrl-C while serving stays the normal stop (exit 0, in
test_launch_cli.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.integration.test_launch_cli import (
    FAKE_SERVER,
    LAUNCH,
    Lines,
    clean_env,
    insert_measured_study,
)
from tests.studykit import processes_mentioning
from tuner.domain import ServingConfig
from tuner.runner.ports import free_port


def test_ctrl_c_during_start_up_exits_130_and_leaves_nothing(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'tuner.db'}"
    insert_measured_study(db_url, [ServingConfig()])
    env = {**clean_env(tmp_path), "TUNER_FAKE_STARTUP_S": "60", "PYTHONUNBUFFERED": "1"}
    args = [*LAUNCH, "--storage", db_url, "--port", str(free_port()), *FAKE_SERVER]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = Lines(proc)
    try:
        lines.wait_for("starting vLLM", 60)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        output = lines.rest()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        lines.close()
    assert code == 130, output
    assert "interrupted during start-up" in output and "nothing was served" in output
    assert "base URL" not in output
    assert processes_mentioning(str(tmp_path / "home")) == []
