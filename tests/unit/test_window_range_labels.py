"""A trial's [low, high] is the range over one launch's measurement windows, and is labelled so;
only intervals across launches (comparisons, claims) are called 95 % confidence intervals."""

from __future__ import annotations

from typing import Any

from api.schemas import EstimateOut
from tuner.deploy.local import Measured
from tuner.domain import Estimate
from tuner.results.comparisons import claims_table, comparison_table
from tuner.results.export import markdown_table
from tuner.results.recommend import Recommendation

EST = Estimate(median=100.0, low=90.0, high=110.0, values=(90.0, 100.0, 110.0))


def _no_ci_claim(text: str) -> None:
    assert "95" not in text and "CI" not in text, text
    assert "confidence" not in text.replace("not a confidence interval", ""), text


def test_the_api_estimate_schema_describes_a_range() -> None:
    schema = EstimateOut.model_json_schema()
    _no_ci_claim(schema["description"])
    assert "range" in schema["description"]
    props = schema["properties"]
    assert props["low"]["description"] == "smallest window value"
    assert props["high"]["description"] == "largest window value"


def test_the_trials_table_header_says_range() -> None:
    record: dict[str, Any] = {
        "number": 0,
        "phase": "search",
        "is_baseline": True,
        "status": "complete",
        "failure_class": None,
        "effective_backend": "FLASH_ATTN",
        "config": {},
        "metrics": {"output_throughput": {"median": 100.0, "low": 90.0, "high": 110.0}},
        "objective_values": [100.0, 1.0, 500.0],
        "score": 1.0,
    }
    table = markdown_table([record])
    head = table.splitlines()[0]
    _no_ci_claim(head)
    assert "out tok/s [range]" in head
    assert "| 100 [90, 110] |" in table


def test_the_recommendation_and_launch_texts_say_range() -> None:
    rec = Recommendation(
        study="s",
        trial_number=3,
        is_baseline=False,
        score=1.1,
        flags=("--max-num-seqs", "8"),
        env={},
        serve_command="vllm serve m --max-num-seqs 8",
        metrics={"output_throughput": EST},
        baseline_metrics={"output_throughput": EST},
        memory_gib=1.0,
        baseline_memory_gib=1.0,
        provenance={},
        feasible=True,
    )
    text = rec.render()
    _no_ci_claim(text)
    assert "medians [range] over the measurement windows of one launch" in text
    measured = Measured(
        model="m",
        study="s",
        trial=3,
        flags=(),
        env={},
        vllm_version="0.1",
        gpu="g",
        workload="w",
        objective="balanced",
        source="local store",
        metrics={"output_throughput": EST},
    )
    lines = "\n".join(measured.describe())
    _no_ci_claim(lines)
    assert "medians [range] over the measurement windows of one launch" in lines


def test_intervals_across_launches_keep_their_95_percent_label() -> None:
    side = {"median": 100.0, "values": [99.0, 100.0, 101.0]}
    record = {
        "a_label": "defaults",
        "b_label": "#3",
        "confidence": 0.95,
        "metrics": [
            {
                "metric": "output_throughput",
                "label": "output tok/s",
                "a": side,
                "b": side,
                "ratio": 1.0,
                "low": 0.9,
                "high": 1.1,
                "verdict": "no significant difference",
            }
        ],
    }
    assert "change [95 % CI]" in comparison_table(record).splitlines()[0]
    claim = {"id": "c", "metric": "output_throughput", "claimed_text": "1.41",
             "verdict": "refuted", "reason": "r",
             "measured": {"ratio": 1.02, "low": 0.95, "high": 1.11}}  # fmt: skip
    claimed = {**record, "workload": "w", "claim": claim}
    assert "measured B/A [95 % CI]" in claims_table([claimed]).splitlines()[0]


def test_a_claims_interval_says_its_own_level() -> None:
    """`verify-claims --confidence 0.9` stored 90 % intervals; the Markdown export called them
    95 %. One level for all: in the head; several: in each cell."""
    claim = {"id": "c", "metric": "output_throughput", "claimed_text": "1.41",
             "verdict": "refuted", "reason": "r",
             "measured": {"ratio": 1.02, "low": 0.95, "high": 1.11}}  # fmt: skip
    base = {"a_label": "A", "b_label": "B", "workload": "w", "claim": claim}
    at_90 = claims_table([{**base, "confidence": 0.9}]).splitlines()
    assert "measured B/A [90 % CI]" in at_90[0] and "95 %" not in "\n".join(at_90)
    mixed = claims_table([{**base, "confidence": 0.9}, {**base, "confidence": 0.99}])
    head, _, first, second = mixed.splitlines()
    assert "measured B/A [CI]" in head
    assert "[0.950, 1.110] (90 %)" in first and "[0.950, 1.110] (99 %)" in second


def test_a_verdicts_interval_level_comes_from_its_record_or_is_left_unsaid() -> None:
    """Claim records without their comparisons (`verify-claims --json`, a report's verdicts
    table) printed "(?)" in every measured cell; they carry their level now, and where one
    does not, none is claimed."""
    from tuner.results.comparisons import verdicts_table

    v = {"id": "c", "kind": "effect", "workload": "w", "verdict": "refuted", "reason": "r",
         "claimed_text": "x1.41", "comparison_id": 7,
         "measured": {"text": "x1.100 [1.000, 1.200]"}}  # fmt: skip
    unknown = verdicts_table([v], [])
    assert "(?)" not in unknown and "95 %" not in unknown
    at_90 = verdicts_table([{**v, "confidence": 0.9}], []).splitlines()
    assert "measured here [90 % CI]" in at_90[0]


def test_a_difference_claims_interval_is_shown_in_the_claims_table() -> None:
    """A claim on a difference ("840 MB freed") showed "-" where its interval stood."""
    claim = {"id": "freed", "metric": "memory_gib", "claimed_text": "-840 MB",
             "verdict": "smaller", "reason": "r",
             "measured": {"difference": -0.131, "low": -0.185, "high": -0.077,
                          "text": "-134 MB [-189, -79]"}}  # fmt: skip
    table = claims_table([{"a_label": "A", "b_label": "B", "workload": "w", "claim": claim,
                           "confidence": 0.95}])  # fmt: skip
    assert "| -134 MB [-189, -79] |" in table and "[95 % CI]" in table.splitlines()[0]
