"""Published claims about vLLM settings as testable statements, and their verdicts.

A claims file (``studies/claims/*.toml``) holds ``[[claim]]`` tables::

    [[claim]]
    id = "fa2-throughput"                      # lower-case letters, digits and dashes
    statement = "FlashAttention-2 raises throughput by 41 %."
    a = "defaults"                             # or a knob table: { max_num_seqs = 64 }
    b = { attention_backend = "FLASH_ATTN", flash_attn_version = 2 }
    workload = "seed-bench"                    # or { preset = "seed-bench", prompt_tokens = 2048 }
    metric = "output_throughput"               # one of tuner.abtest.compare.COMPARED
    claimed = 1.41                             # the claimed B/A of the metric; "0.7/1.2" works
    requires = ["gpu", "FLASH_ATTN"]           # optional: a CUDA GPU, backends it must offer

:func:`load_claims` validates it (errors name the line), :func:`plan` decides per model and GPU
which claims can be measured at all, :func:`evaluate` measures them (claims with the same
workload share the launches of their common configurations) and :func:`judge` gives the verdict.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.abtest.compare import COMPARED
from tuner.catalog import rules
from tuner.catalog.gpus import FLASH_ATTN, GPUS
from tuner.domain import GpuProfile, ModelSpec, ServingConfig, Workload
from tuner.errors import SpecError, UsageError
from tuner.load.workloads import WORKLOADS, plan_requests
from tuner.space import KNOBS, SearchSpace, normalize_knob
from tuner.spec.study import WORKLOAD_TYPES, find_line, line_from_message, typed_value

CONFIRMED = "confirmed"
REFUTED = "refuted"
INCONCLUSIVE = "inconclusive"
NOT_APPLICABLE = "not applicable"

METRICS: tuple[str, ...] = tuple(name for name, _, _ in COMPARED)
BACKENDS: frozenset[str] = frozenset(b for g in GPUS.values() for b in g.attention_backends)
_KEYS = frozenset({"id", "statement", "a", "b", "workload", "metric", "claimed", "requires"})
_REQUIRED = ("id", "statement", "a", "b", "workload", "metric", "claimed")
_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_HEADER = re.compile(r"^\s*\[\[\s*claim\s*\]\]")


@dataclass(frozen=True)
class Claim:
    """One testable statement: B against A on ``workload``, ``metric`` B/A = ``claimed``."""

    id: str
    statement: str
    a: Mapping[str, Any]  # knob -> value as written ({} = defaults); see SearchSpace.config_from
    b: Mapping[str, Any]
    workload: Workload
    metric: str
    claimed: float
    claimed_text: str  # as written: "1.41", "0.7/1.2"
    requires: tuple[str, ...] = ()
    line: int | None = None


def load_claims(path: str | Path) -> tuple[Claim, ...]:
    """Read and validate a claims file; SpecError (exit 2) naming the line of the first problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read claims file: {exc.strerror}", path=str(p)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None) or line_from_message(str(exc))
        raise SpecError(f"not valid TOML: {exc}", path=str(p), line=line) from None
    stray = sorted(set(data) - {"claim"})
    entries = data.get("claim", [])
    if stray or not isinstance(entries, list) or not entries:
        what = f"unknown top-level key(s) {stray}" if stray else "no [[claim]] tables"
        line = find_line(text, stray[0]) if stray else None
        raise SpecError(what, path=str(p), line=line, hint="a claims file is [[claim]] tables")
    headers = [i for i, line in enumerate(text.splitlines()) if _HEADER.match(line)]
    claims: list[Claim] = []
    for index, entry in enumerate(entries):
        start = headers[index] if index < len(headers) else 0
        claim = _claim(entry, text, start, str(p))
        if any(c.id == claim.id for c in claims):
            raise SpecError(f"duplicate claim id {claim.id!r}", path=str(p), line=claim.line)
        claims.append(claim)
    return tuple(claims)


def _claim(entry: Mapping[str, Any], text: str, start: int, where: str) -> Claim:
    region = "\n".join(text.splitlines()[start:])

    def fail(msg: str, key: str | None = None, hint: str = "", section: str | None = None) -> Any:
        found = find_line(region, key) if key else None
        line = start + (found if found is not None else 1)
        return SpecError(msg, path=where, line=line, hint=hint)

    for key in entry:
        if key not in _KEYS:
            raise fail(f"unknown key {key!r} in [[claim]]", key, hint=f"allowed: {sorted(_KEYS)}")
    for key in _REQUIRED:
        if key not in entry:
            raise fail(f"[[claim]] lacks {key!r}", hint=f"every claim has {', '.join(_REQUIRED)}")
    claim_id = typed_value(entry["id"], str, "id", fail, "claim")
    if not _ID.match(claim_id):
        raise fail(f"claim id {claim_id!r}: use lower-case letters, digits and dashes", "id")
    statement = typed_value(entry["statement"], str, "statement", fail, "claim")
    a, b = (_config(entry[side], side, fail) for side in ("a", "b"))
    if a == b:
        raise fail("a and b are the same configuration: there is nothing to compare", "b")
    metric = typed_value(entry["metric"], str, "metric", fail, "claim")
    if metric not in METRICS:
        raise fail(f"unknown metric {metric!r}", "metric", hint=f"metrics: {', '.join(METRICS)}")
    claimed, claimed_text = _claimed(entry["claimed"], fail)
    requires = entry.get("requires", [])
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise fail("requires must be a list of strings", "requires")
    for item in requires:
        if item != "gpu" and item not in BACKENDS:
            known = ", ".join(["gpu", *sorted(BACKENDS)])
            raise fail(f"unknown requirement {item!r}", "requires", hint=f"known: {known}")
    return Claim(
        id=claim_id,
        statement=statement,
        a=a,
        b=b,
        workload=_workload(entry["workload"], fail),
        metric=metric,
        claimed=claimed,
        claimed_text=claimed_text,
        requires=tuple(requires),
        line=start + 1,
    )


