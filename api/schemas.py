"""Response models: the API's JSON shapes, built from the repository's frozen rows.

They are not table models: the database layout can change without changing the API. A schema
of a row is derived from it (:func:`row_fields`): it names only the row fields it leaves out,
the fields it sends in another shape (an enum as its text, a configuration as its knobs) and
its own. Floats that are not finite (a latency with no samples is NaN) are sent as ``null``:
JSON has no NaN.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Collection, Mapping
from typing import Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model

from tuner.catalog import GpuPrice
from tuner.db import ComparisonRow, StudyRow, TrialRow, numbers_back, plan_back
from tuner.domain import Estimate, GpuProfile, jsonable, to_jsonable
from tuner.results import costs
from tuner.study import runner_gone


def finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def json_safe(obj: Any) -> Any:
    """Domain records as JSON values, with non-finite floats as None."""
    return jsonable.finite(to_jsonable(obj))[0]


M = TypeVar("M", bound=BaseModel)


def row_fields(
    row: type[Any], *, omit: Collection[str] = (), only: Collection[str] | None = None
) -> type[BaseModel]:
    """A pydantic model of the fields of the frozen row dataclass ``row`` (each required, typed
    as the row types it), less ``omit``, or just ``only``: the base of that row's schema,
    which redeclares a field only to send it in another shape."""
    hints = typing.get_type_hints(row)
    names = [f.name for f in dataclasses.fields(row)]
    unknown = set(omit) - set(names) | set(only or ()) - set(names)
    if unknown:
        raise TypeError(f"{row.__name__} has no field {sorted(unknown)}")
    chosen = [n for n in names if n not in omit and (only is None or n in only)]
    definitions: dict[str, Any] = {n: (hints[n], ...) for n in chosen}
    return create_model(f"{row.__name__}Fields", **definitions)


def from_row(cls: type[M], row: object, **converted: Any) -> M:
    """``cls`` from a repository row: every field of the schema that ``converted`` does not give
    is the row's attribute of the same name (the schema says what the API sends, the row holds
    the values; as :func:`tuner.db.convert` builds rows from ORM objects)."""
    same = {name: getattr(row, name) for name in cls.model_fields if name not in converted}
    return cls(**same, **converted)


class EstimateOut(BaseModel):
    """A metric over the measurement windows of one launch: the median, the range (smallest
    and largest window value; not a confidence interval) and each window's value."""

    median: float | None = Field(description="median over the measurement windows")
    low: float | None = Field(description="smallest window value")
    high: float | None = Field(description="largest window value")
    values: list[float | None] = Field(description="one value per measurement window")

    @classmethod
    def of(cls, e: Estimate) -> EstimateOut:
        return cls(
            median=finite(e.median),
            low=finite(e.low),
            high=finite(e.high),
            values=[finite(v) for v in e.values],
        )


def metrics_out(metrics: Mapping[str, Estimate]) -> dict[str, EstimateOut]:
    return {name: EstimateOut.of(e) for name, e in metrics.items()}


# The trial's queryable provenance columns (tuner.db.TrialRow), a trial's or its study's.
_PROVENANCE = ("gpu_name", "gpu_uuid", "driver_version", "vllm_version", "model", "workload",
               "emulated", "hostname")  # fmt: skip


class ProvenanceOut(row_fields(TrialRow, only=_PROVENANCE)):  # type: ignore[misc]
    emulated: bool  # the trial's or its study's

    @classmethod
    def of(cls, trial: TrialRow, study: StudyRow) -> ProvenanceOut:
        return from_row(
            cls,
            trial,
            vllm_version=trial.vllm_version or study.vllm_version,
            model=trial.model or study.model,
            workload=trial.workload or study.workload,
            emulated=bool(study.emulated or trial.emulated),
        )


