"""``tuner db merge``: bring the studies of another database (the SQLite file a GPU host without
network wrote) into this one, the store that ``tuner serve`` and ``tuner best`` read.

Every tuner study with its trials and comparisons, the comparisons of no study, and the launch
summaries of the noise profiles (``tuner_launches``) are copied in one transaction (all or
nothing); then each study's Optuna study (:mod:`merge_optuna`).
Merging is idempotent: what the target holds already is left alone, so merging the same file
twice changes nothing the second time, and merging a later copy of it adds what is new. How
rows are matched, and when a study is refused, is in :mod:`tuner.db.merge_plan`.

The source is only read: a SQLite file is opened read-only, and one whose tuner schema is not at
this tuner's head revision is refused (upgrading it is its owner's decision, and a read-only
copy from a customer's machine should stay as it came).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import create_engine, inspect, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from tuner.db import merge_optuna, migrate
from tuner.db.merge_optuna import OptunaMerge
from tuner.db.merge_plan import Plan, Source, StudyPlan, TargetView, apply_plan
from tuner.db.merge_plan import plan_merge as _plan_merge
from tuner.db.models import (
    TABLE_PREFIX,
    ComparisonModel,
    LaunchModel,
    StudyModel,
    TrialModel,
    TrialRequestsModel,
)
from tuner.db.names import check_suffix
from tuner.db.session import (
    URL_EXAMPLES,
    make_engine,
    not_sqlite,
    optuna_engine_kwargs,
    read_only,
    safe_url,
    session_scope,
    sqlite_file,
    storage_error,
)
from tuner.errors import StorageError, UsageError

if TYPE_CHECKING:
    from optuna.storages import RDBStorage


@dataclass(frozen=True)
class StudyMerge:
    """One source study: where it went and what it brought."""

    name: str  # in the source
    merged_as: str  # in the target: ``name``, or ``name-SUFFIX`` when renamed
    new: bool  # the target had no such study
    updated: bool  # the target's study took the source's newer status / notes / trial count
    trials_added: int
    trials_replaced: int  # RUNNING or interrupted in the target, finished in the source
    trials_kept: int  # already in the target (or further along there)
    comparisons_added: int
    comparisons_kept: int
    optuna: OptunaMerge


@dataclass(frozen=True)
class MergeSummary:
    source: str  # URLs, passwords masked
    target: str
    dry_run: bool  # nothing was written; the counts say what a merge would do
    studies: tuple[StudyMerge, ...]
    comparisons_added: int  # comparisons of no study (``tuner compare``, verify-claims)
    comparisons_kept: int
    launches_added: int = 0  # launch summaries (tuner_launches) of noise profiles
    launches_kept: int = 0
    upgraded_from: str | None = None  # the target's revision when the merge (would) migrate it

    @property
    def changed(self) -> bool:
        """Whether the merge wrote (or, dry, would write) anything."""
        return bool(self.comparisons_added or self.launches_added) or any(
            _changed(s) for s in self.studies
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "changed": self.changed}


def _changed(s: StudyMerge) -> bool:
    tuner = s.new or s.updated or s.trials_added or s.trials_replaced or s.comparisons_added
    return bool(tuner or s.optuna.trials_added or s.optuna.trials_finished)


def source_url(text: str) -> str:
    """``text`` as a database URL: a URL as given, a plain path as ``sqlite:///`` that path."""
    if "://" in text:
        return text
    return "sqlite:///" + str(Path(text).expanduser().resolve())


