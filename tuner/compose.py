"""Builds the objects a study needs from a spec: the composition root the CLI calls.

Everything that touches the outside world at set-up time (NVML, the vLLM interpreter, the model
cache, the database) is resolved here, in an order that fails fast: cheap checks of the user's
input first, then hardware, then vLLM, and only then anything that writes.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.catalog import get_gpu, has_facts, resolve_model
from tuner.domain import GpuProfile, ModelSpec, Objective, ServingConfig, Slo, Workload, typed_knobs
from tuner.domain.workload import parse_slo
from tuner.errors import EnvironmentProblem, SpecError, UsageError
from tuner.load import SATURATING, check_shapes, check_workload, get_workload, recommended_slo
from tuner.runner import load_flags
from tuner.space import NothingToSearch, SearchSpace
from tuner.spec import NO_SLO, StudySpec, check_flags, find_line
from tuner.vllm import FlagCatalog, argv, shipped, spelling_key

if TYPE_CHECKING:
    from tuner.db import Repository
    from tuner.runner import VllmTrialRunner
    from tuner.vllm import VllmInstall


def tuner_home() -> Path:
    """tuner's own directory ($TUNER_HOME, else ~/.cache/tuner: models, flags, compile caches,
    launch logs), as configured; :func:`writable_home` where tuner is about to write there."""
    return Path(os.environ.get("TUNER_HOME", Path.home() / ".cache" / "tuner"))


def writable_home() -> Path:
    """:func:`tuner_home`, created when missing; EnvironmentProblem when it cannot be a
    writable directory (a file, under a file, read-only): said before a study or comparison
    starts, not as a traceback from its first write there."""
    home = tuner_home()
    hint = "point TUNER_HOME at a writable directory (tuner creates it when missing)"
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = "is a file" if home.exists() else f"cannot be created ({exc.strerror})"
        raise EnvironmentProblem(f"tuner's home {home} {why}", hint=hint) from None
    if not os.access(home, os.W_OK | os.X_OK):
        raise EnvironmentProblem(f"tuner's home {home} is not writable", hint=hint)
    return home


def default_vllm_python() -> str:
    return os.environ.get("TUNER_VLLM_PYTHON") or sys.executable


@dataclass(frozen=True)
class StudyContext:
    """Everything resolved from a spec, ready to run."""

    name: str
    spec: StudySpec
    model: ModelSpec
    gpu: GpuProfile
    workload: Workload
    slo: Slo
    space: SearchSpace
    storage_url: str
    vllm_version: str
    serve_model: str  # what a ready `vllm serve` line names: weights dir, hub id or dummy dir
    emulated: bool = False


@dataclass(frozen=True)
class Prepared:
    ctx: StudyContext
    runner: VllmTrialRunner
    repo: Repository


def resolve_workload(
    spec: StudySpec, tokenizer: Path | None = None, *, shapes: bool = True
) -> Workload:
    """The spec's workload; a trace's text counted with ``tokenizer`` (a model directory with a
    ``tokenizer.json``) where given, else by the characters-per-token rule. ``shapes``: also
    refuse request shapes no plan can draw (the API, whose schema cannot state that rule
    between two numbers, queues them with a warning instead)."""
    try:
        workload = get_workload(spec.workload, spec.workload_overrides, tokenizer=tokenizer)
    except UsageError as exc:
        if "override" not in exc.message:
            raise
        raise _at_override(spec, exc, f"bad [workload] override in {spec.source}: ") from None
    try:
        check_workload(workload)  # before any server starts: a count of 0 measures nothing
        if shapes:
            check_shapes(workload)
    except UsageError as exc:
        raise _at_override(spec, exc) from None
    if spec.objective is Objective.CAPACITY and len(workload.load_points()) < 2:
        raise UsageError(
            f"the capacity objective reads each launch's load curve, but workload "
            f"{workload.name!r} measures one load point",
            hint="give the workload a ladder, e.g. [workload] concurrency_ladder = [4, 16, 64] "
            "or rate_ladder = [1.0, 2.0, 4.0] in the spec",
        )
    # One offered load, at however many caps on requests in flight (a trace's own times), or
    # a rate ladder of one rate: no higher load can show where the server stops keeping up.
    points = workload.load_points()
    one_rate = all(p.open_loop for p in points) and len({p.request_rate for p in points}) == 1
    if spec.objective is Objective.COST and one_rate:
        raise UsageError(
            f"the cost objective ranks by throughput per GPU, but workload {workload.name!r} "
            "sends one open-loop load (timed arrivals): every configuration that keeps up "
            "serves that same rate, so the costs would only rank noise",
            hint=f"give it {SATURATING}; or keep this workload with another objective "
            "(latency, balanced)",
        )
    return workload


def _at_override(spec: StudySpec, exc: UsageError, prefix: str = "") -> UsageError:
    """``exc`` about the spec's workload, at the line of the [workload] override it names when
    the spec is a file (a SpecError, FILE:LINE), else as it was (``prefix`` before it)."""
    named = [key for key in spec.workload_overrides if key in exc.message]
    if not (spec.from_file and named and Path(spec.source).is_file()):
        return UsageError(prefix + exc.message, hint=exc.hint)
    text = Path(spec.source).read_text(encoding="utf-8")
    line = find_line(text, max(named, key=len), "workload")
    return SpecError(exc.message, path=spec.source, line=line, hint=exc.hint)


def resolve_slo(spec: StudySpec) -> Slo:
    """The spec's SLO; without one, the workload preset's recommended SLO (chat-heavy's TTFT
    and ITL bounds); ``none`` for no SLO at all."""
    text = spec.slo.strip()
    if text.lower() == NO_SLO:
        return Slo()
    try:
        return parse_slo(text or recommended_slo(spec.workload))
    except ValueError as exc:
        raise UsageError(str(exc), hint="e.g. --slo ttft_p99=500ms,e2e_p99=10s") from None


def plan_wanted(spec: StudySpec) -> bool:
    """Whether the study leaves its space to the lever plan (:mod:`tuner.study.plan`): the
    spec names no space of its own and does not turn the plan off."""
    return spec.plan != "off" and spec.params is None and not spec.choices and not spec.search


def extra_knobs(spec: StudySpec) -> list[str]:
    """The knobs a spec names beyond the typed ones: flags to check against vLLM's list."""
    return beyond_typed(name for name, _ in spec.named_knobs())


