"""A real study on real vLLM (the CPU build), end to end through the CLI: one study that takes
every path a study has on real servers, so that CI starts as few of them as it can (each costs
about a minute on 2 cores).

The spec below searches two `vllm serve` flags none of tuner's typed knobs covers (an explicit
256 MiB KV cache and 8 tokens per streamed chunk, read from vLLM's own parser), measures each
launch on a two-point load curve (2 and 4 streams) and ranks by capacity under an SLO, then
confirms its best candidate against the defaults with two fresh launches each, interleaved: six
launches. (A configuration vLLM refuses to start costs another minute here; the classifier is
checked on vLLM's own messages in tests/unit/test_vllm_logparse.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.studykit import processes_mentioning
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import Regime
from tuner.load.canary import FULL, QUICK
from tuner.scoring.regime import diagnose
from tuner.testing.contract import check_complete

pytestmark = pytest.mark.e2e
VLLM_PROCESS = "vllm.entrypoints"
STUDY = "e2e"
SPEC = """\
[study]
name = "e2e"
model = "tiny-ernie"
gpu = "cpu"
workload = "smoke"
objective = "capacity"
trials = 2
slo = "ttft_p99=10s,e2e_p99=60s"

[workload]
concurrency = 4
concurrency_ladder = [2, 4]
requests_per_window = 16
windows = 2
warmup_requests = 8

[space]
params = []  # none of the typed knobs: only the flags given with --search
fixed = { enforce_eager = true }  # torch.compile would double every start-up on 2 cores

[[enqueue]]
kv-cache-memory-bytes = 268435456
stream_interval = 8

