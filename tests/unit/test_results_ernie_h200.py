"""The committed H200 results: the report's table is exactly what the dataset says."""

from __future__ import annotations

from pathlib import Path

from tuner.export import from_jsonl, markdown_table

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "ernie-0.3b-h200" / "trials.jsonl"
REPORT = ROOT / "docs" / "results" / "ernie-0.3b-h200-chat.md"


def test_report_table_is_derived_from_the_dataset() -> None:
    records = from_jsonl(DATA.read_text())
    report = REPORT.read_text()
    table = report.split("<!-- trials-table -->\n", 1)[1].split("<!-- /trials-table -->", 1)[0]
    assert table == markdown_table(records)


def test_dataset_carries_real_h200_provenance() -> None:
    records = from_jsonl(DATA.read_text())
    complete = [r for r in records if r["status"] == "complete"]
    assert len(complete) >= 10
    for r in complete:
        assert r["provenance"]["vllm_version"] == "0.26.0"
        assert r["provenance"]["gpu_name"] == "NVIDIA H200"
        assert r["provenance"]["emulated"] is False
        assert r["effective_backend"] in {
            "FLASH_ATTN",
            "FLASHINFER",
            "TRITON_ATTN",
            "FLEX_ATTENTION",
        }
        assert r["memory"]["gpu_peak_bytes"], "GPU memory measured through NVML"
        m = r["metrics"]["output_throughput"]
        assert m["low"] <= m["median"] <= m["high"] and len(m["values"]) == 3
    baseline = next(r for r in records if r["is_baseline"])
    assert baseline["config"] == {} and baseline["score"] == 1.0
