"""The confirmation phase that ends every study, and the verdict it supports.

The search ranks configurations on single launches, and a single launch can be lucky by 20 %.
So the best candidates (the top ``confirm_top`` SLO-feasible ones) and vLLM's defaults are
launched again, interleaved (D A B, B A D, ...), by the decision design of ``tuner compare``
(:mod:`tuner.abtest.decide`): ``confirm_launches`` each at the first look, then one more round
at a time up to ``confirm_max_launches`` (default: one look), until every candidate is decided
on the objective's deciding metric or the budget is spent. Intervals borrow the noise profile
of the key (the study's own launches left out) where the launches do not contradict it, else
Welch's; with looks they are at the Pocock level that holds the stated confidence.

A candidate wins only when it is significantly better than the defaults on what the objective
decides by, and significantly worse on none of the metrics the objective weighs (worse by the
design's ``min_effect``, 5 %, or more); otherwise the defaults are what to run (the verdict
"worse" where every candidate was significantly worse on what the objective decides by). Peak
memory is better (or worse) only by more than ``min_effect`` (as ``tuner compare`` reads it): a
memory objective's candidate 0.1 % lower, certain on near-identical launches, does not win. The
stated confidence holds for the deciding interval; "not worse" is a check on intervals of the
same launches, of lower power, not a second guarantee. On the H200's noise
(``bench/decision_replay.py --objective balanced``) the check keeps the deciding metric's
"better" where latency did not worsen (to 0.1 point of power), and takes away about one in
seven of those bought with a x1.1 latency.

What decides: an objective that weighs one metric alone has that metric as its score, so the
metric's stored interval (pooled where valid; inverted for a lower-is-better metric) is the
score's. The balanced objective's composite mixes metrics whose noise profile is kept per
metric, so its looks stop on its heaviest weight (:func:`decision_metric`, the output
throughput), and it wins when that metric says better, no weighed metric says worse and the
composite's point estimate is above 1. The composite's own Welch interval is reported, never
decides: on the H200 (2026-12-04) a confirmation stopped at three launches a side on output
tok/s x1.34 [1.01, 1.78] while the composite's interval on 2.5 degrees of freedom still held 1.

A study resumed with more trials after its confirmation confirms, in a round of its own (its
own defaults' launches, interleaved), the top candidates that no earlier round compared; the
verdict is then taken over every round's comparisons (:func:`choose`).

Confirmation runs are stored as trials of phase "confirm", numbered from
:data:`CONFIRM_NUMBER_BASE` (never colliding with Optuna's numbers) and never told to Optuna;
each candidate's comparison against the defaults is a comparison row of the study.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from tuner.abtest import (
    FLOORED,
    Arm,
    Design,
    Look,
    judge_look,
    judged_level,
    launches_profile,
    record_launch,
    reusable,
    run_interleaved,
    run_looks,
)
from tuner.compose import StudyContext
from tuner.db import ComparisonRow, Repository, TrialPhase, TrialRow, study_run_tag
from tuner.domain import Objective, ServingConfig, TrialResult, interrupted
from tuner.load import FULL
from tuner.runner import TrialRunner
from tuner.scoring import (
    BETTER,
    CAPACITY,
    INCONCLUSIVE,
    MIN_EFFECT,
    NO_DIFFERENCE,
    WORSE,
    RatioInterval,
    is_inconclusive,
    ratio_interval,
    stored_drift_note,
    stored_window_note,
    trend_ratio_interval,
)
from tuner.scoring import objectives as scoring
from tuner.spec import DEFAULTS as DEFAULTS_LABEL

CONFIRM_NUMBER_BASE = 100_000
if TYPE_CHECKING:
    from tuner.study.loop import Ranked


def run_confirmation(
    ctx: StudyContext,
    ranked: Sequence[Ranked],
    runner: TrialRunner,
    repo: Repository,
    reporter: Any,
) -> None:
    """Launch the defaults and the best of ``ranked`` (the study's standings) interleaved;
    store the runs and one comparison per candidate (see the module docstring).

    Resumable: launches of an earlier, interrupted confirmation of this study (its ``confirm``
    trials that completed or failed with a finding) count as done, and only the rest are
    launched; interrupted launches are launched again under new numbers.
    """
    if not any(r.is_baseline for r in ranked):
        reporter.phase("confirmation skipped", "vLLM's defaults produced no measurement")
        return
    baseline = ctx.space.baseline()
    study, workload, spec = ctx.name, ctx.workload, ctx.spec
    stored = [c for c in repo.list_comparisons(study) if is_confirmation(c)]
    compared = {c.b_config for c in stored}
    candidates = [c for c in confirmation_candidates(ctx, ranked) if c[1] not in compared]
    if not candidates:
        why = "every candidate is confirmed" if stored else "no candidate besides the defaults"
        reporter.phase("confirmation skipped", why)
        return
    launches = spec.confirm_launches
    design = confirmation_design(launches, spec.confirm_max_launches, spec.confidence)
    metric = decision_metric(spec.objective, curve=len(ctx.workload.load_points()) > 1)
    arms = [Arm(DEFAULTS_LABEL, baseline)] + [Arm(f"#{n}", c) for n, c in candidates]
    earlier = repo.list_trials(study, phase="confirm", limit=None)
    # Only this round's launches are reused (a confirmation cut short): an earlier round's
    # defaults were interleaved with other candidates, at another time.
    last = max((c.created_at for c in stored), default=0.0)
    done = _earlier_launches([t for t in earlier if (t.started_at or 0.0) > last], arms)
    pending: dict[int, tuple[int, int, ServingConfig]] = {}  # launch index -> trial id, number
    # This run's launches, numbered after the earlier ones.
    numbers = itertools.count(CONFIRM_NUMBER_BASE + len(earlier))

    def started(index: int, total: int, arm: Arm) -> None:
        number = next(numbers)
        is_base = arm.label == DEFAULTS_LABEL
        trial_id = repo.start_trial(study, number, arm.config, "confirm", is_base)
        pending[index] = (trial_id, number, arm.config)
        reporter.trial_started(number, index, total, arm.config, is_base)

    def finished(index: int, total: int, arm: Arm, result: TrialResult) -> None:
        values = (
            scoring.objective_values(result, memory_ceiling_gib=1024.0) if result.metrics else None
        )
        trial_id, number, _config = pending.pop(index)
        repo.finish_trial(trial_id, result, None, values)
        # Each confirmation launch refreshes the noise profile of its key, as compare's do.
        record_launch(
            repo,
            result,
            model=ctx.model,
            workload=workload.name,
            is_defaults=arm.label == DEFAULTS_LABEL,
            source="confirm",
            run=study_run_tag(study),
        )
        reporter.trial_finished(number, result, None)

    launch = partial(
        run_interleaved,
        arms,
        runner,
        workload,
        slo=ctx.slo,
        on_start=started,
        on_run=finished,
        on_phase=reporter.phase,
        first_canary=FULL,  # every candidate answers every shape before it can win
    )

    def looks(results: list[list[TrialResult]]) -> list[Look]:
        launched = itertools.chain.from_iterable(results)
        profile = launches_profile(repo, launched, ctx.model, workload.name, study_run_tag(study))
        return [
            judge_look(arms[0], results[0], arm, rs, design, profile, metric)
            for arm, rs in zip(arms[1:], results[1:], strict=True)
        ]

    try:
        # ``launches`` at the first look (a single launch each: no interval, no looks).
        results = run_looks(
            launch, launches, done, design, lambda rs: all(look.done for look in looks(rs))
        )
    except BaseException:
        # The tuner is going down (Ctrl-C, SIGTERM): the launch in flight is recorded as
        # interrupted, and a resumed study launches it again.
        for trial_id, _number, config in pending.values():
            stopped = interrupted(config, "the tuner stopped during this confirmation launch")
            repo.finish_trial(trial_id, stopped, None, None)
        raise
    for arm, arm_results, look in zip(arms[1:], results[1:], looks(results), strict=True):
        prov = next((r.provenance for r in arm_results if r.provenance is not None), None)
        repo.add_comparison(
            model=prov.model if prov else "",
            gpu=prov.gpu_name if prov else "",
            workload=workload.name,
            a_config=baseline,
            b_config=arm.config,
            repeats=max(look.step.n_a, look.step.n_b, 1),
            results={**look.to_results(), "kind": "confirmation"},
            verdicts=look.comparison.to_verdicts(),
            provenance=prov,
            study_name=study,
        )


def confirmation_candidates(
    ctx: StudyContext, ranked: Sequence[Ranked]
) -> list[tuple[int, ServingConfig]]:
    """The trials a confirmation of the study's standings ``ranked`` puts against the defaults:
    the top ``confirm_top`` SLO-feasible configurations other than the defaults, by number. One
    that names the kernel vLLM chose by itself for the defaults (or an earlier candidate) runs
    the same launch (:func:`tuner.study.standings.ran_as`): it is no candidate of its own."""
    from tuner.study.standings import ran_as  # standings reads this module's verdicts

    seen = {ctx.space.baseline(), *(c for r in ranked if r.is_baseline for c in ran_as(r.row))}
    candidates = []
    for r in ranked:
        same = ran_as(r.row)
        if r.feasible and not r.is_baseline and not seen.intersection(same):
            seen.update(same)
            candidates.append((r.number, r.config))
    return candidates[: ctx.spec.confirm_top]


def confirmation_design(launches: int, max_launches: int | None, confidence: float) -> Design:
    """The decision design of a confirmation: ``launches`` each at the first look, up to
    ``max_launches`` (None or no more than ``launches``: one look of ``launches``; a single
    launch each is judged as a fixed design of two, which gives no interval)."""
    if max_launches is None or max_launches <= launches or launches < 2:
        return Design.fixed_launches(max(launches, 2), confidence)
    return Design.sequential(launches, max_launches, confidence)


_COMPOSITE = ("output_throughput", "e2e_p99_ms", "memory_gib")  # as _composites weighs them


def decision_metric(objective: Objective, curve: bool = False) -> str:
    """The metric whose interval decides when a confirmation stops: the heaviest of the
    objective's weights (ties: the first, the output throughput; over a load ``curve``, a
    capacity or cost study's is the capacity, :func:`_weighed`)."""
    weights = scoring.WEIGHTS[objective]
    return _weighed(objective, curve)[max(range(len(weights)), key=lambda i: (weights[i], -i))]


def _weighed(objective: Objective, curve: bool) -> tuple[str, ...]:
    """The metrics the objective's weights apply to, as its search ranked: a capacity or cost
    study over a load ``curve`` weighs the capacity (the most a load point within the SLO
    served), not the throughput at the workload's own load point, which no SLO bounds."""
    if curve and objective in (Objective.CAPACITY, Objective.COST):
        return (CAPACITY, *_COMPOSITE[1:])
    return _COMPOSITE


@dataclass(frozen=True)
class Confirmed:
    """The verdict of a confirmation: which config to run and how sure we are."""

    config: ServingConfig
    label: str  # "#N" of the search trial, or "defaults"
    # better / no significant difference (from defaults) / worse (every candidate significantly
    # worse on what the objective decides by) / inconclusive (a comparison's launches disagreed
    # far beyond their noise on a metric of the objective): all but "better" run the defaults
    verdict: str
    score: float  # confirmed score ratio vs the defaults (1.0 for the defaults themselves)
    score_low: float
    score_high: float
    comparison_id: int | None  # the comparison the verdict (and details) come from
    details: tuple[str, ...]  # one line per metric of the objective
    # What to keep in mind: "A (defaults): 2 of 9 windows disturbed; ..." of that comparison.
    caveats: tuple[str, ...] = ()
    # A composite objective's verdict rests on its deciding metric, not on the score's interval:
    # that metric's label, ratio and interval (None where the score's interval decides). With
    # the verdict "worse": what the shown candidate lost on, B/A (the deciding metric, or the
    # metric an objective weighs alone).
    decided_on: tuple[str, float, float, float] | None = None
    # Whose comparison ``details`` are, for people: "#2 against vLLM's defaults" (with the
    # defaults' verdict: the candidate whose comparison is shown; '' in older callers).
    details_from: str = ""
    # The defaults' verdict where a candidate was better only by less than this smallest
    # effect worth acting on (peak memory: 0.001 of 141 GB is certain and worthless).
    min_effect: float | None = None
    # "worse": the candidates, every one confirmed worse ("#2", "#5"; the first's is shown).
    worse: tuple[str, ...] = ()

    def verdict_text(self) -> str:
        """The verdict for people, with the interval it rests on."""
        if self.verdict == BETTER:
            if self.decided_on is not None:
                label, ratio, low, high = self.decided_on
                return (
                    f"better than vLLM's defaults: {label} x{ratio:.3f} [{low:.3f}, {high:.3f}] "
                    "(the objective's deciding metric; no metric it weighs worse by the smallest "
                    "effect worth acting on), "
                    f"score x{self.score:.3f} (composite, Welch's [{self.score_low:.3f}, "
                    f"{self.score_high:.3f}] at the per-look level)"
                )
            return (
                f"better than vLLM's defaults: score x{self.score:.3f} [{self.score_low:.3f}, "
                f"{self.score_high:.3f}]"
            )
        if self.verdict == INCONCLUSIVE:
            return (
                "inconclusive: launches of one configuration disagreed far beyond their "
                "noise (see below), so nothing was confirmed: run vLLM's defaults, and "
                "measure again on a quiet machine"
            )
        if self.verdict == WORSE:
            interval = "(no interval)"
            if self.decided_on is not None:
                label, ratio, low, high = self.decided_on
                interval = f"{label} x{ratio:.3f} [{low:.3f}, {high:.3f}]"
            if len(self.worse) > 1:
                return (
                    f"every candidate ({', '.join(self.worse)}) worse than vLLM's defaults; "
                    f"{self.worse[0]}: {interval}: run vLLM's defaults"
                )
            return f"worse than vLLM's defaults: {interval}: run vLLM's defaults"
        if self.min_effect is not None:
            return (
                f"no configuration beats the defaults by more than {self.min_effect * 100:g} % "
                "(the smallest effect worth acting on): run vLLM's defaults"
            )
        return "no significant difference from defaults: run vLLM's defaults"

    def chose(self, number: int, is_baseline: bool) -> bool:
        """Whether this verdict picks search trial ``number`` (the defaults: the baseline)."""
        return is_baseline if self.label == DEFAULTS_LABEL else self.label == f"#{number}"


def choose(rows: Sequence[ComparisonRow], objective: Objective) -> Confirmed | None:
    """The recommendation from a study's confirmation comparisons (None without any), by the
    rule of the module docstring; the memory preset's winner must not lose throughput either.
    The best winner by score is chosen. A candidate inconclusive on a metric of the objective
    cannot win. No winner: the defaults, "no significant difference" (shown: the first candidate
    not worse), "worse" when every candidate was significantly worse on what the objective
    decides by (shown: the first), or "inconclusive" when some comparison was."""
    rows = [r for r in rows if is_confirmation(r)]
    if not rows:
        return None
    best: Confirmed | None = None
    unclear: ComparisonRow | None = None  # the first comparison inconclusive on the objective
    too_small: float | None = None  # a better score within the smallest effect: no win
    kept: ComparisonRow | None = None  # the first comparison not worse on what decides
    lost: list[ComparisonRow] = []  # the comparisons worse on what decides
    for row in rows:
        metrics = {m["metric"]: m for m in row.results["metrics"]}
        curve = CAPACITY in metrics  # launches over a load curve: see _weighed
        if any(
            is_inconclusive(metrics.get(n, {}).get("verdict")) for n in _judged(objective, curve)
        ):
            unclear = unclear or row
            continue
        interval = _score_interval(row, metrics, objective)
        if interval is None:
            kept = kept or row
            continue
        decided_on = _deciding(metrics, objective)
        floor = float((row.results.get("decision") or {}).get("min_effect") or MIN_EFFECT)
        if decided_on is None:
            said = interval.verdict(higher_is_better=True)
            # Peak memory is better or worse only beyond the smallest effect, as compare judges.
            floored = _alone(objective, curve) in FLOORED
            if said != NO_DIFFERENCE and floored and interval.within(floor):
                too_small = floor if said == BETTER else too_small
                said = NO_DIFFERENCE
            wins = said == BETTER
        else:  # a composite: what the looks stopped on, no weighed metric worse, score above 1
            said = metrics.get(decision_metric(objective, curve), {}).get("verdict")
            worse = any(_worse_by(metrics.get(n, {}), floor) for n in _judged(objective, curve))
            wins = said == BETTER and not worse and interval.ratio > 1.0
        if objective is Objective.MEMORY and metrics["output_throughput"]["verdict"] == WORSE:
            wins = False
        if said != WORSE:
            kept = kept or row
        if wins and (best is None or interval.ratio > best.score):
            best = Confirmed(
                row.b_config,
                str(row.results.get("b_label", "")),
                BETTER,
                interval.ratio,
                interval.low,
                interval.high,
                row.id,
                _details(metrics),
                _caveats(row),
                decided_on,
                _against(row),
            )
        elif said == WORSE:
            lost.append(row)
    if best is not None:
        return best
    if unclear is None and kept is None and lost:  # every candidate confirmed worse
        # The first one's comparison shown, with what it lost on (the deciding metric, or the
        # metric the objective weighs alone).
        metrics = {m["metric"]: m for m in lost[0].results["metrics"]}
        alone = _alone(objective, CAPACITY in metrics)
        lost_on = _deciding(metrics, objective) or _metric_interval(metrics, alone)
        names = tuple(_name(r) for r in lost)
        return _keep_defaults(lost[0], WORSE, decided_on=lost_on, worse=names)
    # The evidence for keeping the defaults: the first candidate's comparison not worse than
    # them, or the first one that could not say anything.
    if unclear is not None:
        return _keep_defaults(unclear, INCONCLUSIVE)
    return _keep_defaults(kept or rows[0], NO_DIFFERENCE, min_effect=too_small)


def _keep_defaults(shown: ComparisonRow, verdict: str, **more: Any) -> Confirmed:
    """The verdict that keeps vLLM's defaults (a score of 1), with ``shown``'s comparison as
    its evidence; ``more``: the fields of :class:`Confirmed` that the verdict fills."""
    metrics = {m["metric"]: m for m in shown.results["metrics"]}
    return Confirmed(
        shown.a_config,
        DEFAULTS_LABEL,
        verdict,
        1.0,
        1.0,
        1.0,
        shown.id,
        _details(metrics),
        _caveats(shown),
        details_from=_against(shown),
        **more,
    )


def _metric_interval(
    metrics: Mapping[str, Any], name: str | None
) -> tuple[str, float, float, float] | None:
    """Metric ``name``'s (label, ratio, low, high) B/A among ``metrics``, None without it."""
    m = metrics.get(name or "", {})
    ratio, low, high = m.get("ratio"), m.get("low"), m.get("high")
    if ratio is None or low is None or high is None:
        return None
    return (str(m.get("label", name)), ratio, low, high)


def _name(row: ComparisonRow) -> str:
    return str(row.results.get("b_label") or "the candidate")


def _against(row: ComparisonRow) -> str:
    return f"{_name(row)} against vLLM's defaults"


def _score_interval(
    row: ComparisonRow, metrics: Mapping[str, Any], objective: Objective
) -> RatioInterval | None:
    """The candidate's score against the defaults with its interval (see :func:`choose`)."""
    alone = _alone(objective, CAPACITY in metrics)
    if alone is not None:
        m = metrics.get(alone, {})
        ratio, low, high = m.get("ratio"), m.get("low"), m.get("high")
        if ratio is None or low is None or high is None or not low > 0:
            return None
        if not m.get("higher_is_better", True):  # the score is its inverse
            ratio, low, high = 1.0 / ratio, 1.0 / high, 1.0 / low
        n_a, n_b = len(m["a"]["values"]), len(m["b"]["values"])
        level = judged_level(row.results)
        return RatioInterval(ratio, low, high, level, n_a, n_b, m.get("method") or "welch")
    decision = row.results.get("decision") or {}
    confidence = judged_level(row.results)
    a, b = _composites(metrics, "a", objective), _composites(metrics, "b", objective)
    at = metrics.get("output_throughput", {})
    a_at, b_at = (at.get(side, {}).get("at") for side in ("a", "b"))
    if decision.get("trend") and a_at and b_at and (len(a_at), len(b_at)) == (len(a), len(b)):
        # As the decision took the machine's drift out of each metric, out of the score too.
        own = decision.get("per_look_confidence_own")
        found = trend_ratio_interval(
            list(zip(a_at, a, strict=True)), list(zip(b_at, b, strict=True)), confidence, None, own
        )
        if found is not None:
            return found
    return ratio_interval(a, b, confidence)


def _alone(objective: Objective, curve: bool = False) -> str | None:
    """The metric an objective weighs alone (its score is that metric), None for a composite."""
    names = _weighed(objective, curve)
    weighed = [(name, w) for name, w in zip(names, scoring.WEIGHTS[objective], strict=True) if w]
    return weighed[0][0] if len(weighed) == 1 and weighed[0][1] == 1.0 else None


def _deciding(
    metrics: Mapping[str, Any], objective: Objective
) -> tuple[str, float, float, float] | None:
    """A composite objective's deciding metric as (label, ratio, low, high); None for an
    objective that weighs one metric alone (its score's interval is that metric's)."""
    curve = CAPACITY in metrics
    if _alone(objective, curve) is not None:
        return None
    return _metric_interval(metrics, decision_metric(objective, curve))


def _worse_by(metric: Mapping[str, Any], floor: float) -> bool:
    """Whether a stored metric is significantly worse, and its ratio worse by ``floor`` or
    more: a weighed metric's guard. Without the floor, a peak memory that NVML reads 40 MB
    higher of 141 GB on near-identical launches (x1.0003) was "worse" and took away a x1.2
    throughput win (``bench/decision_replay.py --objective balanced``)."""
    ratio = metric.get("ratio")
    if metric.get("verdict") != WORSE or not ratio:
        return False
    worsening = 1.0 / float(ratio) if metric.get("higher_is_better", True) else float(ratio)
    return worsening - 1.0 >= floor - 1e-12


def _judged(objective: Objective, curve: bool = False) -> tuple[str, ...]:
    """The metrics a confirmation's verdict for ``objective`` rests on."""
    weights = zip(_weighed(objective, curve), scoring.WEIGHTS[objective], strict=True)
    names = [name for name, weight in weights if weight > 0]
    if objective is Objective.MEMORY:
        names.append("output_throughput")  # it must not be significantly worse
    return tuple(names)


def _caveats(row: ComparisonRow) -> tuple[str, ...]:
    notes = (stored_window_note(row.results), stored_drift_note(row.results))
    return tuple(note for note in notes if note)


def _earlier_launches(trials: Sequence[TrialRow], arms: Sequence[Arm]) -> list[list[TrialResult]]:
    """Per arm, the reusable launches among a study's earlier confirmation trials."""
    found = (confirmation_launches(trials, a.config, a.label == DEFAULTS_LABEL) for a in arms)
    return [[t.to_result() for t in launches] for launches in found]


def confirmation_launches(
    trials: Sequence[TrialRow], config: ServingConfig, defaults: bool
) -> list[TrialRow]:
    """The confirmation's launches of ``config`` (as vLLM's defaults where ``defaults``, else
    as a candidate) among a study's trials, by number: those that ended on their own
    (:func:`tuner.abtest.reusable`), which a resumed confirmation counts as done."""
    mine = [t for t in trials if t.phase is TrialPhase.CONFIRM and t.is_baseline == defaults]
    found = [t for t in mine if t.config == config and reusable(t.to_result())]
    return sorted(found, key=lambda t: t.number)


def is_confirmation(row: ComparisonRow) -> bool:
    """Whether ``row`` is a study's confirmation (not a `tuner compare` or a verified claim)."""
    return isinstance(row.results, dict) and row.results.get("kind") == "confirmation"


def _composites(metrics: Mapping[str, Any], side: str, objective: Objective) -> list[float]:
    """Per-launch score values: thr^w1 * p99^-w2 * mem^-w3 (launches in the same order)."""
    w_thr, w_lat, w_mem = scoring.WEIGHTS[objective]
    thr = metrics["output_throughput"][side]["values"]
    p99 = metrics["e2e_p99_ms"][side]["values"]
    mem = metrics["memory_gib"][side]["values"] or [1.0] * len(thr)
    if not (len(thr) == len(p99) == len(mem)):
        return []
    return [
        math.exp(w_thr * math.log(t) - w_lat * math.log(p) - w_mem * math.log(m))
        for t, p, m in zip(thr, p99, mem, strict=True)
        if t > 0 and p > 0 and m > 0
    ]


def _details(metrics: Mapping[str, Any]) -> tuple[str, ...]:
    out = []
    for m in metrics.values():
        if m.get("ratio") is None or is_inconclusive(m.get("verdict")):
            out.append(f"{m['label']}: {m['verdict']}")
            continue
        pct = (m["ratio"] - 1.0) * 100
        lo, hi = (m["low"] - 1.0) * 100, (m["high"] - 1.0) * 100
        out.append(f"{m['label']}: {pct:+.1f} % [{lo:+.1f}, {hi:+.1f}] -> {m['verdict']}")
    return tuple(out)


def study_pick(ranked: Sequence[Ranked], confirmed: Confirmed | None) -> Ranked | None:
    """A study's recommendation from its ranked search trials: the confirmation decides where
    there was one (its winner, or the defaults when nothing beat them), else the top trial. A
    choice that misses the study's SLO gives way to the top trial where that one meets it (as
    the API's recommendation does): the confirmation compared scores, and an SLO is a bound."""
    if not ranked:
        return None
    if confirmed is not None:
        for r in ranked:
            if confirmed.chose(r.number, r.is_baseline):
                return r if r.feasible or not ranked[0].feasible else ranked[0]
    return ranked[0]
