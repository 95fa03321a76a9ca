"""Early stopping inside a study (``[study] early_stop = true``, ``tuner run --early-stop``): the
first load point of a trial against the same point of the best trial so far, by the rule of
:mod:`tuner.scoring.early_stop`, with the noise this study has measured.

- **Score of a point**: the study objective's score of that point alone (throughput and P99
  latency; memory is not known before the launch ends, so it counts as equal). The capacity
  objective compares points by the throughput objective's score; the memory objective is never
  stopped early (its score is the memory).
- **Noise**: the launch-to-launch spread of the study's configurations measured more than once
  (SD of log output throughput, pooled), else :data:`DEFAULT_LAUNCH_SIGMA`; the window-to-window
  spread from the best trial's own windows at that point.
- A stopped trial is PRUNED/STOPPED_EARLY with its partial numbers: Optuna is told them (it
  learns the region is poor), the ranking never holds it beside whole trials.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from tuner.compose import StudyContext
from tuner.db import TrialRow
from tuner.domain import Objective, ServingConfig, Slo, TrialStatus, WindowMetrics, Workload
from tuner.load import FirstPointCheck, first_point_windows, summarize
from tuner.scoring import Standing, StopPolicy, meets_slo_within_noise
from tuner.scoring import objectives as scoring
from tuner.scoring.early_stop import early_stop
from tuner.scoring.noise import Launch, components
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


def launch_sigma(rows: Iterable[TrialRow]) -> float:
    """Pooled log-scale SD of output throughput across launches of one configuration, from
    the study's complete trials among ``rows`` (:func:`tuner.scoring.noise.components`, one
    value a launch); :data:`DEFAULT_LAUNCH_SIGMA` below 2 degrees of freedom."""
    groups: dict[ServingConfig, str] = {}
    launches = [
        Launch(groups.setdefault(row.config, str(len(groups))), (math.log(thr.median),))
        for row in rows
        if row.status is TrialStatus.COMPLETE
        and (thr := row.metrics.get("output_throughput")) is not None
        and thr.median > 0
    ]
    pooled = components(launches, windows=1)
    return DEFAULT_LAUNCH_SIGMA if pooled is None or pooled.df < 2 else pooled.sd


def _window_sigma(windows: Sequence[WindowMetrics]) -> float:
    logs = [math.log(w.output_throughput) for w in windows if w.output_throughput > 0]
    return statistics.stdev(logs) if len(logs) >= 2 else 0.0


def point_spread(windows: Sequence[WindowMetrics], workload: Workload) -> float:
    """The window-to-window SD (log output throughput) at the first load point of ``workload``:
    over all the windows of a one-point workload (its first alone has none), over the first
    point's of a ladder. Over a ladder's points it was the curve's rise (x10 from the bottom
    rung to the top), which widened the margin until nothing ever stopped."""
    one_point = len(workload.load_points()) == 1
    return _window_sigma(windows if one_point else windows[: first_point_windows(workload)])


def first_point_check(
    ctx: StudyContext, rows: Sequence[TrialRow], slo: Slo
) -> FirstPointCheck | None:
    """The check for the study's next trial, from the study's trial ``rows`` (``slo``: the
    one stored with it); None when early stopping is off or has nothing to compare with yet
    (no SLO-feasible trial, or the memory objective)."""
    if not ctx.spec.early_stop or ctx.spec.objective is Objective.MEMORY:
        return None
    ranked = [r for r in standings(rows, ctx.spec.objective, slo) if r.feasible]
    if not ranked:
        return None
    best = ranked[0].row
    n = first_point_windows(ctx.workload)
    if len(best.windows) < n:
        return None
    spread = point_spread(best.windows, ctx.workload)
    policy = StopPolicy(launch_sigma=launch_sigma(rows), window_sigma=spread)
    reference = point_standing(best.windows[:n], ctx, policy.margin)

    def check(windows: tuple[WindowMetrics, ...]) -> str | None:
        decision = early_stop(point_standing(windows, ctx, policy.margin), reference, policy)
        if not decision.stop:
            return None
        return f"{decision.reason} (trial {best.number}'s first point as the reference)"

    return check
