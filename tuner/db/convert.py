"""ORM models to frozen rows, and domain results onto ORM models."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from sqlalchemy import inspect as sa_inspect

from tuner.db import codec
from tuner.db.models import ComparisonModel, LaunchModel, StudyModel, TrialModel
from tuner.db.rows import ComparisonRow, LaunchRow, StudyRow, StudyStatus, TrialPhase, TrialRow
from tuner.domain import FailureClass, ServingConfig, TrialResult, TrialStatus

R = TypeVar("R")


def storable_text(text: str) -> str:
    """``text`` with NUL characters as U+FFFD: PostgreSQL's text type cannot hold NUL, and a
    crashed server's log may contain some. Same on every backend, so rows read back alike."""
    return text.replace("\x00", "\ufffd")


def _row(model: Any, row_type: type[R], **converted: Any) -> R:
    """A frozen row from an ORM object: every row field that is a mapped column of the same
    name is copied as it is; ``converted`` gives the others (decoded JSON, enums, counts)."""
    columns = {c.key for c in sa_inspect(type(model)).column_attrs}
    fields = {f.name for f in dataclasses.fields(row_type)}  # type: ignore[arg-type]
    copied = {name: getattr(model, name) for name in (fields & columns) - converted.keys()}
    return row_type(**copied, **converted)


def study_row(m: StudyModel, counts: Mapping[str, Mapping[str, int]]) -> StudyRow:
    """``counts``: trials per phase value, then per status value; missing ones count 0."""
    search = counts.get(TrialPhase.SEARCH.value, {})
    confirm = counts.get(TrialPhase.CONFIRM.value, {})
    return _row(
        m,
        StudyRow,
        status=StudyStatus(m.status),
        slo=dict(m.slo),
        spec=dict(m.spec),
        trial_counts={s: search.get(s.value, 0) for s in TrialStatus},
        confirmation_counts={s: confirm.get(s.value, 0) for s in TrialStatus},
    )


def trial_row(m: TrialModel, study_name: str) -> TrialRow:
    return _row(
        m,
        TrialRow,
        study_name=study_name,
        phase=TrialPhase(m.phase),
        config=ServingConfig.from_dict(m.config),
        status=TrialStatus(m.status),
        failure=None if m.failure_class is None else FailureClass(m.failure_class),
        metrics=codec.decode_metrics(m.metrics),
        windows=tuple(codec.decode_window(w) for w in m.windows),
        memory=codec.decode_memory(m.memory),
        server=codec.decode_server(m.server),
        server_metrics={k: float(v) for k, v in m.server_metrics.items()},
        provenance=codec.decode_provenance(m.provenance),
        objective_values=(
            None if m.objective_values is None else tuple(float(v) for v in m.objective_values)
        ),
    )


def comparison_row(m: ComparisonModel) -> ComparisonRow:
    return _row(
        m,
        ComparisonRow,
        a_config=ServingConfig.from_dict(m.a_config),
        b_config=ServingConfig.from_dict(m.b_config),
        provenance=codec.decode_provenance(m.provenance),
    )


def launch_row(m: LaunchModel) -> LaunchRow:
    return _row(
        m,
        LaunchRow,
        config=ServingConfig.from_dict(m.config),
        values={str(k): tuple(float(v) for v in vs) for k, vs in (m.values or {}).items()},
    )


def reset_trial(
    m: TrialModel, config: ServingConfig, phase: str, is_baseline: bool, now: float
) -> None:
    """Make ``m`` a fresh RUNNING trial of ``config``: every outcome column cleared."""
    m.phase = phase
    m.is_baseline = is_baseline
    m.config = config.to_dict()
    m.config_label = config.label()
    m.status = TrialStatus.RUNNING.value
    m.failure_class = None
    m.failure_detail = ""
    m.log_tail = ""
    m.metrics, m.windows, m.memory, m.server_metrics = {}, [], {}, {}
    m.server = m.objective_values = m.provenance = None
    m.score = m.finished_at = None
    m.started_at = now
    m.gpu_name = m.gpu_uuid = m.driver_version = m.vllm_version = None
    m.model = m.workload = m.effective_backend = m.hostname = None
    m.emulated = None
    m.kv_cache_tokens = None


def apply_result(m: TrialModel, result: TrialResult, now: float) -> None:
    """Copy a finished result onto ``m``: JSON columns and the provenance columns."""
    m.status = result.status.value
    m.failure_class = None if result.failure is None else result.failure.value
    m.failure_detail = storable_text(result.failure_detail)
    m.log_tail = storable_text(result.log_tail)
    m.metrics = codec.encode(result.metrics)
    m.windows = codec.encode(result.windows)
    m.memory = codec.encode(result.memory)
    m.server = None if result.server is None else codec.encode(result.server)
    m.server_metrics = codec.encode(result.server_metrics)
    if result.started_at is not None:
        m.started_at = result.started_at
    m.finished_at = result.finished_at if result.finished_at is not None else now
    prov, server = result.provenance, result.server
    m.provenance = None if prov is None else codec.encode(prov)
    if prov is not None:
        m.gpu_name, m.gpu_uuid = prov.gpu_name, prov.gpu_uuid
        m.driver_version, m.vllm_version = prov.driver_version, prov.vllm_version
        m.model, m.workload = prov.model, prov.workload
        m.emulated, m.hostname = prov.emulated, prov.hostname or None
    if server is not None:
        m.vllm_version = m.vllm_version or server.vllm_version
        m.effective_backend = server.effective_backend
        m.kv_cache_tokens = server.kv_cache_tokens
