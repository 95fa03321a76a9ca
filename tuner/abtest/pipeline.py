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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tuner.abtest.compare import Arm, RunCallback
from tuner.abtest.guard import FindingGuard
from tuner.abtest.launchlog import LaunchLog, run_logged
from tuner.compose import prepare, tuner_home
from tuner.domain import GpuProfile, ModelSpec, Provenance, ServingConfig, TrialResult, Workload

if TYPE_CHECKING:
    from tuner.db.repository import Repository
    from tuner.runner.vllm import PhaseCallback, TrialRunner
    from tuner.spec.study import StudySpec


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


class Judged(Protocol):
    """What a judge step gives per verdict: it says what to store, None for nothing."""

    def stored(self) -> Judgement | None: ...


J = TypeVar("J", bound=Judged)
Judge = Callable[[Group, list[list[TrialResult]]], Sequence[J]]
"""A judge step: a group and its launches per arm (in the order of ``group.arms``) -> verdicts."""
LogFactory = Callable[[Workload, list[Arm]], LaunchLog]


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
) -> list[tuple[J, int | None]]:
    """Launch each group's arms ``launches`` times each, judge each group, and store; see the
    module docstring. Returns every verdict in group order with the id of its stored comparison
    (None when not stored).

    ``runner`` may be None only when there is no group. ``launch_log`` gives each group's log
    (earlier launches reused, each new one recorded); ``store`` stores a judgement and gives
    its id. Without ``store`` nothing is stored, and the launch logs are kept.
    """
    w = watch or Watch()
    logs: list[LaunchLog] = []
    measured: list[list[list[TrialResult]]] = []
    for group in groups:
        if runner is None:
            raise ValueError("a runner is needed to measure a group")
        if on_group:
            on_group(group)
        log = launch_log(group.workload, list(group.arms)) if launch_log else None
        if log is not None:
            logs.append(log)
        measured.append(
            run_logged(
                log,
                group.arms,
                runner,
                group.workload,
                launches,
                on_start=w.on_start,
                on_run=w.on_run,
                on_phase=w.on_phase,
                on_resumed=w.on_resumed,
            )
        )
    judged = [j for g, results in zip(groups, measured, strict=True) for j in judge(g, results)]
    if store is None:
        return [(j, None) for j in judged]
    ids = [None if (row := j.stored()) is None else store(row) for j in judged]
    for log in logs:  # stored: a later run of the same command measures afresh
        log.clear()
    return list(zip(judged, ids, strict=True))


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

    def launch_log(self, workload: Workload, arms: Sequence[Arm]) -> LaunchLog:
        """The log of measuring ``arms`` on ``workload`` here, under ``$TUNER_HOME``."""
        return LaunchLog.for_arms(
            tuner_home(),
            self.command,
            arms,
            self.launches,
            model=self.model.alias,
            gpu=self.gpu.name,
            hardware=self.hardware,
            vllm=self.vllm_version,
            workload=workload,
        )

    def store(self, judgement: Judgement) -> int:
        """Store ``judgement`` as a comparison; its id."""
        row = self.repo.add_comparison(
            model=self.model.alias,
            gpu=self.gpu.name,
            workload=judgement.workload.name,
            a_config=judgement.a,
            b_config=judgement.b,
            repeats=self.launches,
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
        on_group: Callable[[Group], None] | None = None,
    ) -> list[tuple[J, int | None]]:
        """:func:`run_groups` on this machine: launch logs under ``$TUNER_HOME``, verdicts
        stored in its database."""
        return run_groups(
            groups,
            self.runner,
            self.launches,
            judge,
            watch=watch,
            on_group=on_group,
            launch_log=self.launch_log,
            store=self.store,
        )


def open_bench(
    command: str,
    spec: StudySpec,
    storage_url: str,
    model: ModelSpec,
    gpu: GpuProfile,
    launches: int,
) -> Bench:
    """Set the machine up for ``spec`` (:func:`tuner.compose.prepare`: a TunerError
    before anything is written when it cannot be) and wrap its runner in the finding guard."""
    prepared = prepare(spec, storage_url)
    return Bench(
        command=command,
        model=model,
        gpu=gpu,
        launches=launches,
        runner=FindingGuard(prepared.runner, model),
        repo=prepared.repo,
        hardware=prepared.runner.hardware.name,
        vllm_version=prepared.ctx.vllm_version,
    )