def beyond_typed(names: Iterable[str]) -> list[str]:
    """The names among ``names`` that are no typed knob in any spelling (``max-num-seqs`` is
    one): vLLM flags, which only vLLM's flag list can type."""
    return [n for n in dict.fromkeys(names) if spelling_key(n) not in typed_knobs()]


def study_flags(python: str, version: str, *, fake_server: bool) -> FlagCatalog:
    """The ``vllm serve`` flags of the vLLM a study runs: asked of its interpreter once per
    version (cached under TUNER_HOME); the shipped list of the version the fake server
    reports under the TUNER_SERVER_MODULE test seam."""
    if not fake_server:
        return load_flags(python, version, tuner_home() / "vllm-flags")
    catalog = shipped(version)
    if catalog is None:
        raise EnvironmentProblem(
            f"no shipped vLLM flag list for TUNER_SERVER_VERSION={version}",
            hint="tuner/vllm/flag_lists holds the versions tuner ships",
        )
    return catalog


def build_space(
    spec: StudySpec,
    model: ModelSpec,
    gpu: GpuProfile,
    workload: Workload,
    flags: FlagCatalog | None = None,
    *,
    new_study: bool = False,
) -> SearchSpace:
    """The spec's search space, its enqueued configurations checked against its rules; for a
    ``new_study``, vLLM's defaults with its fixed values too (:func:`check_baseline`), and
    NothingToSearch when it would only measure them."""
    space = SearchSpace(
        model,
        gpu,
        workload,
        params=spec.params,
        choices=spec.choices,
        fixed=spec.fixed,
        search=spec.search,
        flags=flags,
    )
    if new_study and spec.from_api:
        check_baseline(
            space,
            "queue it again (POST /v1/studies, another study.name) with other space.fixed "
            "values or another workload",
        )
    elif new_study:
        where = spec.source if spec.from_file else "on the command line"
        check_baseline(space, f"change the fixed values ([space] fixed) or the workload, {where}")
    enqueued = check_enqueued(spec, space, as_params=False)
    if new_study:
        check_something_to_search(spec, space, enqueued)
    return space


