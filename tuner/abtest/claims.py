"""Published claims about vLLM settings as testable statements, and where they can be measured.

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

:func:`load_claims` validates it (errors name the line), :func:`select` keeps the claims asked
for, :func:`plan` decides per model and GPU which claims can be measured at all, and
:func:`setup_claims` does all three for ``tuner verify-claims``'s options. Measuring and judging
them is :mod:`tuner.abtest.verdicts`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.abtest.compare import COMPARED
from tuner.catalog import rules
from tuner.catalog.gpus import FLASH_ATTN, GPUS, get_gpu
from tuner.catalog.models import resolve_model
from tuner.domain import GpuProfile, ModelSpec, ServingConfig, Workload
from tuner.errors import SpecError, UsageError
from tuner.load.workloads import WORKLOADS, plan_requests
from tuner.space import KNOBS, SearchSpace, normalize_knob
from tuner.spec.configs import (
    check_confidence,
    knob_table,
    parse_config_spec,
    parse_workload_overrides,
    with_overrides,
)
from tuner.spec.fields import Fail, find_line, read_toml, typed_value, workload_field
from tuner.spec.study import StudySpec

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
    data, text = read_toml(p, "claims")
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

    def fail(
        msg: str, key: str | None = None, hint: str = "", section: str | None = None
    ) -> SpecError:
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
    a, b = (knob_table(entry[side], side, fail) for side in ("a", "b"))
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


def _claimed(value: Any, fail: Fail) -> tuple[float, str]:
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


def _workload(value: Any, fail: Fail) -> Workload:
    table = {"preset": value} if isinstance(value, str) else value
    if not isinstance(table, dict) or not isinstance(table.get("preset"), str):
        raise fail(
            'workload must be a preset name or { preset = "...", key = value, ... }', "workload"
        )
    given = {k: v for k, v in table.items() if k not in ("preset", "name")}
    preset = WORKLOADS.get(table["preset"])
    if preset is None:
        raise fail(
            f"unknown workload preset {table['preset']!r}",
            "workload",
            hint=f"presets: {', '.join(WORKLOADS)}",
        )
    overrides = {key: workload_field(key, v, fail) for key, v in given.items()}
    name = table.get("name")
    if name is not None and not isinstance(name, str):
        raise fail("the workload's name must be a string", "name")
    try:
        workload = with_overrides(preset, overrides, name=name)
        plan_requests(workload, 1, 0)  # the shape checks, with a line number
    except UsageError as exc:
        raise fail(exc.message, "workload", hint=exc.hint) from None
    return workload


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


def select(claims: Sequence[Claim], only: Sequence[str] | None, where: str | Path) -> list[Claim]:
    """The claims whose id is in ``only`` (all of them when ``only`` is empty), in file order;
    UsageError naming ``where`` for an id the file does not have."""
    if not only:
        return list(claims)
    ids = [c.id for c in claims]
    unknown = [i for i in only if i not in ids]
    if unknown:
        raise UsageError(f"--only: no claim {unknown} in {where}", hint=f"ids: {', '.join(ids)}")
    return [c for c in claims if c.id in only]


@dataclass(frozen=True)
class ClaimsSetup:
    """The claims ``tuner verify-claims`` was asked to judge, planned for this model and GPU."""

    claims: tuple[Claim, ...]
    planned: list[Planned]
    model: ModelSpec
    gpu: GpuProfile
    spec: StudySpec  # what sets the machine up, needed only when a claim is applicable

    @property
    def applicable(self) -> bool:
        return any(not p.reason for p in self.planned)


def setup_claims(
    *,
    file: Path,
    model: str,
    gpu: str,
    confidence: float,
    only: Sequence[str] | None,
    fixed: str | None,
    workload_set: str | None,
    vllm_python: str | None,
) -> ClaimsSetup:
    """Everything ``tuner verify-claims`` was given, checked before anything starts (exit 2):
    the confidence, the claims file, ``--only``, ``--fixed`` and ``--workload-set``."""
    check_confidence(confidence)
    claims = tuple(select(load_claims(file), only, file))
    held = parse_config_spec(fixed, "--fixed") if fixed else {}
    overrides = parse_workload_overrides(workload_set)
    profile, spec_model = get_gpu(gpu), resolve_model(model)
    planned = plan(claims, spec_model, profile, fixed=held, workload_overrides=overrides)
    spec = StudySpec(
        model=model, gpu=gpu, fixed=held, vllm_python=vllm_python, source="command line"
    )
    return ClaimsSetup(claims, planned, spec_model, profile, spec)


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
