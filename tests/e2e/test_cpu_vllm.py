"""Real studies on real vLLM (CPU build): the CLI end to end, and a config that cannot start.

Each real server costs 30-90 s on 2 cores, so these tests are few and each checks a lot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.studykit import processes_mentioning
from tuner.compose import prepare
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import FailureClass, ServingConfig, TrialStatus
from tuner.load.canary import FULL, QUICK
from tuner.spec.study import DEFAULT_SPEC_PATH, load_spec
from tuner.testing.contract import check_complete, check_failed

pytestmark = pytest.mark.e2e
VLLM_PROCESS = "vllm.entrypoints"


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


def test_three_trial_study_on_cpu_vllm(tmp_path: Path, vllm_python: str) -> None:
    db = tmp_path / "e2e.db"
    env = {**os.environ, "TUNER_VLLM_PYTHON": vllm_python, "TUNER_DB_URL": f"sqlite:///{db}"}
    # Two confirmation launches a side (the embedded default takes three): the phase's
    # interleaving, canaries and verdict are the same, for two fewer CPU-vLLM starts in CI.
    args = ["run", "--study", "e2e", "--trials", "3", "--confirm-launches", "2"]
    run = _tuner(args, tmp_path, env, timeout=1500)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "vllm serve" in run.stdout and "best of study e2e" in run.stdout

    repo = Repository(make_engine(f"sqlite:///{db}"))
    rows = repo.list_trials("e2e", phase="search", limit=None)
    assert len(rows) == 3
    assert rows[0].is_baseline
    for row in rows:
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
    # Distinct configurations were launched, each on its own server.
    assert len({r.config for r in rows}) == 3
    assert len({r.to_result().server.served_model_name for r in rows}) == 3  # type: ignore[union-attr]
    # The confirmation phase: the best candidate and the defaults, 2 fresh launches each,
    # interleaved, every one measured; one comparison with a verdict.
    confirm = repo.list_trials("e2e", phase="confirm", limit=None)
    assert len(confirm) == 4
    assert [r.is_baseline for r in confirm] == [True, False] * 2
    for row in confirm:
        check_complete(row.to_result())
    # Each arm's first confirmation launch answered the whole canary on real vLLM.
    canaries = [row.to_result().server.canary for row in confirm]  # type: ignore[union-attr]
    assert canaries[:2] == [FULL, FULL] and set(canaries[2:]) == {QUICK}
    comparisons = repo.list_comparisons("e2e")
    assert len(comparisons) == 1 and comparisons[0].verdicts["overall"]
    assert "confirmation (fresh launches, interleaved)" in run.stdout
    assert processes_mentioning(VLLM_PROCESS) == []

    best = _tuner(["best", "e2e"], tmp_path, env, timeout=60)
    assert best.returncode == 0 and "--load-format dummy" in best.stdout
    listed = _tuner(["trials", "e2e", "--json"], tmp_path, env, timeout=60)
    assert listed.returncode == 0
    assert len(json.loads(listed.stdout)) == 7


def test_utilization_above_free_memory_is_a_recorded_finding(
    tmp_path: Path, vllm_python: str
) -> None:
    spec = load_spec(DEFAULT_SPEC_PATH).with_overrides(vllm_python=vllm_python, name="infeasible")
    prepared = prepare(spec, f"sqlite:///{tmp_path / 'f.db'}", log_dir=tmp_path / "logs")
    # vLLM's own default (0.92 of host memory for the CPU worker) does not fit beside the OS.
    result = prepared.runner.run(
        ServingConfig(gpu_memory_utilization=0.98, enforce_eager=True), prepared.ctx.workload
    )
    check_failed(result, FailureClass.MEMORY_EXCEEDED)
    assert result.status is TrialStatus.FAILED
    assert "less than desired CPU memory utilization" in result.failure_detail
    assert "less than desired CPU memory utilization" in result.log_tail
    assert processes_mentioning(VLLM_PROCESS) == []


def test_a_capacity_study_measures_a_load_curve_per_launch(
    tmp_path: Path, vllm_python: str
) -> None:
    """Each trial's one server is measured at 2, 4 and 8 streams after one warm-up, and the
    trials are ranked by the capacity read from their curves under the study's SLO."""
    db = tmp_path / "curve.db"
    env = {**os.environ, "TUNER_VLLM_PYTHON": vllm_python, "TUNER_DB_URL": f"sqlite:///{db}"}
    spec = Path(__file__).resolve().parents[2] / "studies" / "tiny-ernie-cpu-curve.toml"
    run = _tuner(["run", str(spec)], tmp_path, env, timeout=1200)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]

    repo = Repository(make_engine(f"sqlite:///{db}"))
    rows = repo.list_trials("tiny-ernie-cpu-curve", phase="search", limit=None)
    assert len(rows) == 2
    capacities = {}
    for row in rows:
        result = row.to_result()
        check_complete(result)
        # One launch, three load points, two windows each, lowest load first.
        assert [w.concurrency for w in result.windows] == [2, 2, 4, 4, 8, 8]
        for w in result.windows:
            assert w.client is not None and w.tpot_ms is not None
            assert w.requests_ok == max(16, 4 * (w.concurrency or 0))
        cap = result.metrics["capacity_output_throughput"].median
        load = result.metrics["capacity_load"].median
        assert cap > 0 and load in (2.0, 4.0, 8.0)
        # The capacity is the throughput of the chosen load point.
        chosen = [w.output_throughput for w in result.windows if w.concurrency == load]
        assert min(chosen) <= cap <= max(chosen)
        assert row.objective_values is not None and row.objective_values[0] == cap
        # Every request was kept: four per stream at least, with its chunk gaps (vLLM may put
        # more than one token in a chunk, never a chunk without one).
        kept = repo.trial_requests(row.id)
        assert [len(w) for w in kept] == [w.requests_ok for w in result.windows]
        assert all(0 < len(r.itl_s) < r.output_tokens for w in kept for r in w if r.ok)
        capacities[row.number] = cap
    # The study ranks by capacity: its best trial is the one with the larger capacity.
    best = max(capacities, key=lambda n: capacities[n])
    listed = _tuner(["trials", "tiny-ernie-cpu-curve", "--json"], tmp_path, env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    shown = _tuner(["best", "tiny-ernie-cpu-curve"], tmp_path, env, timeout=60)
    assert shown.returncode == 0 and f"#{best}" in shown.stdout, shown.stdout
    exported = _tuner(
        ["export", "tiny-ernie-cpu-curve", "--format", "vllm-bench", "--out", "bench"],
        tmp_path,
        env,
        timeout=60,
    )
    assert exported.returncode == 0, exported.stderr
    files = sorted((tmp_path / "bench").glob("*.json"))
    assert len(files) == 2 * 6
    first = json.loads(files[0].read_text())
    assert {"output_throughput", "p99_ttft_ms", "median_itl_ms", "ttfts", "itls"} <= set(first)
    assert processes_mentioning(VLLM_PROCESS) == []


FLAG_SPEC = """\
[study]
name = "e2e-flags"
model = "tiny-ernie"
gpu = "cpu"
workload = "smoke"
objective = "throughput"
trials = 2

[space]
params = []  # none of the typed knobs: only the flags given with --search
fixed = { gpu_memory_utilization = 0.98 }  # more of host memory than is free

[[enqueue]]
kv-cache-memory-bytes = 268435456
stream_interval = 8

[confirm]
launches = 0
"""


def test_a_study_searches_vllm_flags_beyond_the_typed_knobs(
    tmp_path: Path, vllm_python: str
) -> None:
    """Two flags that none of tuner's typed knobs covers, checked against vLLM's own list (read
    from the CPU build's parser once, then cached): an explicit 256 MiB KV cache, and 8 tokens
    per streamed chunk. vLLM's CPU build refuses to reserve 0.98 of host memory, so the
    defaults cannot start; with --kv-cache-memory-bytes it sizes the KV cache by that instead
    and serves, so the recommendation is that launch and its serve line carries both flags."""
    db = tmp_path / "flags.db"
    home = tmp_path / "home"
    env = {
        **os.environ,
        "TUNER_VLLM_PYTHON": vllm_python,
        "TUNER_DB_URL": f"sqlite:///{db}",
        "TUNER_HOME": str(home),
    }
    (tmp_path / "flags.toml").write_text(FLAG_SPEC)
    search = ["--search", "kv-cache-memory-bytes=268435456", "--search", "stream_interval=8"]
    run = _tuner(["run", "flags.toml", *search], tmp_path, env, timeout=1200)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    cached = json.loads((home / "vllm-flags" / "vllm-flags-0.32.0.json").read_text())
    assert cached["source"].endswith("make_arg_parser")  # asked of the installed vLLM

    repo = Repository(make_engine(f"sqlite:///{db}"))
    baseline, tried = repo.list_trials("e2e-flags", phase="search", limit=None)
    assert baseline.is_baseline and baseline.config.extra == {}
    check_failed(baseline.to_result(), FailureClass.MEMORY_EXCEEDED)
    # Not ruled out as "at least as demanding" as the failed defaults: its extra knobs differ.
    assert tried.config.extra == {"kv_cache_memory_bytes": 268435456, "stream_interval": 8}
    result = tried.to_result()
    check_complete(result)
    assert result.server is not None
    args = list(result.server.argv)
    for flag, value in (("--kv-cache-memory-bytes", "268435456"), ("--stream-interval", "8")):
        assert args.count(flag) == 1 and args[args.index(flag) + 1] == value
    # vLLM streamed about 8 tokens per chunk: some 1/8 as many gaps as tokens.
    kept = [r for w in repo.trial_requests(tried.id) for r in w if r.ok]
    gaps = sum(len(r.itl_s) for r in kept) / sum(r.output_tokens - 1 for r in kept)
    assert 0 < gaps < 0.25, gaps

    best = _tuner(["best", "e2e-flags"], tmp_path, env, timeout=60)
    assert best.returncode == 0, best.stdout + best.stderr
    assert "trial #1" in best.stdout
    serve = next(line for line in best.stdout.splitlines() if "serve: vllm serve" in line)
    assert "--kv-cache-memory-bytes 268435456" in serve and "--stream-interval 8" in serve
    assert processes_mentioning(VLLM_PROCESS) == []
