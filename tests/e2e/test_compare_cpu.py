"""``tuner compare`` on real vLLM (the CPU build): prefix caching off against on, under the
``multi-turn`` preset, where each turn's prompt carries the conversation so far. Its own
options on real servers (the fixed design of two fresh launches a side, interleaved), the
workload's fingerprint printed before the launches, the comparison stored, no server left.

What a busy 2-core machine lets this assert honestly: two launches a side give Welch's interval
one or two degrees of freedom, and the machine's other work moves a launch by up to x2, so the
interval need not exclude 1. The effect is larger than that: without the cache every turn
prefills the whole conversation again, and the median TTFT of every launch with the cache lies
well below that of every launch without it (about x0.35 measured on this machine). The test
asserts that ordering with a margin, and that no metric calls the cache worse for TTFT. About
three minutes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.studykit import processes_mentioning
from tuner.db.repository import Repository
from tuner.db.session import make_engine

pytestmark = pytest.mark.e2e
REPO = Path(__file__).parents[2]
SMALL = "requests_per_window=48,windows=2,warmup_requests=8,output_tokens=16,think_time_s=0.1"


def test_prefix_caching_on_multi_turn_traffic_cuts_ttft(
    tmp_path: Path, vllm_python: str, e2e_home: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'compare.db'}"
    env = {
        **{k: v for k, v in os.environ.items() if k != "TUNER_DB_URL"},
        "TUNER_VLLM_PYTHON": vllm_python,
        "PYTHONPATH": str(REPO),
        "TUNER_HOME": str(e2e_home),
    }
    run = subprocess.run(
        [sys.executable, "-m", "tuner", "compare", "--model", "tiny-ernie", "--gpu", "cpu",
         "--workload", "multi-turn", "--workload-set", SMALL,
         "--a", "enable_prefix_caching=false,enforce_eager=true",
         "--b", "enable_prefix_caching=true,enforce_eager=true",
         "--repeats", "2", "--json", "--storage", db],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    # 0: decided or no difference; 1: inconclusive (launches that disagree on a busy machine).
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads(run.stdout)

    # The fingerprint, before the first launch: conversations, and most prompt tokens repeat
    # an earlier prefix (the shared system prompt and the turns before).
    reuse = re.search(r"prefix reuse: (\d+)% of prompt tokens", run.stderr)
    assert reuse is not None and run.stderr.index(reuse.group(0)) < run.stderr.index("launch 1/")
    fp = data["workload_fingerprint"]
    assert fp["sessions"] > 0 and fp["prefix_reuse"] >= 0.5
    assert int(reuse.group(1)) == round(100 * fp["prefix_reuse"])

    metrics = {m["metric"]: m for m in data["results"]["metrics"]}
    ttft = metrics["ttft_p50_ms"]
    off, on = ttft["a"]["values"], ttft["b"]["values"]
    assert len(off) == len(on) == 2
    assert max(on) < 0.8 * min(off), (off, on)
    assert ttft["verdict"] != "worse" and metrics["ttft_p99_ms"]["verdict"] != "worse"

    row = Repository(make_engine(db)).get_comparison(data["id"])
    assert row is not None and row.results["kind"] == "compare" and row.repeats == 2
    assert row.a_config.enable_prefix_caching is False
    assert row.b_config.enable_prefix_caching is True
    assert row.workload.startswith("multi-turn[")
    launches = [line for line in run.stderr.splitlines() if line.startswith("launch ")]
    assert len(launches) == 4 and "enable_prefix_caching=false" in launches[0]
    assert processes_mentioning("vllm.entrypoints") == []
