"""The seed claims judged again from the committed H200 comparisons (no launch): the second
article's ranges per context length, absolute figures as differences in their unit, flags
answered from vLLM 0.26.0's own flag list, starts from every stored launch, and what is not
measured yet or not measurable, each saying what it needs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tuner.abtest.claims import load_claims
from tuner.abtest.claims.rejudge import rejudge, stored_launches, where_of
from tuner.results.export import from_jsonl

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = load_claims(ROOT / "studies" / "claims" / "seed-claims.toml")
RECORDS = from_jsonl(
    (ROOT / "studies" / "results" / "ernie-0.3b-h200" / "claims.jsonl").read_text()
)

H200 = {
    "fa2-memory": "smaller",
    "fa2-memory-freed": "smaller",
    "fa2-throughput": "no effect",
    "fa2-latency": "no effect",
    "fa2-ttft": "no effect",
    "fa2-streaming": "not measured yet",
    "enable-flash-attn-flag": "refuted",
    "custom-all-reduce-required": "refuted",
    "max-model-len-memory": "consistent",
    "utilization-p99": "no effect",
    "prefix-caching-throughput": "no effect",
    "fa2-context-2k": "inconclusive",
    "fa2-context-8k": "consistent",
    "fa2-context-16k": "consistent",
    "flash-attn-ttft": "consistent",
    "enable-flash-attn-removed": "confirmed",
    "flash-attn-default": "confirmed",
    "attention-intermediate-memory": "not measurable",
}


class _Flags:
    def __init__(self, *names: str) -> None:
        self.names = names

    def get(self, name: str) -> object | None:
        return object() if name in self.names else None


def _by_id(records: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, dict[str, Any]]:
    flags = kw.pop("flags", lambda version: _Flags("--disable-custom-all-reduce"))
    return {v["id"]: v for v in rejudge(records or RECORDS, CLAIMS, flags=flags, **kw)}


def test_the_h200_data_judged_with_the_articles_figures() -> None:
    verdicts = _by_id()
    assert list(verdicts) == [c.id for c in CLAIMS]
    assert {cid: v["verdict"] for cid, v in verdicts.items()} == H200
    two_k = verdicts["fa2-context-2k"]
    assert two_k["reason"] == (
        "the interval is too wide to tell: ×1.101 [0.904, 1.341] holds both no change and the "
        "claimed ×1.10 to 1.20"
    )
    assert two_k["setting"] == (
        "measured on ernie-0.3b / NVIDIA H200 (vLLM 0.26.0); the article's setting was "
        "Qwen 14B / RTX 4090 (24 GB)"
    )
    assert two_k["comparison_id"] == 8 and two_k["claimed"]["low"] == 1.1
    # An absolute figure is a difference in its unit.
    assert verdicts["max-model-len-memory"]["measured"]["text"] == "-67 MB [-122, -12]"
    assert verdicts["fa2-memory-freed"]["measured"]["text"] == "-134 MB [-189, -79]"
    assert verdicts["fa2-ttft"]["measured"]["text"] == "+5.4 ms [-13, +24]"
    # Claims sharing launches share the comparisons stored for them (the latest of equals).
    assert verdicts["fa2-memory-freed"]["comparison_id"] == 4
    assert verdicts["fa2-memory"]["comparison_id"] == 4
    assert verdicts["flash-attn-ttft"]["comparison_id"] == 8


def test_what_is_not_measured_or_measurable_says_what_it_needs() -> None:
    verdicts = _by_id()
    streaming = verdicts["fa2-streaming"]
    assert streaming["reason"] == (
        "needs 2 configurations × 3 fresh launches on seed-bench-long-replies here "
        "(tuner verify-claims --only fa2-streaming)"
    )
    assert streaming["measured"] is None and "comparison_id" not in streaming
    memory = verdicts["attention-intermediate-memory"]
    assert "peak activation" in memory["reason"]
    assert memory["reason"].startswith("vLLM reserves GPU memory up to --gpu-memory-utilization")


def test_flags_are_answered_from_the_versions_own_flag_list() -> None:
    assert where_of(RECORDS).vllm == "0.26.0"
    asked: list[str] = []

    def old(version: str) -> _Flags:
        asked.append(version)
        return _Flags("--enable-flash-attn")

    verdicts = _by_id(flags=old)
    assert asked == ["0.26.0", "0.26.0"]
    assert verdicts["enable-flash-attn-flag"]["verdict"] == "confirmed"
    assert verdicts["enable-flash-attn-removed"]["verdict"] == "refuted"
    unknown = _by_id(flags=lambda version: None)["enable-flash-attn-flag"]
    assert unknown["verdict"] == "not measured yet" and "0.26.0" in unknown["reason"]
    flag = _by_id()["enable-flash-attn-flag"]
    assert flag["setting"] == "answered for vLLM 0.26.0; the article used vLLM 0.6.3"


def test_the_shipped_flag_list_of_vllm_0_26_has_no_enable_flash_attn() -> None:
    flags = pytest.importorskip("tuner.vllm.flags")
    catalog = flags.shipped("0.26.0")
    assert catalog is not None and catalog.get("--enable-flash-attn") is None
    assert catalog.get("--disable-custom-all-reduce") is not None
    verdicts = {v["id"]: v["verdict"] for v in rejudge(RECORDS, CLAIMS)}
    assert verdicts["enable-flash-attn-flag"] == "refuted"
    assert verdicts["enable-flash-attn-removed"] == "confirmed"


def test_stored_launches_count_each_launch_once() -> None:
    facts = stored_launches(RECORDS, "--disable-custom-all-reduce")
    assert sum(f.count for f in facts) == 39  # 13 arms × 3 launches; shared arms once
    assert all(f.started and not f.with_flag for f in facts)
    fa2 = [f for f in facts if "flash_attn_version=2" in f.label]
    assert sum(f.count for f in fa2) == 12
    backends = {(f.backend, f.flash_attn_version) for f in facts if f.default_backend and f.backend}
    assert backends == {("FLASH_ATTN", 3)}
    starts = _by_id()["custom-all-reduce-required"]
    assert starts["reason"] == (
        "39 of 39 launches of 13 configuration(s) started without --disable-custom-all-reduce, "
        "12 of them with FlashAttention 2"
    )


def test_a_start_that_fails_without_the_flag_and_passes_with_it_confirms() -> None:
    records = copy.deepcopy(RECORDS[:1])
    (r,) = records
    r["launches"] = {"a": 0, "b": 3}
    r["failures"] = {"a": ["start_failed: RuntimeError: custom all-reduce"] * 3, "b": []}
    r["b_config"] = {**r["b_config"], "disable_custom_all_reduce": True}
    starts = _by_id(records)["custom-all-reduce-required"]
    assert starts["verdict"] == "confirmed", starts
    assert starts["reason"].startswith("3 launch(es) failed to start without")


def test_a_claim_measured_again_with_more_launches_reads_the_larger_comparison() -> None:
    again = copy.deepcopy(next(r for r in RECORDS if r["id"] == 8))
    again["id"], again["launches"] = 99, {"a": 6, "b": 6}
    metric = next(m for m in again["metrics"] if m["metric"] == "output_throughput")
    metric.update(ratio=1.15, low=1.11, high=1.19)
    verdict = _by_id([*RECORDS, again])["fa2-context-2k"]
    assert verdict["comparison_id"] == 99 and verdict["verdict"] == "consistent"


def test_records_of_several_settings_are_refused() -> None:
    other = {**RECORDS[0], "gpu": "a10g"}
    with pytest.raises(ValueError, match="one model, GPU and vLLM version"):
        rejudge([RECORDS[0], other], CLAIMS)


def test_a_difference_claim_is_judged_again_at_the_level_it_was_judged_at() -> None:
    """A sequential comparison judges a claim made in a unit ("<= -500 ms") by Welch's interval
    at the per-look level (97.79 % for looks 3 to 6); judged again from the stored record, it
    read the record's overall 95 % and called "consistent" what verify-claims had left
    inconclusive."""
    a, b = [1500.0, 1620.0, 1410.0], [1150.0, 1010.0, 1300.0]  # B - A = -357 ms
    records = copy.deepcopy(RECORDS)
    for record in records:
        for metric in record["metrics"]:
            if metric["metric"] == "ttft_p50_ms":
                metric["a"]["values"], metric["b"]["values"] = list(a), list(b)
    assert _by_id(records)["fa2-ttft"]["verdict"] == "consistent"  # at 95 %: [-655, -58]
    for record in records:
        record["decision"] = {"kind": "sequential", "per_look_confidence": 0.9779}
    assert _by_id(records)["fa2-ttft"]["verdict"] == "inconclusive"  # [-753, +39]
