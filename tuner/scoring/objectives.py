"""Objectives, SLO constraints and the scalar score: pure functions of trial results.

The study optimises three objectives at once (Optuna multi-objective):

    1. output tokens/s            (maximise)  median over the measurement windows; for the
                                              capacity preset, the capacity read from the
                                              launch's load curve (tuner.load.curve)
    2. peak memory in GiB         (minimise)  GPU memory over baseline; host RSS on CPU
    3. P99 end-to-end latency ms  (minimise)  median over windows of each window's P99

SLOs become Optuna constraints: one value per SLO field, ``measured - target`` (feasible when
<= 0), plus one for the error rate (at most 1 % of requests may fail). A configuration that could
not run at all (a finding: it does not fit, it is not valid here) is reported with penalty
values and a violated constraint, so constraint-aware samplers learn to avoid its region.

For ranking, each objective preset has one documented scalar score, a weighted geometric mean of
ratios against a reference (vLLM's defaults' search trial, when it completed):

    throughput : (thr / thr_ref)
    latency    : (p99_ref / p99)
    memory     : (mem_ref / mem) * min(1, thr / thr_ref)        (never buy memory with throughput)
    capacity   : (cap / cap_ref)           cap = capacity under the SLO, from the load curve
    cost       : (usd_ref / usd)           usd = $ per 1M output tokens at the SLO's throughput
                 = (thr_slo / thr_slo_ref) at one price per GPU-hour (tuner.scoring.cost):
                 the curve's capacity where the trial measured one, else the fixed load's
                 throughput with the SLO as the constraint
    balanced   : (thr / thr_ref)^0.5 * (p99_ref / p99)^0.3 * (mem_ref / mem)^0.2

So a score of 1.25 reads "25 % better than the defaults on this objective". Without a reference
the raw values are used (ranking is the same, the reference only rescales; except that the memory
preset's throughput guard needs a reference to compare with). A configuration that produced no
tokens scores 0 on every preset that weighs throughput; a zero or missing memory or latency
number (no telemetry, no samples) is neutral.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from tuner.domain import SLO_METRICS, Estimate, Objective, Slo, TrialResult, TrialStatus
from tuner.load import FEASIBLE, slo_margins
from tuner.scoring.cost import slo_throughput

GIB = 1024**3
# Penalty objective values for findings: worse than anything a real trial can measure.
PENALTY_LATENCY_MS = 1e7
VIOLATED = 1.0

DIRECTIONS: tuple[Literal["maximize", "minimize"], ...] = ("maximize", "minimize", "minimize")
OBJECTIVE_NAMES = ("output_throughput", "memory_gib", "e2e_p99_ms")
CONSTRAINT_NAMES = (*SLO_METRICS, "error_rate")  # in the order of load.slo_margins

WEIGHTS: Mapping[Objective, tuple[float, float, float]] = {
    Objective.THROUGHPUT: (1.0, 0.0, 0.0),
    Objective.LATENCY: (0.0, 1.0, 0.0),
    Objective.MEMORY: (0.0, 0.0, 1.0),
    Objective.BALANCED: (0.5, 0.3, 0.2),
    Objective.CAPACITY: (1.0, 0.0, 0.0),
    Objective.COST: (1.0, 0.0, 0.0),
}


@dataclass(frozen=True)
class Headline:
    """The three numbers the objectives use, taken from a complete trial."""

    throughput: float
    memory_gib: float
    p99_ms: float

    @classmethod
    def of(cls, result: TrialResult, objective: Objective | None = None) -> Headline:
        if result.status is not TrialStatus.COMPLETE:
            raise ValueError("only a complete trial has headline numbers")
        return cls.of_metrics(result.metrics, objective, memory_bytes=result.memory.headline_bytes)

    @classmethod
    def of_metrics(
        cls,
        metrics: Mapping[str, Estimate],
        objective: Objective | None = None,
        *,
        memory_bytes: int | None = None,
    ) -> Headline:
        """The headline numbers of a complete trial's metrics; throughput is the curve's
        capacity for the capacity preset (0 for a trial that measured no curve: it cannot show
        a capacity). Memory without ``memory_bytes`` is 0 (unknown: neutral in the score)."""
        if objective is Objective.CAPACITY:
            cap = metrics.get("capacity_output_throughput")
            throughput = cap.median if cap is not None else 0.0
        elif objective is Objective.COST:
            throughput = slo_throughput(metrics)[0].median
        else:
            throughput = metrics["output_throughput"].median
        return cls(
            throughput=throughput,
            memory_gib=(memory_bytes or 0) / GIB,
            p99_ms=metrics["e2e_p99_ms"].median,
        )

    def as_values(self) -> list[float]:
        return [self.throughput, self.memory_gib, self.p99_ms]


def objective_values(
    result: TrialResult, *, memory_ceiling_gib: float, objective: Objective | None = None
) -> list[float]:
    """Values for Optuna's three objectives; penalties for a trial that produced nothing."""
    if result.status is TrialStatus.COMPLETE:
        return Headline.of(result, objective).as_values()
    return [0.0, memory_ceiling_gib, PENALTY_LATENCY_MS]


