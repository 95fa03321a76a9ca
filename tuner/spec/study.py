"""Study specs: what a study measures, read from a TOML file in ``studies/`` or built from CLI
options (which override the file). Errors name the file and line and say what is allowed. The
file's tables and keys: docs/specs.md."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.catalog import get_gpu, price_problem
from tuner.db import name_problem
from tuner.domain import SEED_MAX, Objective, typed_knobs
from tuner.domain.workload import parse_slo
from tuner.errors import SpecError, UsageError
from tuner.scoring import MAX_LAUNCHES
from tuner.spec.fields import (
    WORKLOAD_TYPES,
    Fail,
    find_line,
    read_toml,
    typed_value,
    valid_confidence,
    workload_field,
)
from tuner.vllm import FlagCatalog, argv, knob_flag, knob_spelling, spelling_key, spelt_like_a_flag
from tuner.vllm.caches import MODES as CACHE_MODES

# The keys of [study] and [runner] that are read as they are, by type.
_STUDY_TYPES: Mapping[str, type] = {
    **dict.fromkeys(("model", "gpu", "workload", "slo", "name", "notes"), str),
    **dict.fromkeys(("trials", "seed"), int),
    **dict.fromkeys(("emulate", "early_stop"), bool),
}
_RUNNER_STRINGS = ("vllm_python", "load_format", "cpu_placement")
# [confirm]'s keys: the field each sets, and its type.
_CONFIRM_FIELDS: Mapping[str, tuple[str, type]] = {
    "top": ("confirm_top", int),
    "launches": ("confirm_launches", int),
    "max_launches": ("confirm_max_launches", int),
    "confidence": ("confidence", float),
}
_SECTIONS: Mapping[str, frozenset[str]] = {
    "study": frozenset({*_STUDY_TYPES, "objective", "gpu_price"}),
    "workload": frozenset(WORKLOAD_TYPES),
    "space": frozenset({"params", "choices", "fixed", "search", "plan"}),
    "confirm": frozenset(_CONFIRM_FIELDS),
    "runner": frozenset({*_RUNNER_STRINGS, "startup_timeout_s", "extra_args", "compile_cache"}),
}
_SERVING_KEYS = frozenset(typed_knobs())
NO_SLO = "none"  # `slo = "none"`: no SLO, not even the workload's recommended one
# Trials of one study, for a spec file, --trials and the API alike: each is a vLLM launch of
# minutes, so this is months of one GPU, and far inside what the database's columns hold. A
# resume is bounded by its stored study instead (tuner.spec.resume): one created with more
# (by a tuner before this bound) resumes from its own spec file.
TRIALS_MAX = 10_000
# A confirmation of one launch a candidate: no interval, its max_launches dropped, and `tuner
# best` then recommending vLLM's defaults for "not enough launches". 0 turns it off.
ONE_LAUNCH = (
    "{}: one launch a candidate gives no interval to confirm it by; a confirmation takes "
    "at least 2 (as `tuner compare --repeats` does)"
)
ONE_LAUNCH_HINT = "give {0} 2 or more (3 is the default), or {0} 0 to turn the confirmation off"
# The source of a study queued through the API (POST /v1/studies): its spec is the request's body.
API_SOURCE = "request body"
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class StudySpec:
    model: str = "tiny-ernie"
    gpu: str = "cpu"
    workload: str = "smoke"
    objective: Objective = Objective.BALANCED
    trials: int = 3
    slo: str = ""
    seed: int = 0
    name: str | None = None
    notes: str = ""
    emulate: bool = False  # run on a larger GPU limited to --gpu's memory (labelled emulated)
    early_stop: bool = False  # stop a trial at its first load point when clearly worse
    gpu_price: float | None = None  # $ per GPU-hour; None: the catalog default (tuner.catalog.gpus)
    workload_overrides: Mapping[str, Any] = field(default_factory=dict)
    params: tuple[str, ...] | None = None
    choices: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    search: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # flag -> values
    enqueue: tuple[Mapping[str, Any], ...] = ()
    # [space] plan: "auto" (a spec without a space of its own searches the lever plan of its
    # defaults' bottleneck, tuner.study.plan) or "off" (the card's knobs, as given).
    plan: str = "auto"
    # The confirmation phase (tuner.study.confirm): candidates, fresh launches each, interval level.
    confirm_top: int = 3
    confirm_launches: int = 3
    # Launch budget each of the decision design (tuner.abtest.decide): pairs are added after
    # the first look while a candidate is undecided; None: confirm_launches (one look).
    confirm_max_launches: int | None = None
    confidence: float = 0.95
    startup_timeout_s: float = 900.0
    compile_cache: str = "shared"  # tuner.vllm.caches: shared, cold or system
    cpu_placement: str = "auto"  # tuner.runner.placement: auto, pinned or off (checked there)
    extra_args: tuple[str, ...] = ()
    vllm_python: str | None = None
    load_format: str | None = None  # None: dummy for catalogued models, auto for real weights
    source: str = "<defaults>"

    @property
    def from_file(self) -> bool:
        """Whether ``source`` names a spec file (else the defaults or the command line)."""
        return self.source not in ("", "<defaults>", "command line", API_SOURCE)

    @property
    def from_api(self) -> bool:
        """Whether the spec is the body of a study queued through the API."""
        return self.source == API_SOURCE

    def study_name(self) -> str:
        if self.name:
            return self.name
        model, workload = (_NAME_UNSAFE.sub("_", v) for v in (self.model, self.workload))
        model = model.lstrip(".-") or "model"  # a name never starts so (tuner.db.names)
        # Emulated results are never mixed with real ones, not even in a study's name.
        emulated = "-emulated" if self.emulate else ""
        return f"{model}-{self.gpu}{emulated}-{workload}-{self.objective.value}"

    def with_overrides(self, *, resume: bool = False, **changes: Any) -> StudySpec:
        """Apply CLI options; ``None`` means "not given on the command line". ``resume``: the
        trial count is bounded by the stored study's (:func:`tuner.spec.resume.resumed_spec`),
        not by :data:`TRIALS_MAX`."""
        given = {k: v for k, v in changes.items() if v is not None}
        if not 0 <= given.get("seed", 0) <= SEED_MAX:
            raise UsageError(f"--seed must be 0 to {SEED_MAX}", hint="e.g. --seed 7")
        if not resume and given.get("trials", 1) > TRIALS_MAX:
            raise UsageError(f"--trials must be at most {TRIALS_MAX}", hint="e.g. --trials 16")
        if "search" in given:  # --search adds to the file's, flag by flag
            given["search"] = {**self.search, **given["search"]}
        if "objective" in given:
            given["objective"] = parse_objective(str(given["objective"]), where="--objective")
        if "gpu" in given:
            given["gpu"] = profile_name(given["gpu"])
        return dataclasses.replace(self, **given)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StudySpec:
        """The inverse of :meth:`to_dict` (a spec stored with a queued study)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["objective"] = Objective(kwargs.get("objective", Objective.BALANCED.value))
        for key in ("params", "extra_args", "enqueue"):
            if kwargs.get(key) is not None:
                kwargs[key] = tuple(kwargs[key])
        for key in ("choices", "search"):
            if key in kwargs:
                kwargs[key] = {k: tuple(v) for k, v in kwargs[key].items()}
        if "workload_overrides" in kwargs:  # ladders are tuples, as a spec file gives them
            kwargs["workload_overrides"] = {
                k: tuple(v) if isinstance(v, list) else v
                for k, v in kwargs["workload_overrides"].items()
            }
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["objective"] = self.objective.value
        return data

    def named_knobs(self) -> list[tuple[str, str]]:
        """Every knob the spec names, with where: params, choices, fixed, search or enqueue."""
        return [
            *((n, "params") for n in self.params or ()),
            *((n, "choices") for n in self.choices),
            *((n, "fixed") for n in self.fixed),
            *((n, "search") for n in self.search),
            *((n, "enqueue") for item in self.enqueue for n in item),
        ]


