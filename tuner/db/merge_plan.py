"""Planning ``tuner db merge``: where each source row goes in the target, and what cannot go.

Rows are copied column by column through the ORM models' tables, so a column added by a later
migration is copied without a change here. The target is at the head revision when a merge
writes; the source may be at an older one whose tables of studies, trials and comparisons are
the head's (``tuner.db.merge.SAME_MERGED_COLUMNS``), and a dry run plans against the target's
tables as they are.

A source study lands in the target as:

- a new study, when the target has none of that name;
- more of the same study, when the target's study of that name has the same ``created_at``:
  trials are matched by number; those it lacks are added, and a trial is replaced by the
  source's copy when that one got further (RUNNING, then interrupted, then any other end:
  :func:`progress`; a RUNNING or interrupted trial's number may be used again, the
  repository's rule);
- nothing, with a conflict: the target's study of that name is another study, or the same one
  whose trials of one number differ in phase, or ended differently (it went on in two
  places), or the target holds an Optuna study of that name without tuner's.
  ``rename_suffix`` then retries as ``NAME-SUFFIX``.

Comparisons are matched on ``created_at`` and both configurations, wherever they are linked.

Launch summaries (``tuner_launches``, the noise profiles' data) are matched on ``created_at``,
their noise key (host, GPU, vLLM version, model, workload, windows, placement), configuration
and source; each is copied with its key, placement and run tag, so a profile in the target
counts it once and a comparison still leaves its own launches out. A launch of a study merged
under a new name (``--rename-suffix``) takes the new name in its run tag (``study:NAME``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tuner.db.convert import values
from tuner.db.models import (
    LAUNCH_KEY,
    Base,
    ComparisonModel,
    LaunchModel,
    StudyModel,
    TrialModel,
    TrialRequestsModel,
)
from tuner.db.names import STUDY_NAME_MAX, name_problem

# The repository's rule: a RUNNING or interrupted trial's number may be used again.
from tuner.db.repository import QUEUE_WORKER, replaceable
from tuner.domain import TrialStatus
from tuner.errors import UsageError

_ROW_KEYS = frozenset({"id", "study_id"})  # the target gives its own
_STUDY_KEYS = frozenset({"id", "name", "optuna_study_name", "created_at"})  # what makes a study
_TOUCH_S = 0.001  # how far a merge that writes to a study moves its updated_at


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def same_row(a: Base, b: Base) -> bool:
    """Equal in every column but the ids."""
    return _canonical(values(a, _ROW_KEYS)) == _canonical(values(b, _ROW_KEYS))


def comparison_key(row: ComparisonModel) -> tuple[float, str, str]:
    return (row.created_at, _canonical(row.a_config), _canonical(row.b_config))


# What makes a launch summary the same launch (its run tag may differ after a rename).
_LAUNCH_KEY = ("created_at", *LAUNCH_KEY, "config_label", "source")


def launch_key(row: LaunchModel) -> tuple[Any, ...]:
    return tuple(getattr(row, column) for column in _LAUNCH_KEY)


def study_run_tag(name: str) -> str:
    """The run tag of a study's confirmation launches in tuner_launches (tuner.study.confirm
    writes it; a merge renames it with its study)."""
    return f"study:{name}"


@dataclass(frozen=True)
class Source:
    """Everything read from the source, detached from its session."""

    studies: Sequence[StudyModel]  # oldest first
    trials: Mapping[int, Sequence[TrialModel]]  # by source study id, by number
    comparisons: Sequence[ComparisonModel]  # in creation (id) order
    launches: Sequence[LaunchModel] = ()  # in id order; none before revision 0003
    # Per-request records (tuner_trial_requests.windows) by source trial id; none before 0002.
    requests: Mapping[int, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TargetView:
    """What planning needs to know of the target; ``session=None`` for a target without
    tuner's tables yet (a dry run does not create them)."""

    session: Session | None
    optuna_names: Collection[str]
    launches: bool = True  # False: a target before revision 0003, without them

    def study(self, name: str) -> StudyModel | None:
        if self.session is None:
            return None
        return self.session.scalar(select(StudyModel).where(StudyModel.name == name))

    def renamed(self, study: StudyModel) -> list[tuple[str, str]]:
        """The names (and Optuna names) the target holds ``study`` under besides its own: an
        earlier merge's renamed copies (created at the same moment, of its model and GPU)."""
        if self.session is None:
            return []
        query = select(StudyModel.name, StudyModel.optuna_study_name).where(
            StudyModel.created_at == study.created_at,
            StudyModel.model == study.model,
            StudyModel.gpu == study.gpu,
            StudyModel.name != study.name,
        )
        return [(name, optuna) for name, optuna in self.session.execute(query.order_by("name"))]

    def trials(self, study_id: int) -> list[TrialModel]:
        if self.session is None:
            return []
        query = select(TrialModel).where(TrialModel.study_id == study_id)
        return list(self.session.scalars(query.order_by(TrialModel.number)))

    def comparison_keys(self) -> set[tuple[float, str, str]]:
        if self.session is None:
            return set()
        return {comparison_key(r) for r in self.session.scalars(select(ComparisonModel))}

    def launch_keys(self) -> set[tuple[Any, ...]]:
        if self.session is None or not self.launches:
            return set()
        return {launch_key(r) for r in self.session.scalars(select(LaunchModel))}