def merge_databases(
    source: str, target: str, *, rename_suffix: str | None = None, dry_run: bool = False
) -> MergeSummary:
    """Merge database ``source`` (a URL, or a SQLite file's path) into database URL ``target``.

    The target is migrated to the head revision first (not in a dry run, which writes nothing
    and plans against the older tables as they are; either way ``upgraded_from`` says so).
    Raises UsageError for a source that is missing, unreadable or holds no tuner tables, for a
    bad ``rename_suffix``, and for studies that cannot be merged (see
    :mod:`tuner.db.merge_plan`), before anything is written; StorageError for a source not at
    the head revision or a database that fails.
    """
    src = source_url(source)
    suffix = None if rename_suffix is None else check_suffix(rename_suffix)
    src_file, dst_file = (
        None if f is None else f.resolve() for f in map(sqlite_file, (src, target))
    )
    if src_file is not None and not src_file.is_file():
        what = "is not a file" if src_file.exists() else "does not exist"
        raise UsageError(
            f"source database {src_file} {what}",
            hint="pass the SQLite file a study wrote (its $TUNER_DB_URL), or a database URL",
        )
    if (src_file is not None and src_file == dst_file) or src == target:
        raise UsageError(f"source and target are the same database ({safe_url(target)})")
    # The source must not change, not even by the WAL switch tuner's engines make.
    engine_kwargs = {} if src_file is None else read_only(src_file)
    data = _read_source(src, src_file, engine_kwargs)
    before = None
    if dst_file is None or dst_file.exists():  # a damaged target is not written to
        migrate.check_integrity(target)
        before = migrate.current_revision(target)
    with merge_optuna.open_storage(
        "sqlite://" if src_file else src, engine_kwargs, create=False
    ) as from_optuna:
        if dry_run or before != migrate.head_revision():
            # Planned against the target as it is first: a refused merge leaves it untouched,
            # not even migrated. (At the head, the merge's own plan refuses before it writes.)
            plan, merged = _dry_run(data, target, dst_file, from_optuna, suffix)
        if not dry_run:
            plan, merged = _merge(data, target, from_optuna, suffix)
    return MergeSummary(
        source=safe_url(src),
        target=safe_url(target),
        dry_run=dry_run,
        studies=tuple(_summary(p, merged[p.name]) for p in plan.studies),
        comparisons_added=sum(1 for _c, owner in plan.comparisons if owner is None),
        comparisons_kept=plan.unlinked_kept,
        launches_added=len(plan.launches),
        launches_kept=plan.launches_kept,
        upgraded_from=before if before not in (None, migrate.head_revision()) else None,
    )


def _merge(
    data: Source, target: str, from_optuna: RDBStorage | None, suffix: str | None
) -> tuple[Plan, dict[str, OptunaMerge]]:
    migrate.upgrade(target)
    kwargs = optuna_engine_kwargs(target)
    engine = make_engine(target)
    try:
        with merge_optuna.open_storage(target, kwargs, create=False) as to_optuna:
            names = merge_optuna.study_names(to_optuna)
        with session_scope(engine) as s:
            plan = _plan_merge(data, TargetView(s, names), suffix)
            apply_plan(s, plan, data.requests)
    finally:
        engine.dispose()
    wanted = merge_optuna.study_names(from_optuna) & {
        p.source.optuna_study_name for p in plan.studies
    }
    try:
        with merge_optuna.open_storage(target, kwargs, create=bool(wanted)) as to_optuna:
            merged = _optuna(from_optuna, to_optuna, plan, dry_run=False)
    except StorageError as e:
        raise StorageError(
            f"tuner's tables are merged, but Optuna's are not: {e.message}",
            hint="fix the cause and run the same merge again: it adds only what is missing",
        ) from e
    return plan, merged


def _dry_run(
    data: Source,
    target: str,
    dst_file: Path | None,
    from_optuna: RDBStorage | None,
    suffix: str | None,
) -> tuple[Plan, dict[str, OptunaMerge]]:
    """The plan against the target as it is, without creating or migrating anything."""
    if dst_file is not None and not dst_file.exists():
        plan = _plan_merge(data, TargetView(None, ()), suffix)
        return plan, _optuna(from_optuna, None, plan, dry_run=True)
    current = migrate.current_revision(target)
    fresh = current is None
    older = current in SAME_MERGED_COLUMNS  # planned as it is: the merge would migrate it
    if not fresh and not older:
        migrate.ensure_current(target)
    kwargs = optuna_engine_kwargs(target)
    engine = make_engine(target)
    try:
        with (
            merge_optuna.open_storage(target, kwargs, create=False) as to_optuna,
            Session(engine) as s,
        ):
            names = merge_optuna.study_names(to_optuna)
            view = TargetView(None if fresh else s, names, launches=not older)
            plan = _plan_merge(data, view, suffix)
            merged = _optuna(from_optuna, to_optuna, plan, dry_run=True)
            s.rollback()
    except sa_exc.SQLAlchemyError as e:
        raise storage_error(e, target) from e
    finally:
        engine.dispose()
    return plan, merged


