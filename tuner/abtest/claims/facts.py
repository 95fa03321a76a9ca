"""Verdicts on the claims that are not a figure on a metric (:mod:`tuner.abtest.claims.file`):
a flag exists or not, vLLM fails to start without a flag, vLLM's defaults run an attention
backend, and what tuner cannot measure.

Each answer is ``confirmed`` or ``refuted`` with what it rests on, or ``not measured yet`` with
what it needs; ``unmeasurable`` claims are ``not measurable``, with what a measurement would
need. The functions take plain facts (a flag list, what launches did), so that a live
``tuner verify-claims`` and a re-judgement of stored comparisons
(:mod:`tuner.abtest.claims.rejudge`) give the same sentences. :func:`setting_note` says when a
claim was measured elsewhere than the article measured it; :func:`machine_flags` and
:func:`runner_passing` give ``tuner verify-claims`` this machine's flag list and a runner that
passes a flag.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tuner.abtest.claims.figures import INCONCLUSIVE
from tuner.abtest.claims.file import FLAG, UNMEASURABLE, Claim
from tuner.domain import FailureClass, GpuProfile, ModelSpec, TrialResult, TrialStatus

if TYPE_CHECKING:
    from tuner.runner import TrialRunner
    from tuner.spec import StudySpec

CONFIRMED = "confirmed"
REFUTED = "refuted"
NOT_APPLICABLE = "not applicable"
NOT_MEASURABLE = "not measurable"
NOT_MEASURED = "not measured yet"

# Failures that mean "the server did not come up" (as against: came up, then went wrong).
NO_START = frozenset(
    {
        FailureClass.START_FAILED,
        FailureClass.TIMEOUT,
        FailureClass.MEMORY_EXCEEDED,
        FailureClass.KV_CACHE_INSUFFICIENT,
        FailureClass.UNSUPPORTED,
    }
)


class FlagList(Protocol):
    """What a claim needs of vLLM's flag list (:class:`tuner.vllm.flags.FlagCatalog`)."""

    def get(self, name: str) -> object | None: ...


@dataclass(frozen=True)
class Fact:
    """A verdict on a claim that is not a figure: what it rests on in ``measured``."""

    verdict: str
    reason: str
    measured: str = ""


@dataclass(frozen=True)
class Where:
    """Where claims are measured: tuner's model alias, the GPU as named, the vLLM version."""

    model: str
    gpu: str  # profile name (h200, cpu): compared with the article's
    gpu_name: str = ""  # as shown: "NVIDIA H200"
    vllm: str = ""


@dataclass(frozen=True)
class LaunchFact:
    """What ``count`` launches of one configuration showed: whether they started (None: cut
    short for another reason), the attention backend the server reported, and whether that
    configuration left the backend to vLLM."""

    label: str
    started: bool | None
    default_backend: bool
    backend: str | None = None
    flash_attn_version: int | None = None
    count: int = 1
    with_flag: bool = False  # the launch passed the starts claim's flag to vLLM


def passes(flag: str, config: Mapping[str, Any], argv: Sequence[str] = ()) -> bool:
    """Whether a launch of ``config`` (a knob table) with command line ``argv`` gave ``flag``
    (``--disable-custom-all-reduce``, or its knob ``disable_custom_all_reduce`` set)."""
    return flag in argv or bool(config.get(flag.lstrip("-").replace("-", "_")))


def launch_facts(results: Sequence[TrialResult], flag: str = "") -> list[LaunchFact]:
    """One :class:`LaunchFact` per launch; ``flag``: a starts claim's, to tell launches that
    passed it from the others."""
    out = []
    for r in results:
        started: bool | None = None
        if r.status is TrialStatus.COMPLETE or r.server is not None:
            started = True
        elif r.failure in NO_START:
            started = False
        server = r.server
        out.append(
            LaunchFact(
                label=r.config.label(),
                started=started,
                default_backend=r.config.attention_backend is None,
                backend=server.effective_backend if server else None,
                flash_attn_version=server.flash_attn_version if server else None,
                with_flag=bool(flag)
                and passes(flag, r.config.to_dict(), server.argv if server else ()),
            )
        )
    return out


def machine_flags(spec: StudySpec, version: str) -> tuple[FlagList | None, str]:
    """The flag list of the vLLM that ``spec`` runs, reported as ``version`` (tuner's snapshot
    of that version, else asked of the interpreter and cached under ``$TUNER_HOME/flags``), or
    None and why not."""
    from tuner.compose import default_vllm_python, tuner_home
    from tuner.runner import load_flags
    from tuner.vllm import shipped

    catalog = shipped(version)
    if catalog is not None:
        return catalog, ""
    python = spec.vllm_python or default_vllm_python()
    try:
        return load_flags(python, version, tuner_home() / "flags"), ""
    except Exception as exc:  # any failure to read it is a reason for no verdict, not a crash
        return None, f"could not read vLLM {version}'s flag list from {python}: {exc}"


