"""``tuner db merge``: bring the studies of another database (the SQLite file a GPU host without
network wrote) into this one, the store that ``tuner serve`` and ``tuner best`` read.

Every tuner study with its trials and comparisons, the comparisons of no study, and the launch
summaries of the noise profiles (``tuner_launches``) are copied in one transaction (all or
nothing); then each study's Optuna study (:mod:`merge_optuna`).
Merging is idempotent: what the target holds already is left alone, so merging the same file
twice changes nothing the second time, and merging a later copy of it adds what is new. How
rows are matched, and when a study is refused, is in :mod:`tuner.db.merge_plan`.

The source is only read, in one snapshot: a SQLite file is opened read-only, and it is never
migrated (upgrading it is its owner's decision, and a read-only copy from a customer's machine
should stay as it came). A source at an older revision whose studies, trials and comparisons
tables are the head's (:data:`SAME_MERGED_COLUMNS`) is read as it is; one at a revision this
tuner does not know is refused. A dry run only reads the target too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, false, inspect, select, text, update
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
    trials_replaced: int  # RUNNING or interrupted in the target, further along in the source
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
    :mod:`tuner.db.merge_plan`), before anything is written; StorageError for a source at a
    revision this tuner does not know, a target it cannot migrate (:func:`_target_revision`)
    or a database that fails.
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
    before = _target_revision(target, dst_file, dry_run)
    with merge_optuna.open_storage(
        "sqlite://" if src_file else src, engine_kwargs, create=False
    ) as from_optuna:
        if dry_run or before != migrate.head_revision():
            # Planned against the target as it is first: a refused merge leaves it untouched,
            # not even migrated. (At the head, the merge's own plan refuses before it writes.)
            plan, merged = _dry_run(data, target, dst_file, before, from_optuna, suffix)
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


def _target_revision(target: str, dst_file: Path | None, dry_run: bool) -> str | None:
    """The target's tuner revision; None for a SQLite file that is missing or empty (0 bytes:
    not opened, since opening it writes SQLite's header) or a database without tuner's tables.

    Raises StorageError for a target that is damaged (not written to), whose alembic_version
    is another application's, that is at a revision this tuner does not know, or that has
    tuner tables without a revision (migrating them would fail on the tables it finds). A dry
    run opens a SQLite file read-only: it writes nothing, not even the WAL switch.
    """
    if _blank(dst_file):
        return None
    engine = _target_engine(target, dst_file if dry_run else None)
    try:
        with engine.connect() as connection:
            if problems := migrate.damage(connection):
                raise migrate.damaged(f"database {safe_url(target)}", problems)
            migrate.check_alembic_version(connection, target)
            revision = migrate.revision_of(connection)
            tables = inspect(connection).get_table_names()
    except sa_exc.SQLAlchemyError as e:
        raise storage_error(e, target) from e
    finally:
        engine.dispose()
    if revision is None:
        migrate.check_leftovers(target, tables)
    migrate.check_known(target, revision)
    return revision


def _blank(path: Path | None) -> bool:
    """Whether SQLite file ``path`` holds nothing: it is missing, or empty (0 bytes). Either is
    planned against as an empty database without being opened: opening writes SQLite's header
    (tuner.doctor.checks.blank_sqlite_file says the same for the commands that only read)."""
    return path is not None and (not path.exists() or (path.is_file() and path.stat().st_size == 0))


def _target_engine(target: str, read_only_file: Path | None) -> Engine:
    """The target's engine: tuner's (:func:`make_engine`), or one that opens SQLite file
    ``read_only_file`` read-only, for what must not write."""
    if read_only_file is None:
        return make_engine(target)
    return create_engine("sqlite://", **read_only(read_only_file))


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
            _lock(s)
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


# Any constant will do: the PostgreSQL advisory lock a merge holds while it plans and writes.
_MERGE_LOCK = 0x6D65726765  # "merge"


def _lock(s: Session) -> None:
    """Take the target's lock for merging before planning, so that a merge beside this one
    plans only once this one has committed (planned side by side, both added the same
    comparisons and launches). On SQLite, the write lock: pysqlite begins a transaction only at
    the first write, so a write that changes nothing takes it, as Repository's
    ``_locked_spec`` does. On PostgreSQL, an advisory lock until the transaction ends."""
    dialect = s.get_bind().dialect.name
    if dialect == "sqlite":
        s.execute(update(StudyModel).where(false()).values(updated_at=StudyModel.updated_at))
    elif dialect == "postgresql":
        s.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MERGE_LOCK})


def _dry_run(
    data: Source,
    target: str,
    dst_file: Path | None,
    current: str | None,
    from_optuna: RDBStorage | None,
    suffix: str | None,
) -> tuple[Plan, dict[str, OptunaMerge]]:
    """The plan against the target at revision ``current`` as it is, reading only: nothing is
    created or migrated, and a SQLite file is opened read-only."""
    if _blank(dst_file):
        plan = _plan_merge(data, TargetView(None, ()), suffix)
        return plan, _optuna(from_optuna, None, plan, dry_run=True)
    fresh = current is None
    older = current in SAME_MERGED_COLUMNS  # planned as it is: the merge would migrate it
    if dst_file is None:
        url, kwargs = target, optuna_engine_kwargs(target)
    else:
        url, kwargs = "sqlite://", read_only(dst_file)
    engine = _target_engine(target, dst_file)
    try:
        with (
            merge_optuna.open_storage(url, kwargs, create=False) as to_optuna,
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
    """All of the source's tuner rows, after checking its revision, read in one snapshot."""
    where = safe_url(url)
    engine = create_engine("sqlite://", **engine_kwargs) if path else make_engine(url, _SOURCE_HINT)
    try:
        with _snapshot(engine) as connection:
            if problems := migrate.damage(connection):
                raise migrate.damaged(f"source database {where}", problems)
            tables = inspect(connection).get_table_names()
            _check_revision(where, migrate.revision_of(connection), tables)
            with Session(connection) as s:
                return _rows(s, tables)
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


