"""tuner's own tables, as SQLAlchemy 2 typed ORM models.

They share a database with Optuna's storage, so every table carries the ``tuner_`` prefix and
the migration history lives in its own version table (:data:`VERSION_TABLE`); Alembic's
autogenerate ignores everything without the prefix. Types are kept portable between SQLite
and PostgreSQL: JSON via :class:`sqlalchemy.JSON`, timestamps as unix seconds in floats, and
statuses as short strings validated in Python (a database enum would need a migration for
every new value).

Nothing outside :mod:`tuner.db` sees these classes: the repository hands out frozen rows.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

TABLE_PREFIX = "tuner_"
VERSION_TABLE = "tuner_alembic_version"

# Named constraints make migrations reproducible across backends (and are required for
# Alembic's batch mode on SQLite to find them again).
_NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# JSON where Python None means SQL NULL (not the JSON literal ``null``).
_NULLABLE_JSON = JSON(none_as_null=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=_NAMING)


class StudyModel(Base):
    __tablename__ = "tuner_studies"
    __table_args__ = (UniqueConstraint("name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    optuna_study_name: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(512))
    model_source: Mapped[str | None] = mapped_column(Text, nullable=True)
    gpu: Mapped[str] = mapped_column(String(64))
    workload: Mapped[str] = mapped_column(String(255))
    objective: Mapped[str] = mapped_column(String(64))
    slo: Mapped[dict[str, Any]] = mapped_column(JSON)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    emulated: Mapped[bool] = mapped_column(Boolean)
    vllm_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    notes: Mapped[str] = mapped_column(Text)
    n_trials_requested: Mapped[int | None] = mapped_column(Integer, nullable=True)


class TrialModel(Base):
    __tablename__ = "tuner_trials"
    __table_args__ = (
        UniqueConstraint("study_id", "number"),
        Index("ix_tuner_trials_study_status", "study_id", "status"),
        Index("ix_tuner_trials_provenance", "model", "gpu_name", "workload"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("tuner_studies.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    phase: Mapped[str] = mapped_column(String(16))
    is_baseline: Mapped[bool] = mapped_column(Boolean)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    config_label: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    failure_class: Mapped[str | None] = mapped_column(String(32), nullable=True)
    failure_detail: Mapped[str] = mapped_column(Text)
    log_tail: Mapped[str] = mapped_column(Text)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    windows: Mapped[list[Any]] = mapped_column(JSON)
    memory: Mapped[dict[str, Any]] = mapped_column(JSON)
    server: Mapped[dict[str, Any] | None] = mapped_column(_NULLABLE_JSON, nullable=True)
    server_metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    objective_values: Mapped[list[Any] | None] = mapped_column(_NULLABLE_JSON, nullable=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Provenance: the whole record as JSON, and the parts worth querying as columns.
    provenance: Mapped[dict[str, Any] | None] = mapped_column(_NULLABLE_JSON, nullable=True)
    gpu_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    gpu_uuid: Mapped[str | None] = mapped_column(String(128), nullable=True)
    driver_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    vllm_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    model: Mapped[str | None] = mapped_column(String(512), nullable=True)
    workload: Mapped[str | None] = mapped_column(String(255), nullable=True)
    emulated: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    effective_backend: Mapped[str | None] = mapped_column(String(64), nullable=True)
    kv_cache_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    hostname: Mapped[str | None] = mapped_column(String(255), nullable=True)


class ComparisonModel(Base):
    __tablename__ = "tuner_comparisons"
    __table_args__ = (Index("ix_tuner_comparisons_lookup", "model", "gpu", "workload"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[float] = mapped_column(Float)
    model: Mapped[str] = mapped_column(String(512))
    gpu: Mapped[str] = mapped_column(String(64))
    workload: Mapped[str] = mapped_column(String(255))
    a_config: Mapped[dict[str, Any]] = mapped_column(JSON)
    b_config: Mapped[dict[str, Any]] = mapped_column(JSON)
    repeats: Mapped[int] = mapped_column(Integer)
    results: Mapped[Any] = mapped_column(JSON)
    verdicts: Mapped[Any] = mapped_column(JSON)
    provenance: Mapped[dict[str, Any] | None] = mapped_column(_NULLABLE_JSON, nullable=True)
    study_id: Mapped[int | None] = mapped_column(
        ForeignKey("tuner_studies.id", ondelete="SET NULL"), nullable=True
    )


class TrialRequestsModel(Base):
    """The per-request records of a trial, apart from its row so that listing trials stays
    light: ``windows`` holds one list per measurement window, each request as
    ``[start_s, ttft_s, e2e_s, prompt_tokens, output_tokens, error, [gap_us, ...]]`` (ITL gaps
    as integer microseconds)."""

    __tablename__ = "tuner_trial_requests"

    trial_id: Mapped[int] = mapped_column(
        ForeignKey("tuner_trials.id", ondelete="CASCADE"), primary_key=True
    )
    windows: Mapped[list[Any]] = mapped_column(JSON)


# The columns of a launch's noise key, in the order of its index.
LAUNCH_KEY = ("host", "gpu", "vllm_version", "model", "workload", "windows", "placement")


class LaunchModel(Base):
    """One server launch's summary for the noise profile of its key (host, GPU, vLLM version,
    model, workload, windows per launch, CPU placement): the log of every window value of the
    compared metrics, ``values = {metric: [log value, ...]}``, which configuration it ran, what
    measured it (``source``: calibrate, compare, claim, confirm) and ``run``, the comparison or
    study it belonged to (so that a comparison's own launches are not counted twice)."""

    __tablename__ = "tuner_launches"
    __table_args__ = (Index("ix_tuner_launches_key", *LAUNCH_KEY),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[float] = mapped_column(Float)
    host: Mapped[str] = mapped_column(String(255))
    gpu: Mapped[str] = mapped_column(String(255))
    vllm_version: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(512))
    workload: Mapped[str] = mapped_column(String(255))
    windows: Mapped[int] = mapped_column(Integer)
    # tuner.runner.placement's mode the launch ran with: "off" or "pinned" (noise differs).
    placement: Mapped[str] = mapped_column(String(16), server_default="off")
    config_label: Mapped[str] = mapped_column(Text)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    is_defaults: Mapped[bool] = mapped_column(Boolean)
    source: Mapped[str] = mapped_column(String(32))
    run: Mapped[str] = mapped_column(String(255))
    values: Mapped[dict[str, Any]] = mapped_column(JSON)
    wall_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    startup_s: Mapped[float | None] = mapped_column(Float, nullable=True)
