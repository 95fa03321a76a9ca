"""Searching any `vllm serve` flag, through the whole command on the fake server (compose's
TUNER_SERVER_MODULE seam, which reads the shipped flag list of TUNER_SERVER_VERSION): a
misspelt flag is refused before anything starts, a real one reaches vLLM's argv exactly once,
and the recommendation's `vllm serve` line carries it, with the tradeoff in words."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.studykit import processes_mentioning
from tuner.db.migrate import upgrade
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import Estimate, Provenance, ServingConfig
from tuner.load.workloads import get_workload
from tuner.results.recommend import Recommendation, recommendation, tradeoffs
from tuner.scoring.objectives import objective_values
from tuner.testing.fake_runner import FakeRunner

REPO = Path(__file__).parents[2]
SPEC = """\
[study]
name = "anyflag"
model = "tiny-ernie"
gpu = "cpu"
workload = "smoke"
objective = "throughput"
trials = 2

[workload]
requests_per_window = 8
warmup_requests = 2
concurrency = 4
output_tokens = 8
windows = 2

[space]
params = []

[[enqueue]]
stream-interval = 8
kv_cache_memory_bytes = 268435456

[runner]
startup_timeout_s = 30
{runner}

[confirm]
launches = 0
"""


def _tuner(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TUNER_VLLM_PYTHON",)}
    env |= {
        "PYTHONPATH": str(REPO),
        "TUNER_DB_URL": f"sqlite:///{tmp_path / 'tuner.db'}",
        "TUNER_HOME": str(tmp_path / "home"),
        "TUNER_SERVER_MODULE": "tuner.testing.fake_server",
        "TUNER_SERVER_VERSION": "0.32.0",
        "TUNER_FAKE_STARTUP_S": "0.1",
        "COLUMNS": "200",
    }
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_misspelt_flag_is_refused_before_anything_starts(tmp_path: Path) -> None:
    run = _tuner(
        tmp_path,
        *("run", "--model", "tiny-ernie", "--gpu", "cpu", "--workload", "smoke"),
        *("--trials", "2", "--confirm-launches", "0", "--search", "stream_intervall=1,8"),
    )
    assert run.returncode == 2, run.stdout + run.stderr
    said = " ".join((run.stdout + run.stderr).split())
    assert "vLLM 0.32.0 has no flag 'stream_intervall'" in said
    assert "did you mean --stream-interval" in said
    # Nothing was written or launched: no database, no model directory, no server log.
    assert not (tmp_path / "tuner.db").exists()
    assert not (tmp_path / "home" / "models").exists() and not (tmp_path / ".tuner").exists()


def test_a_flag_given_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(
        SPEC.format(runner='extra_args = ["--stream-interval", "4"]')
    )
    run = _tuner(tmp_path, "run", "spec.toml", "--search", "stream_interval=8")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "vLLM would get it twice" in " ".join((run.stdout + run.stderr).split())
    assert not (tmp_path / "tuner.db").exists()


def test_a_study_searches_flags_beyond_the_typed_knobs(tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(SPEC.format(runner=""))
    run = _tuner(
        tmp_path,
        *("run", "spec.toml", "--search", "stream_interval=8"),
        *("--search", "kv-cache-memory-bytes=268435456"),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "kv_cache_memory_bytes=268435456,stream_interval=8" in run.stdout
    listed = _tuner(tmp_path, "trials", "anyflag", "--json")
    assert listed.returncode == 0, listed.stderr
    baseline, tried = json.loads(listed.stdout)
    assert baseline["config"]["extra"] == {} and baseline["status"] == "complete"
    assert tried["config"]["extra"] == {"kv_cache_memory_bytes": 268435456, "stream_interval": 8}
    assert tried["config_label"].endswith("kv_cache_memory_bytes=268435456,stream_interval=8")
    args = tried["server"]["argv"]
    assert args.count("--stream-interval") == 1 and args[args.index("--stream-interval") + 1] == "8"
    assert args.count("--kv-cache-memory-bytes") == 1
    assert "--stream-interval" not in baseline["server"]["argv"]
    # The stored row reads back as the same configuration.
    repo = Repository(make_engine(f"sqlite:///{tmp_path / 'tuner.db'}"))
    rows = repo.list_trials("anyflag", limit=None)
    assert rows[1].config.extra == {"kv_cache_memory_bytes": 268435456, "stream_interval": 8}
    best = _tuner(tmp_path, "best", "anyflag", "--json")
    assert best.returncode == 0, best.stderr
    rec = json.loads(best.stdout)["recommendation"]
    if rec["trial_number"] == 1:
        assert "--stream-interval 8" in rec["serve_command"]
    assert processes_mentioning(str(tmp_path)) == []


def _estimate(value: float) -> Estimate:
    return Estimate(median=value, low=value * 0.95, high=value * 1.05, values=(value,) * 3)


def test_the_recommendation_carries_the_flag_and_says_what_it_costs(tmp_path: Path) -> None:
    """A measured study where --stream-interval 8 doubled throughput and quintupled P99 ITL,
    as on the H200: the serve line carries the flag, and the tradeoff is stated."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    repo = Repository(make_engine(url))
    repo.create_study(
        name="si",
        optuna_study_name="si",
        model="tiny-ernie",
        model_source=None,
        gpu="cpu",
        workload="smoke",
        objective="throughput",
        slo={},
        spec={},
        emulated=False,
        vllm_version="0.26.0",
        n_trials_requested=2,
        status="finished",
    )
    shape = get_workload("smoke").replace(requests_per_window=8, windows=3)
    chosen = ServingConfig(extra={"stream_interval": 8, "quantization": "fp8"})
    for number, (config, thr, itl) in enumerate(
        [(ServingConfig(), 10_000.0, 25.0), (chosen, 20_000.0, 130.0)]
    ):
        result = FakeRunner().run(config, shape)
        metrics = {
            **result.metrics,
            "output_throughput": _estimate(thr),
            "itl_p99_ms": _estimate(itl),
        }
        result = dataclasses.replace(
            result,
            metrics=metrics,
            provenance=Provenance(
                gpu_name="h200",
                gpu_uuid=None,
                driver_version=None,
                vllm_version="0.26.0",
                model="tiny-ernie",
                workload="smoke",
            ),
        )
        trial = repo.start_trial("si", number, config, is_baseline=number == 0)
        repo.finish_trial(trial, result, 1.0, objective_values(result, memory_ceiling_gib=64.0))
    rec = recommendation(repo, "si")
    assert rec is not None and rec.trial_number == 1
    assert rec.serve_command.endswith("--quantization fp8 --stream-interval 8")
    text = rec.render()
    assert "tradeoff: stream_interval=8 streams several tokens per chunk" in text
    assert "130 ms against the defaults' 25 ms (x5.2), for x2.00 the defaults' output tok/s" in text
    assert "add --slo itl_p99=50ms" in text
    assert "changes outputs: quantization=fp8" in text


@pytest.mark.parametrize(
    ("itl", "slo", "expected"),
    [
        (24.0, {}, None),  # within 25 %: nothing to say
        (130.0, {"itl_p99_ms": 150.0}, "within the study's ITL SLO of 150 ms"),
        (130.0, {"itl_p99_ms": 50.0}, "above the study's ITL SLO of 50 ms"),
    ],
)
def test_the_tradeoff_sentence(itl: float, slo: dict[str, float], expected: str | None) -> None:
    base = {"itl_p99_ms": _estimate(20.0), "output_throughput": _estimate(100.0)}
    mine = {"itl_p99_ms": _estimate(itl), "output_throughput": _estimate(150.0)}
    said = tradeoffs(ServingConfig(max_num_seqs=512), mine, base, slo)
    if expected is None:
        assert said == []
    else:
        (sentence,) = said
        assert sentence.startswith("this configuration streams less smoothly")
        assert expected in sentence
    assert Recommendation.__dataclass_fields__["tradeoffs"].default == ()
