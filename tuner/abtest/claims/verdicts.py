"""Verdicts on claims (:mod:`tuner.abtest.claims`), measured here.

An ``effect`` claim's verdict reads the measured interval against the article's figure
(:mod:`tuner.abtest.claims.figures`): ``consistent``, ``smaller``, ``larger``, ``opposite``,
``no effect`` or ``inconclusive``; the other kinds (:mod:`tuner.abtest.claims.facts`) are
``confirmed`` or ``refuted``, ``not measurable`` (what would be needed) or ``not measured yet``
(what is needed). Any claim can be ``not applicable`` here, with the reason.

:func:`evaluate` measures planned claims through the :mod:`tuner.abtest.pipeline`: effect claims
with the same workload form one group, launched interleaved over the distinct configurations
they name, so that a configuration shared by several claims (the defaults of the
FlashAttention ones) is launched once per round, not once per claim. ``starts`` and
``default-backend`` claims are answered by those launches; with none, by one launch of their
own (a ``starts`` claim also by one with its flag, when it can). :func:`verify` is what
``tuner verify-claims`` runs: the same, each measured effect claim stored as a comparison
(``results["kind"] == "claim"``, ``results["claim"]`` its :func:`claim_record`).

With a decision design (:mod:`tuner.abtest.decide`) each claim is judged by
:func:`~tuner.abtest.decide.judge_look` on its own metric, and a group's arms get another
interleaved round after each look until every claim of the group is decided or the launch
budget is spent; the verdict reads the interval at the design's per-look level, so it holds at
the design's overall confidence. Without a design, ``launches`` a side and Welch's interval.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.abtest.claims import Claim, Planned
from tuner.abtest.claims.facts import (
    NOT_APPLICABLE,
    NOT_MEASURABLE,
    Fact,
    FlagList,
    Where,
    judge_default_backend,
    judge_flag,
    judge_starts,
    launch_facts,
    setting_note,
)
from tuner.abtest.claims.figures import CONSISTENT, Claimed, read
from tuner.abtest.claims.file import DEFAULT_BACKEND, FLAG, STARTS, UNMEASURABLE
from tuner.abtest.compare import Arm, Comparison, RunCallback, compare
from tuner.abtest.compare import run_interleaved as _interleaved
from tuner.abtest.decide import Design, Look, judge_look
from tuner.abtest.guard import finding_of
from tuner.abtest.launchlog import LaunchLog
from tuner.abtest.pipeline import (
    Bench,
    Group,
    Judgement,
    Record,
    Watch,
    first_provenance,
    run_groups,
)
from tuner.domain import Provenance, ServingConfig, TrialResult, Workload

if TYPE_CHECKING:
    from tuner.runner import PhaseCallback, TrialRunner
    from tuner.scoring import NoiseProfile

__all__ = ["CONSISTENT", "NOT_APPLICABLE", "Outcome", "claim_record", "evaluate", "verify"]
FlagSource = Callable[[], tuple[FlagList | None, str]]
"""This machine's vLLM flag list, or None and why not
(:func:`tuner.abtest.claims.facts.machine_flags`)."""
ProfileSource = Callable[[Group, Sequence[Sequence[TrialResult]]], "NoiseProfile | None"]
"""The noise profile of a group's key, without its own launches (:meth:`Bench.profile`)."""


