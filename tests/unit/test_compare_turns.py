"""Per-turn TTFT in a comparison: multi-turn launches get a row per turn that every launch has;
single-turn launches get none, and the compared set stays what claims files name. Peak memory's
row is judged against the smallest effect worth acting on."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from tuner.abtest.compare import COMPARED, Arm, compare, turn_metrics
from tuner.abtest.decide import Design, judge_look
from tuner.cli.compare import decision_lines
from tuner.domain import FailureClass, MemoryUsage, ServingConfig, TrialResult, TrialStatus
from tuner.load.stats import estimate
from tuner.scoring import BETTER, BUDGET, GIB, NO_DIFFERENCE, PRECISE, WORSE


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


def _memory(gib: Sequence[float]) -> list[TrialResult]:
    return [
        dataclasses.replace(_launch(50, {}), memory=MemoryUsage(host_peak_rss_bytes=int(g * GIB)))
        for g in gib
    ]


# Peak memory 40 MB higher of 140 GB on every B launch (as NVML read it on the H200): x1.0003,
# and its interval, on three near-equal launches a side, excludes 1.
A_GIB = (140.000, 140.001, 140.002)
B_GIB = (140.040, 140.041, 140.042)


def test_a_memory_difference_within_the_smallest_effect_is_no_difference() -> None:
    a, b = Arm("a", ServingConfig()), Arm("b", ServingConfig())
    memory = compare(a, _memory(A_GIB), b, _memory(B_GIB)).metric("memory_gib")
    assert memory.low is not None and memory.low > 1.0  # significant, but by 0.03 %
    assert memory.verdict == NO_DIFFERENCE
    assert memory.describe() == (
        "memory GiB: B/A 1.000 [1.000, 1.000] (+0.0 %) -> no significant difference"
    )
    assert compare(a, _memory(B_GIB), b, _memory(A_GIB)).metric("memory_gib").verdict == (
        NO_DIFFERENCE  # 40 MB less is not "better" either
    )
    # Beyond the smallest effect (+7 %), or with a smaller one asked for, it is worse.
    more = [g * 1.07 for g in A_GIB]
    assert compare(a, _memory(A_GIB), b, _memory(more)).metric("memory_gib").verdict == WORSE
    small = compare(a, _memory(A_GIB), b, _memory(B_GIB), min_effect=0.0001)
    assert small.metric("memory_gib").verdict == WORSE


@pytest.mark.parametrize(
    ("design", "reason"),
    [(Design.sequential(3, 6, 0.95, 0.05), PRECISE), (Design.fixed_launches(3), BUDGET)],
)
def test_a_memory_claim_within_the_smallest_effect_is_decided_no_difference(
    design: Design, reason: str
) -> None:
    a, b = Arm("a", ServingConfig()), Arm("b", ServingConfig())
    look = judge_look(a, _memory(A_GIB), b, _memory(B_GIB), design, None, "memory_gib")
    assert (look.step.verdict, look.step.reason) == (NO_DIFFERENCE, reason)
    assert look.step.interval is not None and look.step.interval.low > 1.0
    assert look.comparison.to_verdicts()["memory_gib"] == NO_DIFFERENCE
    # it said "(the interval's half-width is at most 5 %)" beside an interval that excludes 1
    assert (
        "(the whole interval lies within ±5 %, the smallest effect that counts)"
        in (decision_lines(look)[0])
    )
    # tuner compare (decided on throughput) with --min-effect 0.0001: the 0.03 % counts.
    tight = Design.sequential(3, 6, 0.95, 0.0001)
    look = judge_look(a, _memory(A_GIB), b, _memory(B_GIB), tight, None)
    assert look.comparison.to_verdicts()["memory_gib"] == WORSE


def test_a_fixed_design_takes_min_effect_as_its_memory_floor() -> None:
    """`tuner compare --repeats 3 --max-launches 3 --min-effect 0.0001` (a fixed design) read
    the 40 MB as no difference: the design dropped --min-effect. `--repeats 3 --min-effect X`
    is refused with a hint that says what --min-effect does and how a fixed design takes it."""
    from tuner.cli.compare import design_of
    from tuner.errors import UsageError

    a, b = Arm("a", ServingConfig()), Arm("b", ServingConfig())
    fixed = design_of(3, 3, 0.0001, 0.95)
    assert fixed.fixed and fixed.key() is None  # the launch log of `--repeats 3`, as before
    assert fixed.text().endswith("peak memory within 0.01 % is no difference")
    look = judge_look(a, _memory(A_GIB), b, _memory(B_GIB), fixed, None)
    assert look.comparison.to_verdicts()["memory_gib"] == WORSE
    assert look.to_results()["decision"]["min_effect"] == 0.0001
    plain = design_of(3, 3, None, 0.95)  # no --min-effect: the 5 % floor, as before
    assert plain.plan.min_effect is None and plain.text() == design_of(3, None, None, 0.95).text()
    look = judge_look(a, _memory(A_GIB), b, _memory(B_GIB), plain, None)
    assert look.comparison.to_verdicts()["memory_gib"] == NO_DIFFERENCE
    with pytest.raises(UsageError) as refused:
        design_of(3, None, 0.0001, 0.95)
    assert "within 5 % is no difference" in str(refused.value)
    assert "add --max-launches 3 for 3 launches a side" in refused.value.hint


def _throughput(values: Sequence[float]) -> list[TrialResult]:
    out = []
    for v in values:
        launch = _launch(50, {})
        metrics = {**launch.metrics, "output_throughput": estimate([v, v * 1.001])}
        out.append(dataclasses.replace(launch, metrics=metrics))
    return out


def test_the_look_at_the_cap_decides_though_a_launch_failed() -> None:
    """Cap 6, one B launch crashed: the look counted 5 values against the cap and said
    "continue" with no reason, where run_looks had no launch left to run; `tuner compare`
    printed "decision: continue after 6 + 5 launches ()" and stored it so."""
    a, b = Arm("a", ServingConfig()), Arm("b", ServingConfig())
    crashed = TrialResult(
        config=ServingConfig(), status=TrialStatus.FAILED, failure=FailureClass.CRASHED
    )
    a_runs = _throughput([100, 112, 91, 108, 95, 104])
    b_runs = [*_throughput([103, 90, 111, 97, 106]), crashed]
    design = Design.sequential(3, 6, 0.95, 0.01)
    look = judge_look(a, a_runs, b, b_runs, design, None)
    assert (look.step.verdict, look.step.reason) == (NO_DIFFERENCE, BUDGET)
    assert (look.step.n_a, look.step.n_b) == (6, 5)
    assert look.to_results()["decision"]["stopped"] == BUDGET
    lines = decision_lines(look)
    assert lines[0].startswith("decision: no significant difference after 6 + 5 launches (the")
    assert "caution: failed launches A 0, B 1" in "\n".join(lines)
    # Below the cap, the same launches go on to one more round.
    early = judge_look(a, a_runs[:5], b, b_runs, design, None)
    assert not early.done
    # A fixed design's one look is its cap: with a crashed launch it judged nothing and read
    # "no significant difference" for a B 30 % faster. It judges the values there are.
    fixed = Design.fixed_launches(5)
    faster = [*_throughput([130, 131, 129, 132]), crashed]
    look = judge_look(a, a_runs[:5], b, faster, fixed, None)
    assert look.step.verdict == BETTER and look.step.interval is not None
    assert (look.step.n_a, look.step.n_b) == (5, 4)
    # One value a side left: no interval, and still no "continue" at the cap.
    lone = judge_look(a, a_runs, b, [*_throughput([103]), *[crashed] * 5], design, None)
    assert lone.done and lone.step.reason == BUDGET and (lone.step.n_a, lone.step.n_b) == (6, 1)


def test_a_resumed_comparison_fills_its_last_round_before_it_looks() -> None:
    """Interrupted after A's 5th launch and before B's, a resumed `tuner compare` looked at 5
    against 4 (a look at 4 a side, which the Pocock schedule of 3 to 6 had already spent),
    then launched the round that brought both to 5. It now launches B's 5th first."""
    from tuner.abtest.decide import run_looks

    done = [_throughput([100, 101, 99, 102, 98]), _throughput([100, 100, 101, 99])]
    asked: list[int] = []
    seen: list[tuple[int, int]] = []

    def launch(rounds: int, done: list[list[TrialResult]]) -> list[list[TrialResult]]:
        asked.append(rounds)
        return [list(rs) + _throughput([100.0] * (rounds - len(rs))) for rs in done]

    def decided(results: list[list[TrialResult]]) -> bool:
        seen.append((len(results[0]), len(results[1])))
        return True

    run_looks(launch, 3, done, Design.sequential(3, 6, 0.95, 0.05), decided)
    assert asked == [5] and seen == [(5, 5)]
    # No earlier launches, or a fixed design, start where they always did.
    asked.clear()
    run_looks(launch, 3, [[], []], Design.sequential(3, 6, 0.95, 0.05), decided)
    assert asked == [3]
    asked.clear()
    run_looks(launch, 3, done, Design.fixed_launches(3), decided)
    assert asked == [3]


