"""A decision's design, stop and GPU-minutes where comparisons are read: the report's
provenance table, the Markdown dataset and the API's comparison."""

from __future__ import annotations

from api.schemas import ComparisonOut
from tuner.db.rows import ComparisonRow
from tuner.domain import ServingConfig
from tuner.results.comparisons import comparisons_markdown
from tuner.results.report.compare import comparison_report, decision_facts

RESULTS = {
    "kind": "compare",
    "confidence": 0.95,
    "a_label": "defaults",
    "b_label": "B",
    "launches": {"a": 4, "b": 4},
    "metrics": [],
    "decision": {
        "kind": "sequential",
        "first": 3,
        "max_launches": 6,
        "confidence": 0.95,
        "per_look_confidence": 0.978,
        "min_effect": 0.05,
        "boundary": "pocock",
        "stopped": "significant",
        "launches": {"a": 4, "b": 4},
        "half_width": 0.09,
        "method": "pooled",
        "df": 17.0,
    },
    "noise": {"launches": 12},
    "gpu_minutes": 15.64,
}


def _row(results: object) -> ComparisonRow:
    return ComparisonRow(
        1, 0.0, "ernie-0.3b", "h200", "throughput-256", ServingConfig(), ServingConfig(),
        4, results, {"overall": "better"}, None, None,
    )  # fmt: skip


def test_the_report_states_the_design_the_stop_and_the_cost() -> None:
    report = comparison_report(_row(RESULTS))
    assert report.provenance["GPU-minutes"] == "15.6"
    design = report.provenance["design"]
    assert design == "sequential, 3 to 6 launches a side, stop at a half-width of 5 %"
    assert report.provenance["stopped"] == "significant after 4 + 4 launches"
    assert report.provenance["interval"] == "pooled"
    assert report.unparsed == ""  # decision, noise and gpu_minutes are placed, not dumped
    fixed = {**RESULTS, "decision": {**RESULTS["decision"], "kind": "fixed"}}  # type: ignore[dict-item]
    assert decision_facts(fixed)["design"] == "fixed, 3 launches a side"
    assert decision_facts({}) == {}  # a comparison stored before decisions were recorded


def test_the_api_and_the_markdown_carry_the_gpu_minutes() -> None:
    assert ComparisonOut.of(_row(RESULTS)).gpu_minutes == 15.64
    assert ComparisonOut.of(_row({"kind": "compare"})).gpu_minutes is None
    record = {
        "id": 1, "kind": "compare", "study": None, "model": "m", "gpu": "g", "workload": "w",
        "a_label": "A", "b_label": "B", "verdicts": {"overall": "better"}, "metrics": [],
        "gpu_minutes": 15.64,
    }  # fmt: skip
    assert "overall better, 15.6 GPU-minutes" in comparisons_markdown([record])