def _optuna(
    from_optuna: RDBStorage | None, to_optuna: RDBStorage | None, plan: Plan, *, dry_run: bool
) -> dict[str, OptunaMerge]:
    return {
        p.name: merge_optuna.merge_study(
            from_optuna, to_optuna, p.source.optuna_study_name, p.optuna_name, dry_run=dry_run
        )
        for p in plan.studies
    }


def _summary(p: StudyPlan, optuna: OptunaMerge) -> StudyMerge:
    return StudyMerge(
        name=p.source.name,
        merged_as=p.name,
        new=p.target is None,
        updated=p.refresh,
        trials_added=len(p.add),
        trials_replaced=len(p.replace),
        trials_kept=p.kept,
        comparisons_added=p.comparisons_added,
        comparisons_kept=p.comparisons_kept,
        optuna=optuna,
    )


# The source is merge's SOURCE argument, not --storage (the target).
_SOURCE_HINT = (
    f"pass as SOURCE the SQLite file a study wrote, or a database URL, e.g. {URL_EXAMPLES}"
)


def _read_source(url: str, path: Path | None, engine_kwargs: dict[str, Any]) -> Source:
    """All of the source's tuner rows, after checking its revision."""
    where = safe_url(url)
    engine = create_engine("sqlite://", **engine_kwargs) if path else make_engine(url, _SOURCE_HINT)
    try:
        with engine.connect() as connection:
            if problems := migrate.damage(connection):
                raise migrate.damaged(f"source database {where}", problems)
            tables = inspect(connection).get_table_names()
            revision = migrate.revision_of(connection)
        _check_revision(where, url, revision, tables)
        with Session(engine) as s:
            studies = list(
                s.scalars(select(StudyModel).order_by(StudyModel.created_at, StudyModel.id))
            )
            trials: dict[int, list[TrialModel]] = {}
            for t in s.scalars(select(TrialModel).order_by(TrialModel.study_id, TrialModel.number)):
                trials.setdefault(t.study_id, []).append(t)
            comparisons = list(s.scalars(select(ComparisonModel).order_by(ComparisonModel.id)))
            launches = (
                list(s.scalars(select(LaunchModel).order_by(LaunchModel.id)))
                if LaunchModel.__tablename__ in tables
                else []
            )
            requests = (
                {r.trial_id: r.windows for r in s.scalars(select(TrialRequestsModel))}
                if TrialRequestsModel.__tablename__ in tables
                else {}
            )
    except sa_exc.SQLAlchemyError as e:
        if path is None:
            raise storage_error(e, url, _SOURCE_HINT) from e
        text = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
        if not_sqlite(url) is not None:
            text = "it is not a SQLite database"
        raise UsageError(
            f"cannot read source database {path}: {text}",
            hint="pass a SQLite file written by tuner; on read-only media, copy it off first",
        ) from e
    finally:
        engine.dispose()
    return Source(studies, trials, comparisons, launches, requests)


# Older revisions whose studies, trials and comparisons tables are those of the head: a source
# before 0002 has no tuner_trial_requests (per-request records) to copy, one before 0003 no
# tuner_launches and brings no launch summaries.
SAME_MERGED_COLUMNS = frozenset({"0001", "0002"})


def _check_revision(where: str, url: str, revision: str | None, tables: list[str]) -> None:
    if revision is None:
        ours = [t for t in tables if t.startswith(TABLE_PREFIX)]
        raise UsageError(
            f"source database {where} has no tuner tables"
            + (f" (only {', '.join(ours)}, without a revision)" if ours else ""),
            hint="is it the file a study wrote? `tuner studies --storage SOURCE` lists its studies",
        )
    head = migrate.head_revision()
    if revision == head or revision in SAME_MERGED_COLUMNS:
        return
    if revision in migrate.known_revisions():
        raise StorageError(
            f"source database {where} is at tuner schema revision {revision}, this tuner at {head}",
            hint=f"upgrade it first (a copy, if it must stay as it is): "
            f"tuner db upgrade --storage {where}",
        )
    raise StorageError(
        f"source database {where} is at tuner schema revision {revision}, unknown to this tuner",
        hint="a newer tuner wrote it: upgrade tuner, then merge",
    )
