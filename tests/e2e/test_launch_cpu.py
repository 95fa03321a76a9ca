"""``tuner doctor``, ``tuner launch``, ``tuner load`` and ``tuner canary`` on real vLLM (the CPU
build), on one server: doctor sees vLLM 0.32 and its CPU_ATTN backend; launch serves a measured
configuration; while it serves, the OpenAI client example talks to it, ``tuner load`` measures it
at two concurrencies in vLLM's result format and ``tuner canary`` sends it every request shape;
then SIGINT leaves no process behind. One real server (about a minute on 2 cores)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_launch_cli import (
    E2E_CONFIG,
    clean_env,
    insert_measured_study,
    serve_and_stop,
    tuner,
)
from tuner.runner.leases import read_lease
from tuner.runner.ports import free_port

pytestmark = pytest.mark.e2e
REPO = Path(__file__).parents[2]
SERVED = "tiny-ernie"  # tuner launch serves under the model's alias


def _load_and_canary(
    url: str, cwd: Path, results: Path
) -> dict[str, subprocess.CompletedProcess[str]]:
    base = url.removesuffix("/v1")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # Token-id prompts (the default) below tiny-ernie's vocabulary of 1024.
    load = subprocess.run(
        [sys.executable, "-m", "tuner", "load", base, "--model", SERVED,
         "--concurrency", "1,4", "--prompt-tokens", "64", "--output-tokens", "16",
         "--warmup", "4", "--json", "--save-result", str(results)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    # The full canary against real vLLM: the same set the fake server answers.
    canary = subprocess.run(
        [sys.executable, "-m", "tuner", "canary", base, "--model", SERVED, "--json"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    return {"load": load, "canary": canary}


def _socket_dirs(leases: Path) -> list[Path]:
    """The socket directories of the servers serving ``SERVED`` (their leases say which)."""
    found = [read_lease(path) for path in leases.glob("server-*.json")]
    return [Path(lease.sockets) for lease in found if lease and lease.served_model_name == SERVED]


def test_doctor_then_launch_load_and_canary_on_cpu_vllm(
    tmp_path: Path, vllm_python: str, e2e_home: Path
) -> None:
    db_url = f"sqlite:///{tmp_path / 'tuner.db'}"
    env = {**clean_env(tmp_path), "TUNER_VLLM_PYTHON": vllm_python, "TUNER_HOME": str(e2e_home)}

    doctor = tuner(["doctor", "--json", "--storage", db_url], tmp_path, env, timeout=300)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    data = json.loads(doctor.stdout)
    assert data["vllm"]["version"].startswith("0.32"), data["vllm"]
    assert "CPU_ATTN" in data["vllm"]["backends"] and data["vllm"]["backends_source"] == "platform"
    assert data["torch"]["version"] and data["torch"]["cuda_available"] is False
    assert data["ok"] is True and data["problems"] == []

    insert_measured_study(db_url, [E2E_CONFIG], name="cpu-measured")
    port = free_port()
    results = tmp_path / "results"
    done: dict[str, subprocess.CompletedProcess[str]] = {}
    sockets: list[Path] = []
    bound: list[int] = []  # socket files in each while it serves

    def serving(url: str) -> None:
        sockets.extend(_socket_dirs(e2e_home / "leases"))
        bound.extend(sum(stat.S_ISSOCK(f.lstat().st_mode) for f in d.iterdir()) for d in sockets)
        done.update(_load_and_canary(url, tmp_path, results))

    output, client = serve_and_stop(
        ["--model", "tiny-ernie", "--gpu", "cpu", "--storage", db_url, "--port", str(port)],
        tmp_path,
        env,
        str(e2e_home),  # in the server's --model path
        ready_timeout_s=600,
        while_serving=serving,
    )
    # vLLM bound its engine's sockets in the directory tuner gave it, and it went with it.
    assert len(sockets) == 1 and sockets[0].name.startswith("tuner-vllm-"), sockets
    assert bound[0] >= 1, bound
    assert not sockets[0].exists()
    assert f"base URL: http://127.0.0.1:{port}/v1" in output
    # Announced only after the quick canary, the workload's warm-up and the full canary.
    marks = ("canary: 3", "warming up:", "canary passed", "base URL:")
    assert [output.index(m) for m in marks] == sorted(output.index(m) for m in marks), output
    assert "trial #0 of study cpu-measured" in output
    assert "--gpu-memory-utilization 0.1 --max-num-seqs 8 --enforce-eager" in output
    chat, completion = client.splitlines()[:2]
    assert chat.startswith("chat (streamed):") and chat.split(":", 1)[1].strip(), client
    assert completion.startswith("completion:") and completion.split(":", 1)[1].strip(), client

    canary, load = done["canary"], done["load"]
    assert canary.returncode == 0, canary.stdout[-3000:] + canary.stderr[-3000:]
    assert json.loads(canary.stdout)["passed"] is True
    assert load.returncode == 0, load.stdout[-3000:] + load.stderr[-3000:]
    points = [json.loads(line) for line in load.stdout.splitlines() if line.strip()]
    assert [p["max_concurrency"] for p in points] == [1, 4]
    for point in points:
        requests = max(32, 4 * point["max_concurrency"])
        assert point["completed"] == point["num_prompts"] == requests, point
        assert point["failed"] == 0
        assert point["model_id"] == SERVED and point["request_rate"] == "inf"
        # vLLM's own usage counts: the prompts have exactly the asked length.
        assert point["total_input_tokens"] == 64 * requests
        assert point["total_output_tokens"] == 16 * requests  # ignore_eos
        assert point["output_throughput"] > 0
        for metric in ("ttft", "e2el"):
            assert point[f"p99_{metric}_ms"] >= point[f"median_{metric}_ms"] > 0, metric
        # On 2 busy cores the client may read several of a fast server's chunks in one read
        # (their gaps are then 0): TPOT and ITL can be 0, never negative.
        for metric in ("tpot", "itl"):
            assert point[f"p99_{metric}_ms"] >= point[f"median_{metric}_ms"] >= 0, metric
        # Equal when the client read a request's whole answer in its first chunk (coalesced).
        assert point["median_e2el_ms"] >= point["median_ttft_ms"]
    files = sorted(results.iterdir())
    assert len(files) == 2
    for path in files:
        saved = json.loads(path.read_text())
        assert len(saved["itls"]) == saved["num_prompts"]
        # 16 tokens: at most 15 gaps. On 2 busy cores vLLM's API server may put more than one
        # token in a chunk when it falls behind (fewer gaps), never a chunk without a token.
        assert all(1 <= len(gaps) <= 15 for gaps in saved["itls"]), saved["itls"]
