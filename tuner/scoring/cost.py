"""Dollars per million output tokens, from a price per GPU-hour and a measured throughput.

One server is one GPU (tuner launches no tensor parallelism), so a configuration that serves
``T`` output tokens/s on a GPU rented at ``P`` $/hour costs ``P / (T * 3600) * 1e6``, ``T``
being the throughput at the SLO (:func:`slo_throughput`). Where the price comes from and what
each figure means: ``docs/cost.md``. Cost falls as throughput rises, so the range of a cost is
the throughput's range reversed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tuner.domain import Estimate

SECONDS_PER_HOUR = 3600.0
TOKENS = 1e6  # "per million output tokens"
CAPACITY = "capacity_output_throughput"
FIXED_LOAD = "output_throughput"


def usd_per_million(tokens_per_s: float, usd_per_hour: float) -> float:
    """Dollars per million output tokens at ``tokens_per_s`` on one GPU at ``usd_per_hour``;
    infinite for a throughput of 0 (nothing served), NaN for a NaN throughput."""
    if usd_per_hour < 0:
        raise ValueError(f"a GPU price is not negative, got {usd_per_hour}")
    if math.isnan(tokens_per_s):
        return math.nan
    if tokens_per_s <= 0:
        return math.inf
    return usd_per_hour / (tokens_per_s * SECONDS_PER_HOUR) * TOKENS


def slo_throughput(metrics: Mapping[str, Estimate]) -> tuple[Estimate, str]:
    """The output throughput a configuration serves within its SLO, and which metric it is:
    the load curve's capacity where there is one, else the fixed load's throughput."""
    if CAPACITY in metrics:
        return metrics[CAPACITY], CAPACITY
    return metrics[FIXED_LOAD], FIXED_LOAD


def cost_estimate(throughput: Estimate, usd_per_hour: float) -> Estimate:
    """``throughput`` (tok/s, median and range over windows) as $ per 1M output tokens: the
    median's cost, and the range from the highest throughput (lowest cost) to the lowest."""
    return Estimate(
        median=usd_per_million(throughput.median, usd_per_hour),
        low=usd_per_million(throughput.high, usd_per_hour),
        high=usd_per_million(throughput.low, usd_per_hour),
        values=tuple(usd_per_million(v, usd_per_hour) for v in throughput.values),
    )


def trial_cost(metrics: Mapping[str, Estimate], usd_per_hour: float) -> Estimate | None:
    """$ per 1M output tokens of a measured trial at its SLO throughput; None when it has no
    throughput (not measured)."""
    if CAPACITY not in metrics and FIXED_LOAD not in metrics:
        return None
    return cost_estimate(slo_throughput(metrics)[0], usd_per_hour)
