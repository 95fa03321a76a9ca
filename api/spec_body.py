"""The body of ``POST /v1/studies`` as a schema: exactly what the API queues.

A spec file's structure as JSON (:mod:`tuner.spec.study`), narrowed to what a worker can run
without surprises: catalog names as enums (GET /v1/models, /v1/gpus), counts within what the
database holds, an SLO in parse_slo's grammar, and no local paths (no trace workload, no
``runner.vllm_python``). The same types validate the body (:func:`check`) and become its
OpenAPI schema (:func:`openapi_schema`), so the two cannot disagree. Two rules span sections and
are stated as conditionals: a model must fit the GPU (:func:`tuner.compose.check_fits`) and the
capacity objective needs a load ladder (:func:`tuner.compose.resolve_workload`); tuner's own
checks enforce them. Rules between knobs (fixed vs searched, candidates per GPU, enqueued
configurations) are not conditions on the body: :mod:`api.queue` fits the space instead.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Annotated, Any, Literal, Required, TypeVar

from pydantic import AfterValidator, ConfigDict, Field, TypeAdapter, ValidationError, with_config
from pydantic_core import core_schema
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from api.bounds import INT_MAX, NO_NUL, SLO_EXAMPLE, SLO_PATTERN, TEXT_MAX
from tuner.catalog import GPUS, LEVERS, MAX_GPU_PRICE, MODELS, resolve_model
from tuner.compose import check_fits
from tuner.db import STUDY_NAME_PATTERN
from tuner.domain import SEED_MAX, Objective
from tuner.errors import UsageError
from tuner.load import MAX_POINT_REQUESTS, WORKLOADS
from tuner.runner.placement import MODES as PLACEMENTS
from tuner.scoring import MAX_LAUNCHES
from tuner.space import KNOBS
from tuner.spec import TRIALS_MAX
from tuner.vllm.caches import MODES as CACHE_MODES

T = TypeVar("T")
_STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
DEFAULT = "default"  # a knob left at vLLM's default, as in a spec file


class OneOf:
    """``Annotated`` marker: the value is one of ``values`` (an enum in the schema)."""

    def __init__(self, values: Sequence[Hashable]) -> None:
        self.values = list(values)

    def __get_pydantic_core_schema__(self, _source: Any, _handler: Any) -> core_schema.CoreSchema:
        return core_schema.literal_schema(self.values)


def _distinct(values: list[T]) -> list[T]:
    if len(set(values)) != len(values):
        raise ValueError("the points must be distinct")
    return values


# Names from the catalog. A model is an alias, a catalogued hub id, or another hub id (org/name).
MODEL_NAMES = (*MODELS, *sorted({m.hub_id for m in MODELS.values()}))
HUB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$"
NAME_PATTERN = STUDY_NAME_PATTERN  # tuner's one rule for names (tuner.db.names)
BACKENDS = sorted({b for g in GPUS.values() for b in g.attention_backends})
KV_DTYPES = sorted({d for g in GPUS.values() for d in g.kv_cache_dtypes})

Count = Annotated[int, Field(ge=1, le=INT_MAX)]
Amount = Annotated[int, Field(ge=0, le=INT_MAX)]
Seed = Annotated[int, Field(ge=0, le=SEED_MAX)]
Positive = Annotated[float, Field(gt=0)]
Text = Annotated[str, Field(max_length=TEXT_MAX, pattern=NO_NUL)]
Points = Annotated[list[T], Field(min_length=2, json_schema_extra={"uniqueItems": True})]
Model = Annotated[str, OneOf(MODEL_NAMES)] | Annotated[str, Field(pattern=HUB_ID_PATTERN)]


@with_config(_STRICT)
class StudySection(TypedDict, total=False):
    name: Annotated[str, Field(pattern=NAME_PATTERN, description="default: from the others")]
    model: Required[Annotated[Model, Field(description="catalog alias or hub id (org/name)")]]
    gpu: Required[Annotated[str, OneOf(list(GPUS)), Field(description="GPU profile")]]
    workload: Required[Annotated[str, OneOf(list(WORKLOADS)), Field(description="preset")]]
    objective: Annotated[str, OneOf([o.value for o in Objective])]
    trials: Annotated[int, Field(ge=1, le=TRIALS_MAX)]
    slo: Annotated[str, Field(pattern=SLO_PATTERN, examples=[SLO_EXAMPLE])]
    seed: Seed
    notes: Text
    emulate: bool
    early_stop: Annotated[bool, Field(description="stop a trial early when clearly worse")]
    gpu_price: Annotated[
        float,
        Field(
            ge=0, le=MAX_GPU_PRICE, description="US dollars per GPU-hour (default: the catalog's)"
        ),
    ]


# A load curve is a concurrency ladder or a rate ladder (tuner.load.check_workload), not both,
# and its points set the load: no request_rate beside it (tuner.load.check_overrides).
_ONE_LADDER: Any = {
    "allOf": [
        {"not": {"required": list(pair)}}
        for pair in (
            ("concurrency_ladder", "rate_ladder"),
            ("request_rate", "concurrency_ladder"),
            ("request_rate", "rate_ladder"),
        )
    ]
}


@with_config(ConfigDict(**_STRICT, json_schema_extra=_ONE_LADDER))
class WorkloadSection(TypedDict, total=False):
    """Overrides of the preset's fields."""

    prompt_tokens: Count
    output_tokens: Count
    shared_prefix_tokens: Amount
    concurrency: Count
    request_rate: Positive
    requests_per_window: Annotated[int, Field(ge=1, le=MAX_POINT_REQUESTS)]
    windows: Count
    warmup_requests: Amount
    length_jitter: Annotated[float, Field(ge=0, lt=1)]
    seed: Seed
    concurrency_ladder: Annotated[Points[Count], AfterValidator(_distinct)]
    rate_ladder: Annotated[Points[Positive], AfterValidator(_distinct)]
    turns: Count
    think_time_s: Annotated[float, Field(ge=0, description="mean seconds between two turns")]


