"""The lever plan end to end on the fake server's simulated bottlenecks (TUNER_FAKE_REGIME):
a study with no space of its own diagnoses vLLM's defaults, plans the levers of that regime,
screens them against the defaults and searches what beat the noise. Frontend-bound (CPU per
streamed chunk in the API server): the plan holds stream_interval and the study finds the
grouped stream, the simulated best. KV-bound (a small KV cache, preemptions): another plan."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import ApiSettings
from tests.studykit import processes_mentioning
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import Objective
from tuner.study.standings import rank

REPO = Path(__file__).parents[2]
# 64 streams of 16 tokens: the API server's 1.5 ms per chunk, not decoding, is the limit.
FRONTEND = "concurrency = 64\nrequests_per_window = 128\nwarmup_requests = 8\noutput_tokens = 16"
# 24 streams of 256 + 128 tokens: more than the small KV cache holds at once.
KV = "concurrency = 24\nrequests_per_window = 48\nwarmup_requests = 4\n" + (
    "prompt_tokens = 256\noutput_tokens = 128"
)
# The CPU baseline's utilization (0.1) then holds 6,000 KV tokens: 15 of the 24 sequences.
KV_SCALE = "0.12"
SPEC = """[study]
name = "planned"
model = "tiny-ernie"
gpu = "cpu"
workload = "smoke"
objective = "throughput"
trials = {trials}

[workload]
windows = 2
{workload}

[runner]
startup_timeout_s = 30

[confirm]
launches = 0
"""


def _study(tmp_path: Path, regime: str, workload: str, trials: int, **env_extra: str) -> dict:  # type: ignore[type-arg]
    env = {k: v for k, v in os.environ.items() if k not in ("TUNER_VLLM_PYTHON", "TUNER_DB_URL")}
    env |= {
        "PYTHONPATH": str(REPO),
        "TUNER_HOME": str(tmp_path / "home"),
        "TUNER_SERVER_MODULE": "tuner.testing.fake_server",
        "TUNER_SERVER_VERSION": "0.32.0",
        "TUNER_FAKE_STARTUP_S": "0.1",
        "TUNER_FAKE_REGIME": regime,
        "COLUMNS": "200",
        **env_extra,
    }
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    (tmp_path / "spec.toml").write_text(SPEC.format(trials=trials, workload=workload))
    args = ["run", "spec.toml", "--storage", url]
    run = subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert processes_mentioning(str(tmp_path)) == []
    row = Repository(make_engine(url)).get_study("planned")
    assert row is not None
    return {"out": run.stdout + run.stderr, "plan": row.spec["plan_record"], "url": url}


def test_a_frontend_bound_server_gets_stream_interval_and_the_study_finds_it(
    tmp_path: Path,
) -> None:
    got = _study(tmp_path, "frontend", FRONTEND, 5)
    plan = got["plan"]
    assert plan["diagnosis"]["regime"] == "frontend-bound", plan
    knobs = [k["knob"] for k in plan["knobs"]]
    assert knobs[0] == "stream_interval"
    skipped = dict(plan["skipped"])
    assert "async_scheduling" in skipped  # the CPU build turns it off
    assert any("enable_prefix_caching" in k and "do not move" in v for k, v in skipped.items())
    assert "stream_interval" in plan["kept"] and plan["effects"]["stream_interval"] > 1.5
    out = got["out"]
    assert "diagnosis frontend-bound at 64 streams: API server at" in out
    # Printed after the defaults' trial, before the first screening trial starts.
    assert out.index("plan screening stream_interval") < out.index("trial 2/5")
    assert "screened (the recipe x" in out and "each knob's share: stream_interval x" in out
    # The recipe (trial 2) already holds the simulated best: grouped streams. Larger batches
    # are not in it: the CPU build's cap is 128 sequences, above every candidate (4-64) and
    # above the 64 requests the defaults ran at once.
    assert "trial 2/5 #1: gpu_memory_utilization=0.1,stream_interval=8" in out
    assert "max_num_seqs" not in knobs and "of 128 on cpu" in skipped["max_num_seqs"]
    best = rank(Repository(make_engine(got["url"])), "planned", Objective.THROUGHPUT)[0]
    assert best.config.extra.get("stream_interval") in (4, 8), best
    shown = subprocess.run(
        [sys.executable, "-m", "tuner", "best", "planned", "--storage", got["url"]],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "where tuner looked (the lever plan):" in shown.stdout, shown.stdout + shown.stderr
    assert "diagnosis: frontend-bound" in shown.stdout
    # The API and the study's page show the same plan.
    with TestClient(create_app(ApiSettings(storage=got["url"]))) as client:
        api = client.get("/v1/studies/planned").json()
        page = client.get("/ui/studies/planned").text
    assert api["plan"]["diagnosis"]["regime"] == "frontend-bound"
    assert api["plan"]["kept"] == plan["kept"]
    assert "Bottleneck and lever plan: frontend-bound" in page
    assert "screening stream_interval" in page


def test_a_kv_bound_server_gets_another_plan(tmp_path: Path) -> None:
    plan = _study(tmp_path, "kv", KV, 2, TUNER_FAKE_KV_SCALE=KV_SCALE)["plan"]
    assert plan["diagnosis"]["regime"] == "kv-cache-bound", plan
    knobs = [k["knob"] for k in plan["knobs"]]
    assert "stream_interval" not in knobs and "gpu_memory_utilization" in knobs
    assert plan["diagnosis"]["figures"]["preemptions"] > 0
