"""The one decision design of ``tuner compare``, ``tuner verify-claims`` and a study's
confirmation: how many launches a comparison takes, and its verdict at each look.

A :class:`Design` is either

- **sequential** (the default): interleaved pairs A B, B A, A B ... (counterbalanced: see
  :func:`tuner.abtest.compare.run_interleaved`) with a look after every pair from
  ``first`` launches a side, until the interval of B/A excludes 1, or its half-width is at most
  the smallest effect worth acting on (``min_effect``, default 5 %: "no significant
  difference" with the tight interval stated), or ``cap`` launches a side are spent; each
  look's interval at the Pocock level for the look schedule (:mod:`tuner.scoring.sequential`;
  an interval on the comparison's own launches alone, t at the trend fit's few df, at the
  level simulated for those statistics), so the intervals are repeated confidence intervals
  that hold at the stated ``confidence`` whichever look the comparison stopped at;
- **fixed**: ``n`` launches a side and one look at ``confidence`` (``--repeats`` alone, or
  ``--repeats N --max-launches N``, which takes ``--min-effect``; else ``min_effect`` is 5 %).

Either way a launch's value is the geometric mean of its windows, and each metric's interval
borrows the noise profile of the key when there is one and the comparison's own launches do
not contradict it (:func:`tuner.scoring.noise.pooled_ratio_interval`), else Welch's on its own
launches. A machine that drifts while the comparison runs (an H100 fell 4-8 % a launch,
docs/results/plan-h200.md §13-14) would widen that interval by its drift, so by default
(:attr:`Design.trend`) the interval is B/A with a common straight-line trend over the
launches' times taken out (:func:`tuner.scoring.noise.trend_ratio_interval`: a level a side
and one slope, the residual variance pooled with the profile's as above), wherever the
launches span a minute or more. ``bench/decision_replay.py`` measured it: without a drift it
costs nothing with a profile (the same power and false decisions), with 4 % a launch it keeps
the power that the untrended interval loses (84 % against 35 % at B/A = 1.2), and a change that
is not a straight line (a step of 15 % inside a round of the first look) raises its false
decisions to 7.5 % (10.5 % for one look of 3), against 4-5 % without the trend.
A side whose launches disagree far beyond their noise ends the comparison
"inconclusive" (more launches cannot undo a disagreement), unless the two sides' launches lie
apart by more than either side's spread and the interval decides. A side that cannot be
measured here (a finding such as memory exceeded, or no launch of it completed) ends it
"unmeasured".

Every verdict carries its cost: the GPU-minutes of all launches it took (start-up included).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.abtest.compare import HEADLINE, Arm, Comparison, Times, compare
from tuner.abtest.guard import finding_of
from tuner.abtest.profile import launch_walls
from tuner.domain import TrialResult, TrialStatus
from tuner.scoring import (
    BUDGET,
    CONTINUE,
    MIN_EFFECT,
    NO_DIFFERENCE,
    PRECISE,
    SIGNIFICANT,
    NoiseProfile,
    RatioInterval,
    SequentialPlan,
    Step,
    next_step,
    pooled_ratio_interval,
    trend_ratio_interval,
)

TREND = True  # whether a design fits the machine's drift unless told otherwise
FIRST = 3  # launches a side at the first look
CAP = 6  # launches a side at most
INCONCLUSIVE_STOP = "inconclusive"
UNMEASURED_STOP = "unmeasured"  # a side cannot be measured here: more launches cannot help


@dataclass(frozen=True)
class Design:
    """How many launches a side, and at what level each look's intervals are."""

    plan: SequentialPlan
    confidence: float  # what the reported intervals hold at (overall, whichever look stopped)
    fixed: bool = False
    # Take a common straight-line trend over the launches' times out of every interval
    # (tuner.scoring.noise.trend_ratio_interval), where the launches span a minute or more.
    trend: bool = TREND

    @classmethod
    def fixed_launches(
        cls,
        n: int,
        confidence: float = 0.95,
        min_effect: float | None = None,
        *,
        trend: bool = TREND,
    ) -> Design:
        """``n`` launches a side, one look; ``min_effect`` when one was asked for (peak memory's
        floor, and "precise" at its half-width), else None: the floor is 5 %, unstated."""
        plan = SequentialPlan(
            first=n, cap=n, confidence=confidence, margin=None, min_effect=min_effect
        )
        return cls(plan, confidence, fixed=True, trend=trend)

    @classmethod
    def sequential(
        cls,
        first: int = FIRST,
        cap: int = CAP,
        confidence: float = 0.95,
        min_effect: float | None = MIN_EFFECT,
        *,
        trend: bool = TREND,
    ) -> Design:
        if first == cap:
            return cls.fixed_launches(first, confidence, trend=trend)
        plan = SequentialPlan.decision(
            first, cap, alpha=1.0 - confidence, min_effect=min_effect, own=trend
        )
        return cls(plan, confidence, trend=trend)

    @classmethod
    def of_options(
        cls,
        repeats: int | None,
        max_launches: int | None,
        confidence: float,
        min_effect: float | None,
        *,
        trend: bool = TREND,
    ) -> Design:
        """The design from a command's options: ``--repeats`` alone is a fixed design;
        ``--max-launches`` makes it sequential with ``--repeats`` (default 3, at most the
        budget) as the first look, fixed with ``min_effect`` where the two are equal; neither:
        sequential from 3 to 6 a side. ``min_effect`` None: none asked for (5 %)."""
        if max_launches is None and repeats is not None:
            return cls.fixed_launches(repeats, confidence, trend=trend)
        cap = CAP if max_launches is None else max_launches
        first = min(repeats if repeats is not None else FIRST, cap)
        if first == cap:
            return cls.fixed_launches(first, confidence, min_effect, trend=trend)
        floor = MIN_EFFECT if min_effect is None else min_effect
        return cls.sequential(first, cap, confidence, floor, trend=trend)

    @property
    def first(self) -> int:
        return self.plan.first

    @property
    def cap(self) -> int:
        return self.plan.cap

    def key(self) -> dict[str, Any] | None:
        """What of the design defines a run (for its launch log); None for a fixed design,
        whose run is defined by its launch count alone."""
        if self.fixed:
            return None
        key = {"first": self.first, "cap": self.cap, "confidence": self.confidence,
               "min_effect": self.plan.min_effect}  # fmt: skip
        return key | {"trend": True} if self.trend else key

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "fixed" if self.fixed else "sequential",
            "first": self.first,
            "max_launches": self.cap,
            "confidence": self.confidence,
            "per_look_confidence": self.plan.confidence,
            # where an interval rests on its own launches alone (t at the trend fit's df)
            "per_look_confidence_own": self.plan.own_confidence,
            "min_effect": self.plan.min_effect,
            "boundary": None if self.fixed else "pocock",
            "trend": "straight line over the launches' times" if self.trend else None,
        }

    def text(self) -> str:
        """A sentence for the plan line."""
        trend = ", a straight-line trend over the launches' times taken out" if self.trend else ""
        if self.fixed:
            floor = self.plan.min_effect
            return f"{self.first} fresh launches each, interleaved A B, B A, ...{trend}" + (
                f", peak memory within {floor * 100:g} % is no difference" if floor else ""
            )
        stop = (
            f" or the interval's half-width is at most {self.plan.min_effect * 100:g} %"
            if self.plan.min_effect
            else ""
        )
        own = self.plan.own_confidence
        alone = f", {own * 100:.2f} % on its own launches alone" if own else ""
        return (
            f"interleaved pairs A B, B A, A B ..., a look after each pair from {self.first} to "
            f"{self.cap} launches a side, until B/A excludes 1{stop} (each look at "
            f"{self.plan.confidence * 100:.2f} %{alone}, Pocock, for {self.confidence * 100:g} % "
            f"overall{trend})"
        )


