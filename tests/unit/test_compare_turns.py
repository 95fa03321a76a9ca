"""Per-turn TTFT in a comparison: multi-turn launches get a row per turn that every launch has;
single-turn launches get none, and the compared set stays what claims files name."""

from __future__ import annotations

import pytest

from tuner.abtest.compare import COMPARED, Arm, compare, turn_metrics
from tuner.domain import FailureClass, ServingConfig, TrialResult, TrialStatus
from tuner.load.stats import estimate


def _launch(ttft: float, turns: dict[int, float]) -> TrialResult:
    metrics = {name: estimate([1.0, 1.0]) for name, _, _ in COMPARED if name != "memory_gib"}
    metrics["ttft_p50_ms"] = estimate([ttft, ttft * 1.01])
    for k, value in turns.items():
        metrics[f"ttft_turn{k}_p50_ms"] = estimate([value, value * 1.02])
        metrics[f"ttft_turn{k}_p99_ms"] = estimate([2 * value, 2 * value])
    return TrialResult(config=ServingConfig(), status=TrialStatus.COMPLETE, metrics=metrics)


def test_turns_every_launch_has_are_compared_in_order() -> None:
    a = [_launch(50, {1: 90, 2: 40, 3: 45}), _launch(52, {1: 95, 2: 42, 3: 44})]
    b = [_launch(30, {2: 20, 1: 88, 3: 22}), _launch(31, {1: 91, 2: 21})]  # no turn 3
    assert [name for name, _, _ in turn_metrics(*a, *b)] == [
        "ttft_turn1_p50_ms", "ttft_turn2_p50_ms",
    ]  # fmt: skip
    failed = TrialResult(
        config=ServingConfig(), status=TrialStatus.FAILED, failure=FailureClass.CRASHED
    )
    assert turn_metrics(*a, failed) == turn_metrics(*a)  # a failed launch has no say
    c = compare(Arm("a", ServingConfig()), a, Arm("b", ServingConfig()), b)
    rows = {m.metric: m for m in c.metrics}
    assert rows["ttft_turn2_p50_ms"].label == "turn 2 P50 TTFT ms"
    assert rows["ttft_turn2_p50_ms"].a_values == pytest.approx((40.4, 42.42))  # window medians
    assert not rows["ttft_turn2_p50_ms"].higher_is_better
    assert "ttft_turn3_p50_ms" not in rows and "ttft_turn1_p99_ms" not in rows
    assert [m.metric for m in c.metrics][: len(COMPARED)] == [n for n, _, _ in COMPARED]


def test_single_turn_launches_get_no_turn_rows() -> None:
    a, b = [_launch(50, {}), _launch(51, {})], [_launch(40, {}), _launch(41, {})]
    assert turn_metrics(*a, *b) == ()
    c = compare(Arm("a", ServingConfig()), a, Arm("b", ServingConfig()), b)
    assert [m.metric for m in c.metrics] == [n for n, _, _ in COMPARED]