class BaselineOut(BaseModel):
    """vLLM's defaults as measured in the same study."""

    trial: int
    metrics: dict[str, EstimateOut]
    memory_gib: float | None
    cost: EstimateOut | None = Field(
        default=None, description="$ per 1M output tokens, as the recommendation's"
    )
    cost_is_upper_bound: bool = False
    capacity_is_lower_bound: bool = Field(
        default=False, description="its capacity is only a lower bound, as the recommendation's"
    )


class PriceOut(row_fields(GpuPrice)):  # type: ignore[misc]
    """A price per GPU-hour and where it comes from."""

    source: str = Field(
        description="given price (the request's gpu_price), the study's price, or the "
        "catalog default (a list-price assumption, with where it was read)"
    )


class DecidedOut(BaseModel):
    """The metric a composite objective's confirmation verdict rests on, with its interval."""

    metric: str
    ratio: float | None
    low: float | None
    high: float | None


class ConfirmedOut(BaseModel):
    """The confirmation phase's verdict: fresh launches interleaved with vLLM's defaults."""

    verdict: str = Field(
        description="better; or no significant difference, worse (every candidate "
        "significantly worse on what the objective decides by), or inconclusive (launches of "
        "one configuration disagreed far beyond their noise): run the defaults"
    )
    label: str = Field(description="#N (the search trial) or defaults")
    score: float | None = Field(description="confirmed score ratio to the defaults")
    score_low: float | None
    score_high: float | None
    comparison_id: int | None = Field(description="GET /v1/compare/{id} for the details")
    details: list[str]
    details_from: str = Field(
        default="", description="whose comparison the details are: '#2 against vLLM's defaults'"
    )
    caveats: list[str] = Field(
        default_factory=list,
        description="client-bound or disturbed measurement windows of that comparison",
    )
    decided_on: DecidedOut | None = Field(
        default=None,
        description="a composite objective's verdict rests on its deciding metric (the one the "
        "confirmation's looks stop on), not on the score's interval: that metric's ratio and "
        "interval; null where the score's interval decides. With the verdict worse: what the "
        "candidate lost on, B/A (the deciding metric, or the metric the objective weighs alone)",
    )


class RecommendationOut(BaseModel):
    model: str
    model_source: str | None = Field(
        default=None,
        description="where the study loaded the model from (a hub id, a directory); null for a "
        "catalog alias",
    )
    gpu: str
    workload: str
    objective: str
    study: str
    trial: int = Field(description="trial number within the study")
    config: dict[str, Any] = Field(description="the knobs set; {} means vLLM's defaults")
    flags: list[str]
    env: dict[str, str] = Field(description="environment variables the flags need")
    serve_command: str
    extra_args: list[str] = Field(
        default_factory=list,
        description="the study's own extra vLLM arguments: every launch had them before the "
        "flags, as serve_command has",
    )
    workload_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="the values the study changed in its workload preset (its warm-up shapes)",
    )
    vllm_version: str = Field(description="the vLLM version the flags are spelled for")
    metrics: dict[str, EstimateOut]
    memory_gib: float | None
    score: float | None = Field(
        description="objective score; 1.0 = vLLM's defaults in that study; null where the "
        "defaults were not measured there (ranked on the objective's raw composite, as "
        "`tuner best` says)"
    )
    baseline: BaselineOut | None
    provenance: ProvenanceOut
    feasible: bool = Field(description="meets the SLO (the request's, else the study's)")
    is_baseline: bool
    slo: dict[str, float]
    confirmed: ConfirmedOut | None = Field(
        default=None, description="the confirmation's verdict, when the study had one"
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="what to check before trusting this result, e.g. an emulated peak memory "
        "above the emulated GPU's, or a capacity or cost ranking that rests on a lower bound",
    )
    cost: EstimateOut | None = Field(
        default=None,
        description="$ per 1M output tokens at the SLO's throughput (the load curve's capacity "
        "where measured) and the price: median and range over the windows; null without a price",
    )
    cost_is_upper_bound: bool = Field(
        default=False,
        description="the cost is only an upper bound: its throughput is an open-loop load the "
        "server kept up with, not what the GPU can serve",
    )
    capacity_is_lower_bound: bool = Field(
        default=False,
        description="the capacity in metrics (capacity_output_throughput, capacity_request_"
        "throughput, at capacity_load) is only a lower bound: read at an open-loop load the "
        "server kept up with (the top rate of a rate ladder it served), not what the GPU can serve",
    )
    price: PriceOut | None = Field(
        default=None,
        description="the price per GPU-hour the costs assume, its source named; null where "
        "there is none (no catalog price for the GPU: give gpu_price)",
    )