@dataclass
class StudyPlan:
    source: StudyModel
    name: str  # in the target
    optuna_name: str  # in the target
    target: StudyModel | None  # None: a new study
    # Take the source's status, notes and requested trials: its row is the newer one.
    refresh: bool = False
    add: list[TrialModel] = field(default_factory=list)
    replace: list[tuple[TrialModel, TrialModel]] = field(default_factory=list)  # target, source
    kept: int = 0  # trials the target holds already (or holds further along)
    # Kept trials that are the same row on both sides (target, source): their per-request
    # records are copied where the target has none (a store merged by an older tuner).
    same: list[tuple[TrialModel, TrialModel]] = field(default_factory=list)
    comparisons_added: int = 0
    comparisons_kept: int = 0


@dataclass
class Plan:
    studies: list[StudyPlan]
    # Comparisons to add in source order, with the plan of their study (None: no study).
    comparisons: list[tuple[ComparisonModel, StudyPlan | None]]
    unlinked_kept: int
    # Launch summaries to add in source order, each with the run tag it gets in the target.
    launches: list[tuple[LaunchModel, str]] = field(default_factory=list)
    launches_kept: int = 0


def plan_merge(source: Source, target: TargetView, rename_suffix: str | None) -> Plan:
    """Decide every row's fate. Raises UsageError naming every study that cannot be merged."""
    plans: list[StudyPlan] = []
    problems: list[str] = []
    claimed: set[str] = set()
    for study in source.studies:
        plan, problem = _place(
            study, source.trials.get(study.id, ()), target, rename_suffix, claimed
        )
        if plan is None:
            problems.append(f"study {study.name!r}: {problem}")
        else:
            claimed.add(plan.name)
            plans.append(plan)
    if problems:
        raise _conflicts(problems, rename_suffix)
    by_source_id = {p.source.id: p for p in plans}
    known = target.comparison_keys()
    to_add: list[tuple[ComparisonModel, StudyPlan | None]] = []
    unlinked_kept = 0
    for c in source.comparisons:
        owner = None if c.study_id is None else by_source_id[c.study_id]
        key = comparison_key(c)
        if key in known:
            if owner is None:
                unlinked_kept += 1
            else:
                owner.comparisons_kept += 1
            continue
        known.add(key)
        to_add.append((c, owner))
        if owner is not None:
            owner.comparisons_added += 1
    launches, launches_kept = _plan_launches(source.launches, plans, target)
    return Plan(plans, to_add, unlinked_kept, launches, launches_kept)


