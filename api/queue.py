"""Queueing a study from a spec sent to the API, validated by the same rules as a spec file.

The body is a spec file's TOML structure as JSON (``{"study": {...}, "space": {...}, ...}``,
see :mod:`tuner.spec.study`), within the schema of :mod:`api.spec_body`. Model, GPU, workload,
objective and SLO must resolve, and the model must fit the GPU, before anything is written; the
study is then recorded as ``queued`` for a worker to run. Local paths are refused (a model
directory, a trace file, ``runner.vllm_python``): the API must not let a caller probe the
server's file system or pick a program for the worker to run, and a worker may not share it.

The search space is *fitted* rather than refused: whether a knob can be searched, or a
configuration enqueued, depends on the GPU, the model and the workload together, which no
schema states. So the API queues what can run and lists what it changed (:class:`Parsed`): a
fixed knob is not searched, a knob with choices is, a knob without candidates here is left at
vLLM's default (as when a spec names no params), and an enqueued configuration that cannot run
here, or that the space cannot produce, is dropped. The stored spec is the fitted one, so the
worker's own checks (:func:`tuner.compose.prepare`) pass.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api import spec_body
from api.errors import describe_validation
from tuner.catalog import get_gpu, levers, resolve_model
from tuner.compose import (
    check_baseline,
    check_fits,
    check_something_to_search,
    resolve_slo,
    resolve_workload,
)
from tuner.db import Repository, StudyRow, StudyStatus, check_study_name
from tuner.domain import GpuProfile, ModelSpec, Workload
from tuner.domain.workload import format_slo
from tuner.errors import UsageError
from tuner.load import TRACE_PREFIX, check_shapes
from tuner.space import KNOBS, NothingToSearch, SearchSpace
from tuner.spec import (
    API_SOURCE,
    StudySpec,
    spec_from_mapping,  # the spec file's own rules
)
from tuner.vllm import argv, knob_spelling, shipped, shipped_union, shipped_versions

WHERE = API_SOURCE  # a queued study's spec.source
# The API has no vLLM of its own: levers are typed against the flag lists tuner ships, and
# the worker checks them again against its vLLM (a flag its version lacks fails the study
# there, with the closest flags named).
_FLAGS = shipped_union()
_FA = "flash_attn_version"

EXAMPLE: dict[str, Any] = {
    "study": {
        "name": "ernie-h200-chat",
        "model": "ernie-0.3b",
        "gpu": "h200",
        "workload": "chat",
        "objective": "balanced",
        "trials": 16,
        "slo": "ttft_p99=500ms,e2e_p99=10s",
    },
    "space": {"params": ["max_num_seqs", "gpu_memory_utilization"]},
}


@dataclass(frozen=True)
class Parsed:
    """A spec ready to queue, and what fitting its space to the hardware changed."""

    spec: StudySpec
    adjustments: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # what stops the study on the worker before any launch


def read(body: Mapping[str, Any]) -> Parsed:
    """The spec to queue; raises UsageError (SpecError) saying what is wrong."""
    if "study" not in body:
        raise UsageError(
            f"{WHERE}: a study spec needs a 'study' object with model, gpu and workload",
            hint='e.g. {"study": {"model": "ernie-0.3b", "gpu": "h200", "workload": "chat"}}',
        )
    body = whole_numbers(body)
    spec = spec_from_mapping(body, "", WHERE)
    _refuse_local_paths(spec)
    _refuse_other_knobs(spec)
    check_study_name(spec.study_name(), where=WHERE, hint="set study.name")
    # tuner's messages first (unknown model, GPU, workload), then the API's narrower schema.
    model, gpu = resolve_model(spec.model), get_gpu(spec.gpu)
    workload = resolve_workload(spec, shapes=False)  # its shapes: a warning of fit's
    resolve_slo(spec)
    # the GPU as the spec reads it (a profile's name in any case: "H100" is h100, as the CLI's)
    study = body["study"]
    checked = {**body, "study": {**study, "gpu": spec.gpu}} if isinstance(study, dict) else body
    problems = describe_validation(
        [{**e, "loc": ("body", *e["loc"])} for e in spec_body.check(checked)]
    )
    if problems:
        raise UsageError(
            "; ".join(f"{p['where']}: {p['problem']}" for p in problems),
            hint="the body's schema is in /docs (POST /v1/studies)",
        )
    quantization = spec.fixed.get("quantization")  # as the worker fits it (tuner.compose)
    check_fits(model, gpu, quantization if isinstance(quantization, str) else None)
    if spec.emulate and gpu.is_cpu:  # as the worker's hardware check would, at once
        raise UsageError(
            f"{WHERE}: study.emulate needs a GPU to emulate on; gpu 'cpu' is not emulated",
            hint="leave emulate out for a study on the CPU",
        )
    return fit(spec, model, gpu, workload)


def whole_numbers(value: Any) -> Any:
    """``value`` with every float that has no fraction (``16.0``) as an int: JSON (and its
    Schema) has numbers only, and ``"trials": 16.0`` means 16 trials."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


