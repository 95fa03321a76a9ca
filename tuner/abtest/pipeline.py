"""The one A/B pipeline of ``tuner compare`` and ``tuner verify-claims``.

A command sets the machine up once (:func:`open_bench`: the vLLM environment, the hardware, the
database, a runner behind the :class:`~tuner.abtest.guard.FindingGuard`), then hands
:func:`run_groups` its groups of arms and a judge step:

1. each group's arms are launched interleaved, fresh launches each, with a
   :class:`~tuner.abtest.launchlog.LaunchLog` per group, so that a stopped run resumes;
2. the judge step turns a group's launches into the command's verdicts (one comparison for
   ``compare``, one per claim for ``verify-claims``), each saying what, if anything, to store;
3. what is to be stored goes to ``tuner_comparisons``, and only then are the launch logs removed.

Nothing here prints: progress goes to the callbacks of a :class:`Watch`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tuner.abtest.compare import Arm, RunCallback, run_interleaved
from tuner.abtest.decide import Design, run_looks
from tuner.abtest.guard import FindingGuard
from tuner.abtest.launchlog import LaunchLog, describe_resumed
from tuner.abtest.profile import launches_profile, record_launch, run_tag
from tuner.compose import prepare, writable_home
from tuner.domain import (
    GpuProfile,
    ModelSpec,
    Provenance,
    ServingConfig,
    TrialResult,
    Workload,
)
from tuner.spec import DEFAULTS

if TYPE_CHECKING:
    from tuner.db import Repository
    from tuner.runner import PhaseCallback, TrialRunner
    from tuner.scoring import NoiseProfile
    from tuner.spec import StudySpec


@dataclass(frozen=True)
class Watch:
    """Who hears of a run's progress: each launch starting, its phases, each launch finished,
    and the launches an interrupted run of the same command had already made."""

    on_start: Callable[[int, int, Arm], None] | None = None
    on_run: RunCallback | None = None
    on_phase: PhaseCallback | None = None
    on_resumed: Callable[[str], None] | None = None


@dataclass(frozen=True)
class Group:
    """Arms launched together, interleaved, on one workload."""

    workload: Workload
    arms: tuple[Arm, ...]


@dataclass(frozen=True)
class Judgement:
    """One comparison a judge step made, as it is stored in ``tuner_comparisons``."""

    workload: Workload
    a: ServingConfig
    b: ServingConfig
    results: Mapping[str, Any]
    verdicts: Mapping[str, str]
    provenance: Provenance | None
    repeats: int | None = None  # launches a side it took (default: the command's launches)


class Judged(Protocol):
    """What a judge step gives per verdict: it says what to store, None for nothing."""

    def stored(self) -> Judgement | None: ...


J = TypeVar("J", bound=Judged)
Judge = Callable[[Group, list[list[TrialResult]]], Sequence[J]]
"""A judge step: a group and its launches per arm (in the order of ``group.arms``) -> verdicts."""
LogFactory = Callable[[Workload, list[Arm]], LaunchLog]
Decided = Callable[[Group, list[list[TrialResult]]], bool]
"""Whether a group's launches so far decide everything it was launched for."""
Record = Callable[[Group, Arm, TrialResult, Sequence[TrialResult]], None]
"""Called after each new launch with the group, the arm, the result and every launch of the
group so far (this one included)."""


def run_groups(
    groups: Sequence[Group],
    runner: TrialRunner | None,
    launches: int,
    judge: Judge[J],
    *,
    watch: Watch | None = None,
    on_group: Callable[[Group], None] | None = None,
    launch_log: LogFactory | None = None,
    store: Callable[[Judgement], int] | None = None,
    design: Design | None = None,
    decided: Decided | None = None,
    record: Record | None = None,
) -> list[tuple[J, int | None]]:
    """Launch each group's arms ``launches`` times each, judge each group, and store; see the
    module docstring. Returns every verdict in group order with the id of its stored comparison
    (None when not stored).

    ``runner`` may be None only when there is no group. ``launch_log`` gives each group's log
    (earlier launches reused, each new one recorded); ``store`` stores a judgement and gives
    its id. Without ``store`` nothing is stored, and the launch logs are kept. ``design``: its
    first look instead of ``launches``; a sequential one goes on from there, one more round at
    a time until ``decided`` or its cap. ``record`` hears of each new launch (the noise
    profile's store).
    """
    w = watch or Watch()
    logs = [launch_log(g.workload, list(g.arms)) if launch_log else None for g in groups]
    ours = {log.path for log in logs if log is not None}  # the other groups' are not elsewhere
    with contextlib.ExitStack() as held:
        # One run at a time on a log: a second one beside it took the first one's finished
        # launches for an interrupted run's, and both comparisons stood on them.
        for log in logs:
            if log is not None:
                held.enter_context(log.exclusive())
        measured: list[list[list[TrialResult]]] = []
        for group, log in zip(groups, logs, strict=True):
            if runner is None:
                raise ValueError("a runner is needed to measure a group")
            if on_group:
                on_group(group)
            measured.append(
                _measure(group, runner, launches, log, ours, w, design, decided, record)
            )
        judged = [j for g, results in zip(groups, measured, strict=True) for j in judge(g, results)]
        if store is None:
            return [(j, None) for j in judged]
        ids = [None if (row := j.stored()) is None else store(row) for j in judged]
        for log in logs:  # stored: a later run of the same command measures afresh
            if log is not None:
                log.clear()
        return list(zip(judged, ids, strict=True))