@dataclass(frozen=True)
class Outcome:
    """The verdict on one claim, with the comparison it rests on (None when not measured)."""

    claim: Claim
    workload: Workload
    verdict: str
    reason: str
    a: ServingConfig | None = None
    b: ServingConfig | None = None
    comparison: Comparison | None = field(default=None, compare=False)
    provenance: Provenance | None = None
    comparison_id: int | None = None  # once stored
    # On the claim's scale: {"ratio" | "difference": x, "low", "high", "text"}; for the other
    # kinds {"text": what the verdict rests on}. None when nothing was measured.
    measured_record: dict[str, Any] | None = None
    setting: str = ""  # the setting_note: measured elsewhere than the article measured it
    look: Look | None = field(default=None, compare=False)  # the decision, with a design

    @property
    def decided(self) -> bool:
        """Whether more launches would not change this outcome's decision (no design: yes)."""
        return self.look is None or self.comparison is None or self.look.done

    def stored(self) -> Judgement | None:
        """The comparison to store for this claim; None when it was not measured."""
        if self.verdict == NOT_APPLICABLE or self.comparison is None:
            return None
        assert self.a is not None and self.b is not None
        look = self.look
        results = look.to_results() if look is not None else self.comparison.to_results()
        return Judgement(
            workload=self.workload,
            a=self.a,
            b=self.b,
            results={**results, "kind": "claim", "claim": claim_record(self)},
            verdicts=self.comparison.to_verdicts(),
            provenance=self.provenance,
            repeats=None if look is None else max(look.step.n_a, look.step.n_b),
        )


def outcome_of(
    p: Planned,
    a_runs: Sequence[TrialResult],
    b_runs: Sequence[TrialResult],
    confidence: float,
    where: Where | None = None,
    design: Design | None = None,
    profile: NoiseProfile | None = None,
) -> Outcome:
    """The verdict on planned effect claim ``p`` from the launches of its A and B; with
    ``design``, judged by it on the claim's metric with the noise ``profile`` of the key."""
    assert p.a is not None and p.b is not None and p.claim.claimed is not None
    note = setting_note(p.claim, where)
    for side, config, runs in (("A", p.a, a_runs), ("B", p.b, b_runs)):
        finding = finding_of(runs)
        if finding:
            reason = f"{side} ({config.label()}) cannot start here: {finding}"
            return Outcome(p.claim, p.workload, NOT_APPLICABLE, reason, p.a, p.b, setting=note)
    arm_a, arm_b = Arm(p.a.label(), p.a), Arm(p.b.label(), p.b)
    look = None
    if design is None:
        comparison = compare(arm_a, a_runs, arm_b, b_runs, confidence)
    else:
        look = judge_look(arm_a, a_runs, arm_b, b_runs, design, profile, p.claim.metric)
        comparison, confidence = look.comparison, design.plan.confidence
    m = comparison.metric(p.claim.metric)
    reading = read(
        p.claim.claimed,
        ratio=m.ratio,
        low=m.low,
        high=m.high,
        a_values=m.a_values,
        b_values=m.b_values,
        confidence=confidence,
        verdict=m.verdict,
    )
    reason = reading.reason
    if reading.measured is None:
        failed = [*comparison.a_failures, *comparison.b_failures]
        reason += f"; failures: {'; '.join(failed)}" if failed else ""
    if comparison.window_note:
        reason += f" (caution: {comparison.window_note})"
    return Outcome(
        p.claim,
        p.workload,
        reading.verdict,
        reason,
        p.a,
        p.b,
        comparison,
        first_provenance(a_runs, b_runs),
        measured_record=reading.measured,
        setting=note,
        look=look,
    )


def fact_outcome(p: Planned, fact: Fact, where: Where | None) -> Outcome:
    measured = {"text": fact.measured} if fact.measured else None
    return Outcome(
        p.claim,
        p.workload,
        fact.verdict,
        fact.reason,
        p.a,
        p.b,
        measured_record=measured,
        setting=setting_note(p.claim, where),
    )


def answered(p: Planned, where: Where | None, flags: FlagSource) -> Outcome | None:
    """The outcome of a claim that needs no launch (not applicable here, unmeasurable, a flag
    answered from ``flags()``); None for the others."""
    if p.reason:
        note = setting_note(p.claim, where)
        return Outcome(p.claim, p.workload, NOT_APPLICABLE, p.reason, setting=note)
    if p.claim.kind == UNMEASURABLE:
        return fact_outcome(p, Fact(NOT_MEASURABLE, p.claim.needs), where)
    if p.claim.kind == FLAG:
        catalog, why = flags()
        fact = judge_flag(p.claim, catalog, where.vllm if where else "?", why)
        return fact_outcome(p, fact, where)
    return None