def parse(body: Mapping[str, Any]) -> StudySpec:
    return read(body).spec


def _refuse_local_paths(spec: StudySpec) -> None:
    if spec.model.startswith(("/", ".", "~")):
        raise UsageError(
            f"{WHERE}: model {spec.model!r} is a local path, which the API does not accept",
            hint="name a catalog alias (GET /v1/models) or a hub id (org/name)",
        )
    if spec.workload.startswith(TRACE_PREFIX):
        raise UsageError(
            f"{WHERE}: trace workloads read a file on the machine that runs the study",
            hint="queue a preset workload here, or start a trace study with `tuner run`",
        )
    if spec.vllm_python is not None:
        raise UsageError(
            f"{WHERE}: runner.vllm_python names a program on the machine that runs the study, "
            "which the API does not accept",
            hint="the worker runs the vLLM of its own --vllm-python (or $TUNER_VLLM_PYTHON)",
        )


def _refuse_other_knobs(spec: StudySpec) -> None:
    """The API takes tuner's typed knobs and its levers (:data:`api.spec_body.API_KNOBS`), by
    their flags' dests (``stream_interval``); anything else is refused with the closest."""
    if spec.search:
        raise UsageError(
            f"{WHERE}: space.search is for `tuner run`, which checks any flag against its vLLM",
            hint='give a knob\'s values as space.choices, e.g. {"stream_interval": [1, 8]}',
        )
    for name, _ in spec.named_knobs():  # space.search is refused above
        if name in spec_body.API_KNOBS:
            continue
        spelt = knob_spelling(name)
        near = difflib.get_close_matches(spelt, spec_body.API_KNOBS, n=3)
        if spelt in spec_body.API_KNOBS:
            hint = f"the API names a knob by its flag's dest: {spelt}"
        elif spelt == "data_parallel_size":
            hint = "tuner measures one GPU per launch; data_parallel_size needs `tuner run`"
        elif near:
            hint = f"did you mean {', '.join(near)}? GET /docs lists the knobs the API takes"
        else:
            hint = "another `vllm serve` flag needs a spec file and `tuner run --search`"
        raise UsageError(f"{WHERE}: unknown serving knob {name!r}", hint=hint)


def fit(spec: StudySpec, model: ModelSpec, gpu: GpuProfile, workload: Workload) -> Parsed:
    """``spec`` with a search space that can be built here, and what was changed."""
    notes: list[str] = []
    fixed = dict(spec.fixed)
    # A lever whose every choice is vLLM's default has nothing to search (a typed knob's
    # "default" is a point of its own space): it is left at vLLM's default.
    idle = [k for k, v in spec.choices.items() if _only_default(k, v, model, gpu, workload)]
    notes += [f"{k} is not searched: its only choice is vLLM's default" for k in idle]
    if idle:
        named = None if spec.params is None else tuple(k for k in spec.params if k not in idle)
        kept = {k: v for k, v in spec.choices.items() if k not in idle}
        spec = dataclasses.replace(spec, params=named, choices=kept)
    choices = {k: v for k, v in spec.choices.items() if k not in fixed}
    notes += [f"{k} is fixed, so its choices are ignored" for k in spec.choices if k in fixed]
    params = None if spec.params is None else _searchable(spec, model, gpu, workload, notes)
    if params == [] and spec.params and not choices:
        # Named knobs, none searchable here: the study would launch its defaults again and
        # again. It searches where a study that names no space does (the lever plan).
        notes.append(f"none of the named knobs can be searched on {gpu.name}: the study "
                     "searches as one that names no space does (tuner's lever plan)")  # fmt: skip
        params = None
    space_here = functools.partial(SearchSpace, model, gpu, workload, flags=_FLAGS)
    try:
        space = space_here(params=params, choices=choices, fixed=fixed)
    except UsageError:
        if params is None or _FA not in params:
            raise
        # The one rule left: the version needs FLASH_ATTN among the backends searched or fixed.
        notes.append(f"{_FA} is not searched: attention_backend can never be FLASH_ATTN here")
        params = [k for k in params if k != _FA]
        choices.pop(_FA, None)
        space = space_here(params=params, choices=choices, fixed=fixed)
    for knob in list(fixed):  # a fixed value the rules refuse here is left at vLLM's default
        broken = space.violations(space.baseline())
        if not broken:
            break
        without = {k: v for k, v in fixed.items() if k != knob}
        try:
            rebuilt = space_here(params=params, choices=choices, fixed=without)
        except UsageError:  # another fixed value needs this one (the FA version, a backend)
            continue
        fewer = rebuilt.violations(rebuilt.baseline())
        if len(fewer) < len(broken):  # this value broke a rule: one at a time, cumulatively
            gone = "; ".join(p for p in broken if p not in fewer) or "; ".join(broken)
            notes.append(f"{knob} is not fixed at {fixed[knob]!r}: {gone}")
            fixed, space = without, rebuilt
    warnings: list[str] = []
    try:
        check_shapes(workload)
        check_baseline(space, "")
        argv.once(spec.extra_args, [*space.searched, *space.fixed], None)
    except UsageError as exc:  # the worker refuses it before any launch
        warnings.append(f"the study will fail before any launch: {exc.message}")
    enqueue = []
    for item in spec.enqueue:
        problems = _cannot_enqueue(space, item)
        if problems:
            notes.append(f"enqueued configuration {item} is dropped: {'; '.join(problems)}")
        else:
            enqueue.append(item)
    fitted = dataclasses.replace(
        spec,
        params=None if params is None else tuple(params),
        choices=choices,
        fixed=fixed,
        enqueue=tuple(enqueue),
    )
    try:
        configs = [space.config_from(item) for item in enqueue]
        check_something_to_search(fitted, space, configs)
    except NothingToSearch as exc:  # the worker refuses it before any launch; what to change
        warnings.append(f"the study will fail before any launch: {exc.message}; {exc.hint}")
    return Parsed(fitted, tuple(notes), (*warnings, *_flags_some_vllm_lacks(fitted)))


