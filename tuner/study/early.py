"""Early stopping inside a study (``[study] early_stop = true``, ``tuner run --early-stop``): the
first load point of a trial against the same point of the best trial so far, by the rule of
:mod:`tuner.scoring.early_stop`, with the noise this study has measured.

- **Score of a point**: the study objective's score of that point alone (throughput and P99
  latency; memory is not known before the launch ends, so it counts as equal). The capacity
  objective compares points by the throughput objective's score; the memory objective is never
  stopped early (its score is the memory).
- **Noise**: the SD of a launch's score by the metrics the objective scores, as the lever
  plan's screening takes it (:func:`tuner.study.planning.score_sd`: P99 E2E latency's for the
  latency objective), pooled over the study's configurations measured more than once, else
  :data:`DEFAULT_LAUNCH_SIGMA`; the window-to-window spread of the score over the best trial's
  own windows at that point.
- A stopped trial is PRUNED/STOPPED_EARLY with its partial numbers: Optuna is told them (it
  learns the region is poor), the ranking never holds it beside whole trials.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from tuner.abtest import log_values
from tuner.compose import StudyContext
from tuner.db import TrialRow
from tuner.domain import (
    Objective,
    ServingConfig,
    Slo,
    TrialResult,
    TrialStatus,
    WindowMetrics,
    Workload,
)
from tuner.load import FirstPointCheck, first_point_windows, summarize
from tuner.scoring import Standing, StopPolicy, meets_slo_within_noise
from tuner.scoring import objectives as scoring
from tuner.scoring.early_stop import early_stop
from tuner.scoring.noise import Launch, components
from tuner.study.planning import score_sd
from tuner.study.standings import standings

# Log-scale SD of a configuration's throughput across fresh launches when the study has not
# measured one: the H200's +-20 % between launches of one configuration in the first studies.
# docs/results/noise-h200.md has since measured a launch value's SD of 0.056-0.079 there, so
# this errs wide (a point is stopped early less often, never more).
DEFAULT_LAUNCH_SIGMA = 0.15


def point_standing(windows: Sequence[WindowMetrics], ctx: StudyContext, margin: float) -> Standing:
    """The score and SLO feasibility of one load point's windows (see the module docstring)."""
    metrics = summarize(windows)
    objective = ctx.spec.objective
    if objective is Objective.CAPACITY:
        objective = Objective.THROUGHPUT
    medians = {k: e.median for k, e in metrics.items()}
    feasible = meets_slo_within_noise(medians, ctx.slo, margin)
    # Memory is not known yet: left out, it is neutral in the score.
    return Standing(feasible, scoring.score_metrics(metrics, objective))


def launch_sigma(rows: Iterable[TrialResult], objective: Objective) -> float:
    """Log-scale SD of a launch's ``objective`` score (:func:`tuner.study.planning.score_sd`),
    from each scored metric's spread across launches of one configuration among the complete
    ``rows`` (:func:`tuner.scoring.noise.components`, pooled over configurations);
    :data:`DEFAULT_LAUNCH_SIGMA` where a scored metric has fewer than 2 degrees of freedom
    (throughput's narrower spread does not stand in for a P99's here: it would stop more)."""
    groups: dict[ServingConfig, str] = {}
    launches: dict[str, list[Launch]] = {}
    for row in rows:
        if row.status is TrialStatus.COMPLETE:
            group = groups.setdefault(row.config, str(len(groups)))
            for name, ls in log_values(row).items():
                launches.setdefault(name, []).append(Launch(group, tuple(ls)))
    pooled = {n: c for n, ls in launches.items() if (c := components(ls)) and c.df >= 2}
    sd = score_sd(pooled, objective, stand_in=False)[0]
    return DEFAULT_LAUNCH_SIGMA if sd is None else sd


def point_spread(
    windows: Sequence[WindowMetrics],
    workload: Workload,
    objective: Objective = Objective.THROUGHPUT,
) -> float:
    """The window-to-window SD of the log ``objective`` score (memory left out) at the first
    load point of ``workload``: over all the windows of a one-point workload (its first alone
    has none), over the first point's of a ladder. Over a ladder's points it was the curve's
    rise (x10 from the bottom rung to the top), which widened the margin until nothing ever
    stopped."""
    one_point = len(workload.load_points()) == 1
    first = windows if one_point else windows[: first_point_windows(workload)]
    logs = [
        math.log(scoring.score_values((w.output_throughput, 0.0, w.e2e_ms.p99), objective))
        for w in first
        if w.output_throughput > 0
    ]
    return statistics.stdev(logs) if len(logs) >= 2 else 0.0


# Why --early-stop does nothing under the memory objective (the study's header says it).
MEMORY_NOTE = (
    "early stopping is off for the memory objective: its score is the peak GPU memory, known "
    "only when a trial ends"
)


def judged_early(objective: Objective) -> bool:
    """Whether a trial's score under ``objective`` can be judged at its first load point: not
    the memory objective's, the peak GPU memory (:data:`MEMORY_NOTE`)."""
    return objective is not Objective.MEMORY


def first_point_check(
    ctx: StudyContext, rows: Sequence[TrialRow], slo: Slo
) -> FirstPointCheck | None:
    """The check for the study's next trial, from the study's trial ``rows`` (``slo``: the
    one stored with it); None when early stopping is off or has nothing to compare with yet
    (no SLO-feasible trial, or the memory objective)."""
    if not ctx.spec.early_stop or not judged_early(ctx.spec.objective):
        return None
    ranked = [r for r in standings(rows, ctx.spec.objective, slo) if r.feasible]
    if not ranked:
        return None
    best = ranked[0].row
    n = first_point_windows(ctx.workload)
    if len(best.windows) < n:
        return None
    spread = point_spread(best.windows, ctx.workload, ctx.spec.objective)
    policy = StopPolicy(launch_sigma(rows, ctx.spec.objective), spread)
    reference = point_standing(best.windows[:n], ctx, policy.margin)

    def check(windows: tuple[WindowMetrics, ...]) -> str | None:
        decision = early_stop(point_standing(windows, ctx, policy.margin), reference, policy)
        if not decision.stop:
            return None
        return f"{decision.reason} (trial {best.number}'s first point as the reference)"

    return check