def evaluate(
    planned: Sequence[Planned],
    runner: TrialRunner | None,
    launches: int,
    confidence: float,
    *,
    on_group: Callable[[Workload, list[Arm], list[Claim]], None] | None = None,
    on_start: Callable[[int, int, Arm], None] | None = None,
    on_run: RunCallback | None = None,
    on_phase: PhaseCallback | None = None,
    launch_log: Callable[[Workload, list[Arm]], LaunchLog] | None = None,
    on_resumed: Callable[[str], None] | None = None,
    store: Callable[[Judgement], int] | None = None,
    where: Where | None = None,
    flags: FlagSource | None = None,
    runner_with: Callable[[str], TrialRunner] | None = None,
    record: Record | None = None,
    design: Design | None = None,
    profile: ProfileSource | None = None,
) -> list[Outcome]:
    """Measure the applicable claims (``launches`` fresh launches of each configuration, or
    by ``design``: see the module docstring, ``profile`` giving each group's noise profile)
    and judge each; outcomes in the order of ``planned``. ``runner`` may be None only when no
    claim needs a launch. ``launch_log`` gives each workload group's :class:`LaunchLog`: its
    earlier launches are reused and each new one is recorded as it finishes. With ``store``,
    each measured effect claim is stored (its outcome then has ``comparison_id``) and the logs
    go. ``where`` names this machine in the verdicts; ``flags`` gives its vLLM's flag list;
    ``runner_with(flag)`` a runner that passes ``flag`` to vLLM (for a ``starts`` claim's
    launch with its flag); ``record`` hears of each launch (the noise profile's store)."""
    outcomes: dict[str, Outcome] = {}
    members: dict[Workload, list[Planned]] = {}
    facts: list[Planned] = []
    for p in planned:
        outcome = answered(p, where, flags or (lambda: (None, "")))
        if outcome is not None:
            outcomes[p.claim.id] = outcome
        elif p.claim.kind in (STARTS, DEFAULT_BACKEND):
            facts.append(p)
        elif p.a is not None and p.b is not None:
            members.setdefault(p.workload, []).append(p)
    groups = []
    for workload, ps in members.items():
        configs = dict.fromkeys(c for p in ps for c in (p.a, p.b) if c is not None)
        groups.append(Group(workload, tuple(Arm(c.label(), c) for c in configs)))
    seen: list[TrialResult] = []

    def outcomes_of(group: Group, results: list[list[TrialResult]]) -> list[Outcome]:
        by_config = {arm.config: rs for arm, rs in zip(group.arms, results, strict=True)}
        noise = profile(group, results) if profile is not None and design is not None else None
        return [
            outcome_of(p, by_config[p.a], by_config[p.b], confidence, where, design, noise)
            for p in members[group.workload]
            if p.a is not None and p.b is not None
        ]

    def judge_group(group: Group, results: list[list[TrialResult]]) -> list[Outcome]:
        seen.extend(r for rs in results for r in rs)
        return outcomes_of(group, results)

    def decided(group: Group, results: list[list[TrialResult]]) -> bool:
        return all(o.decided for o in outcomes_of(group, results))

    def announce(group: Group) -> None:
        if on_group:
            on_group(group.workload, list(group.arms), [p.claim for p in members[group.workload]])

    judged = run_groups(
        groups,
        runner,
        launches,
        judge_group,
        watch=Watch(on_start, on_run, on_phase, on_resumed),
        on_group=announce,
        launch_log=launch_log,
        store=store,
        record=record,
        design=design,
        decided=decided,
    )
    for outcome, comparison_id in judged:
        outcomes[outcome.claim.id] = dataclasses.replace(outcome, comparison_id=comparison_id)
    if facts:
        own = _own_launches(facts, runner, seen, on_start=on_start, on_run=on_run)
        for p in facts:
            outcomes[p.claim.id] = fact_outcome(p, _fact(p, seen, own, runner_with), where)
    return [outcomes[p.claim.id] for p in planned]