def _config(value: Any, side: str, fail: Any) -> dict[str, Any]:
    if value == "defaults":
        return {}
    if not isinstance(value, dict):
        raise fail(f'{side} must be "defaults" or a table of knob = value', side)
    for knob, raw in value.items():
        if knob not in KNOBS:
            raise fail(f"unknown knob {knob!r} in {side}", knob, hint=f"knobs: {', '.join(KNOBS)}")
        try:
            normalize_knob(knob, raw, side)
        except UsageError as exc:
            raise fail(exc.message, knob, hint=exc.hint) from None
    return dict(value)


def _claimed(value: Any, fail: Any) -> tuple[float, str]:
    text = str(value)
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*[\d.]+\s*/\s*[\d.]+\s*", value):
        top, bottom = (float(x) for x in value.split("/"))
        number = top / bottom if bottom > 0 else None
    if number is None or not math.isfinite(number) or number <= 0 or number == 1.0:
        raise fail(
            f"claimed must be a ratio B/A above 0 and not 1, got {value!r}",
            "claimed",
            hint='e.g. claimed = 1.41 (41 % more), 0.72 (28 % less) or "0.7/1.2"',
        )
    return number, text


def _workload(value: Any, fail: Any) -> Workload:
    table = {"preset": value} if isinstance(value, str) else value
    if not isinstance(table, dict) or not isinstance(table.get("preset"), str):
        raise fail(
            'workload must be a preset name or { preset = "...", key = value, ... }', "workload"
        )
    overrides = {k: v for k, v in table.items() if k not in ("preset", "name")}
    preset = WORKLOADS.get(table["preset"])
    if preset is None:
        raise fail(
            f"unknown workload preset {table['preset']!r}",
            "workload",
            hint=f"presets: {', '.join(WORKLOADS)}",
        )
    for key, v in overrides.items():
        if key not in WORKLOAD_TYPES:
            raise fail(
                f"unknown workload field {key!r}", key, hint=f"fields: {sorted(WORKLOAD_TYPES)}"
            )
        typed_value(v, WORKLOAD_TYPES[key], key, fail, "workload")
    name = table.get("name")
    if name is not None and not isinstance(name, str):
        raise fail("the workload's name must be a string", "name")
    try:
        workload = with_overrides(preset, overrides, name=name)
        plan_requests(workload, 1, 0)  # the shape checks, with a line number
    except UsageError as exc:
        raise fail(exc.message, "workload", hint=exc.hint) from None
    return workload


def with_overrides(
    workload: Workload, overrides: Mapping[str, Any], *, name: str | None = None
) -> Workload:
    """``workload`` with some fields replaced; the name says so unless ``name`` is given."""
    if not overrides:
        return workload if name is None else workload.replace(name=name)
    label = name or f"{workload.name}[{','.join(f'{k}={v}' for k, v in overrides.items())}]"
    return workload.replace(**overrides, name=label)


# -- planning ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    """A claim made concrete for one model and GPU; ``reason`` set: it cannot be measured."""

    claim: Claim
    workload: Workload
    a: ServingConfig | None = None
    b: ServingConfig | None = None
    reason: str = ""


def plan(
    claims: Sequence[Claim],
    model: ModelSpec,
    gpu: GpuProfile,
    *,
    fixed: Mapping[str, Any] | None = None,
    workload_overrides: Mapping[str, Any] | None = None,
) -> list[Planned]:
    """The A and B configurations of each claim here, or why it is not applicable.

    Not applicable: a requirement the GPU profile lacks; a knob the claim varies that
    ``fixed`` (held in every configuration, like a spec's ``[space] fixed``) holds; A or B
    broken by the space rules (e.g. FLASH_ATTN on cpu); or A and B the same configuration
    once vLLM's defaults are spelled out (e.g. max_model_len 4096 for a model of 4096
    positions). ``workload_overrides`` apply to every claim's workload.
    """
    out = []
    for claim in claims:
        workload = with_overrides(claim.workload, workload_overrides or {})
        reason = _held(claim, fixed or {})
        if reason:
            out.append(Planned(claim, workload, reason=reason))
            continue
        space = SearchSpace(model, gpu, workload, fixed=fixed)
        a, b = space.config_from(claim.a), space.config_from(claim.b)
        # The space's sentences first: they say exactly what does not work here and why.
        problems = [
            f"{side} ({c.label()}): {p}"
            for side, c in (("A", a), ("B", b))
            for p in space.violations(c)
        ]
        if problems:
            reason = "; ".join(problems)
        elif _effective(model, gpu, a) == _effective(model, gpu, b):
            reason = _same(model, gpu, a, b)
        else:
            reason = _unmet(claim, gpu)
        out.append(Planned(claim, workload, a, b, reason))
    return out


