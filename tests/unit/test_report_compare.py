"""tuner.results.report.compare: an A/B comparison row as the compare page shows it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tuner.abtest.compare import Arm, compare
from tuner.db.rows import ComparisonRow
from tuner.domain import Provenance, ServingConfig, Workload
from tuner.results.report import comparison_report
from tuner.results.report.compare import backends_text
from tuner.testing.fake_runner import FakeRunner

WORKLOAD = Workload(name="w", prompt_tokens=32, output_tokens=8, requests_per_window=8)


def _row(results: Any, verdicts: Any, provenance: Provenance | None = None) -> ComparisonRow:
    return ComparisonRow(
        id=7,
        created_at=0.0,
        model="m",
        gpu="h200",
        workload="chat",
        a_config=ServingConfig(),
        b_config=ServingConfig(max_num_seqs=64),
        repeats=3,
        results=results,
        verdicts=verdicts,
        provenance=provenance,
        study_id=None,
    )


def test_reads_what_tuner_compare_records() -> None:
    a, b = Arm("defaults", ServingConfig()), Arm("big", ServingConfig(max_num_seqs=64))
    runs = [[FakeRunner(seed=i).run(arm.config, WORKLOAD) for i in range(3)] for arm in (a, b)]
    c = compare(a, runs[0], b, runs[1])
    # Through JSON, as the database hands it back.
    results, verdicts = json.loads(json.dumps(c.to_results())), c.to_verdicts()
    report = comparison_report(_row(results, verdicts))
    assert (report.a_label, report.b_label) == ("defaults", "big")
    assert report.confidence == 0.95 and report.launches == {"a": 3, "b": 3}
    assert report.overall == verdicts["overall"]
    assert report.metrics[0].metric == "output_throughput"
    assert {m.metric for m in report.metrics} == {m.metric for m in c.metrics}
    thr = next(m for m in report.metrics if m.metric == "output_throughput")
    source = c.metric("output_throughput")
    assert thr.ratio is not None and thr.ratio.median == pytest.approx(source.ratio)
    assert (thr.ratio.low, thr.ratio.high) == pytest.approx((source.low, source.high))
    assert thr.a is not None and thr.a.values == pytest.approx(source.a_values)
    assert thr.verdict == source.verdict and thr.unit == "tok/s" and thr.higher_is_better
    assert report.unparsed == ""  # everything had a place on the page
    assert report.backends == {"a": "FAKE_ATTN × 3", "b": "FAKE_ATTN × 3"}


def test_backends_text_counts_what_ran_per_side() -> None:
    servers = [
        {"effective_backend": "FLASH_ATTN", "flash_attn_version": 3},
        {"effective_backend": "TRITON_ATTN", "flash_attn_version": None},
        {"effective_backend": "FLASH_ATTN", "flash_attn_version": 3},
        {"effective_backend": None},
        "not a server",
    ]
    assert backends_text(servers) == "FLASH_ATTN (FlashAttention 3) × 2, TRITON_ATTN × 1"
    assert backends_text([]) == ""


def test_plain_map_shape_gets_a_conservative_ratio_interval() -> None:
    results = {
        "a": {"output_throughput": {"median": 100, "low": 90, "high": 110, "values": [90, 110]}},
        "b": {"output_throughput": {"median": 120, "low": 115, "high": 125}},
        "ratio": {"e2e_p99_ms": {"median": 0.9, "low": 0.8, "high": 1.0}},
    }
    verdicts = {"output_throughput": {"verdict": "better"}, "e2e_p99_ms": "worse"}
    report = comparison_report(_row(results, verdicts))
    thr, e2e = report.metrics
    assert thr.ratio is not None
    assert thr.ratio.median == pytest.approx(1.2)
    assert (thr.ratio.low, thr.ratio.high) == pytest.approx((115 / 110, 125 / 90))
    assert thr.verdict == "better" and thr.tone == "good"
    assert e2e.ratio is not None and e2e.ratio.low == 0.8 and e2e.a is None
    assert e2e.tone == "bad" and not e2e.higher_is_better


def test_sides_without_an_interval_give_a_ratio_of_medians_only() -> None:
    results = {"a": {"x_metric": {"median": 2.0}}, "b": {"x_metric": {"median": "nan"}}}
    (x,) = comparison_report(_row(results, {})).metrics
    assert x.b is None and x.ratio is None and x.label == "x_metric" and x.unit == ""
    results = {"a": {"goodput": {"median": 2.0}}, "b": {"goodput": {"median": 3.0}}}
    (g,) = comparison_report(_row(results, {})).metrics
    assert g.ratio is not None and g.ratio.median == 1.5 and g.ratio.low is None


def test_unexpected_json_is_kept_as_text_and_verdict_text_is_free() -> None:
    results = {"a": {}, "notes": "<b>hand-written</b>", "kind": "confirmation"}
    verdicts = {"overall": "<script>x</script>", "something_else": "odd"}
    report = comparison_report(_row(results, verdicts))
    assert report.metrics == () and report.overall == "<script>x</script>"
    assert report.overall_tone == ""  # a CSS class is only ever a fixed word
    assert json.loads(report.unparsed) == {
        "notes": "<b>hand-written</b>",
        "verdicts": {"something_else": "odd"},
    }
    assert report.provenance["kind"] == "confirmation"
    listed = comparison_report(_row([1, 2], "no"))
    assert json.loads(listed.unparsed) == {"results": [1, 2], "verdicts": "no"}


def test_provenance_prefers_the_recorded_measurement() -> None:
    prov = Provenance(
        gpu_name="NVIDIA H200",
        gpu_uuid=None,
        driver_version="570.1",
        vllm_version="0.32.0",
        model="m",
        workload="chat",
        hostname="gpu-box",
    )
    report = comparison_report(_row({}, {}, prov))
    assert report.provenance == {
        "model": "m",
        "GPU": "NVIDIA H200",
        "vLLM": "0.32.0",
        "workload": "chat",
        "launches per arm": "3",
        "driver": "570.1",
        "host": "gpu-box",
    }
    assert comparison_report(_row({}, {})).provenance["GPU"] == "h200"


def test_a_verified_claim_gets_its_own_card() -> None:
    a, b = Arm("defaults", ServingConfig()), Arm("fa2", ServingConfig(max_num_seqs=64))
    runs = [[FakeRunner(seed=i).run(arm.config, WORKLOAD) for i in range(3)] for arm in (a, b)]
    c = compare(a, runs[0], b, runs[1])
    claim = {
        "id": "fa2-throughput",
        "statement": "FA2 is 41 % faster",
        "metric": "output_throughput",
        "claimed_text": "1.41",
        "verdict": "refuted",
        "reason": "no significant effect",
        "measured": {"ratio": 0.958, "low": 0.752, "high": 1.221},
    }
    results = {**c.to_results(), "kind": "claim", "claim": claim}
    report = comparison_report(_row(json.loads(json.dumps(results)), c.to_verdicts()))
    assert report.claim is not None and report.claim["verdict"] == "refuted"
    assert report.claim["measured_text"] == "0.958 [0.752, 1.221]"
    assert report.unparsed == ""
    assert comparison_report(_row(c.to_results(), c.to_verdicts())).claim is None


def test_a_claim_quoting_its_article_shows_the_figure_beside_the_measurement() -> None:
    a, b = Arm("defaults", ServingConfig()), Arm("cap", ServingConfig(max_model_len=4096))
    runs = [[FakeRunner(seed=i).run(arm.config, WORKLOAD) for i in range(3)] for arm in (a, b)]
    c = compare(a, runs[0], b, runs[1])
    claim = {
        "id": "max-model-len-memory",
        "kind": "effect",
        "statement": "Capping the context saves about 120 MB",
        "article": "ernie-fa2",
        "figure": "--max-model-len 4096 saves about 120 MB more",
        "metric": "memory_gib",
        "claimed": {
            "scale": "difference",
            "low": -0.11,
            "high": -0.11,
            "unit": "MB",
            "text": "-120 MB",
        },
        "claimed_text": "-120 MB",
        "verdict": "consistent",
        "reason": "a real effect, -67 MB [-122, -12]; the claimed -120 MB lies within it",
        "setting": "measured on ernie-0.3b / NVIDIA H200; the article's setting was A10G",
        "measured": {
            "difference": -0.0625,
            "low": -0.11,
            "high": -0.01,
            "text": "-67 MB [-122, -12]",
        },
    }
    results = {**c.to_results(), "kind": "claim", "claim": claim}
    report = comparison_report(_row(json.loads(json.dumps(results)), c.to_verdicts()))
    assert report.claim is not None
    assert report.claim["measured_text"] == "-67 MB [-122, -12]"
    assert report.claim["claimed_shown"] == "-120 MB"
    assert report.claim["figure"].endswith("120 MB more") and report.claim["article"] == "ernie-fa2"
    assert report.claim["setting"].startswith("measured on ernie-0.3b")
    assert report.unparsed == ""


@pytest.mark.parametrize(("geomean", "said"), [(False, "median"), (True, "geometric mean")])
def test_each_surface_says_what_a_launch_value_is(geomean: bool, said: str) -> None:
    """A side's values are one per launch: its windows' median, or (a sequential decision)
    their geometric mean. The record says which, and the page and the Markdown say so."""
    from tuner.results.comparisons import comparisons_markdown
    from tuner.scoring import launch_value

    a, b = Arm("defaults", ServingConfig()), Arm("big", ServingConfig(max_num_seqs=64))
    runs = [
        [FakeRunner(seed=i, window_sd=0.2).run(arm.config, WORKLOAD) for i in range(3)]
        for arm in (a, b)
    ]
    c = compare(a, runs[0], b, runs[1], geomean=geomean)
    results = json.loads(json.dumps(c.to_results()))
    assert results["launch_value"] == ("geomean" if geomean else "median")
    windows = [r.metrics["output_throughput"].values for r in runs[0]]
    expected = [launch_value(w) if geomean else sorted(w)[len(w) // 2] for w in windows]
    thr = next(m for m in results["metrics"] if m["metric"] == "output_throughput")
    assert thr["a"]["values"] == pytest.approx(expected)
    report = comparison_report(_row(results, c.to_verdicts()))
    assert report.provenance["a launch's value"] == f"the {said} of its windows"
    assert report.unparsed == ""
    record = {**results, "id": 1, "kind": "compare", "model": "m", "gpu": "h200", "workload": "w"}
    assert f"A launch's value: the {said} of its windows" in comparisons_markdown([record])
    assert "launch's value" not in comparison_report(_row({}, {})).provenance


def test_a_side_that_could_not_be_measured_is_named_as_why_the_decision_stopped() -> None:
    """Every B launch crashed: the decision stops "unmeasured" (not "budget", which read as
    if the launches had been spent measuring), and the page says which side and how."""
    from tuner.abtest import UNMEASURED_STOP, Design, judge_look
    from tuner.domain import FailureClass, TrialResult, TrialStatus

    a, b = Arm("defaults", ServingConfig()), Arm("big", ServingConfig(max_num_seqs=64))
    a_runs = [FakeRunner(seed=i).run(a.config, WORKLOAD) for i in range(3)]
    b_runs = [
        TrialResult(b.config, TrialStatus.FAILED, FailureClass.CRASHED, "engine died")
        for _ in range(3)
    ]
    look = judge_look(a, a_runs, b, b_runs, Design.sequential(), None)
    assert look.step.reason == UNMEASURED_STOP
    report = comparison_report(_row(json.loads(json.dumps(look.to_results())), {}))
    stopped = report.provenance["stopped"]
    assert stopped == "a side could not be measured: B (crashed ×3) after 3 + 0 launches"
    # A side that completed a launch and then crashed is still measured: no such stop.
    mixed = [FakeRunner(seed=9).run(b.config, WORKLOAD), *b_runs[:2]]
    assert judge_look(a, a_runs, b, mixed, Design.sequential(), None).step.reason == ""


def test_a_ratio_says_what_it_is_taken_from() -> None:
    """tuner compare's ratio is of the sides' geometric means, not of the medians the page
    shows beside it; a plain map's is its stored one (or the ratio of medians)."""
    a, b = Arm("defaults", ServingConfig()), Arm("big", ServingConfig(max_num_seqs=64))
    runs = [[FakeRunner(seed=i).run(arm.config, WORKLOAD) for i in range(3)] for arm in (a, b)]
    results = json.loads(json.dumps(compare(a, runs[0], b, runs[1]).to_results()))
    assert comparison_report(_row(results, {})).ratio_of == "geometric means"
    plain = {"a": {"goodput": {"median": 2.0}}, "b": {"goodput": {"median": 3.0}}}
    assert comparison_report(_row(plain, {})).ratio_of == ""
