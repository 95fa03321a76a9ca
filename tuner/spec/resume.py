"""What a resumed study runs: the spec stored when it was created, never a new one.

A study's spec (model, GPU, workload and its overrides, objective, SLO, space, trials, the
confirmation's settings) is stored with the study when it is created. ``tuner run --study NAME
--resume`` continues that spec: what the command line (or a spec file) gives on top of it is
compared field by field, and

- a field that decides what is measured (everything but the ones below) must agree with the
  stored value; one that contradicts it is refused, naming the stored value;
- ``trials`` may grow (the study runs on to the new count, which is recorded), never shrink,
  and grow to :data:`TRIALS_MAX` at most; a study created with more (by a tuner before that
  bound) resumes at its own count, from its spec file too;
- how the server is started (``vllm_python``, ``startup_timeout_s``, ``compile_cache``) may
  change: the interpreter's path or a slow disk is this run's, not the study's.

So every trial of a study, its confirmation launches included, runs on one workload with one
space and one objective, whatever a resume is given. The workload's name and settings are not
all of it: a trace file can be edited between two runs. The fingerprint of its requests, stored
with the study, must match the one a resume would send (:func:`check_same_requests`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuner.domain import Workload
from tuner.domain.workload import parse_slo
from tuner.errors import UsageError
from tuner.load import fingerprint
from tuner.load.traces import split_name
from tuner.load.workloads import measured_overrides
from tuner.spec.study import TRIALS_MAX, StudySpec, profile_name

FINGERPRINT = "workload_fingerprint"  # the spec's key for the fingerprint of its requests

# Fields a resume may set anew: how this run starts its servers, and where the spec came from.
RUN_FIELDS = frozenset(
    {"vllm_python", "startup_timeout_s", "compile_cache", "cpu_placement", "source"}
)
# Fields kept from the stored spec whatever is given: the study's own name and notes.
KEPT_FIELDS = frozenset({"name", "notes"})

# What a spec file asks for where it leaves a field out.
_DEFAULTS = {f.name: getattr(StudySpec(), f.name) for f in dataclasses.fields(StudySpec)}

# How a spec file spells the fields that have no command-line option (--gpu-price, ...).
_SPEC_KEYS: Mapping[str, str] = {
    "plan": "[space] plan",
    "workload_overrides": "[workload]",
    "params": "[space] params",
    "choices": "[space] choices",
    "fixed": "[space] fixed",
    "enqueue": "[[enqueue]]",
    "confidence": "[confirm] confidence",
    "extra_args": "[runner] extra_args",
    "load_format": "[runner] load_format",
}


def stored_spec(stored: Mapping[str, Any], name: str, model_source: str | None = None) -> StudySpec:
    """The spec stored with study ``name`` (its row's ``spec``), named ``name``, with the cap
    in flight its trace was replayed at (:func:`kept_cap`), its workload's overrides as they
    were measured (:func:`tuner.load.workloads.measured_overrides`), and a model directory
    stored as given (``./m``, by a tuner before they were stored whole) at the study's
    ``model_source``, the directory it measured."""
    spec = kept_cap(StudySpec.from_dict({**stored, "name": name}), stored.get(FINGERPRINT))
    model = spec.model
    if model_source and Path(model_source).is_absolute() and not Path(model).is_absolute():
        model = model_source if Path(model).name == Path(model_source).name else model
    overrides = measured_overrides(spec.workload, spec.workload_overrides)
    return dataclasses.replace(spec, model=model, workload_overrides=overrides)


def kept_cap(spec: StudySpec, measured: Mapping[str, Any] | None) -> StudySpec:
    """``spec`` with ``[workload] concurrency`` set to the cap in flight its study's stored
    fingerprint (``measured``) records, where the study replayed a trace at its own times
    without setting one. Such a replay caps nothing by default now; before, it capped 64 in
    flight, and a study measured so keeps that cap in its resumes, joins and confirmation. A
    concurrency ladder's replay keeps 64 as its headline rung still: nothing to keep there."""
    measured = measured or {}
    cap = measured.get("concurrency")
    given = {"concurrency", "concurrency_ladder"} & set(spec.workload_overrides)
    # A window whose rows all start at once is fingerprinted a closed loop, yet was capped too.
    replayed = measured.get("arrival") in ("trace", "closed loop") and split_name(spec.workload)
    if not replayed or cap is None or given:
        return spec
    overrides = {**spec.workload_overrides, "concurrency": cap}
    return dataclasses.replace(spec, workload_overrides=overrides)


def resumed_spec(
    stored: StudySpec, given: StudySpec, *, changed: set[str] | None = None
) -> StudySpec:
    """The spec a resume runs: ``stored``, with ``given``'s trial count and run settings.

    ``changed``: the fields the caller was given (command-line options); None compares every
    field (a spec file, or a context handed to the study loop). UsageError, naming the stored
    value, for a field that contradicts the study, or for fewer trials than it was created with.
    """
    fields = [f.name for f in dataclasses.fields(StudySpec)]
    compared = [f for f in fields if changed is None or f in changed]
    for key in compared:
        if key in RUN_FIELDS or key in KEPT_FIELDS:
            continue
        old, new = getattr(stored, key), getattr(given, key)
        # A spec file without the key asks for its default: "leave it out" is no way back.
        left_out = changed is None and given.from_file and _same(key, new, _DEFAULTS[key])
        if key == "trials":
            if new < old or new > max(old, TRIALS_MAX):
                most = f"a study runs {TRIALS_MAX} trials at most"
                why = "a resume may add trials, not drop them" if new < old else most
                raise _contradiction(stored, key, old, new, why, left_out=left_out)
            continue
        if not _same(key, old, new):
            raise _contradiction(stored, key, old, new, left_out=left_out)
    updates = {k: getattr(given, k) for k in RUN_FIELDS if k in compared}
    if "trials" in compared:
        updates["trials"] = given.trials
    return dataclasses.replace(stored, **updates)


def _same(key: str, old: Any, new: Any) -> bool:
    if key == "slo":
        return bool(_slo_key(old) == _slo_key(new))
    if key == "gpu":  # a study stored before GPU names were the profile's: "H100" is h100
        return profile_name(str(old)) == profile_name(str(new))
    if key == "model":  # a directory given as ./m here is the one stored by its full path
        return _model_dir(str(old)) == _model_dir(str(new))
    return bool(_plain(old) == _plain(new))


def _model_dir(name: str) -> str:
    path = Path(name).expanduser()
    return str(path.resolve()) if path.is_dir() else name


def _slo_key(text: str) -> Any:
    """An SLO as compared: ``ttft_p99=0.5s`` is ``ttft_p99=500ms``; ``""`` (the workload's
    recommended one) is itself."""
    stripped = text.strip().lower()
    if not stripped:
        return ""
    try:
        return parse_slo(stripped)
    except ValueError:
        return stripped


def _plain(value: Any) -> Any:
    """``value`` as the database holds it (tuples as lists, enums as their values)."""
    if hasattr(value, "value") and not isinstance(value, int | float | str):
        value = value.value
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def _show(key: str, value: Any, option: str = "") -> str:
    """``value`` as ``option`` writes it: a spec file's key in TOML (``{ enforce_eager = true
    }``), ``--search`` as its arguments (``stream_interval=1,8``), else as the command line."""
    plain = _plain(value)
    if key == "slo" and not str(plain).strip():
        return "the workload's recommended SLO"
    if plain in (None, [], {}):
        return "none"
    if option.startswith("["):
        return _toml(plain)
    if key == "search":
        return " --search ".join(
            shlex.quote(f"{flag}={','.join(map(_word, words))}" if words else flag)
            for flag, words in plain.items()
        )
    if isinstance(plain, str):  # a model directory with a space: pasted whole
        return shlex.quote(plain) if option.startswith("--") else plain
    return json.dumps(plain)


def _word(value: Any) -> str:
    """One value of ``--search FLAG=V1,V2`` as it reads it back (parse_search)."""
    if isinstance(value, bool):
        return str(value).lower()
    return json.dumps(value, separators=(",", ":")) if isinstance(value, dict) else str(value)


def _toml(value: Any) -> str:
    """``value`` (as the database holds it) in TOML: ``{ enforce_eager = true }``, ``[1, 8]``."""
    if isinstance(value, dict):
        pairs = ", ".join(f"{_toml_key(k)} = {_toml(v)}" for k, v in value.items())
        return f"{{ {pairs} }}" if pairs else "{}"
    if isinstance(value, list):
        return f"[{', '.join(_toml(v) for v in value)}]"
    return json.dumps(value)  # a string, number or boolean: TOML writes them as JSON does


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _in_file(option: str, plain: Any) -> str:
    """Where and how a spec file writes ``plain`` at ``option`` (a key of _SPEC_KEYS)."""
    section, _, name = option.partition(" ")
    if name:
        return f"`{name} = {_toml(plain)}` under {section}"
    if isinstance(plain, dict):  # [workload]: a line each
        lines = " and ".join(f"`{_toml_key(k)} = {_toml(v)}`" for k, v in plain.items())
        return f"{lines} under {section}"
    return f"{section} tables of " + " and ".join(_toml(t) for t in plain)


# The command line's switches that take no value: a False one is said by its --no- form.
_SWITCHES = {"--early-stop": "--no-early-stop", "--emulate": None}


def _again(key: str, option: str, old: Any) -> str | None:
    """How a command line, or a spec file for its own keys, asks for the stored ``old`` again;
    None where only leaving the option out does (a value unset when the study was created, a
    switch that was off)."""
    plain = _plain(old)
    if plain in (None, [], {}) or (key == "slo" and not str(plain).strip()):
        return None  # unset, or the workload's recommended SLO: what leaving it out gives
    if key == "confirm_launches" and plain == 1:  # taken before 1 was refused: by name only
        return None
    if not option.startswith("--"):  # a spec file's key
        return f"write {_in_file(option, plain)} in the spec file"
    if isinstance(plain, bool):
        off = _SWITCHES.get(option)
        given = f"give {option}" if plain else (f"give {off}" if off else None)
    else:
        given = f"give {option} {_show(key, old, option)}"
    return given and f"{given} (a spec file that leaves it out asks for its default)"


def _contradiction(
    stored: StudySpec, key: str, old: Any, new: Any, why: str = "", *, left_out: bool = False
) -> UsageError:
    """``left_out``: ``new`` is what a spec file that leaves ``key`` out asks for."""
    name = stored.study_name()
    option = _SPEC_KEYS.get(key) or "--" + key.replace("_", "-")
    again = _again(key, option, old)
    by_name = (
        f"resume it by name as it was created (`tuner run --study {name} --resume` reads "
        "its stored settings)"
    )
    shown = f"{option} = " if option.startswith("[") and " " in option else f"{option} "
    return UsageError(
        f"study {name!r} was created with {shown}{_show(key, old, option)}; this resume asks "
        f"for {_show(key, new, option)}" + (f" ({why})" if why else ""),
        hint=", or ".join(
            [
                by_name if left_out else f"leave {option} out and {by_name}",
                *([again] if again else []),
                "start a new study with another --study name",
            ]
        ),
    )


# What a window asks of the server, as the fingerprint counts it: equal when the requests are.
_SAME_REQUESTS = (
    ("requests", "requests a window"),
    ("sessions", "conversations"),
    ("prompt_tokens_total", "prompt tokens a window"),
    ("output_tokens_total", "output tokens a window"),
    ("arrival", "arrivals"),
    ("concurrency", "streams or cap in flight"),
    ("duration_s", "seconds from first to last arrival"),
)


def check_same_requests(stored: Mapping[str, Any] | None, workload: Workload, name: str) -> None:
    """UsageError when ``workload`` would send other requests than study ``name`` measured
    (``stored``: the fingerprint stored with the study; None for a study from before tuner
    stored one, which is not checked): a trace file edited between two runs keeps its name."""
    if not stored:
        return
    now = fingerprint(workload).as_dict()
    changed = [
        f"{label} {_number(stored.get(key))} then, {_number(now.get(key))} now"
        for key, label in _SAME_REQUESTS
        if _number(stored.get(key)) != _number(now.get(key))
    ]
    if changed:
        raise UsageError(
            f"study {name!r} was measured on other requests than workload {workload.name!r} "
            f"sends now (" + "; ".join(changed) + "): its trials would rank against another "
            "workload's",
            hint="restore the trace or workload file it was measured on, or start a new study "
            "with another --study name"
            + (_SHAREGPT_RECOUNTED if workload.name.startswith("sharegpt:") else ""),
        )


# Where a ShareGPT file did not change, tuner may read it otherwise: since 2026-12-07 with a
# tokenizer that adds a BOS, as vLLM's sampler counts it.
_SHAREGPT_RECOUNTED = (
    " (a ShareGPT file that did not change is read otherwise with a tokenizer that adds a BOS "
    "since 2026-12-07: its tokens are counted as vLLM counts them)"
)


def _number(value: Any) -> Any:
    return f"{value:.6g}" if isinstance(value, float) else value