DEFAULT_SPEC_PATH = Path(__file__).with_name("default_study.toml")


def load_spec(path: str | Path, *, resume: bool = False) -> StudySpec:
    """Read and validate a spec file; raises SpecError naming the line of the first problem.
    ``resume``: the file of a study to resume, whose trial count the stored study bounds."""
    p = Path(path)
    data, text = read_toml(p, "spec")
    return spec_from_mapping(data, text, str(p), resume=resume)


def spec_from_mapping(
    data: Mapping[str, Any], text: str, where: str, *, resume: bool = False
) -> StudySpec:
    """Validate parsed spec data (a TOML file's, or JSON posted to the API) into a StudySpec.

    ``text`` is the source text used to find line numbers for errors ("" when there is none).
    ``resume``: ``trials`` may pass :data:`TRIALS_MAX` (the stored study bounds it).
    The sections are read in a fixed order ([study], [workload], [space], [[enqueue]],
    [confirm], [runner]), and the first problem found is the one reported.
    """

    def fail(
        msg: str, key: str | None = None, hint: str = "", section: str | None = None
    ) -> SpecError:
        line = find_line(text, key, section) if key else None
        return SpecError(msg, path=where, line=line, hint=hint)

    _check_sections(data, fail)
    return StudySpec(
        source=where,
        **_study_section(data.get("study", {}), fail, where, resume),
        workload_overrides={
            k: workload_field(k, v, fail) for k, v in data.get("workload", {}).items()
        },
        **_space_section(data.get("space", {}), fail),
        enqueue=_enqueue_section(data.get("enqueue", []), fail),
        **_confirm_section(data.get("confirm", {}), fail),
        **_runner_section(data.get("runner", {}), fail),
    )