def _plan_launches(
    launches: Sequence[LaunchModel], plans: Sequence[StudyPlan], target: TargetView
) -> tuple[list[tuple[LaunchModel, str]], int]:
    """The launches the target lacks, with their run tags there; and the count it holds."""
    renamed = {
        study_run_tag(p.source.name): study_run_tag(p.name)
        for p in plans
        if p.name != p.source.name
    }
    known = target.launch_keys()
    to_add: list[tuple[LaunchModel, str]] = []
    kept = 0
    for row in launches:
        key = launch_key(row)
        if key in known:
            kept += 1
            continue
        known.add(key)
        to_add.append((row, renamed.get(row.run, row.run)))
    return to_add, kept


def _place(
    study: StudyModel,
    trials: Sequence[TrialModel],
    target: TargetView,
    suffix: str | None,
    claimed: set[str],
) -> tuple[StudyPlan | None, str]:
    """The plan under the study's own name, else under a name an earlier merge gave it there
    (it is the same study: a second suffix copied it again), else under ``NAME-SUFFIX``;
    else (None, why)."""
    own, renamed = (study.name, study.optuna_study_name), target.renamed(study)
    # Its own name first where the target holds a study there (the same one, or another that
    # refuses it); where it holds none, an earlier merge's copy before a new one.
    names = [own, *renamed] if target.study(study.name) is not None else [*renamed, own]
    if suffix is not None:
        names.append((f"{study.name}-{suffix}", f"{study.optuna_study_name}-{suffix}"))
    reasons = []
    for name, optuna_name in names:
        plan, reason = _try(study, trials, target, name, optuna_name, claimed)
        if plan is not None:
            return plan, ""
        reasons.append(reason)
    return None, "; as ".join(reasons)


def _try(
    study: StudyModel,
    trials: Sequence[TrialModel],
    target: TargetView,
    name: str,
    optuna_name: str,
    claimed: set[str],
) -> tuple[StudyPlan | None, str]:
    if name != study.name and (problem := name_problem(name)) is not None:
        return None, f"the new name {name!r} {problem}"  # a stored name is kept as it is
    if len(name) > STUDY_NAME_MAX:
        return None, f"{name!r} is longer than {STUDY_NAME_MAX} characters"
    if name in claimed:
        return None, f"{name!r} is taken by another study of the source"
    existing = target.study(name)
    if existing is None:
        if optuna_name in target.optuna_names:
            return None, (
                f"the target holds an Optuna study {optuna_name!r} but no tuner study "
                f"{name!r} (left by a deleted study?)"
            )
        return StudyPlan(study, name, optuna_name, None, add=list(trials)), ""
    if existing.created_at != study.created_at:
        return None, (
            f"the target's study {name!r} is another study (created {_when(existing)}; "
            f"this one {_when(study)})"
        )
    newer = study.updated_at > existing.updated_at
    plan = StudyPlan(study, name, existing.optuna_study_name, existing, refresh=newer)
    diverged = _diff_trials(plan, trials, target.trials(existing.id))
    if diverged:
        shown = ", ".join(str(n) for n in diverged[:5]) + (", ..." if len(diverged) > 5 else "")
        return None, (
            f"{name!r} in the target is the same study, but its trials {shown} finished "
            "differently there (was it continued in both places?)"
        )
    return plan, ""


def progress(row: TrialModel) -> int:
    """How far a trial got: 0 RUNNING, 1 interrupted (FAILED when the tuner stopped), 2 any
    other end. A copy further along replaces the other; two different ends are a conflict."""
    if row.status == TrialStatus.RUNNING.value:
        return 0
    return 1 if replaceable(row) else 2


def _diff_trials(
    plan: StudyPlan, source: Sequence[TrialModel], target: Sequence[TrialModel]
) -> list[int]:
    """Fill ``plan``'s add / replace / kept; return the numbers that conflict."""
    theirs = {t.number: t for t in target}
    diverged = []
    for trial in source:
        mine = theirs.get(trial.number)
        if mine is None:
            plan.add.append(trial)
        elif mine.phase != trial.phase:
            diverged.append(trial.number)
        elif same_row(trial, mine):
            plan.kept += 1
            plan.same.append((mine, trial))
        elif progress(trial) > progress(mine):
            plan.replace.append((mine, trial))
        elif progress(trial) < progress(mine) or replaceable(mine):
            plan.kept += 1  # the target's copy is further along, or as far and not finished
        else:
            diverged.append(trial.number)
    return diverged