def _own_launches(
    facts: Sequence[Planned],
    runner: TrialRunner | None,
    seen: list[TrialResult],
    **watch: Any,
) -> bool:
    """With no launch made for effect claims, one launch of each fact claim's configuration
    (into ``seen``); whether they were made."""
    if seen or runner is None:
        return False
    configs = dict.fromkeys(p.a for p in facts if p.a is not None)
    arms = [Arm(c.label(), c) for c in configs]
    for rs in _interleaved(arms, runner, facts[0].workload, 1, **watch):
        seen.extend(rs)
    return True


def _fact(
    p: Planned,
    seen: Sequence[TrialResult],
    own: bool,
    runner_with: Callable[[str], TrialRunner] | None,
) -> Fact:
    if p.claim.kind == DEFAULT_BACKEND:
        return judge_default_backend(p.claim, launch_facts(seen))
    with_flag: list[TrialResult] = []
    if own and runner_with is not None and p.a is not None:
        with_flag.append(runner_with(p.claim.flag).run(p.a, p.workload))
    return judge_starts(p.claim, launch_facts([*seen, *with_flag], p.claim.flag))


def verify(
    planned: Sequence[Planned],
    bench: Bench | None,
    launches: int,
    confidence: float,
    *,
    watch: Watch,
    on_group: Callable[[Workload, list[Arm], list[Claim]], None] | None = None,
    where: Where | None = None,
    flags: FlagSource | None = None,
    runner_with: Callable[[str], TrialRunner] | None = None,
) -> list[Outcome]:
    """``tuner verify-claims``: :func:`evaluate` on ``bench``, launch logs under
    ``$TUNER_HOME``, each launch summarised for the noise profile, intervals by the bench's
    decision design with the key's profile, and each measured claim stored. ``bench`` may be
    None only when no claim needs this machine."""
    return evaluate(
        planned,
        bench.runner if bench else None,
        launches,
        confidence,
        on_group=on_group,
        on_start=watch.on_start,
        on_run=watch.on_run,
        on_phase=watch.on_phase,
        on_resumed=watch.on_resumed,
        launch_log=bench.launch_log if bench else None,
        store=bench.store if bench else None,
        where=where,
        flags=flags,
        runner_with=runner_with,
        record=bench.record if bench else None,
        design=bench.design if bench else None,
        profile=bench.profile if bench else None,
    )


def claimed_record(claimed: Claimed | None) -> dict[str, Any] | None:
    """A claimed range as JSON: infinite ends as None."""
    if claimed is None:
        return None
    return {
        "scale": claimed.scale,
        "low": None if math.isinf(claimed.low) else claimed.low,
        "high": None if math.isinf(claimed.high) else claimed.high,
        "unit": claimed.unit,
        "text": claimed.shown(),
    }


def claim_record(outcome: Outcome) -> dict[str, Any]:
    """The claim and its verdict as stored with the comparison and printed by ``--json``
    (there with ``comparison_id`` once stored)."""
    c = outcome.claim
    record: dict[str, Any] = {
        "id": c.id,
        "kind": c.kind,
        "statement": c.statement,
        "article": c.article.id if c.article else None,
        "figure": c.figure,
        "metric": c.metric,
        "claimed": claimed_record(c.claimed),
        "claimed_text": c.claimed_text,
        "workload": outcome.workload.name,
        "verdict": outcome.verdict,
        "reason": outcome.reason,
        "setting": outcome.setting,
        "measured": outcome.measured_record,
    }
    if outcome.look is not None:
        step = outcome.look.step
        record["confidence"] = outcome.look.design.confidence  # the level of its interval
        record["decision"] = {
            "design": outcome.look.design.to_dict()["kind"],
            "stopped": step.reason,
            "launches": {"a": step.n_a, "b": step.n_b},
        }
        record["gpu_minutes"] = outcome.look.gpu_minutes
    if outcome.comparison_id is not None:
        record["comparison_id"] = outcome.comparison_id
    return record
