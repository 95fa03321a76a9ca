"""What the repository hands out: frozen rows in domain types, never ORM objects."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from tuner.domain import FailureClass, Provenance, ServingConfig, TrialResult, TrialStatus
from tuner.domain.workload import overridden_name


class StudyStatus(enum.StrEnum):
    """Life cycle of a study (tuner's view, not Optuna's)."""

    QUEUED = "queued"
    RUNNING = "running"
    CONFIRMING = "confirming"  # one worker re-measures the best against the defaults
    FINISHED = "finished"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


# The key, in a study's stored spec, of why its worker could not run it ({"message", "hint"}):
# what `tuner worker` printed, kept for the client that queued the study.
RUN_FAILURE = "run_failure"


class TrialPhase(enum.StrEnum):
    SEARCH = "search"  # proposed by the sampler
    CONFIRM = "confirm"  # a re-run of a candidate (or the defaults) before recommending it


# The search trials that may use no place in a study's trial budget, as the surfaces name them.
FREE = {
    FailureClass.INVALID_CONFIG: "ruled out before launch",
    FailureClass.INTERRUPTED: "interrupted",
}


@dataclass(frozen=True)
class StudyRow:
    id: int
    name: str
    optuna_study_name: str
    created_at: float
    updated_at: float
    status: StudyStatus
    model: str
    model_source: str | None
    gpu: str
    workload: str
    objective: str
    slo: Mapping[str, Any]
    spec: Mapping[str, Any]
    emulated: bool
    vllm_version: str | None
    notes: str
    n_trials_requested: int | None
    # Search trials per status; every status is present.
    trial_counts: Mapping[TrialStatus, int] = field(default_factory=dict)
    # The confirmation phase's launches per status, kept apart from the search's.
    confirmation_counts: Mapping[TrialStatus, int] = field(default_factory=dict)
    # Search trials that used no place in the budget (:func:`budget_free`); every class of FREE.
    free_counts: Mapping[FailureClass, int] = field(default_factory=dict)

    @property
    def workload_label(self) -> str:
        """The load the study measured: its preset's name with the ``[workload]`` values it
        changed (:func:`overridden_name`, "smoke[concurrency_ladder=[2, 4]]"). Two studies of one
        preset with other values measured different loads: neither stands for the other."""
        return overridden_name(self.workload, self.workload_overrides)

    @property
    def workload_overrides(self) -> dict[str, Any]:
        """The ``[workload]`` values the study changed in its preset (its warm-up shapes)."""
        return dict(self.spec.get("workload_overrides") or {})

    @property
    def extra_args(self) -> tuple[str, ...]:
        """The study's own extra vLLM arguments: every launch had them before the flags."""
        return tuple(str(a) for a in self.spec.get("extra_args") or ())

    @property
    def n_trials(self) -> int:
        """Search trials, whatever their status (confirmation launches not included)."""
        return sum(self.trial_counts.values())

    @property
    def n_budget_trials(self) -> int:
        """Search trials that use a place in the budget (n_trials_requested), running ones
        included: :attr:`n_trials` less :attr:`free_counts`."""
        return self.n_trials - sum(self.free_counts.values())

    @property
    def free_label(self) -> str:
        """The search trials that used no place in the budget, named: "1 ruled out before
        launch, 1 interrupted"; "" when there are none."""
        return ", ".join(f"{n} {FREE[f]}" for f, n in self.free_counts.items() if n)

    @property
    def n_confirmation_launches(self) -> int:
        return sum(self.confirmation_counts.values())

    @property
    def failure(self) -> Mapping[str, str] | None:
        """Why the study failed to run (``{"message", "hint"}``, the hint possibly empty), while
        it is failed and its worker recorded why; else None."""
        record = self.spec.get(RUN_FAILURE) if self.status == StudyStatus.FAILED else None
        if not isinstance(record, Mapping) or not record.get("message"):
            return None
        return {"message": str(record["message"]), "hint": str(record.get("hint") or "")}