def test_a_launch_budget_past_what_launches_resolve_is_refused_at_once() -> None:
    """--max-launches 100 simulated its design's bounds for 50 s (half a GB) before anything
    was printed, for a design of hours of GPU time."""
    from tuner.cli.compare import design_of
    from tuner.errors import UsageError
    from tuner.scoring import MAX_LAUNCHES

    with pytest.raises(UsageError) as refused:
        design_of(None, 100, None, 0.95)
    assert f"at most {MAX_LAUNCHES} launches a side" in refused.value.message
    assert "--min-effect" in refused.value.hint
    assert design_of(None, 6, None, 0.95).plan is not None


def test_a_wide_interval_s_half_width_and_the_hints_agree_with_what_is_taken() -> None:
    """`interval half-width ±122.9 % (-35.9 % [-71.2, +42.9])`: the half-width is a factor
    on the log scale, which a percentage beside the interval's ends contradicted; and a hint
    offered `--max-launches 50`, which the next run refused (at most 40)."""
    from tuner.cli.compare import design_of
    from tuner.errors import UsageError

    a, b = Arm("a", ServingConfig()), Arm("b", ServingConfig())
    look = judge_look(a, _throughput([100, 70, 130]), b, _throughput([60, 110, 85]),
                      Design.fixed_launches(3), None)  # fmt: skip
    (line,) = [x for x in decision_lines(look) if "half-width" in x]
    found = look.step.interval
    assert found is not None and found.high / found.ratio > 2  # a wide one
    assert f"x/÷ {(found.high / found.low) ** 0.5:.3f}" in line and "±" not in line
    with pytest.raises(UsageError) as refused:
        design_of(25, None, 0.1, 0.95)
    assert "--max-launches 40 for a sequential design" in (refused.value.hint or "")
    with pytest.raises(UsageError) as refused:  # no sequential design starts at 40
        design_of(40, None, 0.1, 0.95)
    assert "sequential" not in (refused.value.hint or "")
    with pytest.raises(UsageError, match="--repeats 50: at most 40 launches a side"):
        design_of(50, None, None, 0.95)


def test_a_metric_no_launch_gave_is_not_measured_not_short_of_launches() -> None:
    """With one-token answers there is no ITL in any window: compare said "not enough
    launches to compare", as if more launches would give it one."""
    from tuner.abtest.compare import NO_VALUES, NOT_ENOUGH, compare

    def without_itl(n: int) -> list[TrialResult]:
        runs = [_launch(50 + i, {}) for i in range(n)]
        kept = [{k: v for k, v in r.metrics.items() if not k.startswith("itl")} for r in runs]
        return [dataclasses.replace(r, metrics=m) for r, m in zip(runs, kept, strict=True)]

    a, b = Arm("a", ServingConfig()), Arm("b", ServingConfig())
    done = compare(a, without_itl(2), b, without_itl(2))
    itl = done.metric("itl_p99_ms")
    assert itl.verdict == NO_VALUES and "no launch gave a value" in itl.describe()
    assert done.metric("ttft_p50_ms").verdict != NO_VALUES
    short = compare(a, without_itl(1), b, without_itl(1))  # one launch a side: too few
    assert short.metric("itl_p99_ms").verdict == NOT_ENOUGH