def check_enqueued(
    spec: StudySpec, space: SearchSpace, *, as_params: bool = True
) -> set[ServingConfig]:
    """The ``[[enqueue]]`` entries' configurations; UsageError, entry by entry, for one that
    ``space``'s rules forbid, or (``as_params``) that ``space`` does not produce: the study
    enqueues it as Optuna params once it is written, too late to refuse it."""
    enqueued = set()
    for item in spec.enqueue:
        config = space.config_from(item)
        problems = space.violations(config)
        if problems:
            raise UsageError(
                f"enqueued configuration {item} is impossible: {'; '.join(problems)}",
                hint=f"fix the [[enqueue]] entry in {spec.source}",
            )
        if as_params:
            try:
                space.params_for(config)
            except UsageError as exc:
                raise UsageError(
                    f"enqueued configuration {item}: {exc.message}",
                    hint=f"{exc.hint}, or drop that [[enqueue]] entry from {spec.source}",
                ) from exc
        enqueued.add(config)
    return enqueued


def check_something_to_search(
    spec: StudySpec, space: SearchSpace, enqueued: Iterable[ServingConfig]
) -> None:
    """NothingToSearch when a new study would only measure vLLM's defaults: no knob searched,
    no lever plan, no ``enqueued`` configuration beyond the defaults; in the words of where
    the spec came from (the API's body, a spec file, the command line)."""
    if space.searched or plan_wanted(spec) or set(enqueued) - {space.baseline()}:
        return
    if spec.from_api:
        knobs, enqueue = "space.params or space.choices", "enqueue"
        hint = (
            "queue it again (POST /v1/studies, another study.name) with knobs to search in "
            "space.params or space.choices (an enqueue configuration can only set knobs the "
            "space searches); without space.params the study searches tuner's lever plan"
        )
    else:
        knobs, enqueue = "[space] params, choices or search", "[[enqueue]]"
        where = f"in {spec.source}" if spec.from_file else "in a spec file"
        hint = (
            f"name knobs to search in [space] params or search {where}, or pass --search "
            "FLAG=V1,V2; without params the study searches tuner's lever plan"
        )
    raise NothingToSearch(
        f"nothing to search: the space names no knob to search (no {knobs}) and no {enqueue} "
        "configuration beyond vLLM's defaults, so every trial would measure the defaults again",
        hint=hint,
    )


def check_baseline(space: SearchSpace, hint: str) -> None:
    """UsageError when vLLM's defaults with the study's fixed values break the space's rules
    here: a study measures them first, and every score is a ratio to them, so it would launch
    a server the rules already know cannot serve (a fixed max_model_len past the model's
    positions, a workload longer than any max_model_len of the model)."""
    problems = space.violations(space.baseline())
    if problems:
        raise UsageError(
            "vLLM's defaults with the study's fixed values cannot run here, and every score "
            f"is measured against them: {'; '.join(problems)}",
            hint=hint,
        )


# The highest utilization tuner tries: what is left is the least any configuration needs.
_MAX_UTILIZATION = 0.95


def check_fits(model: ModelSpec, gpu: GpuProfile, quantization: str | None = None) -> None:
    """UsageError, with the numbers, when the weights alone exceed what any config can budget
    (``quantization``: the one the study holds fixed, e.g. ``fp8``)."""
    if gpu.is_cpu or not has_facts(model):
        return
    weights = model.weight_bytes(quantization)
    usable = gpu.memory_bytes * _MAX_UTILIZATION
    if weights > usable:
        gb = 1e9
        raise UsageError(
            f"{model.alias} does not fit on one {gpu.display_name}: its "
            f"{quantization or model.dtype} weights "
            f"alone take {weights / gb:.1f} GB ({model.parameter_count() / 1e9:.1f} B "
            f"parameters), and the GPU has {gpu.memory_bytes / gb:.1f} GB, of which at most "
            f"{usable / gb:.1f} GB at gpu-memory-utilization {_MAX_UTILIZATION}, before any "
            "KV cache",
            hint="pick a larger GPU, a smaller model, or a quantized checkpoint (a local "
            "directory); tensor parallelism across GPUs is not tuned by tuner yet",
        )


def vllm_install(spec: StudySpec) -> tuple[VllmInstall, str | None]:
    """The vLLM a study of ``spec`` runs, and the server module standing in for it, if any.

    Test seam, not a user option: $TUNER_SERVER_MODULE (e.g. tuner.testing.fake_server, which
    speaks vLLM's argv and HTTP) is run by this interpreter instead of vLLM and reported as
    vLLM $TUNER_SERVER_VERSION, so that integration tests can drive whole commands quickly."""
    from tuner.runner import detect_vllm
    from tuner.vllm import VllmInstall

    server_module = os.environ.get("TUNER_SERVER_MODULE") or None
    if server_module:
        version = os.environ.get("TUNER_SERVER_VERSION", "0.32.0")
        return VllmInstall(python=sys.executable, version=version, location=""), server_module
    return detect_vllm(spec.vllm_python or default_vllm_python()), None