class StudyFailureOut(BaseModel):
    message: str = Field(description="why the worker could not run the study")
    hint: str = Field(description="what to do about it (empty when there is nothing to add)")


class StudyOut(row_fields(StudyRow, omit=("id", "optuna_study_name", "spec"))):  # type: ignore[misc]
    status: str
    workload_label: str = Field(
        description="the load it measured: the workload's name with any values the study "
        "changed, e.g. chat[turns=2]; what /v1/recommendations and /v1/sizing match on"
    )
    slo: dict[str, Any]
    trial_counts: dict[str, int]
    confirmation_counts: dict[str, int]
    n_trials: int
    free_counts: dict[str, int] = Field(
        description="search trials that used no place in the trial budget, per failure class: "
        "interrupted, and invalid_config (the first draw of a configuration the space's rules "
        "rule out before launch; drawn again, it uses one)"
    )
    n_budget_trials: int = Field(
        description="search trials that use a place in the budget, running ones included: "
        "n_trials less free_counts; what n_trials_requested counts"
    )
    runner_gone: bool = Field(
        description="running, but the tuner that ran it has exited on the API's host "
        "(`kill -9`, a lost terminal): `tuner run --study NAME --resume` continues it"
    )
    failure: StudyFailureOut | None = Field(
        default=None,
        description="failed: why its worker could not run it (the message and hint the worker "
        "printed); null otherwise, or when no reason was recorded",
    )

    @classmethod
    def of(cls, s: StudyRow, **converted: Any) -> Self:
        return from_row(cls, s, runner_gone=runner_gone(s), **converted)


class StudyDetailOut(StudyOut):
    spec: dict[str, Any]
    plan: dict[str, Any] | None = Field(
        default=None,
        description="the bottleneck diagnosed from vLLM's defaults and the lever plan searched "
        "(regime, evidence, knobs screened and kept, the printed lines); null when the study "
        "searched a space of its own",
    )

    @classmethod
    def of(cls, s: StudyRow, **converted: Any) -> Self:
        plan = s.spec.get("plan_record") if s.spec else None
        plan = json_safe(plan_back(plan)) if isinstance(plan, dict) else None
        return super().of(s, spec=json_safe(s.spec), plan=plan, **converted)


class QueuedStudyOut(StudyDetailOut):
    adjustments: list[str] = Field(
        description="what fitting the search space to the GPU, model and workload changed: "
        "knobs not searched here, enqueued configurations dropped ([] when nothing)"
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="what will stop the study on the worker before any server starts (a "
        "workload the model cannot hold, say): queued all the same, it then fails with it",
    )


class StudyListOut(BaseModel):
    total: int
    items: list[StudyOut]


# Sent apart: the full measurement by GET .../trials/{n} (TrialDetailOut), the provenance
# columns as one object; not sent: the repository's keys and the per-request records.
_TRIAL_APART = ("log_tail", "windows", "memory", "server", "server_metrics", "requests", "id",
                "study_name", *_PROVENANCE)  # fmt: skip


