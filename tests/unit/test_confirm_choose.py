"""What a composite objective's confirmation verdict rests on (tuner.study.confirm.choose).

The looks of a balanced study's confirmation stop on its deciding metric (output tok/s); the
verdict must rest on the same thing, not on the composite score's own Welch interval, which on
three launches a side has about 2.5 degrees of freedom. The figures are the H200's confirmation
of 2026-12-04 (docs/results/plan-h200.md): three launches a side, per-look level 96.65 %.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tuner.db import ComparisonRow
from tuner.domain import Objective, ServingConfig
from tuner.scoring import BETTER, NO_DIFFERENCE, WORSE
from tuner.study.confirm import DEFAULTS_LABEL, choose

A_THR = [12027.9, 11158.2, 11851.3]
B_THR = [14073.3, 15592.7, 17471.6]
A_E2E = [7217.9, 7995.3, 7788.1]
B_E2E = [6704.5, 5595.0, 5053.8]
MEM = [131.51, 131.51, 131.51]
CANDIDATE = ServingConfig.from_dict(
    {"api_server_count": 4, "async_scheduling": True, "stream_interval": 8}
)


def _metric(name: str, label: str, a: list[float], b: list[float], ratio: float, low: float,
            high: float, verdict: str, higher: bool) -> dict[str, Any]:  # fmt: skip
    return {
        "metric": name,
        "label": label,
        "ratio": ratio,
        "low": low,
        "high": high,
        "verdict": verdict,
        "higher_is_better": higher,
        "method": "welch: no noise profile for this key",
        "a": {"values": a},
        "b": {"values": b},
    }


def _row(
    *,
    thr: str = BETTER,
    thr_ratio: tuple[float, float, float] = (1.3408, 1.0113, 1.7777),
    e2e: str = NO_DIFFERENCE,
    b_e2e: list[float] = B_E2E,
    e2e_ratio: tuple[float, float, float] = (0.750, 0.517, 1.088),
    mem: tuple[float, float, float, str] = (1.0, 0.9996, 1.0006, NO_DIFFERENCE),
    min_effect: float | None = None,
) -> ComparisonRow:
    metrics = [
        _metric("output_throughput", "output tok/s", A_THR, B_THR, *thr_ratio, thr, True),
        _metric("e2e_p99_ms", "P99 E2E ms", A_E2E, b_e2e, *e2e_ratio, e2e, False),
        _metric("memory_gib", "memory GiB", MEM, [m * mem[0] for m in MEM], *mem, False),
    ]  # fmt: skip
    results = {
        "metrics": metrics,
        "confidence": 0.95,
        "a_label": DEFAULTS_LABEL,
        "b_label": "#5",
        "decision": {
            "kind": "sequential",
            "per_look_confidence": 0.9665060489206141,
            **({} if min_effect is None else {"min_effect": min_effect}),
        },
        "kind": "confirmation",
    }
    return ComparisonRow(
        id=1,
        created_at=0.0,
        model="ernie-0.3b",
        gpu="NVIDIA H200",
        workload="throughput-256",
        a_config=ServingConfig(),
        b_config=CANDIDATE,
        repeats=3,
        results=results,
        verdicts={m["metric"]: m["verdict"] for m in metrics},
        provenance=None,
        study_id=1,
    )


def test_the_balanced_verdict_rests_on_what_the_looks_stopped_on() -> None:
    confirmed = choose([_row()], Objective.BALANCED)
    assert confirmed is not None
    assert confirmed.verdict == BETTER and confirmed.label == "#5"
    assert confirmed.config == CANDIDATE
    assert confirmed.decided_on is not None
    label, ratio, low, _high = confirmed.decided_on
    assert (label, round(ratio, 3), round(low, 3)) == ("output tok/s", 1.341, 1.011)
    # The composite's own Welch interval still holds 1: it is reported, it does not decide.
    assert confirmed.score > 1.0 and confirmed.score_low < 1.0 < confirmed.score_high
    text = confirmed.verdict_text()
    assert text.startswith("better than vLLM's defaults: output tok/s x1.341 [1.011, 1.778]")
    assert "composite" in text


def test_no_win_when_a_weighed_metric_is_worse() -> None:
    # P99 E2E significantly worse, x1.30 (the composite of the launch values stays above 1: the
    # guard alone takes the win away).
    confirmed = choose([_row(e2e=WORSE, e2e_ratio=(1.30, 1.10, 1.54))], Objective.BALANCED)
    assert confirmed is not None and confirmed.verdict == NO_DIFFERENCE
    assert confirmed.label == DEFAULTS_LABEL and confirmed.config == ServingConfig()


def test_a_weighed_metric_worse_by_less_than_the_smallest_effect_keeps_the_win() -> None:
    # NVML's peak memory 40 MB higher of 141 GB on every B launch: significant, x1.0003, and
    # nothing a deployment would act on (the design's smallest effect: 5 %).
    tiny = (1.0003, 1.0001, 1.0005, WORSE)
    confirmed = choose([_row(mem=tiny)], Objective.BALANCED)
    assert confirmed is not None and confirmed.verdict == BETTER and confirmed.label == "#5"
    eight = (1.08, 1.05, 1.11, WORSE)
    confirmed = choose([_row(mem=eight)], Objective.BALANCED)
    assert confirmed is not None and confirmed.verdict == NO_DIFFERENCE


def test_the_smallest_effect_is_the_design_s() -> None:
    worse = {"e2e": WORSE, "e2e_ratio": (1.08, 1.02, 1.14)}
    default = choose([_row(**worse)], Objective.BALANCED)  # type: ignore[arg-type]
    assert default is not None and default.verdict == NO_DIFFERENCE
    wide = choose([_row(**worse, min_effect=0.10)], Objective.BALANCED)  # type: ignore[arg-type]
    assert wide is not None and wide.verdict == BETTER


def test_no_win_when_the_deciding_metric_is_undecided() -> None:
    confirmed = choose([_row(thr=NO_DIFFERENCE)], Objective.BALANCED)
    assert confirmed is not None and confirmed.verdict == NO_DIFFERENCE


def test_no_win_when_the_composite_points_below_one() -> None:
    # Throughput decided better (x1.34); P99 E2E x2.5 slower at its point estimate but, on three
    # launches a side, not significantly: the balanced score (0.5 log thr - 0.3 log E2E) is
    # below 1, so no winner.
    slow = [v * 2.5 for v in A_E2E]
    confirmed = choose([_row(b_e2e=slow, e2e_ratio=(2.5, 0.9, 6.9))], Objective.BALANCED)
    assert confirmed is not None and confirmed.verdict == NO_DIFFERENCE


def test_an_objective_of_one_metric_is_decided_by_its_score_interval() -> None:
    confirmed = choose([_row()], Objective.THROUGHPUT)
    assert confirmed is not None and confirmed.verdict == BETTER
    assert confirmed.decided_on is None
    assert round(confirmed.score_low, 3) == 1.011
    assert confirmed.verdict_text().startswith("better than vLLM's defaults: score x1.341")


def test_the_api_carries_what_decided() -> None:
    from api.recommendations import _confirmed

    confirmed = choose([_row()], Objective.BALANCED)
    assert confirmed is not None
    out = _confirmed(confirmed)
    assert out.decided_on is not None and out.decided_on.metric == "output tok/s"
    assert out.decided_on.low is not None and out.decided_on.low > 1.0
    single = choose([_row()], Objective.THROUGHPUT)
    assert single is not None and _confirmed(single).decided_on is None


def test_the_details_say_whose_comparison_they_are() -> None:
    """With the defaults' verdict the details are a candidate's comparison: it is named, on
    the recommendation's lines too (they read as the defaults' own numbers before)."""
    won = choose([_row()], Objective.BALANCED)
    kept = choose([_row(thr=NO_DIFFERENCE)], Objective.BALANCED)
    assert won is not None and won.details_from == "#5 against vLLM's defaults"
    assert kept is not None and kept.label == DEFAULTS_LABEL
    assert kept.details_from == "#5 against vLLM's defaults"


def test_a_memory_win_must_exceed_the_smallest_effect() -> None:
    """Peak memory 0.1 % lower on every launch is certain (it barely varies between launches)
    and worthless: the memory objective keeps the defaults and says why, as compare reads it."""
    tiny = (0.999, 0.9985, 0.9995, NO_DIFFERENCE)
    kept = choose([_row(mem=tiny)], Objective.MEMORY)
    assert kept is not None and kept.verdict == NO_DIFFERENCE and kept.label == DEFAULTS_LABEL
    assert kept.config == ServingConfig()
    assert kept.verdict_text() == (
        "no configuration beats the defaults by more than 5 % (the smallest effect worth "
        "acting on): run vLLM's defaults"
    )
    # The design's smallest effect decides, as for the guard metrics.
    precise = choose([_row(mem=tiny, min_effect=0.0005)], Objective.MEMORY)
    assert precise is not None and precise.verdict == BETTER and precise.label == "#5"
    halved = choose([_row(mem=(0.5, 0.49, 0.51, BETTER))], Objective.MEMORY)
    assert halved is not None and halved.verdict == BETTER and halved.label == "#5"
    # Nothing better at all: the usual words.
    same = choose([_row(mem=(1.0, 0.98, 1.02, NO_DIFFERENCE))], Objective.MEMORY)
    assert same is not None and same.verdict_text().startswith("no significant difference")


# The H100's confirmation of 2026-12-06: Triton attention, output tok/s -2.0 % [-3.2, -0.8]
# and P99 E2E +2.8 % [+0.7, +4.9], both decided worse against vLLM's defaults.
WORSE_THR = {"thr": WORSE, "thr_ratio": (0.980, 0.968, 0.992)}
WORSE_E2E = {"e2e": WORSE, "e2e_ratio": (1.028, 1.007, 1.049)}


def _labelled(row: ComparisonRow, label: str, row_id: int) -> ComparisonRow:
    return dataclasses.replace(row, id=row_id, results={**row.results, "b_label": label})


def test_a_candidate_confirmed_worse_is_reported_worse() -> None:
    """It read "no significant difference from defaults" on a throughput 2 % lower, certain."""
    row = _row(**WORSE_THR, **WORSE_E2E)  # type: ignore[arg-type]
    confirmed = choose([row], Objective.BALANCED)
    assert confirmed is not None and confirmed.verdict == WORSE
    assert confirmed.label == DEFAULTS_LABEL and confirmed.config == ServingConfig()
    assert confirmed.details_from == "#5 against vLLM's defaults"
    assert confirmed.verdict_text() == (
        "worse than vLLM's defaults: output tok/s x0.980 [0.968, 0.992]: run vLLM's defaults"
    )
    assert (confirmed.score, confirmed.score_low, confirmed.score_high) == (1.0, 1.0, 1.0)
    # An objective that weighs one metric alone: its score's interval says worse.
    alone = choose([row], Objective.THROUGHPUT)
    assert alone is not None and alone.verdict == WORSE and alone.label == DEFAULTS_LABEL
    assert alone.verdict_text() == (
        "worse than vLLM's defaults: output tok/s x0.980 [0.968, 0.992]: run vLLM's defaults"
    )
    latency = choose([row], Objective.LATENCY)  # P99 E2E x1.028: the score x0.973
    assert latency is not None and latency.verdict == WORSE
    assert latency.verdict_text().startswith("worse than vLLM's defaults: P99 E2E ms x1.028")
    # Several candidates, every one worse: each named, the first one's interval shown.
    rows = [_labelled(row, "#5", 1), _labelled(row, "#7", 2)]
    both = choose(rows, Objective.BALANCED)
    assert both is not None and both.verdict == WORSE and both.comparison_id == 1
    assert both.verdict_text() == (
        "every candidate (#5, #7) worse than vLLM's defaults; #5: output tok/s x0.980 "
        "[0.968, 0.992]: run vLLM's defaults"
    )


def test_a_candidate_not_worse_keeps_no_difference_and_is_the_one_shown() -> None:
    worse = _labelled(_row(**WORSE_THR), "#5", 1)  # type: ignore[arg-type]
    level = _labelled(_row(thr=NO_DIFFERENCE), "#7", 2)
    for rows in ([worse, level], [level, worse]):
        kept = choose(rows, Objective.BALANCED)
        assert kept is not None and kept.verdict == NO_DIFFERENCE
        assert kept.label == DEFAULTS_LABEL and kept.comparison_id == 2
        assert kept.details_from == "#7 against vLLM's defaults"
        assert kept.verdict_text() == "no significant difference from defaults: run vLLM's defaults"
    # Worse on a weighed metric only (P99 E2E), not on the deciding one: no difference, as before.
    guard = choose([_row(thr=NO_DIFFERENCE, **WORSE_E2E)], Objective.BALANCED)  # type: ignore[arg-type]
    assert guard is not None and guard.verdict == NO_DIFFERENCE
    # Peak memory worse by less than the smallest effect is no difference, as compare reads it.
    tiny = (1.0003, 1.0001, 1.0005, WORSE)
    memory = choose([_row(mem=tiny)], Objective.MEMORY)
    assert memory is not None and memory.verdict == NO_DIFFERENCE
    eight = choose([_row(mem=(1.08, 1.05, 1.11, WORSE))], Objective.MEMORY)
    assert eight is not None and eight.verdict == WORSE


def test_the_api_lists_worse_among_the_verdicts() -> None:
    from api.recommendations import _confirmed
    from api.schemas import ConfirmedOut

    assert "worse" in (ConfirmedOut.model_fields["verdict"].description or "")
    confirmed = choose([_row(**WORSE_THR)], Objective.BALANCED)  # type: ignore[arg-type]
    assert confirmed is not None
    out = _confirmed(confirmed)
    assert out.verdict == "worse" and out.label == DEFAULTS_LABEL and out.score == 1.0
    assert out.decided_on is not None and out.decided_on.high is not None
    assert out.decided_on.high < 1.0


def test_a_capacity_study_is_confirmed_on_its_capacity_not_its_fixed_load() -> None:
    """A capacity study ranks by the most a load point within the SLO served; its confirmation
    decided on the throughput at the workload's own (top) load point, which no SLO bounds: a
    candidate faster there but with less capacity was "better" and recommended."""
    from tuner.study.confirm import decision_metric

    row = _row()  # output tok/s x1.34, better
    lower = _metric("capacity_output_throughput", "capacity out tok/s", B_THR, A_THR,
                    0.7458, 0.5625, 0.9888, WORSE, True)  # fmt: skip
    curve = dataclasses.replace(
        row, results={**row.results, "metrics": [*row.results["metrics"], lower]}
    )
    for objective in (Objective.CAPACITY, Objective.COST):
        assert decision_metric(objective, curve=True) == "capacity_output_throughput"
        confirmed = choose([curve], objective)
        assert confirmed is not None and confirmed.verdict == WORSE, (objective, confirmed)
        assert confirmed.decided_on is not None
        assert confirmed.decided_on[0] == "capacity out tok/s"
        # Without a curve (a study at one load point), the throughput decides, as before.
        plain = choose([row], objective)
        assert plain is not None and plain.verdict == BETTER
    # The other presets weigh what they weighed.
    assert decision_metric(Objective.THROUGHPUT, curve=True) == "output_throughput"