def run_looks(
    launch: Callable[..., list[list[TrialResult]]],
    rounds: int,
    done: Sequence[Sequence[TrialResult]] | None,
    design: Design | None,
    decided: Callable[[list[list[TrialResult]]], bool] | None,
) -> list[list[TrialResult]]:
    """Launch, then look by look, for ``tuner compare``, ``verify-claims`` and a confirmation:
    ``launch(rounds, done=...)`` (:func:`~tuner.abtest.compare.run_interleaved`, arms bound) to
    ``rounds`` a side from ``done``; then, for a sequential ``design`` and a ``decided``, one
    more round at a time until ``decided`` or the design's cap. A resumed run (``done``) fills
    its last round first: interrupted between A's 5th launch and B's, it looked at 4 a side, a
    look its design never planned, before the round that brought both to 5."""
    if done and design is not None and not design.fixed:
        rounds = min(design.cap, max(rounds, *(len(rs) for rs in done)))
    results = launch(rounds, done=done)
    if design is None or design.fixed or decided is None:
        return results
    while rounds < design.cap and not decided(results):
        # A resumed run may hold more launches than this look: go on from where it stopped.
        rounds = min(design.cap, max(rounds + 1, min(len(rs) for rs in results) + 1))
        results = launch(rounds, done=results)
    return results


def judged_level(results: Mapping[str, Any]) -> float:
    """The level a stored comparison's intervals were judged at (its ``to_results`` JSON): a
    sequential design's per look, as :meth:`Look.to_results` stores it in its decision; else
    the record's own confidence (a fixed design's, a comparison without a design), 0.95 where
    it names none."""
    decision = results.get("decision") or {}
    return float(decision.get("per_look_confidence") or results.get("confidence") or 0.95)


