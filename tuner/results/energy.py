"""How the measured GPU energy of a trial is shown, and why a trial has none.

The numbers themselves are measured per window (:mod:`tuner.telemetry.energy`) and summarized
into a trial's ``joules_per_output_token`` and ``gpu_power_w`` (:data:`tuner.load.stats.
ENERGY_METRICS`); this module only words them. On a CPU nothing is measured, and nothing is
estimated in its place: the trial says so.
"""

from __future__ import annotations

from collections.abc import Mapping

from tuner.domain import Estimate

PER_TOKEN = "joules_per_output_token"
POWER = "gpu_power_w"
NOT_ON_CPU = "energy: not measured on CPU"
NOT_MEASURED = (
    "energy: not measured (recorded before tuner read NVML's energy, or the GPU gave neither "
    "its energy counter nor its power)"
)


def absent(metrics: Mapping[str, Estimate], *, on_gpu: bool) -> str | None:
    """Why a measured trial has no energy (``on_gpu``: it ran on a GPU); None when it has."""
    if PER_TOKEN in metrics:
        return None
    return NOT_MEASURED if on_gpu else NOT_ON_CPU


def power(e: Estimate) -> str:
    return f"{e.median:.0f} [{e.low:.0f}, {e.high:.0f}]"