def _flags_some_vllm_lacks(spec: StudySpec) -> list[str]:
    """A warning per shipped vLLM version that lacks a flag the study sets or searches beyond
    the typed knobs: the API passes a flag some version has (:data:`_FLAGS`), and a worker
    with a version that lacks it refuses the study before any launch."""
    named = {*(spec.params or ()), *spec.choices, *spec.fixed}
    named |= {knob for item in spec.enqueue for knob in item}
    named -= set(KNOBS)  # typed knobs: spelt for each version (tuner.vllm.argv)
    versions = shipped_versions()
    out = []
    for version in versions:
        catalog = shipped(version)
        missing = sorted(k for k in named if catalog and catalog.get(k.split(".")[0]) is None)
        if missing:
            out.append(
                f"vLLM {version} has no flag for {', '.join(missing)} (tuner knows the flags of "
                f"vLLM {', '.join(versions)}): a worker with that version fails the study "
                "before any launch"
            )
    return out


def _only_default(
    knob: str, values: Sequence[Any], model: ModelSpec, gpu: GpuProfile, workload: Workload
) -> bool:
    """Whether every value given for ``knob`` (not a typed knob) is vLLM's default here."""
    if knob in KNOBS:
        return False
    try:
        SearchSpace(model, gpu, workload, params=[knob], choices={knob: values}, flags=_FLAGS)
    except NothingToSearch:
        return True
    except UsageError:
        return False  # another problem, which the whole space reports
    return False


def _searchable(
    spec: StudySpec, model: ModelSpec, gpu: GpuProfile, workload: Workload, notes: list[str]
) -> list[str]:
    """The knobs of ``params`` and of ``choices`` that can be searched here: what the space
    would search given no params (a knob not fixed, with candidates) among them."""
    assert spec.params is not None
    fixed = dict(spec.fixed)
    choices = {k: v for k, v in spec.choices.items() if k not in fixed}
    everything = SearchSpace(
        model, gpu, workload, params=None, choices=choices, fixed=fixed, flags=_FLAGS
    )
    built_in = {k for k, lever in levers.LEVERS.items() if lever.candidates(gpu)}
    possible = {*everything.searched, *choices, *built_in}
    kept = []
    for knob in (k for k in spec_body.API_KNOBS if k in spec.params or k in choices):
        if knob in fixed:
            notes.append(f"{knob} is fixed, so it is not searched")
        elif knob not in possible:
            notes.append(
                f"{knob} is not searched: it has no candidate values on {gpu.name} for this "
                "model and workload (give it choices to search it)"
            )
        else:
            if knob not in spec.params:
                notes.append(f"{knob} is searched: it has choices")
            kept.append(knob)
    return kept


def _cannot_enqueue(space: SearchSpace, item: Mapping[str, Any]) -> Sequence[str]:
    """Why the enqueued ``item`` cannot be tried first in ``space``; [] when it can."""
    try:
        config = space.config_from(item)
        problems = space.violations(config)
        if not problems:
            space.params_for(config)  # what the worker enqueues: the space must produce it
    except UsageError as exc:
        return [exc.message]
    return problems


def queue(repo: Repository, spec: StudySpec) -> StudyRow:
    """Record ``spec`` as a queued study. UsageError if its name is taken."""
    model = resolve_model(spec.model)
    gpu = get_gpu(spec.gpu)
    slo = resolve_slo(spec)
    return repo.create_study(
        name=spec.study_name(),
        optuna_study_name=spec.study_name(),
        model=model.alias,
        model_source=model.source,
        gpu=gpu.name,
        workload=resolve_workload(spec, shapes=False).name,
        objective=spec.objective.value,
        slo={k: v for k, v in vars(slo).items() if v is not None},
        spec=spec.to_dict(),
        emulated=spec.emulate,  # the worker's hardware check has the last word
        vllm_version=None,
        n_trials_requested=spec.trials,
        notes=spec.notes or f"queued through the API (SLO {format_slo(slo)})",
        status=StudyStatus.QUEUED,
    )
