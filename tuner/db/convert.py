"""ORM models to frozen rows, and domain results onto ORM models."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from tuner.db import codec
from tuner.db.models import Base, StudyModel, TrialModel
from tuner.db.rows import FREE, StudyRow, TrialPhase, TrialRow
from tuner.domain import FailureClass, ServingConfig, TrialResult, TrialStatus

R = TypeVar("R")


def storable_text(text: str) -> str:
    """``text`` with NUL characters as U+FFFD: PostgreSQL's text type cannot hold NUL, and a
    crashed server's log may contain some. Same on every backend, so rows read back alike."""
    return text.replace("\x00", "\ufffd")


def values(row: Base, skip: Iterable[str] = ()) -> dict[str, Any]:
    """Every column of ``row`` but ``skip``, by column name."""
    left_out = set(skip)
    return {c.key: getattr(row, c.key) for c in row.__table__.columns if c.key not in left_out}


def frozen_row(model: Base, row_type: type[R], **extra: Any) -> R:
    """A frozen row from an ORM object, each field read by its type as a JSON record is
    (:func:`codec.decode`) from the column of the same name; ``extra`` gives the others
    (counts, names kept elsewhere)."""
    return codec.decode(row_type, {**values(model), **extra})


def study_row(
    m: StudyModel,
    counts: Mapping[str, Mapping[str, int]],
    free: Mapping[FailureClass, int] | None = None,
) -> StudyRow:
    """``counts``: trials per phase value, then per status value; missing ones count 0.
    ``free``: the search trials that used no place in the budget (:func:`budget_free`)."""
    search = counts.get(TrialPhase.SEARCH.value, {})
    confirm = counts.get(TrialPhase.CONFIRM.value, {})
    return frozen_row(
        m,
        StudyRow,
        trial_counts={s: search.get(s.value, 0) for s in TrialStatus},
        confirmation_counts={s: confirm.get(s.value, 0) for s in TrialStatus},
        free_counts={f: (free or {}).get(f, 0) for f in FREE},
    )


def trial_row(m: TrialModel, study_name: str) -> TrialRow:
    return frozen_row(m, TrialRow, study_name=study_name, failure=m.failure_class)


def reset_trial(
    m: TrialModel, config: ServingConfig, phase: str, is_baseline: bool, now: float
) -> None:
    """Make ``m`` a fresh RUNNING trial of ``config``: every outcome column cleared (each
    nullable one to None)."""
    for column in m.__table__.columns:
        if column.nullable:
            setattr(m, column.key, None)
    m.phase, m.is_baseline = phase, is_baseline
    m.config, m.config_label = config.to_dict(), config.label()
    m.status = TrialStatus.RUNNING.value
    m.failure_detail = m.log_tail = ""
    m.metrics, m.windows, m.memory, m.server_metrics = {}, [], {}, {}
    m.started_at = now


def apply_result(m: TrialModel, result: TrialResult, now: float) -> None:
    """Copy a finished result onto ``m``: JSON columns and the provenance columns."""
    m.status = result.status.value
    m.failure_class = None if result.failure is None else result.failure.value
    m.failure_detail = storable_text(result.failure_detail)
    m.log_tail = storable_text(result.log_tail)
    m.metrics = codec.encode(result.metrics)
    m.windows = codec.encode(result.windows)
    m.memory = codec.encode(result.memory)
    m.server = codec.encode(result.server)
    m.server_metrics = codec.encode(result.server_metrics)
    m.provenance = codec.encode(result.provenance)
    if result.started_at is not None:
        m.started_at = result.started_at
    m.finished_at = result.finished_at if result.finished_at is not None else now
    prov, server = result.provenance, result.server
    if prov is not None:
        m.gpu_name, m.gpu_uuid = prov.gpu_name, prov.gpu_uuid
        m.driver_version, m.vllm_version = prov.driver_version, prov.vllm_version
        m.model, m.workload = prov.model, prov.workload
        m.emulated, m.hostname = prov.emulated, prov.hostname or None
    if server is not None:
        m.vllm_version = m.vllm_version or server.vllm_version
        m.effective_backend = server.effective_backend
        m.kv_cache_tokens = server.kv_cache_tokens