def apply_plan(session: Session, plan: Plan, requests: Mapping[int, Any]) -> None:
    """Write ``plan`` in ``session`` (the caller's transaction); ``requests``: the source's
    per-request records by its trial id (:attr:`Source.requests`)."""
    rows: dict[int, StudyModel] = {}  # source study id -> target row
    for p in plan.studies:
        row = p.target
        if row is None:
            row = StudyModel(**values(p.source, {"id"}))
            if p.name != p.source.name:  # renamed: its spec names it as the study does
                row.name, row.optuna_study_name = p.name, p.optuna_name
                row.spec = {**row.spec, "name": p.name} if "name" in row.spec else row.spec
            session.add(row)
            session.flush()  # its id, for the trials
        elif p.refresh or p.add or p.replace or p.comparisons_added:
            if p.refresh:
                for key, value in values(p.source, _STUDY_KEYS).items():
                    setattr(row, key, value)
                if p.name != p.source.name and "name" in row.spec:  # renamed, as above
                    row.spec = {**row.spec, "name": p.name}
            # Every write moves updated_at: the API's caches watch it (Repository.change_marker).
            # By a millisecond past the later of the two copies, not to the merge's clock: a
            # copy written after this one, merged later, must still read as the newer one (at
            # a tenth of a second, a copy of a study finished 0.1 s after the one merged before
            # it read as older, and its status was lost). A millisecond stays visible in the
            # marker's sum of timestamps for up to about 2,000 studies (a double's resolution
            # there is N * 4e-7 s); past that, the marker's latest timestamp still moves
            # wherever the touched study is the latest.
            row.updated_at = max(p.source.updated_at, row.updated_at) + _TOUCH_S
        if row.spec and QUEUE_WORKER in row.spec and (p.target is None or p.refresh):
            # The worker that ran it is another host's, whose heartbeat stops here with the
            # copy: a worker of the target took such a copy over, and waited for good on its
            # running trial. A copy is nobody's to run here (`tuner run --resume` can).
            row.spec = {k: v for k, v in row.spec.items() if k != QUEUE_WORKER}
        rows[p.source.id] = row
        copied = [(TrialModel(study_id=row.id, **values(t, _ROW_KEYS)), t) for t in p.add]
        session.add_all(mine for mine, _ in copied)
        for mine, theirs in p.replace:
            for key, value in values(theirs, _ROW_KEYS).items():
                setattr(mine, key, value)
        session.flush()  # the new trials' ids, for their per-request records
        for mine, theirs in copied:
            if theirs.id in requests:
                session.add(TrialRequestsModel(trial_id=mine.id, windows=requests[theirs.id]))
        for mine, theirs in p.replace:  # the source's records, or none: not the replaced one's
            held = session.get(TrialRequestsModel, mine.id)
            if theirs.id in requests:
                session.merge(TrialRequestsModel(trial_id=mine.id, windows=requests[theirs.id]))
            elif held is not None:
                session.delete(held)
        for mine, theirs in p.same:  # where a store an older tuner merged has none
            if theirs.id in requests and session.get(TrialRequestsModel, mine.id) is None:
                session.add(TrialRequestsModel(trial_id=mine.id, windows=requests[theirs.id]))
    for c, owner in plan.comparisons:
        study_id = None if owner is None else rows[owner.source.id].id
        session.add(ComparisonModel(study_id=study_id, **values(c, _ROW_KEYS)))
    for launch, run in plan.launches:
        session.add(LaunchModel(**{**values(launch, {"id"}), "run": run}))
    session.flush()


def _when(study: StudyModel) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(study.created_at))


def _conflicts(problems: list[str], suffix: str | None) -> UsageError:
    if suffix is None:
        hint = (
            "merge them under other names with --rename-suffix SUFFIX "
            "(NAME becomes NAME-SUFFIX, its Optuna study too)"
        )
    else:
        hint = "pick another --rename-suffix"
    many = f"{len(problems)} studies: " if len(problems) > 1 else ""
    return UsageError(f"cannot merge {many}" + "; ".join(problems), hint=hint)