[confirm]
top = 1
launches = 2
"""
FLAGS = {"kv_cache_memory_bytes": 268435456, "stream_interval": 8}


def _tuner(
    args: list[str], cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        cwd=cwd,
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def test_a_study_with_a_curve_and_vllm_flags_confirms_its_best(
    tmp_path: Path, vllm_python: str, e2e_home: Path
) -> None:
    db = tmp_path / "e2e.db"
    env = {
        **os.environ,
        "TUNER_VLLM_PYTHON": vllm_python,
        "TUNER_DB_URL": f"sqlite:///{db}",
        "TUNER_HOME": str(e2e_home),
    }
    (tmp_path / "e2e.toml").write_text(SPEC)
    search = ["--search", "kv-cache-memory-bytes=268435456", "--search", "stream_interval=8"]
    run = _tuner(["run", "e2e.toml", *search], tmp_path, env, timeout=1500)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "vllm serve" in run.stdout and f"best of study {STUDY}" in run.stdout
    # The flags were checked against the installed vLLM's own parser (read once, then cached).
    cached = json.loads((e2e_home / "vllm-flags" / "vllm-flags-0.32.0.json").read_text())
    assert cached["source"].endswith("make_arg_parser")

    repo = Repository(make_engine(f"sqlite:///{db}"))
    baseline, flagged = repo.list_trials(STUDY, phase="search", limit=None)
    assert baseline.is_baseline and baseline.config.extra == {}
    assert flagged.config.extra == FLAGS
    for row in (baseline, flagged):
        result = row.to_result()
        check_complete(result)
        assert result.provenance is not None
        assert result.provenance.vllm_version.startswith("0.32")
        assert result.provenance.model == "tiny-ernie"
        assert result.provenance.gpu_name.startswith("cpu")
        assert row.effective_backend == "CPU_ATTN"
        assert result.memory.host_peak_rss_bytes and result.memory.host_peak_rss_bytes > 2**28
        assert result.server is not None and "--load-format" in result.server.argv
        assert result.server.canary == QUICK  # a fresh server's first requests: short prompts
        # One launch, two load points, two windows each, lowest load first.
        assert [w.concurrency for w in result.windows] == [2, 2, 4, 4]
        for w in result.windows:
            assert w.client is not None and w.tpot_ms is not None
            assert w.requests_ok == 16
        cap = result.metrics["capacity_output_throughput"].median
        load = result.metrics["capacity_load"].median
        assert cap > 0 and load in (2.0, 4.0)
        chosen = [w.output_throughput for w in result.windows if w.concurrency == load]
        assert min(chosen) <= cap <= max(chosen)  # the capacity is its load point's throughput
        assert row.objective_values is not None and row.objective_values[0] == cap
        # Every request was kept, with its chunk gaps.
        kept = repo.trial_requests(row.id)
        assert [len(w) for w in kept] == [w.requests_ok for w in result.windows]
        assert all(r.ok and 0 < len(r.itl_s) < r.output_tokens for w in kept for r in w)
        # What the diagnosis reads, from real vLLM: its API server and engine core (found by
        # its process title) under load, vLLM's request-phase histograms; a named regime.
        m = result.server_metrics
        assert m["api_server_processes"] >= 1 and m["engine_core_processes"] >= 1, m
        assert m["engine_core_cpu"] > 0.1 and m["api_server_cpu"] > 0, m
        assert m["prefill_time_s"] > 0 and m["decode_time_s"] > 0, m
        assert diagnose(result).regime is not Regime.UNKNOWN, diagnose(result)
    # Each configuration on a server of its own.
    names = {r.to_result().server.served_model_name for r in (baseline, flagged)}  # type: ignore[union-attr]
    assert len(names) == 2

    # The flags reached vLLM as given, and vLLM streamed about 8 tokens per chunk.
    argv = list(flagged.to_result().server.argv)  # type: ignore[union-attr]
    for flag, value in (("--kv-cache-memory-bytes", "268435456"), ("--stream-interval", "8")):
        assert argv.count(flag) == 1 and argv[argv.index(flag) + 1] == value
    kept = [r for w in repo.trial_requests(flagged.id) for r in w if r.ok]
    gaps = sum(len(r.itl_s) for r in kept) / sum(r.output_tokens - 1 for r in kept)
    assert 0 < gaps < 0.25, gaps

    # The confirmation: the best candidate (the flagged launch, the only one beside the
    # defaults) and the defaults, two fresh launches each, interleaved, each measured, the
    # first of each arm answering the whole canary; one comparison with a verdict.
    confirm = repo.list_trials(STUDY, phase="confirm", limit=None)
    assert len(confirm) == 4
    assert [r.is_baseline for r in confirm] == [True, False, False, True]  # D B, B D
    assert all(r.config.extra == FLAGS for r in confirm if not r.is_baseline)
    for row in confirm:
        check_complete(row.to_result())
    canaries = [row.to_result().server.canary for row in confirm]  # type: ignore[union-attr]
    assert canaries[:2] == [FULL, FULL] and set(canaries[2:]) == {QUICK}
    comparisons = repo.list_comparisons(STUDY)
    assert len(comparisons) == 1 and comparisons[0].verdicts["overall"]
    assert "confirmation (fresh launches, interleaved)" in run.stdout
    assert processes_mentioning(VLLM_PROCESS) == []

    # What a user reads back: the recommendation's serve line, the trials, the dataset.
    best = _tuner(["best", STUDY], tmp_path, env, timeout=60)
    assert best.returncode == 0 and "--load-format dummy" in best.stdout, best.stdout
    listed = _tuner(["trials", STUDY, "--json"], tmp_path, env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 6
    out = tmp_path / "bench"
    exported = _tuner(
        ["export", STUDY, "--format", "vllm-bench", "--out", str(out)], tmp_path, env, timeout=60
    )
    assert exported.returncode == 0, exported.stderr
    files = sorted(out.glob("*.json"))
    assert len(files) == 6 * 4  # every completed launch, every window
    first = json.loads(files[0].read_text())
    assert {"output_throughput", "p99_ttft_ms", "median_itl_ms", "ttfts", "itls"} <= set(first)
