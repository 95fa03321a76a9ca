"""Published claims about vLLM settings, and where they can be measured: the face of the
claims feature (``tuner verify-claims`` and the re-judgement of stored comparisons).

Its modules: :mod:`~tuner.abtest.claims.file` reads and documents the claims file,
:mod:`~tuner.abtest.claims.figures` what an article's figure says about a metric and how a
measured interval reads against it, :mod:`~tuner.abtest.claims.facts` the verdicts that are not
a figure (a flag exists, a start fails, a default backend), :mod:`~tuner.abtest.claims.verdicts`
measures and judges, :mod:`~tuner.abtest.claims.rejudge` judges again from stored comparisons.

Here, after :func:`load_claims` (``studies/claims/*.toml``): :func:`select` keeps the claims
asked for, :func:`plan` decides per model and GPU which claims can be measured at all, and
:func:`setup_claims` does all three for ``tuner verify-claims``'s options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.abtest.claims.file import EFFECT, FLAG, METRICS, UNMEASURABLE, Claim, load_claims
from tuner.catalog import FLASH_ATTN, get_gpu, resolve_model, rules
from tuner.compose import beyond_typed, installed_flags
from tuner.domain import GpuProfile, ModelSpec, ServingConfig, Workload
from tuner.errors import UsageError
from tuner.load import check_shapes, check_workload
from tuner.space import KNOBS, SearchSpace, normalize_knob
from tuner.spec import (
    StudySpec,
    check_confidence,
    parse_config_spec,
    parse_workload_overrides,
    with_overrides,
)
from tuner.vllm import knob_spelling

if TYPE_CHECKING:
    from tuner.vllm import FlagCatalog

__all__ = [
    "METRICS",
    "Claim",
    "ClaimsSetup",
    "Planned",
    "load_claims",
    "plan",
    "select",
    "setup_claims",
]


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
    flags: FlagCatalog | None = None,
) -> list[Planned]:
    """The A and B configurations of each claim here, or why it is not applicable.

    Not applicable: a requirement the GPU profile lacks; a knob the claim varies that
    ``fixed`` (held in every configuration, like a spec's ``[space] fixed``) holds; A or B
    broken by the space rules (e.g. FLASH_ATTN on cpu); or A and B the same configuration
    once vLLM's defaults are spelled out (e.g. max_model_len 4096 for a model of 4096
    positions). ``workload_overrides`` apply to every claim's workload. Claims of the other
    kinds: ``starts`` and ``default-backend`` get their configuration as A and B (the launch
    of their own, when they need one); ``flag`` and ``unmeasurable`` none.
    """
    out = []
    for claim in claims:
        workload = with_overrides(claim.workload, workload_overrides or {})
        if claim.kind not in (FLAG, UNMEASURABLE):  # a count of 0 measures nothing: said
            check_workload(workload)  # before any server starts, as compare says it
            check_shapes(workload)
        if claim.kind in (FLAG, UNMEASURABLE):  # no configuration: nothing the space can rule out
            out.append(Planned(claim, workload, reason=_unmet(claim, gpu)))
            continue
        reason = _held(claim, fixed or {})
        if reason:
            out.append(Planned(claim, workload, reason=reason))
            continue
        space = SearchSpace(model, gpu, workload, fixed=fixed, flags=flags)
        a, b = space.config_from(claim.a), space.config_from(claim.b)
        # The space's sentences first: they say exactly what does not work here and why.
        problems = [
            f"{side} ({c.label()}): {p}"
            for side, c in (("A", a), ("B", b))
            for p in space.violations(c)
        ]
        if problems:
            reason = "; ".join(problems)
        elif claim.kind == EFFECT and _effective(model, gpu, a) == _effective(model, gpu, b):
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
        """Whether anything needs this machine's vLLM (a launch, or its flag list)."""
        return any(not p.reason and p.claim.kind != UNMEASURABLE for p in self.planned)


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
    spec = StudySpec(
        model=model, gpu=gpu, fixed=held, vllm_python=vllm_python, source="command line"
    )
    # A vLLM flag held with --fixed (stream_interval=4) is typed by the installed vLLM's list,
    # as compare's -a/-b are.
    flags = installed_flags(spec) if beyond_typed(held) else None
    planned = plan(
        claims, spec_model, profile, fixed=held, workload_overrides=overrides, flags=flags
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
    for given, value in fixed.items():
        knob = knob_spelling(given)  # --fixed gpu-memory-utilization=0.5 holds it too
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