def _check_sections(data: Mapping[str, Any], fail: Fail) -> None:
    """Every section known and a table, every key in it known (``[[enqueue]]`` has its own)."""
    for section, value in data.items():
        if section == "enqueue":
            continue
        allowed = _SECTIONS.get(section)
        if allowed is None:
            raise fail(
                f"unknown section [{section}]",
                section,
                hint=f"allowed sections: {sorted([*_SECTIONS, 'enqueue'])}",
            )
        if not isinstance(value, dict):
            raise fail(f"[{section}] must be a table", section)
        for key in value:
            if key not in allowed:
                raise fail(
                    f"unknown key {key!r} in [{section}]",
                    key,
                    hint=f"allowed: {sorted(allowed)}",
                    section=section,
                )


def profile_name(gpu: str) -> str:
    """The GPU profile's own name for ``gpu`` (matched in any case): one profile, one study
    name and one resume check. A name no profile has is kept, refused where the study is
    prepared, with the profiles listed."""
    try:
        return get_gpu(gpu).name
    except UsageError:
        return gpu


def _study_section(
    study: Mapping[str, Any], fail: Fail, where: str, resume: bool = False
) -> dict[str, Any]:
    """``[study]``: names, counts, the SLO and the objective."""
    kwargs = {
        key: typed_value(study[key], kind, key, fail, "study")
        for key, kind in _STUDY_TYPES.items()
        if key in study
    }
    if "gpu" in kwargs:
        kwargs["gpu"] = profile_name(kwargs["gpu"])
    if "slo" in kwargs and kwargs["slo"].strip().lower() != NO_SLO:
        try:
            parse_slo(kwargs["slo"])
        except ValueError as exc:
            raise fail(str(exc), "slo", section="study") from None
    if "name" in kwargs and (problem := name_problem(kwargs["name"])) is not None:
        raise fail(
            f"study.name {kwargs['name']!r} {problem}",
            "name",
            hint="pick a name such as ernie-h200-chat (letters, digits, _ . -)",
            section="study",
        )
    if "trials" in kwargs and kwargs["trials"] < 1:
        raise fail("trials must be at least 1", "trials")
    if "trials" in kwargs and kwargs["trials"] > TRIALS_MAX and not resume:
        raise fail(f"study.trials must be at most {TRIALS_MAX}", "trials", section="study")
    if "seed" in kwargs and not 0 <= kwargs["seed"] <= SEED_MAX:
        raise fail(f"study.seed must be 0 to {SEED_MAX}", "seed", section="study")
    if "gpu_price" in study:
        price = typed_value(study["gpu_price"], float, "gpu_price", fail, "study")
        if problem := price_problem(price):
            raise fail(
                f"gpu_price: {problem} US dollars",
                "gpu_price",
                hint="e.g. gpu_price = 3.5",
                section="study",
            )
        kwargs["gpu_price"] = float(price)
    if "objective" in study:
        try:
            kwargs["objective"] = parse_objective(str(study["objective"]), where=where)
        except SpecError as exc:
            raise fail(exc.message.split(": ", 1)[-1], "objective", exc.hint) from None
    return kwargs