def _unmet(claim: Claim, gpu: GpuProfile) -> str:
    for item in claim.requires:
        if item == "gpu" and gpu.is_cpu:
            return "needs a CUDA GPU; the cpu profile runs vLLM's CPU build"
        if item != "gpu" and item not in gpu.attention_backends:
            return f"needs the {item} attention backend, which {gpu.display_name} does not offer"
    return ""


def _held(claim: Claim, fixed: Mapping[str, Any]) -> str:
    for knob, value in fixed.items():
        for side in (claim.a, claim.b):
            if knob in side and normalize_knob(knob, side[knob], "claim") != normalize_knob(
                knob, value, "--fixed"
            ):
                return f"the claim sets {knob}, which --fixed holds at {value!r}"
    return ""


def _same(model: ModelSpec, gpu: GpuProfile, a: ServingConfig, b: ServingConfig) -> str:
    effective = _effective(model, gpu, a)

    def shown(value: Any) -> str:
        return "default" if value is None else str(value)

    knobs = ", ".join(
        f"{k} {shown(getattr(a, k))} and {shown(getattr(b, k))} both mean {getattr(effective, k)}"
        for k in KNOBS
        if getattr(a, k) != getattr(b, k)
    )
    return f"A and B are the same configuration for {model.alias} on {gpu.name}: {knobs}"


def _effective(model: ModelSpec, gpu: GpuProfile, c: ServingConfig) -> ServingConfig:
    """``c`` with the values vLLM uses for what it leaves at None, where tuner knows them."""
    only = gpu.attention_backends[0] if len(gpu.attention_backends) == 1 else None
    backend = c.attention_backend or only
    return c.replace(
        attention_backend=backend,
        flash_attn_version=(
            rules.effective_flash_attn_version(gpu, c) if backend == FLASH_ATTN else None
        ),
        max_model_len=rules.effective_max_model_len(model, c),
        gpu_memory_utilization=rules.effective_utilization(c),
        kv_cache_dtype=rules.kv_dtype(c),
    )


# -- verdicts ----------------------------------------------------------------------------------


def judge(claimed: float, low: float, high: float) -> str:
    """The verdict on a claimed ratio B/A given the measured interval [low, high] of B/A.

    Read the claim as "B/A is at least as far from 1 as ``claimed``, on its side of 1"
    (articles report the effect they saw; a larger one does not contradict them). With the
    claimed side above 1 (below 1: the same with every ratio inverted):

    - confirmed: ``low > 1`` (a real effect in the claimed direction) and ``claimed <= high``
      (the effect is not significantly smaller than claimed; ``low > claimed`` means it is
      even larger);
    - refuted: ``high < claimed``: the interval excludes the claimed effect on the near side,
      whether it shows a smaller effect, none (a tight interval around 1) or the opposite;
    - inconclusive: otherwise, i.e. ``low <= 1 < claimed <= high``: the interval contains
      both "no change" and the claimed effect; more launches would tell.
    """
    if claimed <= 0 or claimed == 1.0 or not 0 < low <= high:
        raise ValueError(
            f"judge needs claimed > 0, != 1 and 0 < low <= high; got {claimed}, [{low}, {high}]"
        )
    if claimed < 1.0:
        claimed, low, high = 1.0 / claimed, 1.0 / high, 1.0 / low
    if high < claimed:
        return REFUTED
    if low > 1.0:
        return CONFIRMED
    return INCONCLUSIVE


def explain(verdict: str, claimed: float, low: float, high: float) -> str:
    """One sentence on why ``judge`` gave ``verdict`` for this interval."""
    up = claimed > 1.0
    near = low if up else high  # the end of the interval nearest to 1
    if verdict == CONFIRMED:
        if (near > claimed) if up else (near < claimed):
            return "a real effect, even larger than claimed"
        return "a real effect in the claimed direction; the claimed size is within the interval"
    if verdict == REFUTED:
        if (high < 1.0) if up else (low > 1.0):
            return "the opposite of the claim: a real effect in the other direction"
        if low <= 1.0 <= high:
            return "no significant effect, and the interval rules out the claimed size"
        return "a real effect in the claimed direction, but significantly smaller than claimed"
    return "the interval contains both no change and the claimed effect: more launches needed"