def _measure(
    group: Group,
    runner: TrialRunner,
    launches: int,
    log: LaunchLog | None,
    ours: Collection[Path],
    w: Watch,
    design: Design | None,
    decided: Decided | None,
    record: Record | None,
) -> list[list[TrialResult]]:
    """One group's launches, resumed from ``log``'s earlier ones (said through
    ``w.on_resumed``), each new one recorded in ``log`` as it finishes: ``launches`` rounds, or
    look by look (see :func:`run_groups`)."""
    done = log.load(list(group.arms)) if log is not None else None
    resumed = describe_resumed(done, group.arms, log, ours) if done is not None else None
    if resumed and w.on_resumed:
        w.on_resumed(resumed)
    seen: list[TrialResult] = [r for rs in done or [] for r in rs]

    def finished(index: int, total: int, arm: Arm, result: TrialResult) -> None:
        if log is not None:
            log.record(arm, result)
        seen.append(result)
        if record is not None:
            record(group, arm, result, seen)
        if w.on_run:
            w.on_run(index, total, arm, result)

    launch = partial(
        run_interleaved,
        group.arms,
        runner,
        group.workload,
        on_start=w.on_start,
        on_run=finished,
        on_phase=w.on_phase,
    )
    rounds = design.first if design is not None else launches
    return run_looks(
        launch, rounds, done, design, None if decided is None else partial(decided, group)
    )


def first_provenance(*runs: Sequence[TrialResult]) -> Provenance | None:
    """Where the launches of a comparison ran: the provenance of the first launch that has one."""
    return next((r.provenance for rs in runs for r in rs if r.provenance), None)


@dataclass(frozen=True)
class Bench:
    """This machine set up for an A/B command: the guarded runner, the database, and the facts
    that name the command's launch logs and go with its stored comparisons."""

    command: str  # "compare", "verify-claims": part of each launch log's name
    model: ModelSpec
    gpu: GpuProfile
    launches: int  # fresh launches of each configuration
    runner: TrialRunner
    repo: Repository
    hardware: str
    vllm_version: str
    design: Design | None = None  # None: ``launches`` a side, as before the decision design

    def launch_log(self, workload: Workload, arms: Sequence[Arm]) -> LaunchLog:
        """The log of measuring ``arms`` on ``workload`` here, under ``$TUNER_HOME``."""
        key = self.design.key() if self.design is not None else None
        return LaunchLog.for_arms(
            writable_home(),
            self.command,
            arms,
            self.launches,
            # Two models share an alias (two directories named `m`, `orgA/foo` and `orgB/foo`,
            # a catalog model's dummy and real weights): the weights' source tells them apart.
            model=self.model.source or self.model.alias,
            gpu=self.gpu.name,
            hardware=self.hardware,
            vllm=self.vllm_version,
            workload=workload,
            # A launch is stored in the database of the run that made it: a run into another
            # one starts afresh, or its results there would rest on launches stored elsewhere.
            database=self.repo.database,
            **({"design": key} if key is not None else {}),
        )

    def run_tag(self, group: Group, seen: Sequence[TrialResult]) -> str:
        stem = self.launch_log(group.workload, group.arms).path.stem
        return run_tag(self.command, stem, seen)

    def record(
        self, group: Group, arm: Arm, result: TrialResult, seen: Sequence[TrialResult]
    ) -> None:
        """Store a finished launch's summary for the noise profile of its key."""
        record_launch(
            self.repo,
            result,
            model=self.model,
            workload=group.workload.name,
            is_defaults=arm.label.strip() == DEFAULTS,
            source=self.command,
            run=self.run_tag(group, seen),
        )

    def profile(
        self, group: Group, results: Sequence[Sequence[TrialResult]]
    ) -> NoiseProfile | None:
        """The noise profile of the key of ``group``'s launches, from every stored launch but
        this run's own; None before a launch completed or without a profile."""
        flat = [r for rs in results for r in rs]
        run = self.run_tag(group, flat)
        return launches_profile(self.repo, flat, self.model, group.workload.name, run)

    def store(self, judgement: Judgement) -> int:
        row = self.repo.add_comparison(
            model=self.model.alias,
            gpu=self.gpu.name,
            workload=judgement.workload.name,
            a_config=judgement.a,
            b_config=judgement.b,
            repeats=judgement.repeats if judgement.repeats is not None else self.launches,
            results=judgement.results,
            verdicts=judgement.verdicts,
            provenance=judgement.provenance,
        )
        return row.id

    def run(
        self,
        groups: Sequence[Group],
        judge: Judge[J],
        *,
        watch: Watch | None = None,
        decided: Decided | None = None,
    ) -> list[tuple[J, int | None]]:
        """:func:`run_groups` on this machine: launch logs under ``$TUNER_HOME``, each launch
        summarised for the noise profile, verdicts stored in its database. With a sequential
        design, ``decided`` says when a group's launches suffice."""
        return run_groups(
            groups,
            self.runner,
            self.launches,
            judge,
            watch=watch,
            launch_log=self.launch_log,
            store=self.store,
            design=self.design,
            decided=decided,
            record=self.record,
        )


def open_bench(
    command: str,
    spec: StudySpec,
    storage_url: str,
    model: ModelSpec,
    gpu: GpuProfile,
    launches: int,
    design: Design | None = None,
) -> Bench:
    """Set the machine up for ``spec`` (:func:`tuner.compose.prepare`: a TunerError
    before anything is written when it cannot be) and wrap its runner in the finding guard.
    ``design``: the decision design (``launches`` is then its first look)."""
    prepared = prepare(spec, storage_url)
    return Bench(
        command=command,
        model=model,
        gpu=gpu,
        launches=design.first if design is not None else launches,
        runner=FindingGuard(prepared.runner, model),
        repo=prepared.repo,
        hardware=prepared.runner.hardware.name,
        vllm_version=prepared.ctx.vllm_version,
        design=design,
    )