class TrialOut(row_fields(TrialRow, omit=_TRIAL_APART)):  # type: ignore[misc]
    phase: str
    status: str
    config: dict[str, Any]
    failure: str | None
    metrics: dict[str, EstimateOut]
    memory_gib: float | None
    score: float | None = Field(description="the study objective's score; 1.0 = the defaults")
    objective_values: list[float | None] | None = Field(
        description="[output tok/s, memory GiB, P99 E2E ms] as measured (a trial stopped early: "
        "its first load point's); null for a trial that measured none, as in `tuner export`"
    )
    provenance: ProvenanceOut | None
    capacity_is_lower_bound: bool = Field(
        description="the capacity in metrics is only a lower bound: read at an open-loop load "
        "the server kept up with, not what the GPU can serve"
    )

    @classmethod
    def of(cls, t: TrialRow, study: StudyRow, score: float | None, **converted: Any) -> Self:
        values = t.measured_values  # not a failure's penalty (what the sampler was told)
        return from_row(
            cls,
            t,
            config=t.config.to_dict(),
            metrics=metrics_out(t.metrics),
            memory_gib=finite(values[1]) if values and t.metrics else None,
            score=finite(score),
            objective_values=None if values is None else [finite(v) for v in values],
            provenance=ProvenanceOut.of(t, study) if t.status.is_finished() else None,
            capacity_is_lower_bound=costs.capacity_at_least(t.metrics, t.windows, study.spec),
            **converted,
        )


class TrialDetailOut(TrialOut):
    log_tail: str
    windows: list[dict[str, Any]]
    server: dict[str, Any] | None
    server_metrics: dict[str, float | None]


class TrialPageOut(BaseModel):
    study: str
    total: int = Field(description="trials matching the filter, over all pages")
    limit: int
    offset: int
    items: list[TrialOut]


class ObjectiveOut(BaseModel):
    name: str
    direction: str


class ParetoOut(BaseModel):
    study: str
    objectives: list[ObjectiveOut]
    trials: list[TrialOut]


class ComparisonOut(row_fields(ComparisonRow)):  # type: ignore[misc]
    a_config: dict[str, Any]
    b_config: dict[str, Any]
    provenance: dict[str, Any] | None
    gpu_minutes: float | None = Field(
        None,
        description="GPU time the verdict took: the wall time of all its launches, start-up "
        "included (null for comparisons stored before tuner recorded it)",
    )

    @classmethod
    def of(cls, c: ComparisonRow) -> ComparisonOut:
        return from_row(
            cls,
            c,
            a_config=c.a_config.to_dict(),
            b_config=c.b_config.to_dict(),
            results=json_safe(numbers_back(c.results, _RESULT_NUMBERS)),
            verdicts=json_safe(c.verdicts),
            provenance=json_safe(c.provenance),
            gpu_minutes=_gpu_minutes(c.results),
        )


# Where a comparison's results hold numbers that may be stored non-finite (a metric with no
# samples): null in the answer, not the codec's "nan".
_RESULT_NUMBERS = frozenset(
    {"ratio", "low", "high", "median", "values", "half_width", "df", "confidence", "bound"}
)


def _gpu_minutes(results: Any) -> float | None:
    value = results.get("gpu_minutes") if isinstance(results, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


class ModelOut(BaseModel):
    alias: str
    hub_id: str
    architecture: str
    layers: int
    parameters: int
    max_model_len: int
    weights_available: bool
    notes: str


class GpuOut(row_fields(GpuProfile, omit=("nvml_names",))):  # type: ignore[misc]
    compute_capability: str | None  # "9.0"


class HealthOut(BaseModel):
    status: str
    version: str
    studies: int


class ProblemOut(BaseModel):
    where: str = Field(description="e.g. query parameter limit, request body.study.trials")
    problem: str


class ErrorOut(BaseModel):
    """Every error answer (:mod:`api.errors`); some add fields, e.g. the nearest measured
    combinations of a recommendation's 404."""

    model_config = ConfigDict(extra="allow")

    error: str = Field(description="a stable code: not_found, invalid, invalid_spec, ...")
    message: str = Field(description="what is wrong")
    hint: str = Field(description="what to do about it")
    problems: list[ProblemOut] | None = Field(
        default=None, description="each invalid parameter (422 of a malformed request)"
    )