def _space_section(space: Mapping[str, Any], fail: Fail) -> dict[str, Any]:
    """``[space]``: the knobs searched, their candidate values and the knobs held."""
    kwargs: dict[str, Any] = {}
    if "params" in space:
        params = space["params"]
        if not isinstance(params, list) or not all(isinstance(p, str) for p in params):
            raise fail("params must be a list of knob names", "params")
        _check_knobs(params, "params", fail)
        kwargs["params"] = tuple(params)
    for key in ("choices", "fixed"):
        if key in space:
            table = space[key]
            if not isinstance(table, dict):
                raise fail(f"{key} must be a table of knob = value", key)
            _check_knobs(table, key, fail)
            kwargs[key] = (
                {k: tuple(v) if isinstance(v, list) else (v,) for k, v in table.items()}
                if key == "choices"
                else dict(table)
            )
    if "search" in space:
        kwargs["search"] = _search_table(space["search"], fail)
    if "plan" in space:
        if space["plan"] not in ("auto", "off"):
            raise fail('plan must be "auto" or "off"', "plan", section="space")
        kwargs["plan"] = space["plan"]
    return kwargs


def _search_table(value: Any, fail: Fail) -> dict[str, tuple[Any, ...]]:
    """``[space] search``: a table of flag = [values] ([] for the built-in candidates), or a
    list of flag names (built-in candidates), keyed by the flags' spelling in tuner."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = {name: [] for name in value}
    if not isinstance(value, dict):
        raise fail(
            "search must be a table of flag = [values]",
            "search",
            hint="e.g. search = { stream_interval = [1, 8] }",
            section="space",
        )
    _check_knobs(value, "search", fail)
    out: dict[str, tuple[Any, ...]] = {}
    for name, values in value.items():
        values = values if isinstance(values, list) else [values]
        if not all(isinstance(v, bool | int | float | str | dict) for v in values):
            raise fail(f"search values for {name} must be numbers, names or tables", name)
        key = knob_spelling(name)
        if key in out:
            raise fail(f"{name} is given twice in search", name, section="space")
        out[key] = tuple(values)
    return out


def _enqueue_section(enqueue: Any, fail: Fail) -> tuple[dict[str, Any], ...]:
    """``[[enqueue]]``: configurations tried first, each a table of knob = value."""
    if not isinstance(enqueue, list):
        raise fail("enqueue must be an array of tables: [[enqueue]]", "enqueue")
    for item in enqueue:
        if not isinstance(item, dict):
            raise fail("enqueue must be an array of tables: [[enqueue]]", "enqueue")
        _check_knobs(item, "enqueue", fail)
    return tuple(dict(item) for item in enqueue)


def _confirm_section(confirm: Mapping[str, Any], fail: Fail) -> dict[str, Any]:
    """``[confirm]``: the confirmation phase's candidates, launches and interval level."""
    kwargs = {
        field_name: typed_value(confirm[key], kind, key, fail, "confirm")
        for key, (field_name, kind) in _CONFIRM_FIELDS.items()
        if key in confirm
    }
    if kwargs.get("confirm_top", 1) < 1 or kwargs.get("confirm_launches", 0) < 0:
        raise fail("confirm top must be >= 1 and launches >= 0 (0 turns it off)", "confirm")
    if kwargs.get("confirm_launches") == 1:
        raise fail(
            ONE_LAUNCH.format("confirm launches = 1"),
            "launches",
            ONE_LAUNCH_HINT.format("launches ="),
            "confirm",
        )
    if kwargs.get("confirm_launches", 0) > MAX_LAUNCHES:
        raise fail(
            f"confirm launches ({kwargs['confirm_launches']}) is above {MAX_LAUNCHES}, the most "
            "a sequential design takes a side",
            "launches",
            hint="a difference that needs more is below what launches resolve: lower it",
            section="confirm",
        )
    budget = kwargs.get("confirm_max_launches")
    if budget is not None and budget < 2:  # as the API and --confirm-max-launches take it
        raise fail(
            f"confirm max_launches ({budget}) must be 2 or more: each arm's budget, first look "
            "included",
            "max_launches",
            hint="leave max_launches out for one look of `launches`",
            section="confirm",
        )
    if budget is not None and budget > MAX_LAUNCHES:
        raise fail(
            f"confirm max_launches ({budget}) is above {MAX_LAUNCHES}, the most a sequential "
            "design takes a side",
            "max_launches",
            hint="a difference that needs more is below what launches resolve: lower it",
            section="confirm",
        )
    if budget is not None and budget < kwargs.get("confirm_launches", 3):
        raise fail(
            f"confirm max_launches ({budget}) is below launches "
            f"({kwargs.get('confirm_launches', 3)}): it is each arm's budget, first look included",
            "max_launches",
            hint="raise max_launches, or leave it out for one look of `launches`",
            section="confirm",
        )
    if not valid_confidence(kwargs.get("confidence", 0.95)):
        raise fail(
            "confidence must be between 0.5 and 1, e.g. 0.95", "confidence", section="confirm"
        )
    return kwargs