@dataclass(frozen=True)
class Look:
    """A comparison at one look: every metric, the deciding metric's step and what it cost."""

    comparison: Comparison
    step: Step
    design: Design
    profile: NoiseProfile | None
    walls: tuple[tuple[float, float], ...]  # (started_at, wall_s) of every launch it took
    metric: str = HEADLINE  # the metric whose interval decides (a claim's own metric)

    @property
    def done(self) -> bool:
        return self.step.done

    @property
    def gpu_minutes(self) -> float:
        return sum(w for _, w in self.walls) / 60.0

    def to_results(self) -> dict[str, Any]:
        """The comparison's stored JSON (:meth:`Comparison.to_results`) with the design, how
        it stopped, the noise used, the GPU-minutes and the launches they are the wall time of
        (``gpu_launches``: ``{"started_at", "wall_s"}`` each, which names a launch that other
        comparisons of the run read too)."""
        out = self.comparison.to_results()
        out["confidence"] = self.design.confidence
        headline = self.comparison.metric(self.metric)
        found = self.step.interval
        out["decision"] = {
            **self.design.to_dict(),
            "metric": self.metric,
            "stopped": self.step.reason,
            "launches": {"a": self.step.n_a, "b": self.step.n_b},
            "half_width": found.half_width if found is not None else None,
            "method": headline.method or None,
            "df": headline.df,
        }
        if self.profile is not None:
            out["noise"] = self.profile.to_dict()
        out["gpu_minutes"] = self.gpu_minutes
        out["gpu_launches"] = [{"started_at": s, "wall_s": w} for s, w in self.walls]
        return out


def judge_look(
    a: Arm,
    a_runs: Sequence[TrialResult],
    b: Arm,
    b_runs: Sequence[TrialResult],
    design: Design,
    profile: NoiseProfile | None,
    metric: str = HEADLINE,
) -> Look:
    """The comparison of ``a_runs`` and ``b_runs`` at this look (see the module docstring);
    ``metric``'s interval decides whether to stop (the output throughput, or a claim's metric)."""

    def interval_of(
        metric: str,
        av: Sequence[float],
        bv: Sequence[float],
        confidence: float,
        at: Times | None,
    ) -> RatioInterval | None:
        component = profile.get(metric) if profile is not None else None
        if design.trend and at is not None:
            a_points, b_points = zip(at[0], av, strict=True), zip(at[1], bv, strict=True)
            found = trend_ratio_interval(
                list(a_points), list(b_points), confidence, component, design.plan.own_confidence
            )
            if found is not None:
                return found
        return pooled_ratio_interval(av, bv, confidence, component)

    plan = design.plan
    c = compare(
        a, a_runs, b, b_runs, plan.confidence, interval_of=interval_of, geomean=True,
        min_effect=plan.min_effect or MIN_EFFECT,
    )  # fmt: skip
    head = c.metric(metric)
    a_n, b_n = len(head.a_values), len(head.b_values)
    if head.inconclusive:
        found = interval_of(metric, head.a_values, head.b_values, plan.confidence, head.times)
        step = Step(head.verdict, found, a_n, b_n, INCONCLUSIVE_STOP)
    else:
        if plan.higher_is_better != head.higher_is_better:  # a latency claim: lower is better
            plan = dataclasses.replace(plan, higher_is_better=head.higher_is_better)
        n = min(a_n, b_n)
        if min(len(a_runs), len(b_runs)) >= design.cap and 2 <= n < plan.cap:
            # The cap counts launches, as run_looks does; a failed one left fewer values, and
            # the look at the cap judged nothing ("continue", where no launch was left; a
            # fixed design's first look is its cap). It judges the values there are.
            plan = dataclasses.replace(plan, first=min(plan.first, n), cap=n)
        step = next_step(
            head.a_values,
            head.b_values,
            plan,
            lambda av, bv, conf: interval_of(metric, av, bv, conf, head.times),
        )
        if step.reason == SIGNIFICANT and head.verdict == NO_DIFFERENCE:  # within min_effect
            step = dataclasses.replace(
                step, verdict=NO_DIFFERENCE, reason=BUDGET if design.fixed else PRECISE
            )
        if step.verdict == CONTINUE and _hopeless(a_runs, b_runs):
            step = Step(head.verdict, step.interval, a_n, b_n, UNMEASURED_STOP)
        elif step.verdict == CONTINUE and min(len(a_runs), len(b_runs)) >= design.cap:
            # Fewer than two values a side at the cap: no interval, and no launch left.
            step = Step(head.verdict, step.interval, a_n, b_n, BUDGET)
    return Look(c, step, design, profile, launch_walls([*a_runs, *b_runs]), metric)


def _hopeless(*runs: Sequence[TrialResult]) -> bool:
    """Whether a side cannot start here (a finding): more launches of it measure nothing."""
    complete = all(any(r.status is TrialStatus.COMPLETE for r in rs) for rs in runs)
    return any(map(finding_of, runs)) or not complete