@dataclass(frozen=True, kw_only=True)
class TrialRow(TrialResult):
    """A stored trial: the result the runner reported (every field of :class:`TrialResult`,
    inherited, not restated; ``requests`` stay stored apart and are empty here) and what the
    study and the repository add to it."""

    id: int
    study_name: str
    number: int
    phase: TrialPhase
    is_baseline: bool
    config_label: str
    score: float | None
    objective_values: tuple[float, ...] | None
    # The queryable columns, copied from provenance / server when the trial finished
    # (None while it runs, or when the runner reported no provenance).
    gpu_name: str | None = None
    gpu_uuid: str | None = None
    driver_version: str | None = None
    vllm_version: str | None = None
    model: str | None = None
    workload: str | None = None
    emulated: bool | None = None
    hostname: str | None = None
    effective_backend: str | None = None
    kv_cache_tokens: int | None = None

    def to_result(self) -> TrialResult:
        """The trial as the runner reported it (RUNNING rows give a RUNNING result)."""
        return TrialResult(**{f.name: getattr(self, f.name) for f in fields(TrialResult)})

    @property
    def measured_values(self) -> list[float] | None:
        """Its objective values as measured; None for a trial that measured none (a failure's
        stored values are the penalty Optuna was told: 79.6 GiB, a P99 of 10,000 s)."""
        if self.status is TrialStatus.COMPLETE or self.failure is FailureClass.STOPPED_EARLY:
            return list(self.objective_values or []) or None
        return None


# How the study loop records, in a ruled-out trial's failure detail, that it took no place in
# the budget (Optuna's ``free`` mark, :mod:`tuner.study.sharing`); its other note is USED_NOTE.
FREE_NOTE = "no trial of the budget: the next draw takes its place"
USED_NOTE = "drawn again, it uses a trial of the budget"


def budget_free(rows: Iterable[TrialRow]) -> dict[FailureClass, int]:
    """How many search trials among ``rows`` used no place in their study's trial budget, per
    failure class, as the study loop counted them (:mod:`tuner.study.sharing`): every
    interrupted one (Ctrl-C, a lost worker), and each trial ruled out before launch
    (``invalid_config``) that the loop marked free (:data:`FREE_NOTE`: the first draw of a
    configuration; a study stored before 2026-12-07 has no such mark, and its loop counts them
    all)."""
    free = dict.fromkeys(FREE, 0)
    for row in rows:
        if row.phase is TrialPhase.SEARCH and (
            row.failure is FailureClass.INTERRUPTED
            or (row.failure is FailureClass.INVALID_CONFIG and FREE_NOTE in row.failure_detail)
        ):
            free[row.failure] += 1
    return free


def ruled_out_before(rows: Iterable[TrialRow], config: ServingConfig) -> bool:
    """Whether the space's rules ruled ``config`` out in a trial among ``rows``
    (``invalid_config``): the first such draw uses no place in the budget (the study loop's
    ``free`` mark, :data:`FREE_NOTE`), a second does, so a sampler that keeps drawing it cannot
    hold a study open for good."""
    return any(r.failure is FailureClass.INVALID_CONFIG and r.config == config for r in rows)


@dataclass(frozen=True)
class ComparisonRow:
    id: int
    created_at: float
    model: str
    gpu: str
    workload: str
    a_config: ServingConfig
    b_config: ServingConfig
    repeats: int
    results: Any  # JSON, shaped by `tuner compare`
    verdicts: Any  # JSON, shaped by `tuner compare`
    provenance: Provenance | None
    study_id: int | None


@dataclass(frozen=True)
class LaunchRow:
    """A stored launch summary (:class:`tuner.db.models.LaunchModel`): its key, its
    configuration and ``values``, the log window values per metric."""

    id: int
    created_at: float
    host: str
    gpu: str
    vllm_version: str
    model: str
    workload: str
    windows: int
    placement: str
    config_label: str
    config: ServingConfig
    is_defaults: bool
    source: str
    run: str
    values: Mapping[str, tuple[float, ...]]
    wall_s: float | None
    startup_s: float | None
