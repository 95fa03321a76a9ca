"""Verdicts on claims (:mod:`tuner.abtest.claims`): confirmed, refuted, inconclusive, or not
applicable with the reason.

:func:`judge` reads a claimed B/A against a measured interval. :func:`evaluate` measures planned
claims through the :mod:`tuner.abtest.pipeline`: claims with the same workload form one group,
launched interleaved over the distinct configurations they name, so that a configuration shared
by several claims (the defaults of the FlashAttention ones) is launched once per round, not once
per claim; the judge step gives each claim its :class:`Outcome`. :func:`verify` is what
``tuner verify-claims`` runs: the same, each measured claim stored as a comparison
(``results["kind"] == "claim"``, ``results["claim"]`` its :func:`claim_record`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.abtest.claims import Claim, Planned
from tuner.abtest.compare import Arm, Comparison, MetricComparison, RunCallback, compare
from tuner.abtest.guard import finding_of
from tuner.abtest.launchlog import LaunchLog
from tuner.abtest.pipeline import (
    Bench,
    Group,
    Judgement,
    Watch,
    first_provenance,
    run_groups,
)
from tuner.domain import Provenance, ServingConfig, TrialResult, Workload
from tuner.scoring.significance import INCONCLUSIVE

if TYPE_CHECKING:
    from tuner.runner.vllm import PhaseCallback, TrialRunner

CONFIRMED = "confirmed"
REFUTED = "refuted"
NOT_APPLICABLE = "not applicable"


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

    @property
    def measured(self) -> MetricComparison | None:
        return None if self.comparison is None else self.comparison.metric(self.claim.metric)

    def stored(self) -> Judgement | None:
        """The comparison to store for this claim; None when it was not measured."""
        if self.verdict == NOT_APPLICABLE or self.comparison is None:
            return None
        assert self.a is not None and self.b is not None
        return Judgement(
            workload=self.workload,
            a=self.a,
            b=self.b,
            results={**self.comparison.to_results(), "kind": "claim", "claim": claim_record(self)},
            verdicts=self.comparison.to_verdicts(),
            provenance=self.provenance,
        )


def outcome_of(
    p: Planned, a_runs: Sequence[TrialResult], b_runs: Sequence[TrialResult], confidence: float
) -> Outcome:
    """The verdict on planned claim ``p`` from the launches of its A and B."""
    assert p.a is not None and p.b is not None
    for side, config, runs in (("A", p.a, a_runs), ("B", p.b, b_runs)):
        finding = finding_of(runs)
        if finding:
            reason = f"{side} ({config.label()}) cannot start here: {finding}"
            return Outcome(p.claim, p.workload, NOT_APPLICABLE, reason, p.a, p.b)
    comparison = compare(Arm(p.a.label(), p.a), a_runs, Arm(p.b.label(), p.b), b_runs, confidence)
    m = comparison.metric(p.claim.metric)
    if m.ratio is None or m.low is None or m.high is None:
        failed = [*comparison.a_failures, *comparison.b_failures]
        reason = (
            f"not enough complete launches to compare (A {len(m.a_values)}, B "
            f"{len(m.b_values)})" + (f"; failures: {'; '.join(failed)}" if failed else "")
        )
        verdict = INCONCLUSIVE
    elif m.inconclusive:
        # The launches of a side disagree far beyond their noise: the interval says nothing.
        verdict = INCONCLUSIVE
        reason = m.verdict.removeprefix(f"{INCONCLUSIVE}: ")
    else:
        verdict = judge(p.claim.claimed, m.low, m.high)
        reason = explain(verdict, p.claim.claimed, m.low, m.high)
    if comparison.window_note:
        reason += f" (caution: {comparison.window_note})"
    prov = first_provenance(a_runs, b_runs)
    return Outcome(p.claim, p.workload, verdict, reason, p.a, p.b, comparison, prov)


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
) -> list[Outcome]:
    """Measure the applicable claims (``launches`` fresh launches of each configuration) and
    judge each; outcomes in the order of ``planned``. ``runner`` may be None only when no
    claim is applicable. ``launch_log`` gives each workload group's :class:`LaunchLog`: its
    earlier launches are reused and each new one is recorded as it finishes. With ``store``,
    each measured claim is stored (its outcome then has ``comparison_id``) and the logs go."""
    outcomes: dict[str, Outcome] = {}
    members: dict[Workload, list[Planned]] = {}
    for p in planned:
        if p.reason or p.a is None or p.b is None:
            outcomes[p.claim.id] = Outcome(p.claim, p.workload, NOT_APPLICABLE, p.reason)
        else:
            members.setdefault(p.workload, []).append(p)
    groups = []
    for workload, ps in members.items():
        configs = dict.fromkeys(c for p in ps for c in (p.a, p.b) if c is not None)
        groups.append(Group(workload, tuple(Arm(c.label(), c) for c in configs)))

    def judge_group(group: Group, results: list[list[TrialResult]]) -> list[Outcome]:
        by_config = {arm.config: rs for arm, rs in zip(group.arms, results, strict=True)}
        return [
            outcome_of(p, by_config[p.a], by_config[p.b], confidence)
            for p in members[group.workload]
            if p.a is not None and p.b is not None
        ]

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
    )
    for outcome, comparison_id in judged:
        outcomes[outcome.claim.id] = dataclasses.replace(outcome, comparison_id=comparison_id)
    return [outcomes[p.claim.id] for p in planned]


def verify(
    planned: Sequence[Planned],
    bench: Bench | None,
    launches: int,
    confidence: float,
    *,
    watch: Watch,
    on_group: Callable[[Workload, list[Arm], list[Claim]], None] | None = None,
) -> list[Outcome]:
    """``tuner verify-claims``: :func:`evaluate` on ``bench``, launch logs under
    ``$TUNER_HOME`` and each measured claim stored. ``bench`` may be None only when no claim
    is applicable."""
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
    )


def claim_record(outcome: Outcome) -> dict[str, Any]:
    """The claim and its verdict as stored with the comparison and printed by ``--json``
    (there with ``comparison_id`` once stored)."""
    m = outcome.measured
    c = outcome.claim
    measured = None
    if m is not None and m.ratio is not None:
        measured = {"ratio": m.ratio, "low": m.low, "high": m.high}
    record: dict[str, Any] = {
        "id": c.id,
        "statement": c.statement,
        "metric": c.metric,
        "claimed": c.claimed,
        "claimed_text": c.claimed_text,
        "workload": outcome.workload.name,
        "verdict": outcome.verdict,
        "reason": outcome.reason,
        "measured": measured,
    }
    if outcome.comparison_id is not None:
        record["comparison_id"] = outcome.comparison_id
    return record
