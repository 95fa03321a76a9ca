"""Objectives, SLO constraints and preset scores (tuner.scoring.objectives) on hand-built trial
results."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tuner.domain import (
    Estimate,
    FailureClass,
    MemoryUsage,
    Objective,
    ServingConfig,
    Slo,
    TrialResult,
    TrialStatus,
)
from tuner.domain.workload import format_slo, parse_slo
from tuner.load.curve import MAX_ERROR_RATE
from tuner.load.stats import estimate
from tuner.scoring import objectives as scoring

GIB = 1024**3


def complete(
    *,
    thr: float = 100.0,
    mem_gib: float = 10.0,
    p99: float = 1000.0,
    ttft: float = 200.0,
    itl: float = 20.0,
    errors: float = 0.0,
) -> TrialResult:
    """A complete GPU trial whose windows all measured the same numbers."""
    metrics = {
        "output_throughput": estimate([thr, thr, thr]),
        "e2e_p99_ms": estimate([p99, p99, p99]),
        "ttft_p99_ms": estimate([ttft, ttft, ttft]),
        "itl_p99_ms": estimate([itl, itl, itl]),
        "error_rate": estimate([errors, errors, errors]),
    }
    memory = MemoryUsage(gpu_peak_bytes={"GPU-0": int(mem_gib * GIB)})
    return TrialResult(
        config=ServingConfig(), status=TrialStatus.COMPLETE, metrics=metrics, memory=memory
    )


def failed(failure: FailureClass = FailureClass.MEMORY_EXCEEDED) -> TrialResult:
    return TrialResult(config=ServingConfig(), status=TrialStatus.FAILED, failure=failure)


REF = complete()


# --- objective values -------------------------------------------------------------------------


def test_objective_values_are_throughput_memory_and_p99() -> None:
    values = scoring.objective_values(
        complete(thr=123.0, mem_gib=4.5, p99=777.0), memory_ceiling_gib=80
    )
    assert values == pytest.approx([123.0, 4.5, 777.0])
    assert len(values) == len(scoring.OBJECTIVE_NAMES) == len(scoring.DIRECTIONS)


def test_memory_is_the_sum_over_gpus() -> None:
    result = TrialResult(
        config=ServingConfig(),
        status=TrialStatus.COMPLETE,
        metrics=complete().metrics,
        memory=MemoryUsage(gpu_peak_bytes={"GPU-0": 3 * GIB, "GPU-1": 5 * GIB}),
    )
    assert scoring.objective_values(result, memory_ceiling_gib=80)[1] == pytest.approx(8.0)


def test_memory_on_cpu_is_the_servers_rss() -> None:
    result = TrialResult(
        config=ServingConfig(),
        status=TrialStatus.COMPLETE,
        metrics=complete().metrics,
        memory=MemoryUsage(host_peak_rss_bytes=2 * GIB),
    )
    assert scoring.objective_values(result, memory_ceiling_gib=64)[1] == pytest.approx(2.0)


@pytest.mark.parametrize("status", [TrialStatus.FAILED, TrialStatus.PRUNED])
def test_a_trial_without_numbers_gets_penalty_values(status: TrialStatus) -> None:
    result = TrialResult(
        config=ServingConfig(), status=status, failure=FailureClass.KV_CACHE_INSUFFICIENT
    )
    values = scoring.objective_values(result, memory_ceiling_gib=22.5)
    assert values == [0.0, 22.5, scoring.PENALTY_LATENCY_MS]
    # Worse than a real measurement on every objective: less throughput, no less memory, and
    # slower than any P99 a trial could measure.
    real = scoring.objective_values(complete(p99=600_000.0), memory_ceiling_gib=22.5)
    assert values[0] < real[0] and values[1] >= real[1] and values[2] > real[2]


def test_headline_of_a_failed_trial_is_refused() -> None:
    with pytest.raises(ValueError, match="complete"):
        scoring.Headline.of(failed())


# --- constraints ------------------------------------------------------------------------------


def test_no_slo_leaves_only_the_error_rate_constraint() -> None:
    constraints = scoring.constraint_values(complete(errors=0.0), Slo())
    assert constraints[:3] == [scoring.FEASIBLE] * 3
    assert constraints[3] == pytest.approx(-MAX_ERROR_RATE)
    assert len(constraints) == len(scoring.CONSTRAINT_NAMES)
    assert scoring.is_feasible(constraints)


def test_slo_constraints_are_measured_minus_target() -> None:
    result = complete(ttft=200.0, itl=20.0, p99=1000.0)
    slo = Slo(ttft_p99_ms=150.0, itl_p99_ms=50.0, e2e_p99_ms=1000.0)
    constraints = scoring.constraint_values(result, slo)
    assert constraints[:3] == pytest.approx([50.0, -30.0, 0.0])
    assert not scoring.is_feasible(constraints)  # TTFT misses its target by 50 ms
    relaxed = scoring.constraint_values(result, Slo(ttft_p99_ms=250.0))
    assert scoring.is_feasible(relaxed)


def test_too_many_failed_requests_is_infeasible() -> None:
    constraints = scoring.constraint_values(complete(errors=0.05), Slo())
    assert constraints[3] == pytest.approx(0.04)
    assert not scoring.is_feasible(constraints)


def test_a_latency_without_samples_does_not_violate_its_slo() -> None:
    # One-token outputs have no inter-token latency: the window P99 is NaN. Optuna rejects NaN
    # constraint values, and nothing was slower than the target.
    result = complete(itl=math.nan)
    constraints = scoring.constraint_values(result, Slo(itl_p99_ms=50.0))
    assert constraints[1] == scoring.FEASIBLE
    assert not any(math.isnan(c) for c in constraints)


def test_failed_trials_violate_every_constraint() -> None:
    constraints = scoring.constraint_values(failed(), Slo())
    assert constraints == [scoring.VIOLATED] * 4
    assert not scoring.is_feasible(constraints)


def test_is_feasible_boundary() -> None:
    assert scoring.is_feasible([0.0, -1.0])
    assert not scoring.is_feasible([0.0, 1e-9])
    assert scoring.is_feasible([])


# --- scores -----------------------------------------------------------------------------------


@pytest.mark.parametrize("objective", [o for o in Objective if o is not Objective.CAPACITY])
def test_the_reference_scores_one_on_every_preset(objective: Objective) -> None:
    assert scoring.score(REF, objective, REF) == pytest.approx(1.0)


def _with_capacity(result: TrialResult, capacity: float) -> TrialResult:
    metrics = dict(result.metrics)
    metrics["capacity_output_throughput"] = Estimate(capacity, capacity, capacity, (capacity,))
    return dataclasses.replace(result, metrics=metrics)


def test_the_capacity_preset_scores_the_curve_not_the_fixed_load() -> None:
    ref = _with_capacity(REF, 500.0)
    better = _with_capacity(complete(thr=50.0, p99=900.0, mem_gib=11.0), 1000.0)
    assert scoring.score(ref, Objective.CAPACITY, ref) == pytest.approx(1.0)
    assert scoring.score(better, Objective.CAPACITY, ref) == pytest.approx(2.0)
    values = scoring.objective_values(better, memory_ceiling_gib=80, objective=Objective.CAPACITY)
    assert values[0] == 1000.0
    # No load point met the SLO: capacity 0, infeasible; no curve at all: scores nothing.
    none_met = _with_capacity(REF, 0.0)
    assert not scoring.is_feasible(scoring.constraint_values(none_met, Slo(), Objective.CAPACITY))
    assert scoring.is_feasible(scoring.constraint_values(ref, Slo(), Objective.CAPACITY))
    assert scoring.score(REF, Objective.CAPACITY, ref) == 0.0


@pytest.mark.parametrize(
    ("objective", "expected"),
    [
        (Objective.THROUGHPUT, 2.0),
        (Objective.BALANCED, 2**0.5),
        (Objective.LATENCY, 1.0),
        (Objective.MEMORY, 1.0),  # throughput beyond the reference buys no memory credit
    ],
)
def test_twice_the_throughput(objective: Objective, expected: float) -> None:
    assert scoring.score(complete(thr=200.0), objective, REF) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("objective", "expected"),
    [
        (Objective.THROUGHPUT, 1.0),
        (Objective.BALANCED, 2**0.3),
        (Objective.LATENCY, 2.0),
        (Objective.MEMORY, 1.0),
    ],
)
def test_half_the_p99(objective: Objective, expected: float) -> None:
    assert scoring.score(complete(p99=500.0), objective, REF) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("objective", "expected"),
    [
        (Objective.THROUGHPUT, 1.0),
        (Objective.BALANCED, 2**0.2),
        (Objective.LATENCY, 1.0),
        (Objective.MEMORY, 2.0),
    ],
)
def test_half_the_memory(objective: Objective, expected: float) -> None:
    assert scoring.score(complete(mem_gib=5.0), objective, REF) == pytest.approx(expected)


def test_memory_preset_never_rewards_losing_throughput() -> None:
    # Half the memory at half the throughput is no better than the defaults...
    assert scoring.score(complete(mem_gib=5.0, thr=50.0), Objective.MEMORY, REF) == pytest.approx(
        1.0
    )
    # ...and a config that saves nothing while losing throughput scores below them.
    assert scoring.score(complete(thr=80.0), Objective.MEMORY, REF) == pytest.approx(0.8)
    # Extra throughput does not multiply the memory saving either.
    both = complete(mem_gib=5.0, thr=300.0)
    assert scoring.score(both, Objective.MEMORY, REF) == pytest.approx(2.0)


def test_balanced_combines_the_weighted_ratios() -> None:
    better = complete(thr=150.0, p99=800.0, mem_gib=12.0)
    expected = 1.5**0.5 * (1000 / 800) ** 0.3 * (10 / 12) ** 0.2
    assert scoring.score(better, Objective.BALANCED, REF) == pytest.approx(expected)


@pytest.mark.parametrize("objective", list(Objective))
def test_a_failed_trial_scores_zero(objective: Objective) -> None:
    assert scoring.score(failed(), objective, REF) == 0.0


@pytest.mark.parametrize("objective", list(Objective))
def test_score_is_score_values_on_the_stored_objective_values(objective: Objective) -> None:
    result = complete(thr=140.0, p99=900.0, mem_gib=11.0)
    values = scoring.objective_values(result, memory_ceiling_gib=80, objective=objective)
    ref_values = scoring.objective_values(REF, memory_ceiling_gib=80, objective=objective)
    assert scoring.score(result, objective, REF) == pytest.approx(
        scoring.score_values(values, objective, ref_values)
    )


def test_a_failed_reference_means_raw_values() -> None:
    result = complete(thr=140.0, p99=900.0, mem_gib=11.0)
    raw = scoring.score_values([140.0, 11.0, 900.0], Objective.BALANCED)
    assert scoring.score(result, Objective.BALANCED, failed()) == pytest.approx(raw)
    assert scoring.score(result, Objective.BALANCED, None) == pytest.approx(raw)
    assert scoring.score(result, Objective.THROUGHPUT) == pytest.approx(140.0)


@pytest.mark.parametrize("objective", [Objective.BALANCED, Objective.THROUGHPUT, Objective.LATENCY])
def test_the_reference_only_rescales(objective: Objective) -> None:
    trials = [[100.0, 10.0, 1000.0], [150.0, 12.0, 1100.0], [90.0, 6.0, 700.0], [120, 9.0, 1500]]
    ref = trials[0]
    with_ref = [scoring.score_values(v, objective, ref) for v in trials]
    raw = [scoring.score_values(v, objective) for v in trials]
    assert sorted(range(4), key=with_ref.__getitem__) == sorted(range(4), key=raw.__getitem__)


@pytest.mark.parametrize("objective", [Objective.BALANCED, Objective.THROUGHPUT, Objective.MEMORY])
def test_no_throughput_scores_zero(objective: Objective) -> None:
    # A config that produced no tokens is worthless, however little memory it used.
    assert scoring.score_values([0.0, 1.0, 100.0], objective, [100.0, 10.0, 1000.0]) == 0.0


def test_penalty_values_score_zero() -> None:
    penalty = scoring.objective_values(failed(), memory_ceiling_gib=22.5)
    assert scoring.score_values(penalty, Objective.BALANCED, [100.0, 10.0, 1000.0]) == 0.0


def test_missing_memory_telemetry_is_neutral() -> None:
    # A machine without memory telemetry reports 0 GiB: neither a win nor a crash.
    score = scoring.score_values([200.0, 0.0, 1000.0], Objective.BALANCED, [100.0, 10.0, 1000.0])
    assert score == pytest.approx(2**0.5)
    assert scoring.score_values([100.0, 0.0, 1000.0], Objective.MEMORY, [100.0, 0.0, 1000.0]) == 1


# --- SLO text ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "ttft_p99=500ms,itl_p99=50ms,e2e_p99=10s",
            Slo(ttft_p99_ms=500.0, itl_p99_ms=50.0, e2e_p99_ms=10_000.0),
        ),
        ("ttft_p99=250", Slo(ttft_p99_ms=250.0)),  # a bare number is milliseconds
        ("e2e_p99=1.5s", Slo(e2e_p99_ms=1500.0)),
        (" ttft_p99 = 0.5s , ", Slo(ttft_p99_ms=500.0)),
        ("itl_p99_ms=30", Slo(itl_p99_ms=30.0)),
        ("", Slo()),
        ("none", Slo()),
    ],
)
def test_parse_slo(text: str, expected: Slo) -> None:
    assert parse_slo(text) == expected


def test_empty_slo_is_empty() -> None:
    assert parse_slo("").is_empty()


@pytest.mark.parametrize("text", ["ttft=500ms", "p99", "ttft_p99:500ms", "ttft_p90=1s"])
def test_parse_slo_rejects_bad_names_listing_the_allowed_ones(text: str) -> None:
    with pytest.raises(ValueError, match="bad SLO item") as info:
        parse_slo(text)
    assert "ttft_p99" in str(info.value) and "e2e_p99" in str(info.value)


@pytest.mark.parametrize("text", ["ttft_p99=fast", "ttft_p99=5us", "ttft_p99=", "e2e_p99=10 min"])
def test_parse_slo_rejects_bad_values_saying_which_units(text: str) -> None:
    with pytest.raises(ValueError, match="ms or s"):
        parse_slo(text)


@pytest.mark.parametrize("text", ["ttft_p99=-5ms", "ttft_p99=0", "e2e_p99=nan", "e2e_p99=inf"])
def test_parse_slo_rejects_non_positive_values(text: str) -> None:
    with pytest.raises(ValueError, match="positive"):
        parse_slo(text)


@pytest.mark.parametrize("text", [",", " , ,", ",,"])
def test_parse_slo_rejects_separators_that_name_no_objective(text: str) -> None:
    # Read as "no SLO" before: a typo that silently dropped every constraint.
    with pytest.raises(ValueError, match=r"names no objective.*'none'"):
        parse_slo(text)


def test_parse_slo_rejects_a_name_given_twice() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_slo("ttft_p99=1s,ttft_p99=2s")


@pytest.mark.parametrize(
    "slo",
    [Slo(), Slo(ttft_p99_ms=500.0), Slo(ttft_p99_ms=0.25, itl_p99_ms=40.0, e2e_p99_ms=12_000.0)],
)
def test_format_slo_round_trips(slo: Slo) -> None:
    assert parse_slo(format_slo(slo)) == slo


def test_format_slo_text() -> None:
    assert format_slo(Slo(ttft_p99_ms=500.0, e2e_p99_ms=10_000.0)) == (
        "ttft_p99=500ms,e2e_p99=10000ms"
    )
    assert format_slo(Slo()) == "none"