def installed_flags(spec: StudySpec) -> FlagCatalog:
    """The flag list of the vLLM that ``spec`` runs (:func:`study_flags`)."""
    vllm, server_module = vllm_install(spec)
    return study_flags(vllm.python, vllm.version, fake_server=server_module is not None)


def prepare(
    spec: StudySpec, storage_url: str, *, log_dir: Path | None = None, new_study: bool = False
) -> Prepared:
    """Resolve and check everything; raises a TunerError before anything is written.
    ``new_study``: a study that measures vLLM's defaults first (not a resumed one, and not an
    A/B command, whose arms are what it launches): they must be able to run here."""
    model = resolve_model(spec.model)
    if new_study and model.source and Path(spec.model).expanduser().is_dir():
        # Stored by its full path, so that a resume from another directory finds it; the
        # study keeps the name the path as given made.
        spec = dataclasses.replace(spec, name=spec.study_name(), model=model.source)
    gpu = get_gpu(spec.gpu)
    workload = resolve_workload(spec)
    slo = resolve_slo(spec)
    # Flags beyond the typed knobs are checked once vLLM's flag list is known (below).
    fixed_quantization = spec.fixed.get("quantization")
    check_fits(model, gpu, fixed_quantization if isinstance(fixed_quantization, str) else None)
    space = (
        None if extra_knobs(spec) else build_space(spec, model, gpu, workload, new_study=new_study)
    )
    if space is not None:
        check_enqueued(spec, space)
    # The modules below (database, runner, NVML, vLLM) are imported only now: importing them
    # takes longer than all the checks above, which should answer a typo at once.
    from tuner.catalog import tokenizer_dir
    from tuner.catalog.materialize import materialize
    from tuner.db import Repository, ensure_ready, make_engine
    from tuner.runner import (
        VLLM_MODULE,
        RunnerSettings,
        VllmTrialRunner,
        check_hardware,
        placement,
        reap_orphans,
    )
    from tuner.telemetry import detect_gpus

    hardware = check_hardware(
        gpu,
        detect_gpus(),
        emulate=spec.emulate,
        cuda_visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
    vllm, server_module = vllm_install(spec)
    flags = None
    # Flags beyond the typed knobs: named by the spec, or by the lever plan (tuner.study.plan).
    if space is None or plan_wanted(spec):
        flags = study_flags(vllm.python, vllm.version, fake_server=bool(server_module))
        check_flags(spec, flags)
        space = build_space(spec, model, gpu, workload, flags, new_study=new_study)
    argv.once(spec.extra_args, [*space.searched, *space.fixed], flags)
    home = writable_home()
    reap_orphans(home / "leases")
    synthetic = model.source is None
    model_path = str(materialize(model, home / "models")) if synthetic else str(model.source)
    load_format = spec.load_format or ("dummy" if synthetic else None)
    if synthetic or Path(model_path).is_dir():  # a trace's text counted by the model's tokenizer
        counted = resolve_workload(spec, Path(model_path))
        if counted != workload:
            workload = counted
            space = build_space(spec, model, gpu, workload, flags, new_study=new_study)
    settings = RunnerSettings(
        python=vllm.python,
        vllm_version=vllm.version,
        model_path=model_path,
        load_format=load_format,
        tokenizer=str(tokenizer_dir(Path(model_path))) if synthetic else None,
        startup_timeout_s=spec.startup_timeout_s,
        compile_cache=spec.compile_cache,
        cpu_placement=placement.resolve_mode(spec.cpu_placement),
        cache_root=home / "compile-cache",
        extra_args=spec.extra_args,
        log_dir=log_dir or Path(".tuner") / "logs",
        lease_dir=home / "leases",
        synthetic_tokenizer=synthetic,
        module=server_module or VLLM_MODULE,
    )
    check_enqueued(spec, space)  # the final space's, before the study is written
    ensure_ready(storage_url, auto_upgrade=True)
    repo = Repository(make_engine(storage_url))
    ctx = StudyContext(
        name=spec.study_name(),
        spec=spec,
        model=model,
        gpu=gpu,
        workload=workload,
        slo=slo,
        space=space,
        storage_url=storage_url,
        vllm_version=vllm.version,
        serve_model=model.source or (model.hub_id if model.weights_available else model_path),
        emulated=hardware.emulated,
    )
    return Prepared(ctx=ctx, runner=VllmTrialRunner(settings, model, hardware), repo=repo)
