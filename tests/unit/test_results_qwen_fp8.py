"""The Qwen2.5-14B FP8 report (docs/results/qwen2.5-14b-rtx4090-fp8.md) against its committed
data: the table re-derived, and the KV-cache figures the prose gives what the dataset and
vLLM's own start-up logs say."""

from __future__ import annotations

import re
from pathlib import Path

from bench.tables.splice import count_blocks, stale_blocks
from tuner.catalog.models import MODELS
from tuner.results.export import from_jsonl

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "qwen2.5-14b-rtx4090-fp8"
REPORT = ROOT / "docs" / "results" / "qwen2.5-14b-rtx4090-fp8.md"
GIB = 1024**3


def _trials() -> dict[int, dict]:  # type: ignore[type-arg]
    return {r["number"]: r for r in from_jsonl((DATA / "trials.jsonl").read_text())}


def _served_log() -> str:
    return (DATA / "logs" / "tuner-1b33c5980e46.log").read_text()


def test_the_table_is_derived_from_the_dataset() -> None:
    text = REPORT.read_text()
    assert count_blocks(text) == 1
    assert stale_blocks(text, ROOT) == []


def test_every_result_is_labelled_quantized_and_emulated() -> None:
    for row in _trials().values():
        assert row["config"]["quantization"] == "fp8"
        if row["provenance"]:
            assert row["provenance"]["emulated"] is True
            assert "emulating NVIDIA GeForce RTX 4090" in row["provenance"]["gpu_name"]
            assert row["provenance"]["vllm_version"] == "0.26.0"
        assert row["score"] is None  # the defaults never started: nothing to score against


def test_the_defaults_fail_for_kv_cache_and_vllm_names_the_longest_context() -> None:
    trials = _trials()
    defaults, served = trials[0], trials[1]
    assert defaults["is_baseline"] and defaults["failure_class"] == "kv_cache_insufficient"
    longest = int(re.search(r"maximum model length is (\d+)", defaults["failure_detail"])[1])
    assert longest == served["kv_cache_tokens"] == 21680
    assert "GPU KV cache size: 21,680 tokens" in _served_log()


def test_the_kv_cache_figures_follow_from_the_model_and_the_log() -> None:
    per_token = MODELS["qwen2.5-14b"].kv_bytes_per_token(2)  # bf16 KV cache
    assert per_token == 192 * 1024
    log = _served_log()
    room = float(re.search(r"Available KV cache memory: ([\d.]+) GiB", log)[1])
    assert abs(21680 * per_token / GIB - room) < 0.01
    fit = int(re.search(r"--kv-cache-memory=(\d+)` \(2\.63 GiB\) to fit", log)[1])
    assert fit // per_token == 14370
    assert "Graph capturing finished in 10 secs, took 1.19 GiB" in log
    assert "Model loading took 16.15 GiB" in log


def test_the_served_trial_went_above_the_emulated_memory_as_reported() -> None:
    served = _trials()[1]
    (peak,) = served["memory"]["gpu_peak_bytes"].values()
    (idle,) = served["memory"]["gpu_baseline_bytes"].values()
    assert round(peak / GIB, 2) == 25.32 and round(idle / GIB, 2) == 0.60
    assert (peak - idle) / GIB > 24.0  # CUDA graphs outside the budget: the report's catch
    thr = served["metrics"]["output_throughput"]
    assert (round(thr["median"]), round(thr["low"]), round(thr["high"])) == (2038, 2022, 2065)
    assert len(thr["values"]) == 3


def test_the_dataset_is_what_the_committed_database_says(tmp_path: Path) -> None:
    import json
    import shutil

    from tests.studykit import make_repo
    from tuner.results.export import study_records

    db = tmp_path / "qwen.db"  # a copy: opening migrates, and the committed file stays as it is
    shutil.copyfile(DATA / "qwen-fp8-h200.db", db)
    records = study_records(make_repo(f"sqlite:///{db}"), "qwen2.5-14b-rtx4090-fp8")
    fresh = {r["number"]: json.loads(json.dumps(r)) for r in records}
    assert fresh == _trials()


def test_tuner_size_warns_as_tuner_best_that_the_emulated_peak_may_not_start(
    tmp_path: Path,
) -> None:
    """`tuner best` warns that the emulated RTX 4090's peak (25.32 GiB) is above its 24 GiB;
    `tuner size` sized two GPUs of it without the warning."""
    import shutil

    from typer.testing import CliRunner

    from tests.studykit import make_repo
    from tuner.cli.app import app

    db = tmp_path / "qwen.db"  # a copy: opening migrates, and the committed file stays as it is
    shutil.copyfile(DATA / "qwen-fp8-h200.db", db)
    url = f"sqlite:///{db}"
    make_repo(url)
    size = ["size", "--model", "qwen2.5-14b", "--rate", "10", "--emulated", "--gpu-price", "1"]
    sized = CliRunner().invoke(app, [*size, "--storage", url])
    assert sized.exit_code == 0, sized.output
    text = " ".join(sized.stdout.split())
    assert "GPUs for 10 req/s: 2" in text
    assert "the peak GPU memory (25.32 GiB) is above the emulated GPU's 24.0 GiB" in text
