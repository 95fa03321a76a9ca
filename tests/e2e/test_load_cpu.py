"""``tuner load`` against real vLLM (the CPU build) serving tiny-ernie: two load points, one
warm-up, vLLM's result format. One server, started here as tuner's runner starts one (about
a minute on 2 cores), then `tuner load` as a subprocess, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.studykit import processes_mentioning
from tuner.deploy.local import model_source
from tuner.domain import ServingConfig
from tuner.vllm import argv
from tuner.vllm.ports import free_port
from tuner.vllm.server import VllmServer

pytestmark = pytest.mark.e2e
REPO = Path(__file__).parents[2]
SERVED = "tiny-ernie-load"
# The configuration `tuner launch`'s e2e test serves: it fits beside the OS on a small host.
CONFIG = ServingConfig(enforce_eager=True, gpu_memory_utilization=0.1, max_num_seqs=8)


def test_tuner_load_measures_cpu_vllm_at_two_concurrencies(
    tmp_path: Path, vllm_python: str
) -> None:
    model, load_format, tokenizer = model_source(
        "tiny-ernie", tmp_path / "home", dummy_weights=True
    )
    port = free_port()
    args = argv.base_args(
        model, served_model_name=SERVED, host="127.0.0.1", port=port,
        load_format=load_format, tokenizer=tokenizer, dtype=None,
    )  # fmt: skip
    flags = argv.render_flags(CONFIG, "0.32.0")
    with VllmServer(
        argv.server_command(vllm_python, [*args, *flags.args]),
        env=dict(flags.env),
        host="127.0.0.1",
        port=port,
        served_model_name=SERVED,
        log_path=tmp_path / "vllm.log",
        lease_dir=None,
    ) as server:
        server.start()
        server.wait_ready(600)
        server.verify_identity()
        # Token-id prompts (the default) below tiny-ernie's vocabulary of 1024.
        run = subprocess.run(
            [sys.executable, "-m", "tuner", "load", server.base_url, "--model", SERVED,
             "--concurrency", "1,4", "--prompt-tokens", "64", "--output-tokens", "16",
             "--warmup", "4", "--json", "--save-result", str(tmp_path / "results")],
            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        # The full canary against real vLLM: the same set the fake server answers.
        canary = subprocess.run(
            [sys.executable, "-m", "tuner", "canary", server.base_url, "--model", SERVED, "--json"],
            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        log = server.log_tail(40)
    assert canary.returncode == 0, canary.stdout[-3000:] + canary.stderr[-3000:] + log
    assert json.loads(canary.stdout)["passed"] is True
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:] + log
    points = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
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
        assert point["median_e2el_ms"] > point["median_ttft_ms"]
    files = sorted((tmp_path / "results").iterdir())
    assert len(files) == 2
    for path in files:
        data = json.loads(path.read_text())
        assert len(data["itls"]) == data["num_prompts"]
        assert all(len(gaps) == 15 for gaps in data["itls"])  # 16 tokens, one chunk each
    assert processes_mentioning(str(tmp_path)) == []
