"""The finding guard of A/B runs: a configuration that cannot start here (a *finding*: it does not
fit, the backend is not supported) is not launched again, and neither is one that asks at least
as much of the machine; a comparison with such a side is not a measurement of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tuner.catalog import dominated_by
from tuner.domain import (
    FailureClass,
    ModelSpec,
    ServingConfig,
    Slo,
    TrialResult,
    TrialStatus,
    Workload,
)
from tuner.load import QUICK, FirstPointCheck

if TYPE_CHECKING:
    from tuner.runner import PhaseCallback, TrialRunner


class FindingGuard:
    """A :class:`tuner.runner.vllm.TrialRunner` that skips configurations a finding made hopeless.

    After a launch fails with a finding, a configuration that asks at least as much (see
    :func:`tuner.catalog.rules.dominated_by`: more memory utilization after MEMORY_EXCEEDED,
    the same backend after UNSUPPORTED, ...) comes back PRUNED as DOMINATED, never launched;
    unless it started here already, which no rule of thumb overrules.
    """

    def __init__(self, runner: TrialRunner, model: ModelSpec) -> None:
        self.runner = runner
        self.model = model
        self.failures: list[tuple[ServingConfig, FailureClass]] = []
        self.started: list[ServingConfig] = []  # configurations a launch of which came up

    def run(
        self,
        config: ServingConfig,
        workload: Workload,
        *,
        slo: Slo | None = None,
        on_phase: PhaseCallback | None = None,
        canary: Sequence[str] = QUICK,
        first_point: FirstPointCheck | None = None,
    ) -> TrialResult:
        failed = None if config in self.started else dominated_by(self.model, config, self.failures)
        if failed is not None:
            cls = next(f for c, f in self.failures if c == failed)
            return TrialResult(
                config=config,
                status=TrialStatus.PRUNED,
                failure=FailureClass.DOMINATED,
                failure_detail=f"{failed.label()} could not start here ({cls.value}) and "
                "this asks at least as much",
            )
        result = self.runner.run(
            config, workload, slo=slo, on_phase=on_phase, canary=canary, first_point=first_point
        )
        if result.failure is not None and result.failure.is_finding:
            self.failures.append((config, result.failure))
        elif result.status is TrialStatus.COMPLETE and config not in self.started:
            self.started.append(config)
        return result


def finding_of(results: Sequence[TrialResult]) -> str | None:
    """The finding (a config that cannot start here) among ``results``, as text; else None."""
    for r in results:
        if r.failure is not None and r.failure.is_finding:
            return f"{r.failure.value}: {r.failure_detail}"
    return None