def runner_passing(
    flag: str, spec: StudySpec, url: str, model: ModelSpec, gpu: GpuProfile
) -> TrialRunner:
    """A runner set up like ``spec``'s that also passes ``flag`` to vLLM (a starts claim's
    launch with its flag)."""
    from tuner.abtest.pipeline import open_bench

    with_flag = dataclasses.replace(spec, extra_args=(*spec.extra_args, flag))
    return open_bench("verify-claims", with_flag, url, model, gpu, 1).runner


def judge_flag(claim: Claim, catalog: FlagList | None, version: str, why_not: str = "") -> Fact:
    """``claimed = "exists"`` / ``"absent"`` answered from vLLM ``version``'s own flag list."""
    if catalog is None:
        return Fact(NOT_MEASURED, why_not or f"needs vLLM {version}'s flag list")
    present = catalog.get(claim.flag) is not None
    has = f"vLLM {version} has {claim.flag}" if present else f"vLLM {version} has no {claim.flag}"
    right = present == (claim.claimed_text == "exists")
    return Fact(CONFIRMED if right else REFUTED, f"{has} (its own flag list)", has)


def judge_starts(claim: Claim, launches: Sequence[LaunchFact]) -> Fact:
    """``claimed = "required"``: refuted by any launch here that started without the flag;
    confirmed only when the launches without it failed to start and one with it started."""
    flag = claim.flag
    without = [f for f in launches if not f.with_flag]
    with_flag = [f for f in launches if f.with_flag]
    started = sum(f.count for f in without if f.started)
    failed = sum(f.count for f in without if f.started is False)
    fa2 = sum(
        f.count
        for f in without
        if f.started and (f.flash_attn_version == 2 or "flash_attn_version=2" in f.label)
    )
    configs = len({f.label for f in without if f.started})
    w_started = sum(f.count for f in with_flag if f.started)
    w_failed = sum(f.count for f in with_flag if f.started is False)
    after = ""
    if with_flag:
        after = f"; with it, {w_started} of {w_started + w_failed} launch(es) started"
    if started:
        of = f"{started} of {started + failed} launches"
        among = f", {fa2} of them with FlashAttention 2" if fa2 else ""
        measured = f"{of} started without it"
        reason = f"{of} of {configs} configuration(s) started without {flag}{among}{after}"
        return Fact(REFUTED, reason, measured)
    if failed and w_started:
        reason = f"{failed} launch(es) failed to start without {flag}{after}"
        return Fact(CONFIRMED, reason, f"{failed} failed without it, {w_started} started with it")
    if failed:
        why = f"{failed} launch(es) failed to start without {flag}, and none started with it"
        return Fact(INCONCLUSIVE, why, "")
    return Fact(NOT_MEASURED, f"needs one launch of vLLM here without {flag}")


def judge_default_backend(claim: Claim, launches: Sequence[LaunchFact]) -> Fact:
    """``claimed = BACKEND``: what the launches that left the backend to vLLM reported."""
    seen: Counter[str] = Counter()
    for f in launches:
        if f.default_backend and f.backend:
            version = f" (FlashAttention {f.flash_attn_version})" if f.flash_attn_version else ""
            seen[f.backend + version] += f.count
    if not seen:
        why = "needs a launch of vLLM's defaults whose log names the attention backend it chose"
        return Fact(NOT_MEASURED, why)
    total = sum(seen.values())
    ran = ", ".join(f"{name} in {n}" for name, n in seen.items())
    matching = sum(n for name, n in seen.items() if name.split(" ")[0] == claim.claimed_text)
    reason = f"vLLM's own choice of backend ran {ran} of {total} launches"
    measured = ", ".join(f"{name} × {n}" for name, n in seen.items())
    if matching == total:
        return Fact(CONFIRMED, reason, measured)
    if matching == 0:
        return Fact(REFUTED, reason, measured)
    return Fact(INCONCLUSIVE, reason + ": not always the claimed one", measured)


def setting_note(claim: Claim, where: Where | None) -> str:
    """Empty when the claim was measured in the article's setting (or the article names none);
    else e.g. "measured on ernie-0.3b / NVIDIA H200 (vLLM 0.26.0); the article's setting was
    Qwen 14B / RTX 4090"."""
    article = claim.article
    if article is None or where is None:
        return ""
    vllm = f" (vLLM {where.vllm})" if where.vllm else ""
    if claim.kind == FLAG:
        if article.vllm and article.vllm != where.vllm:
            return f"answered for vLLM {where.vllm or '?'}; the article used vLLM {article.vllm}"
        return ""
    if claim.kind == UNMEASURABLE:
        return f"the article's setting was {article.setting}"
    if article.model == where.model and article.gpu == where.gpu:
        return ""
    return (
        f"measured on {where.model} / {where.gpu_name or where.gpu}{vllm}; "
        f"the article's setting was {article.setting}"
    )
