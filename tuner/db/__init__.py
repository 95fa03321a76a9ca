"""tuner's own storage, beside Optuna's in the same database.

models (tables), session (engines, transactions, error translation), migrate (Alembic, own
version table), repository (reads and writes in domain types), rows (what it returns), codec
and convert (JSON and ORM conversions)."""

from typing import TYPE_CHECKING

from tuner import face

if TYPE_CHECKING:
    from tuner.db.codec import decode_result, encode, numbers_back
    from tuner.db.merge import MergeSummary, StudyMerge, merge_databases
    from tuner.db.merge_plan import study_run_tag
    from tuner.db.migrate import (
        check_integrity,
        check_leftovers,
        current_revision,
        ensure_current,
        ensure_ready,
        head_revision,
        holdings,
        upgrade,
    )
    from tuner.db.models import StudyModel
    from tuner.db.names import STUDY_NAME_PATTERN, check_study_name, name_problem
    from tuner.db.repository import RUN_OWNER, Repository, plan_back
    from tuner.db.rows import (
        FREE_NOTE,
        USED_NOTE,
        ComparisonRow,
        StudyRow,
        StudyStatus,
        TrialPhase,
        TrialRow,
        ruled_out_before,
    )
    from tuner.db.session import (
        default_url,
        home_expanded,
        make_engine,
        optuna_engine_kwargs,
        optuna_rdb,
        safe_url,
        sqlite_file,
        storage_error,
        with_storage,
    )

__all__ = [
    "FREE_NOTE",
    "RUN_OWNER",
    "STUDY_NAME_PATTERN",
    "USED_NOTE",
    "ComparisonRow",
    "MergeSummary",
    "Repository",
    "StudyMerge",
    "StudyModel",
    "StudyRow",
    "StudyStatus",
    "TrialPhase",
    "TrialRow",
    "check_integrity",
    "check_leftovers",
    "check_study_name",
    "current_revision",
    "decode_result",
    "default_url",
    "encode",
    "ensure_current",
    "ensure_ready",
    "head_revision",
    "holdings",
    "home_expanded",
    "make_engine",
    "merge_databases",
    "name_problem",
    "numbers_back",
    "optuna_engine_kwargs",
    "optuna_rdb",
    "plan_back",
    "ruled_out_before",
    "safe_url",
    "sqlite_file",
    "storage_error",
    "study_run_tag",
    "upgrade",
    "with_storage",
]

__getattr__, __dir__ = face(__name__)
