"""What a study's measurements cost: its price per GPU-hour (the spec's ``gpu_price`` or
``--gpu-price``, else the catalog's labelled default) and each trial's $ per 1M output tokens at
its SLO throughput (:mod:`tuner.scoring.cost`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tuner.catalog import GpuPrice, gpu_price
from tuner.domain import Estimate
from tuner.errors import UsageError
from tuner.scoring import trial_cost


def study_price(
    gpu: str, spec: Mapping[str, Any] | None, given: float | None = None
) -> GpuPrice | None:
    """The price of a study on GPU profile ``gpu`` with stored ``spec``: ``given`` (a reading
    command's ``--gpu-price``), else the spec's own ``gpu_price`` (``tuner run --gpu-price``
    lands there), else the catalog default; None without any."""
    stored = (spec or {}).get("gpu_price")
    if given is not None or stored is None:
        return gpu_price(gpu, given)
    try:
        value = float(stored)
    except (TypeError, ValueError):
        value = math.nan
    # Not the input cap (price_problem): a study stored by an older tuner may be dearer.
    if not (math.isfinite(value) and value >= 0):
        raise UsageError(
            f"the study's stored gpu_price {stored!r} is no price per GPU-hour",
            hint="`tuner best` and `tuner size` take one with --gpu-price, before the study's",
        )
    return GpuPrice(value, "the study's price")


def no_price(gpu: str) -> str:
    return (
        f"cost: no price per GPU-hour for {gpu} (the catalog has none): give one with "
        "--gpu-price (tuner best, tuner size; tuner run stores it with the study)"
    )


def usd(metrics: Mapping[str, Estimate], price: GpuPrice | None) -> Estimate | None:
    """$ per 1M output tokens of a trial's ``metrics`` at ``price``; None without either."""
    return None if price is None else trial_cost(metrics, price.usd_per_hour)


def usd_text(e: Estimate) -> str:
    return f"{e.median:.3g} [{e.low:.3g}, {e.high:.3g}]"
