"""``tuner doctor`` and ``tuner launch`` on real vLLM (the CPU build): doctor sees vLLM 0.32 and
its CPU_ATTN backend; launch serves a measured configuration that the OpenAI client example
talks to, and SIGINT leaves no process behind. One real server (about a minute on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_launch_cli import (
    E2E_CONFIG,
    clean_env,
    insert_measured_study,
    serve_and_stop,
    tuner,
)
from tuner.vllm.ports import free_port

pytestmark = pytest.mark.e2e


def test_doctor_then_launch_the_measured_config_on_cpu_vllm(
    tmp_path: Path, vllm_python: str
) -> None:
    db_url = f"sqlite:///{tmp_path / 'tuner.db'}"
    env = {**clean_env(tmp_path), "TUNER_VLLM_PYTHON": vllm_python}

    doctor = tuner(["doctor", "--json", "--storage", db_url], tmp_path, env, timeout=300)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    data = json.loads(doctor.stdout)
    assert data["vllm"]["version"].startswith("0.32"), data["vllm"]
    assert "CPU_ATTN" in data["vllm"]["backends"] and data["vllm"]["backends_source"] == "platform"
    assert data["torch"]["version"] and data["torch"]["cuda_available"] is False
    assert data["ok"] is True and data["problems"] == []

    insert_measured_study(db_url, [E2E_CONFIG], name="cpu-measured")
    port = free_port()
    output, client = serve_and_stop(
        ["--model", "tiny-ernie", "--gpu", "cpu", "--storage", db_url, "--port", str(port)],
        tmp_path,
        env,
        str(tmp_path / "home"),  # in the server's --model path
        ready_timeout_s=600,
    )
    assert f"base URL: http://127.0.0.1:{port}/v1" in output
    # Announced only after the quick canary, the workload's warm-up and the full canary.
    marks = ("canary: 3", "warming up:", "canary passed", "base URL:")
    assert [output.index(m) for m in marks] == sorted(output.index(m) for m in marks), output
    assert "trial #0 of study cpu-measured" in output
    assert "--gpu-memory-utilization 0.1 --max-num-seqs 8 --enforce-eager" in output
    chat, completion = client.splitlines()[:2]
    assert chat.startswith("chat (streamed):") and chat.split(":", 1)[1].strip(), client
    assert completion.startswith("completion:") and completion.split(":", 1)[1].strip(), client