# One value of each knob (tuner.space normalizes them); "default" leaves vLLM's.
Backend = Annotated[str, OneOf([*BACKENDS, DEFAULT])]
FlashAttnVersion = Literal[2, 3, "default"]
Tokens = Count | Literal["default"]
Utilization = Annotated[float, Field(gt=0, le=1)] | Literal["default"]
Switch = bool | Literal["default"]
KvDtype = Annotated[str, OneOf([*KV_DTYPES, DEFAULT])]
Candidates = Annotated[list[T], Field(min_length=1)]


# tuner's levers beyond the typed knobs (tuner.catalog.levers), each with the values the API
# takes. data_parallel_size is not among them (tuner measures one GPU per launch), nor are
# other vLLM flags: the API has no vLLM to check them against (`tuner run --search` has).
CUDAGRAPH_MODES = [str(m) for m in LEVERS["compilation_config.cudagraph_mode"].gpu]
NGRAM_CONFIGS = [str(c) for c in LEVERS["speculative_config"].gpu]
Stride = Annotated[int, Field(ge=1, le=1024)] | Literal["default"]
Processes = Annotated[int, Field(ge=1, le=64)] | Literal["default"]
Threshold = Amount | Literal["default"]
BlockSize = Literal[8, 16, 32, 64, 128, "default"]
OptLevel = Literal[0, 1, 2, 3, "default"]
GraphMode = Annotated[str, OneOf([*CUDAGRAPH_MODES, DEFAULT])]
CaptureSize = Annotated[int, Field(ge=1, le=8192)] | Literal["default"]
Ngram = Annotated[str, OneOf([*NGRAM_CONFIGS, DEFAULT])]
OnlineQuant = Literal["fp8", "default"]

# A value per knob (``fixed``, an ``enqueue`` entry).
Knobs = TypedDict(
    "Knobs",
    {
        "attention_backend": Backend,
        "flash_attn_version": FlashAttnVersion,
        "max_model_len": Tokens,
        "gpu_memory_utilization": Utilization,
        "enable_prefix_caching": Switch,
        "max_num_seqs": Tokens,
        "max_num_batched_tokens": Tokens,
        "kv_cache_dtype": KvDtype,
        "enforce_eager": Switch,
        "stream_interval": Stride,
        "async_scheduling": Switch,
        "api_server_count": Processes,
        "max_num_partial_prefills": Processes,
        "long_prefill_token_threshold": Threshold,
        "enable_chunked_prefill": Switch,
        "block_size": BlockSize,
        "optimization_level": OptLevel,
        "compilation_config.cudagraph_mode": GraphMode,
        "compilation_config.max_cudagraph_capture_size": CaptureSize,
        "speculative_config": Ngram,
        "quantization": OnlineQuant,
    },
    total=False,
)

# Candidate values per knob: a knob given choices is searched.
_CANDIDATES = {k: Candidates[v] for k, v in Knobs.__annotations__.items()}  # type: ignore[valid-type]
Choices = TypedDict("Choices", _CANDIDATES, total=False)  # type: ignore[misc]

with_config(_STRICT)(Knobs)
with_config(_STRICT)(Choices)

# The knobs the API takes: tuner's typed ones, then its levers.
API_KNOBS = [k for k in (*KNOBS, *LEVERS) if k in Knobs.__annotations__]
assert set(API_KNOBS) == set(Knobs.__annotations__) == set(Choices.__annotations__)
assert set(LEVERS) - set(API_KNOBS) == {"data_parallel_size"}


@with_config(_STRICT)
class SpaceSection(TypedDict, total=False):
    params: Annotated[
        list[Annotated[str, OneOf(API_KNOBS)]],
        Field(description="knobs to search (default: every knob with candidates here)"),
    ]
    choices: Choices
    fixed: Annotated[Knobs, Field(description="held in every trial, vLLM's defaults included")]
    plan: Annotated[
        Literal["auto", "off"],
        Field(description="auto: diagnose the bottleneck and plan the levers first"),
    ]


