"""Serving configurations and workload changes as people write them, checked and typed.

Two spellings reach here. On the command line (``tuner compare --a/--b``, ``tuner verify-claims
--fixed``): ``defaults`` or ``knob=value,knob=value``, and ``--workload-set key=value,...``; a
problem is a :class:`UsageError` naming the option. In a claims file: a side is ``"defaults"`` or
a TOML table of knob = value, and a problem is raised through the file's ``fail`` (see
:class:`tuner.spec.fields.Fail`), which names the line. :func:`configs_in` then turns the knobs
into the :class:`ServingConfig` a search space makes of them, refusing any that break its rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tuner.domain import ServingConfig, Workload
from tuner.domain.workload import overridden_name
from tuner.errors import UsageError
from tuner.load import check_overrides
from tuner.space import KNOBS, SearchSpace, normalize_knob
from tuner.spec.fields import WORKLOAD_TYPES, Fail, valid_confidence, workload_field
from tuner.vllm import knob_spelling, spelt_like_a_flag

DEFAULTS = "defaults"
"""The spelling of "vLLM's defaults, no knob set" for a side of a comparison, and the label of
that arm (``tuner compare``, ``verify-claims``, a study's confirmation)."""


def parse_value(raw: str) -> Any:
    """A command-line value typed: int, float, true/false, else the string itself."""
    text = raw.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_assignments(text: str, option: str) -> dict[str, Any]:
    """``"k=v,k=v"`` -> ``{k: typed v}``; UsageError naming ``option`` when malformed. A
    JSON object's commas (``speculative_config={"method":"ngram","num_speculative_tokens":3}``)
    stay in its value."""
    out: dict[str, Any] = {}
    for part in _split_values(text):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise UsageError(
                f"{option}: cannot read {part.strip()!r} in {text!r}",
                hint=f"write {option} knob=value,knob=value",
            )
        if key in out:
            raise UsageError(f"{option}: {key} is given twice in {text!r}")
        out[key] = parse_value(value)
    return out


def parse_search(items: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """``--search FLAG=V1,V2`` options -> ``{flag: (typed values)}``; ``--search FLAG`` alone
    -> ``{flag: ()}`` (tuner's built-in candidates). Flag names are checked against vLLM's
    list when the study is prepared; here only their shape."""
    out: dict[str, tuple[Any, ...]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        key = knob_spelling(name)
        words = _split_values(values) if sep else []
        if not spelt_like_a_flag(name) or any(not w for w in words):
            raise UsageError(
                f"--search: cannot read {item!r}",
                hint="write --search FLAG=V1,V2 (e.g. --search stream_interval=1,8), "
                "or --search FLAG for tuner's built-in candidates",
            )
        if key in out:
            raise UsageError(f"--search: {name.strip()} is given twice")
        # A JSON object is kept as written: the value of a JSON-valued flag.
        out[key] = tuple(w if w.startswith("{") else parse_value(w) for w in words)
    return out


def _split_values(text: str) -> list[str]:
    """``1,8`` -> ["1", "8"]; commas inside a JSON object (``{"a":1,"b":2},{...}``) stay."""
    words, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"{": 1, "[": 1, "}": -1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            words.append(text[start:i].strip())
            start = i + 1
    return [*words, text[start:].strip()]


def parse_config_spec(text: str, option: str) -> dict[str, Any]:
    """A SPEC of ``tuner compare``: ``defaults`` (-> {}) or ``knob=value,...``, knobs and
    values checked (UsageError, exit 2, listing the knobs)."""
    if text.strip() == DEFAULTS:
        return {}
    values = parse_assignments(text, option)
    unknown = sorted(k for k in values if k not in KNOBS and not spelt_like_a_flag(k))
    if unknown:
        raise UsageError(
            f"{option}: unknown knob(s) {', '.join(unknown)}",
            hint=f"knobs: {', '.join(KNOBS)}, or a `vllm serve` flag (stream_interval=8); "
            f"or {option} {DEFAULTS}",
        )
    for knob, value in values.items():
        if knob in KNOBS:  # other flags are typed by vLLM's flag list (the search space)
            normalize_knob(knob, value, option)
    return values


def parse_workload_overrides(text: str | None) -> dict[str, Any]:
    """``--workload-set key=value,...`` checked against the workload fields."""
    if not text:
        return {}
    values = parse_assignments(text, "--workload-set")

    def fail(
        msg: str, key: str | None = None, hint: str = "", section: str | None = None
    ) -> UsageError:
        return UsageError(f"--workload-set: {msg}", hint=f"fields: {sorted(WORKLOAD_TYPES)}")

    return {key: workload_field(key, value, fail) for key, value in values.items()}


def check_confidence(value: float) -> float:
    """``--confidence`` itself, or UsageError when it is no interval level."""
    if not valid_confidence(value):
        raise UsageError(f"--confidence {value} is out of range", hint="e.g. 0.95 or 0.99")
    return value


def knob_table(value: Any, side: str, fail: Fail) -> dict[str, Any]:
    """A side of a claim (``a`` or ``b``): ``"defaults"`` (-> {}) or a table of knob = value,
    each knob known and its value valid; problems raised through ``fail`` at the knob's line."""
    if value == DEFAULTS:
        return {}
    if not isinstance(value, dict):
        raise fail(f'{side} must be "{DEFAULTS}" or a table of knob = value', side)
    for knob, raw in value.items():
        if knob not in KNOBS:
            raise fail(f"unknown knob {knob!r} in {side}", knob, hint=f"knobs: {', '.join(KNOBS)}")
        try:
            normalize_knob(knob, raw, side)
        except UsageError as exc:
            raise fail(exc.message, knob, hint=exc.hint) from None
    return dict(value)


def configs_in(
    space: SearchSpace, sides: Sequence[tuple[str, Mapping[str, Any]]]
) -> list[ServingConfig]:
    """The configuration of each side (``[("--a", knobs), ("--b", knobs)]``: the option that
    gave it, its knobs) in ``space``: its baseline with the knobs applied. UsageError naming
    the option when one breaks the space's rules on this model, GPU and workload."""
    configs = [space.config_from(knobs, option) for option, knobs in sides]
    for (option, _), config in zip(sides, configs, strict=True):
        problems = space.violations(config)
        if problems:
            raise UsageError(
                f"{option} ({config.label()}) cannot run here: {'; '.join(problems)}",
                hint=f"change {option}; `tuner gpus` lists what each profile offers",
            )
    return configs


def with_overrides(
    workload: Workload, overrides: Mapping[str, Any], *, name: str | None = None
) -> Workload:
    """``workload`` with some fields replaced; the name says so unless ``name`` is given.
    UsageError for a field the workload does not read (:func:`check_overrides`)."""
    check_overrides(workload, overrides)
    if not overrides:
        return workload if name is None else workload.replace(name=name)
    return workload.replace(**overrides, name=name or overridden_name(workload.name, overrides))