def _runner_section(runner: Mapping[str, Any], fail: Fail) -> dict[str, Any]:
    """``[runner]``: how the server is launched."""
    kwargs: dict[str, Any] = {}
    if "startup_timeout_s" in runner:
        timeout = typed_value(
            runner["startup_timeout_s"], float, "startup_timeout_s", fail, "runner"
        )
        if not (math.isfinite(timeout) and timeout > 0):
            raise fail(
                "startup_timeout_s must be positive and finite (seconds)",
                "startup_timeout_s",
                section="runner",
            )
        kwargs["startup_timeout_s"] = float(timeout)
    if "extra_args" in runner:
        extra = runner["extra_args"]
        if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
            raise fail(
                "extra_args must be a list of strings",
                "extra_args",
                hint='e.g. extra_args = ["--dtype", "float32"]',
                section="runner",
            )
        why = argv.tuner_sets(extra)
        if why is not None:
            raise fail(why, "extra_args", hint="drop it from extra_args", section="runner")
        kwargs["extra_args"] = tuple(extra)
    for key in _RUNNER_STRINGS:
        if key in runner:
            kwargs[key] = typed_value(runner[key], str, key, fail, "runner")
    for key in ("extra_args", *_RUNNER_STRINGS):  # no program takes one in an argument
        value = kwargs.get(key)
        texts = value if isinstance(value, tuple) else (value,) if isinstance(value, str) else ()
        if any("\x00" in text for text in texts):
            raise fail(f"{key} holds a NUL character", key, section="runner")
    if "compile_cache" in runner:
        mode = typed_value(runner["compile_cache"], str, "compile_cache", fail, "runner")
        if mode not in CACHE_MODES:
            raise fail(
                f"compile_cache {mode!r} is none of {', '.join(CACHE_MODES)}",
                "compile_cache",
                hint='"shared" reuses compiled kernels across launches; "cold" starts each '
                "from nothing",
                section="runner",
            )
        kwargs["compile_cache"] = mode
    return kwargs


def _check_knobs(names: Sequence[str] | Mapping[str, Any], where: str, fail: Fail) -> None:
    """Every name a typed knob or spelt like a ``vllm serve`` flag; whether the installed vLLM
    has such a flag is checked against its flag list when the study is prepared."""
    for name in names:
        if name not in _SERVING_KEYS and not spelt_like_a_flag(str(name)):
            raise fail(
                f"unknown serving knob {name!r} in {where}",
                name,
                hint=f"knobs: {sorted(_SERVING_KEYS)}, or a `vllm serve` flag by its name",
                section="enqueue" if where == "enqueue" else "space",
            )


def check_flags(spec: StudySpec, flags: FlagCatalog) -> None:
    """SpecError, naming the spec file's line, for a knob of ``spec`` that is neither a typed
    knob nor a flag of this vLLM (``flags``), with the closest real flags. The search space
    checks the same again for specs that come from no file."""
    text, searched = "", set()
    if spec.from_file and Path(spec.source).is_file():
        data, text = read_toml(Path(spec.source), "spec")
        table = (
            data.get("space", {}).get("search", {}) if isinstance(data.get("space"), dict) else {}
        )
        searched = {spelling_key(str(k)) for k in table}  # a table of flags, or a list of them
    for name, where in spec.named_knobs():
        if spelling_key(name) in _SERVING_KEYS or knob_flag(flags, name) is not None:
            continue
        message, hint = flags.unknown(name)
        if where == "search" and spelling_key(name) not in searched:  # the command line's
            raise SpecError(f"{message} (in search)", path="--search", hint=hint)
        section = "enqueue" if where == "enqueue" else "space"
        line = find_line(text, name, section) or find_line(text, name.replace("_", "-"), section)
        raise SpecError(f"{message} (in {where})", path=spec.source, line=line, hint=hint)


def parse_objective(text: str, *, where: str = "command line") -> Objective:
    try:
        return Objective(text)
    except ValueError:
        allowed = [o.value for o in Objective]
        raise SpecError(
            f"unknown objective {text!r}", path=where, hint=f"use one of {allowed}"
        ) from None
