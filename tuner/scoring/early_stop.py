"""Early stopping: a trial whose first load point is clearly worse than the best so far stops there.

Optuna has no pruner for multi-objective studies, so the rule is tuner's own, a pure function
of two standings (:class:`tuner.scoring.ranking.Standing`):

- ``partial``: the trial's numbers so far (its first load point, or its first measurement
  window), scored like a whole trial;
- ``reference``: the best trial so far, at the same load point (its first window, or its first
  point of the same curve), so that a warm-up or a load level that differs between the first
  point and the whole trial does not count against the candidate.

The trial stops when the reference meets the SLO and the candidate either produced nothing,
clearly misses the SLO (:func:`meets_slo_within_noise` judges a latency bound with the noise
allowed for), or scores below the reference by more than the noise: ``log(reference / partial)
> margin``. The margin is ``z`` standard deviations of the difference of two single-point
measurements of different launches, ``sqrt(2 * (launch_sigma^2 + window_sigma^2))``, from the
launch-to-launch and window-to-window spreads the study's repeated launches measured (log scale).
With ``z = 2`` a configuration exactly as good as the reference is stopped by chance 2.3 % of
the time; the best so far is the maximum of noisy trials, lucky more often than not, so
``bench/search_replay.py`` measures what the rule really costs in lost configurations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tuner.domain import SLO_METRICS, Slo
from tuner.load import MAX_ERROR_RATE
from tuner.scoring.ranking import Standing


@dataclass(frozen=True)
class StopPolicy:
    """How much worse than the reference a first point may be before the trial stops."""

    launch_sigma: float  # log-scale SD of a launch's score across launches of one config
    window_sigma: float = 0.0  # log-scale SD of one window around its launch's median
    z: float = 2.0

    def __post_init__(self) -> None:
        if self.launch_sigma < 0 or self.window_sigma < 0 or not self.z > 0:
            raise ValueError("the spreads must not be negative and z must be positive")

    @property
    def margin(self) -> float:
        """The log-ratio beyond which the partial score is clearly below the reference."""
        return self.z * math.sqrt(2.0 * (self.launch_sigma**2 + self.window_sigma**2))


@dataclass(frozen=True)
class StopDecision:
    stop: bool
    reason: str
    ratio: float | None = None  # partial score / reference score, where both have one


def early_stop(partial: Standing, reference: Standing | None, policy: StopPolicy) -> StopDecision:
    """Whether a trial stops after its first load point (see the module docstring)."""
    if reference is None:
        return StopDecision(False, "no earlier trial to compare with")
    ref = _finite(reference.score)
    if not reference.feasible or ref is None or ref <= 0:
        return StopDecision(False, "the best so far has no SLO-feasible score to compare with")
    score = _finite(partial.score)
    if score is None or score <= 0:
        return StopDecision(True, "the first load point produced nothing", 0.0)
    ratio = score / ref
    if not partial.feasible:
        return StopDecision(True, "the first load point misses the SLO beyond the noise", ratio)
    if math.log(ref / score) > policy.margin:
        return StopDecision(
            True,
            f"the first load point scores x{ratio:.3f} of the best so far, below the noise "
            f"allowance x{math.exp(-policy.margin):.3f}",
            ratio,
        )
    return StopDecision(False, f"x{ratio:.3f} of the best so far: within the noise", ratio)


def meets_slo_within_noise(metrics: Mapping[str, float], slo: Slo, margin: float) -> bool:
    """Whether one point's P99 latencies are within their SLO bounds times ``exp(margin)`` and
    its error rate within the ceiling: a miss that the noise can explain is not a miss yet."""
    for name in SLO_METRICS:
        bound = getattr(slo, name)
        value = metrics.get(name, math.nan)
        if bound is not None and math.isfinite(value) and value > bound * math.exp(margin):
            return False
    return metrics.get("error_rate", 0.0) <= MAX_ERROR_RATE


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