@contextmanager
def _snapshot(engine: Engine) -> Iterator[Connection]:
    """A connection whose reads all see the database as one moment left it. Read table by
    table while a study wrote it, a source gave a comparison of a study that came after the
    studies were read. pysqlite begins no transaction for reads, so SQLite gets an explicit
    BEGIN (its first read fixes the snapshot); PostgreSQL gets REPEATABLE READ."""
    with engine.connect() as connection:
        if connection.dialect.name == "sqlite":
            connection.exec_driver_sql("BEGIN")
        else:
            connection.execution_options(isolation_level="REPEATABLE READ")
        yield connection


def _rows(s: Session, tables: list[str]) -> Source:
    """The source's rows, read in ``s``; ``tables``: the tables it has."""
    studies = list(s.scalars(select(StudyModel).order_by(StudyModel.created_at, StudyModel.id)))
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
    return Source(studies, trials, comparisons, launches, requests)


# Older revisions whose studies, trials and comparisons tables are those of the head: a source
# before 0002 has no tuner_trial_requests (per-request records) to copy, one before 0003 no
# tuner_launches and brings no launch summaries. Every older revision is one of them (a test
# holds it so): a migration that changes those tables must teach the merge to read the old ones.
SAME_MERGED_COLUMNS = frozenset({"0001", "0002"})


def _check_revision(where: str, revision: str | None, tables: list[str]) -> None:
    if revision is None:
        ours = [t for t in tables if t.startswith(TABLE_PREFIX)]
        raise UsageError(
            f"source database {where} has no tuner tables"
            + (f" (only {', '.join(ours)}, without a revision)" if ours else ""),
            hint="is it the file a study wrote? `tuner studies --storage SOURCE` lists its studies",
        )
    if revision != migrate.head_revision() and revision not in SAME_MERGED_COLUMNS:
        raise StorageError(
            f"source database {where} is at tuner schema revision {revision}, unknown to this "
            "tuner",
            hint="a newer tuner wrote it: upgrade tuner, then merge",
        )