def constraint_values(
    result: TrialResult, slo: Slo, objective: Objective | None = None
) -> list[float]:
    """Optuna constraint values (<= 0 is feasible): :func:`metric_constraints` of a complete
    trial's metrics; all violated for a trial that produced nothing."""
    if result.status is not TrialStatus.COMPLETE:
        return [VIOLATED] * 4
    return metric_constraints(result.metrics, slo, objective)


def metric_constraints(
    metrics: Mapping[str, Estimate], slo: Slo, objective: Objective | None = None
) -> list[float]:
    """Optuna constraint values (<= 0 is feasible) of a complete trial's metrics: one per SLO
    field, then the error rate.

    The list always has four entries (ttft, itl, e2e, errors) so every trial of a study has the
    same shape; unset SLO fields are reported as feasible. For the capacity preset the SLO was
    applied when the capacity was read from the curve: a trial is feasible when some load
    point met it (a capacity above 0).
    """
    curve = "capacity_output_throughput" in metrics
    if objective is Objective.CAPACITY or (objective is Objective.COST and curve):
        cap = metrics.get("capacity_output_throughput")
        met = cap is not None and cap.median > 0
        return [FEASIBLE if met else VIOLATED] * 4
    # Optuna rejects NaN constraint values: slo_margins reports a latency without samples as met.
    return slo_margins(metrics, slo)


def is_feasible(constraints: Sequence[float]) -> bool:
    return all(c <= 0 for c in constraints)


def score(result: TrialResult, objective: Objective, reference: TrialResult | None = None) -> float:
    """The preset's scalar score (see the module docstring). 0.0 for a trial with no numbers."""
    if result.status is not TrialStatus.COMPLETE:
        return 0.0
    ref = reference if reference is not None and reference.status is TrialStatus.COMPLETE else None
    return score_metrics(
        result.metrics,
        objective,
        ref.metrics if ref is not None else None,
        memory_bytes=result.memory.headline_bytes,
        reference_memory_bytes=ref.memory.headline_bytes if ref is not None else None,
    )


def score_metrics(
    metrics: Mapping[str, Estimate],
    objective: Objective,
    reference: Mapping[str, Estimate] | None = None,
    *,
    memory_bytes: int | None = None,
    reference_memory_bytes: int | None = None,
) -> float:
    """The preset's scalar score of a complete trial's metrics, against a reference trial's
    metrics (raw values without one). Memory not given is unknown: neutral in the score."""
    ref = None
    if reference is not None:
        ref = Headline.of_metrics(
            reference, objective, memory_bytes=reference_memory_bytes
        ).as_values()
    values = Headline.of_metrics(metrics, objective, memory_bytes=memory_bytes).as_values()
    return score_values(values, objective, ref)


def score_values(
    values: Sequence[float], objective: Objective, reference: Sequence[float] | None = None
) -> float:
    """:func:`score` on objective values ``[throughput, memory_gib, p99_ms]`` as stored."""
    thr, mem, p99 = values
    ref_thr, ref_mem, ref_p99 = reference if reference is not None else (1.0, 1.0, 1.0)
    thr_ratio = _ratio(thr, ref_thr)
    lat_ratio = _ratio(ref_p99, p99)
    mem_ratio = _ratio(ref_mem, mem)
    if not thr > 0 and objective is not Objective.LATENCY:
        # _ratio would call zero throughput neutral; a config that produced nothing is worthless.
        return 0.0
    if objective is Objective.MEMORY:
        return mem_ratio * min(1.0, thr_ratio)
    w_thr, w_lat, w_mem = WEIGHTS[objective]
    return float(
        math.exp(
            w_thr * math.log(thr_ratio) + w_lat * math.log(lat_ratio) + w_mem * math.log(mem_ratio)
        )
    )


def _ratio(num: float, den: float) -> float:
    # Zero memory (a fake runner on a machine without telemetry) or NaN (no samples) must not
    # blow up the score: such a number says nothing, so the ratio is neutral.
    if not (num > 0 and den > 0):
        return 1.0
    return num / den
