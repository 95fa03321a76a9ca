"""``tuner verify-claims`` on real vLLM (the CPU build): the seed claims file, its flag claims
answered from vLLM's own flag list, its one measurable effect claim (prefix caching) measured
with two fresh launches a side, interleaved, through the A/B pipeline that `tuner compare` runs
too (``open_bench`` -> ``run_interleaved`` -> the comparison, stored). A study's confirmation
takes the same interleaving and comparison on real vLLM (tests/e2e/test_study_cpu.py); the
decision design, which needs many launches (a known gain found within a budget, a configuration
against itself never better), is checked on the fake server, where launches cost milliseconds
(tests/integration/test_decision_fake.py, test_compare_cli.py). About four minutes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.studykit import processes_mentioning
from tuner.abtest.claims.figures import EFFECT_VERDICTS
from tuner.db.repository import Repository
from tuner.db.session import make_engine

pytestmark = pytest.mark.e2e
REPO = Path(__file__).parents[2]
VLLM_PROCESS = "vllm.entrypoints"


def test_verify_the_seed_claims_on_cpu_vllm(
    tmp_path: Path, vllm_python: str, e2e_home: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'claims.db'}"
    env = {
        **{k: v for k, v in os.environ.items() if k != "TUNER_DB_URL"},
        "TUNER_VLLM_PYTHON": vllm_python,
        "PYTHONPATH": str(REPO),
        "TUNER_HOME": str(e2e_home),
    }
    # enforce_eager and smaller windows keep the one measurable claim (prefix caching, 2 x 2
    # launches) to about four minutes on 2 cores.
    quick = "requests_per_window=24,warmup_requests=8,output_tokens=16,windows=2"
    run = subprocess.run(
        [sys.executable, "-m", "tuner", "verify-claims",
         str(REPO / "studies" / "claims" / "seed-claims.toml"),
         "--model", "tiny-ernie", "--gpu", "cpu", "--repeats", "2", "--json",
         "--fixed", "enforce_eager=true", "--workload-set", quick, "--storage", db],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    records = {r["id"]: r for r in json.loads(run.stdout)}
    assert len(records) == 18
    for cid in ("fa2-memory", "fa2-throughput", "fa2-latency", "fa2-ttft", "fa2-context-2k"):
        assert records[cid]["verdict"] == "not applicable"
        assert "FLASH_ATTN is not available on CPU" in records[cid]["reason"]
    assert "same configuration" in records["max-model-len-memory"]["reason"]
    util = records["utilization-p99"]
    assert util["verdict"] == "not applicable" and util["reason"], util
    prefix = records["prefix-caching-throughput"]
    assert prefix["verdict"] in EFFECT_VERDICTS, prefix
    assert prefix["measured"] is not None
    # Answered without a launch of their own: the flag from vLLM 0.32.0's flag list, the start
    # from the prefix-caching launches (none passes --disable-custom-all-reduce).
    assert records["enable-flash-attn-flag"]["verdict"] == "refuted"
    assert records["enable-flash-attn-removed"]["verdict"] == "confirmed"
    starts = records["custom-all-reduce-required"]
    assert starts["verdict"] == "refuted", starts
    assert "launches of 2 configuration(s) started without --disable-custom" in starts["reason"]
    assert records["attention-intermediate-memory"]["verdict"] == "not measurable"
    row = Repository(make_engine(db)).get_comparison(prefix["comparison_id"])
    assert row is not None and row.results["kind"] == "claim"
    assert row.results["claim"]["verdict"] == prefix["verdict"]
    assert row.provenance is not None and row.provenance.vllm_version.startswith("0.32")
    # Interleaved A B, B A (counterbalanced).
    assert [line for line in run.stderr.splitlines() if line.startswith("launch ")] == [
        "launch 1/4: gpu_memory_utilization=0.1,enable_prefix_caching=False,enforce_eager=True",
        "launch 2/4: gpu_memory_utilization=0.1,enable_prefix_caching=True,enforce_eager=True",
        "launch 3/4: gpu_memory_utilization=0.1,enable_prefix_caching=True,enforce_eager=True",
        "launch 4/4: gpu_memory_utilization=0.1,enable_prefix_caching=False,enforce_eager=True",
    ]
    assert processes_mentioning(VLLM_PROCESS) == []
