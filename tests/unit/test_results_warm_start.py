"""The cold-against-warm start report (docs/results/warm-start-h200.md) against the JSON that
bench/bench_warm_start.py wrote on the H200 and on the CPU."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from bench.tables.splice import count_blocks, stale_blocks
from bench.tables.starts import starts_table

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "studies" / "results" / "warm-start-h200" / "warm-start-h200.json"
CPU = ROOT / "bench" / "results" / "warm-start-cpu.json"
REPORT = ROOT / "docs" / "results" / "warm-start-h200.md"


def test_the_table_is_derived_from_the_bench_output() -> None:
    text = REPORT.read_text()
    assert count_blocks(text) == 1
    assert stale_blocks(text, ROOT) == []


@pytest.mark.parametrize("path", [H200, CPU], ids=["h200", "cpu"])
def test_the_medians_are_the_medians_of_the_starts(path: Path) -> None:
    run = json.loads(path.read_text())
    assert run["cold_median_s"] == statistics.median(run["cold_s"])
    assert run["warm_median_s"] == statistics.median(run["warm_s"])
    assert run["warm_over_cold"] == pytest.approx(run["warm_median_s"] / run["cold_median_s"])


def test_on_the_h200_warm_meets_the_target_with_the_ranges_apart() -> None:
    run = json.loads(H200.read_text())
    assert run["gpu"] == "NVIDIA H200" and run["vllm_version"] == "0.26.0"
    assert len(run["cold_s"]) == len(run["warm_s"]) == 2
    assert max(run["warm_s"]) < min(run["cold_s"])  # every warm start beat every cold one
    assert run["warm_over_cold"] <= 0.5  # the target: warm at least 50 % faster


def test_a_run_without_starts_is_refused() -> None:
    with pytest.raises(ValueError, match="cold and warm"):
        starts_table([{"gpu": "x", "cold_s": [], "warm_s": [1.0], "cold_median_s": 1.0,
                       "warm_median_s": 1.0, "vllm_version": "0", "model": "m"}])  # fmt: skip
