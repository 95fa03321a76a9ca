"""The committed H200 results: every table of the report is what the datasets say, the prose's
headline numbers too, and the datasets carry real H200 provenance."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench.tables.splice import count_blocks, splice, stale_blocks
from tuner.abtest.claims import load_claims
from tuner.abtest.claims.rejudge import rejudge
from tuner.errors import UsageError
from tuner.results.export import from_jsonl

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "ernie-0.3b-h200"
REPORT = ROOT / "docs" / "results" / "ernie-0.3b-h200.md"
CLAIMS = ROOT / "studies" / "claims" / "seed-claims.toml"
CPU = ROOT / "studies" / "results" / "claims-cpu-vllm-0.32.0"
BACKENDS = {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"}


def _load(name: str) -> list[dict[str, Any]]:
    return from_jsonl((DATA / name).read_text())


def test_every_report_table_is_derived_from_the_datasets() -> None:
    text = REPORT.read_text()
    assert count_blocks(text) >= 6
    assert stale_blocks(text, ROOT) == []


def test_a_stale_table_is_detected(tmp_path: Path) -> None:
    text = REPORT.read_text().replace("| 6512 [6394, 6893] |", "| 7000 [6394, 6893] |")
    stale = stale_blocks(text, ROOT)
    assert stale == ["trials studies/results/ernie-0.3b-h200/trials.jsonl search"]
    assert stale_blocks(splice(text, ROOT), ROOT) == []


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}"


def test_the_headline_numbers_are_the_confirmation_and_the_claims() -> None:
    text = " ".join(REPORT.read_text().split())
    (confirmation,) = _load("confirmation.jsonl")
    assert confirmation["kind"] == "confirmation" and confirmation["launches"] == {"a": 3, "b": 3}
    metrics = {m["metric"]: m for m in confirmation["metrics"]}
    thr = metrics["output_throughput"]
    assert thr["verdict"] == "no significant difference"
    interval = f"{_pct(thr['ratio'])} % [{_pct(thr['low'])}, {_pct(thr['high'])}]"
    assert f"throughput **{interval}**" in text
    ttft = metrics["ttft_p50_ms"]
    assert ttft["verdict"] == "worse"
    assert f"{_pct(ttft['ratio'])} % [{_pct(ttft['low'])}, {_pct(ttft['high'])}]" in text
    claims = {r["claim"]["id"]: r for r in _load("claims.jsonl")}
    for cid in ("fa2-memory", "fa2-throughput", "fa2-latency", "fa2-ttft"):
        assert claims[cid]["claim"]["verdict"] == "refuted"
    fa2 = next(m for m in claims["fa2-throughput"]["metrics"] if m["metric"] == "output_throughput")
    assert f"{_pct(fa2['ratio'])} % [{_pct(fa2['low'])}, {_pct(fa2['high'])}]" in text


def test_trials_carry_real_h200_provenance_and_the_backend_that_ran() -> None:
    records = _load("trials.jsonl")
    complete = [r for r in records if r["status"] == "complete"]
    assert len(complete) >= 16
    assert {r["phase"] for r in complete} == {"search", "confirm"}
    for r in complete:
        prov = r["provenance"]
        assert prov["vllm_version"] == "0.26.0"
        assert prov["gpu_name"] == "NVIDIA H200" and prov["emulated"] is False
        assert r["effective_backend"] in BACKENDS
        # Memory was read on the GPU the trial ran on (and only there, since session 2).
        assert prov["gpu_uuid"] in r["memory"]["gpu_peak_bytes"]
        m = r["metrics"]["output_throughput"]
        assert m["low"] <= m["median"] <= m["high"] and len(m["values"]) == 3
    baseline = next(r for r in records if r["is_baseline"] and r["phase"] == "search")
    assert baseline["config"] == {} and baseline["score"] == 1.0
    oom = [r for r in records if r["failure_class"] == "memory_exceeded"]
    assert [r["effective_backend"] for r in oom] == ["FLEX_ATTENTION"]


@pytest.mark.parametrize("name", ["emulated-a10g-trials.jsonl"])
def test_emulated_results_are_labelled_and_within_the_emulated_budget(name: str) -> None:
    records = _load(name)
    assert records
    for r in records:
        assert r["provenance"]["emulated"] is True
        assert "emulating NVIDIA A10G" in r["provenance"]["gpu_name"]
        # Every launch reserved only the A10G's share of the H200 (plus vLLM's overhead).
        assert r["objective_values"][1] < 24.0


def _times(m: dict[str, Any]) -> str:
    return f"×{m['ratio']:.3f} [{m['low']:.3f}, {m['high']:.3f}]"


def test_every_stored_claim_is_a_real_h200_measurement() -> None:
    claims = {c.id: c for c in load_claims(CLAIMS)}
    records = _load("claims.jsonl")
    stored = {r["claim"]["id"]: r for r in records}
    assert len(stored) == len(records) == 10 and set(stored) <= set(claims)
    for cid, r in stored.items():
        assert r["provenance"]["vllm_version"] == "0.26.0"
        assert r["provenance"]["gpu_name"] == "NVIDIA H200"
        assert r["launches"] == {"a": 3, "b": 3}
        # Verdicts of the claims file of their time; the report re-judges them.
        assert r["claim"]["verdict"] in {"confirmed", "refuted", "inconclusive"}
        metric = next(m for m in r["metrics"] if m["metric"] == claims[cid].metric)
        assert metric["low"] <= metric["ratio"] <= metric["high"]


def test_the_claims_table_is_rejudged_with_the_articles_figures() -> None:
    """The report's claims table is re-derived from the committed comparisons and the claims
    file (test_every_report_table_is_derived_from_the_datasets keeps it so); its summary quotes
    the verdicts it gives."""
    text = REPORT.read_text()
    data = DATA.relative_to(ROOT)
    marker = f"<!-- table: claims {data}/claims.jsonl studies/claims/seed-claims.toml -->"
    assert marker in text
    claims = load_claims(CLAIMS)
    verdicts = {v["id"]: v for v in rejudge(_load("claims.jsonl"), claims)}
    assert set(verdicts) == {c.id for c in claims}
    # The second article's ranges per length: 2k too wide to tell, 8k and 16k consistent.
    assert [verdicts[f"fa2-context-{n}"]["verdict"] for n in ("2k", "8k", "16k")] == [
        "inconclusive",
        "consistent",
        "consistent",
    ]
    assert verdicts["enable-flash-attn-flag"]["verdict"] == "refuted"
    assert verdicts["custom-all-reduce-required"]["verdict"] == "refuted"
    table = text.split(marker)[1].split("<!-- /table -->")[0]
    for c in claims:
        row = next(line for line in table.splitlines() if line.startswith(f"| {c.id} |"))
        assert c.figure in row and f"**{verdicts[c.id]['verdict']}**" in row, c.id
    summary = " ".join(text.split("## What ran, and where")[0].split())
    counts = Counter(v["verdict"] for v in verdicts.values())
    wanted = ", ".join(f"{n} {verdict}" for verdict, n in counts.items() if n)
    assert sorted(wanted.split(", ")) == sorted(_counted(summary).split(", ")), summary
    records = {r["claim"]["id"]: r for r in _load("claims.jsonl")}
    by_id = {c.id: c for c in claims}
    for cid in ("prefix-caching-throughput", "utilization-p99", "fa2-context-2k",
                "fa2-context-8k", "fa2-context-16k"):  # fmt: skip
        metric = next(m for m in records[cid]["metrics"] if m["metric"] == by_id[cid].metric)
        assert _times(metric) in summary, cid
    # The article's "grows with the context": the FlashAttention-2 gain rises with the prompt.
    gain = [
        next(m for m in records[c]["metrics"] if m["metric"] == "output_throughput")["ratio"]
        for c in ("fa2-context-2k", "fa2-context-8k", "fa2-context-16k")
    ]
    assert gain == sorted(gain)


def _counted(summary: str) -> str:
    """The "4 consistent, 2 smaller, ..." list of the summary."""
    m = re.search(r"\(no new run\): ([^.]*)\.", summary)
    assert m, summary
    return m.group(1).replace(", and ", ", ")


def test_the_cpu_answers_are_the_committed_verify_claims_output() -> None:
    records = json.loads((CPU / "verify-claims.json").read_text())
    verdicts = {r["id"]: r["verdict"] for r in records}
    assert verdicts == {
        "enable-flash-attn-flag": "refuted",
        "custom-all-reduce-required": "refuted",
        "enable-flash-attn-removed": "confirmed",
        "flash-attn-default": "not applicable",
    }
    starts = next(r for r in records if r["id"] == "custom-all-reduce-required")
    assert "with it, 1 of 1 launch(es) started" in starts["reason"]
    with_flag = (CPU / "logs" / "with-disable-custom-all-reduce.log").read_text()
    assert "'disable_custom_all_reduce': True" in with_flag  # the flag reached vLLM
    assert "Application startup complete" in with_flag
    without = (CPU / "logs" / "without-flag.log").read_text()
    assert "'disable_custom_all_reduce'" not in without.split("non-default args:")[1].split("\n")[0]


def test_comparison_tables_follow_the_order_the_marker_gives() -> None:
    data = "studies/results/ernie-0.3b-h200/claims.jsonl"
    fwd = splice(f"<!-- table: comparison {data} 8,10 -->\n<!-- /table -->\n", ROOT)
    rev = splice(f"<!-- table: comparison {data} 10,8 -->\n<!-- /table -->\n", ROOT)
    assert fwd.index("max_model_len=2560") < fwd.index("max_model_len=8704")
    assert rev.index("max_model_len=8704") < rev.index("max_model_len=2560")


def test_a_marker_naming_a_missing_comparison_says_which_ids_exist() -> None:
    data = "studies/results/ernie-0.3b-h200/claims.jsonl"
    with pytest.raises(UsageError, match=r"no comparison \[99\]") as err:
        splice(f"<!-- table: comparison {data} 1,99 -->\n<!-- /table -->\n", ROOT)
    assert "1, 2" in (err.value.hint or "")


def test_a_verdicts_marker_needs_its_claims_file() -> None:
    data = "studies/results/claims-cpu-vllm-0.32.0/verify-claims.json"
    with pytest.raises(UsageError, match="names no claims file"):
        splice(f"<!-- table: verdicts {data} -->\n<!-- /table -->\n", ROOT)
    table = splice(
        f"<!-- table: verdicts {data} studies/claims/seed-claims.toml -->\n<!-- /table -->\n", ROOT
    )
    assert "| custom-all-reduce-required | ernie-fa2: --disable-custom-all-reduce" in table