# max_launches is each candidate's budget, its first look included: at least launches (3 when
# not given). tuner's spec check refuses less; the schema states it as some count n between
# the two (an anyOf of one branch a count: generators take that, not a chain of if/then).
_BUDGET: Any = {
    "anyOf": [
        {"not": {"required": ["max_launches"]}},
        {"not": {"required": ["launches"]}, "properties": {"max_launches": {"minimum": 3}}},
        *(
            {
                "required": ["launches"],
                "properties": {"launches": {"maximum": n}, "max_launches": {"minimum": n}},
            }
            for n in range(2, MAX_LAUNCHES + 1)
        ),
    ]
}


@with_config(ConfigDict(**_STRICT, json_schema_extra=_BUDGET))
class ConfirmSection(TypedDict, total=False):
    """The confirmation: ``max_launches``, each candidate's budget, is at least ``launches``."""

    top: Count
    # 0 turns the confirmation off; one launch a candidate gives no interval.
    launches: Literal[0] | Annotated[int, Field(ge=2, le=MAX_LAUNCHES)]
    max_launches: Annotated[int, Field(ge=2, le=MAX_LAUNCHES)]
    confidence: Annotated[float, Field(gt=0.5, lt=1)]


@with_config(_STRICT)
class RunnerSection(TypedDict, total=False):
    startup_timeout_s: Positive
    extra_args: list[Text]
    load_format: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
    compile_cache: Annotated[str, OneOf(CACHE_MODES)]
    cpu_placement: Annotated[str, OneOf(PLACEMENTS)]


def _in_study(name: str, schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    """A condition on ``study.<name>``; with ``required``, one the body must also state."""
    study = {"required": [name]} if required else {}
    return {"properties": {"study": {**study, "properties": {name: schema}}}}


def _conditions() -> list[dict[str, Any]]:
    """The rules across sections, as JSON Schema conditionals, from tuner's own checks."""
    # Fitted in the weights' own dtype, or at fp8 where the study holds it fixed (vLLM's online
    # FP8 halves the linear layers), as the worker fits it (tuner.compose.prepare).
    fp8 = {
        "required": ["space"],
        "properties": {
            "space": {
                "required": ["fixed"],
                "properties": {
                    "fixed": {
                        "required": ["quantization"],
                        "properties": {"quantization": {"const": "fp8"}},
                    }
                },
            }
        },
    }
    fits = []
    for quantization, held in ((None, {"not": fp8}), ("fp8", fp8)):
        unfit: dict[tuple[str, ...], list[str]] = {}
        for name in MODEL_NAMES:
            model = resolve_model(name)
            bad = []
            for gpu_name, gpu in GPUS.items():
                try:
                    check_fits(model, gpu, quantization)
                except UsageError:
                    bad.append(gpu_name)
            if bad:
                unfit.setdefault(tuple(bad), []).append(name)
        fits += [
            {
                "if": {"allOf": [_in_study("model", {"enum": names}), held]},
                "then": _in_study(
                    "gpu", {"enum": [g for g in GPUS if g not in bad]}, required=False
                ),
            }
            for bad, names in unfit.items()
        ]
    capacity = {
        "if": _in_study("objective", {"const": Objective.CAPACITY.value}),
        "then": {
            "required": ["workload"],
            "properties": {
                "workload": {
                    "anyOf": [
                        {"required": ["concurrency_ladder"]},
                        {"required": ["rate_ladder"]},
                    ]
                }
            },
        },
    }
    cpu = [name for name, gpu in GPUS.items() if gpu.is_cpu]
    emulated = {  # tuner.runner.hardware: a CPU profile has no GPU memory to emulate
        "if": _in_study("gpu", {"enum": cpu}),
        "then": _in_study("emulate", {"const": False}, required=False),
    }
    return [*fits, capacity, emulated]


_CROSS_SECTION: Any = {"allOf": _conditions()}


@with_config(ConfigDict(**_STRICT, json_schema_extra=_CROSS_SECTION))
class StudyBody(TypedDict, total=False):
    """A study spec: a spec file's sections as JSON."""

    study: Required[StudySection]
    workload: WorkloadSection
    space: SpaceSection
    enqueue: Annotated[list[Knobs], Field(description="configurations to try first")]
    confirm: ConfirmSection
    runner: RunnerSection


_ADAPTER: TypeAdapter[StudyBody] = TypeAdapter(StudyBody)


def check(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The schema's complaints about ``body`` (pydantic's error dicts, ``loc`` inside the
    body); [] when it conforms. The cross-section conditionals are tuner's checks' business."""
    try:
        _ADAPTER.validate_python(body)
    except ValidationError as exc:
        return [dict(e) for e in exc.errors(include_url=False)]
    return []


def openapi_schema() -> dict[str, Any]:
    """The body's JSON Schema, self-contained (no ``$ref``), for the OpenAPI document."""
    schema = _ADAPTER.json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return {**inline(defs[ref.removeprefix("#/$defs/")]), **inline(rest)}
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    result: dict[str, Any] = inline(schema)
    return result
