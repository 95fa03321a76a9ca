"""Queueing a study from a spec sent to the API, validated by the same rules as a spec file.

The body is a spec file's TOML structure as JSON (``{"study": {...}, "space": {...}, ...}``,
see :mod:`tuner.spec.study`). Model, GPU, workload, objective and SLO must resolve, and the search
space must be buildable, before anything is written; the study is then recorded as
``queued`` for a worker to run. Local paths are refused: the API must not let a caller probe
the server's file system, and a worker may not share it anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.catalog.gpus import get_gpu
from tuner.catalog.models import resolve_model
from tuner.compose import resolve_slo, resolve_workload
from tuner.db.repository import Repository
from tuner.db.rows import StudyRow, StudyStatus
from tuner.domain.workload import format_slo
from tuner.errors import UsageError
from tuner.load.workloads import TRACE_PREFIX
from tuner.space import SearchSpace
from tuner.spec.study import (
    StudySpec,
    spec_from_mapping,  # the spec file's own rules
)

WHERE = "request body"
NAME_MAX = 255  # the column's width

EXAMPLE: dict[str, Any] = {
    "study": {
        "name": "ernie-h200-chat",
        "model": "ernie-0.3b",
        "gpu": "h200",
        "workload": "chat",
        "objective": "balanced",
        "trials": 16,
        "slo": "ttft_p99=500ms,e2e_p99=10s",
    },
    "space": {"params": ["max_num_seqs", "gpu_memory_utilization"]},
}


def parse(body: Mapping[str, Any]) -> StudySpec:
    """A validated spec; raises UsageError (SpecError) saying what is wrong."""
    if "study" not in body:
        raise UsageError(
            f"{WHERE}: a study spec needs a 'study' object with model, gpu and workload",
            hint='e.g. {"study": {"model": "ernie-0.3b", "gpu": "h200", "workload": "chat"}}',
        )
    spec = spec_from_mapping(body, "", WHERE)
    if spec.model.startswith(("/", ".", "~")):
        raise UsageError(
            f"{WHERE}: model {spec.model!r} is a local path, which the API does not accept",
            hint="name a catalog alias (GET /v1/models) or a hub id (org/name)",
        )
    if spec.workload.startswith(TRACE_PREFIX):
        raise UsageError(
            f"{WHERE}: trace workloads read a file on the machine that runs the study",
            hint="queue a preset workload here, or start a trace study with `tuner run`",
        )
    name = spec.study_name()
    if not name.strip() or len(name) > NAME_MAX:
        raise UsageError(
            f"{WHERE}: study name {name!r} must be 1 to {NAME_MAX} characters",
            hint="set study.name",
        )
    resolve_model(spec.model)
    space_of(spec)
    return spec


def space_of(spec: StudySpec) -> SearchSpace:
    """The study's search space: checks knobs, choices and the enqueued configurations."""
    model, gpu, workload = resolve_model(spec.model), get_gpu(spec.gpu), resolve_workload(spec)
    resolve_slo(spec)
    space = SearchSpace(
        model, gpu, workload, params=spec.params, choices=spec.choices, fixed=spec.fixed
    )
    for item in spec.enqueue:
        problems = space.violations(space.config_from(item))
        if problems:
            raise UsageError(
                f"{WHERE}: enqueued configuration {item} is impossible: {'; '.join(problems)}",
                hint="fix or drop that enqueue entry",
            )
    return space


def queue(repo: Repository, spec: StudySpec) -> StudyRow:
    """Record ``spec`` as a queued study. UsageError if its name is taken."""
    model = resolve_model(spec.model)
    gpu = get_gpu(spec.gpu)
    slo = resolve_slo(spec)
    return repo.create_study(
        name=spec.study_name(),
        optuna_study_name=spec.study_name(),
        model=model.alias,
        model_source=model.source,
        gpu=gpu.name,
        workload=resolve_workload(spec).name,
        objective=spec.objective.value,
        slo={k: v for k, v in vars(slo).items() if v is not None},
        spec=spec.to_dict(),
        emulated=False,
        vllm_version=None,
        n_trials_requested=spec.trials,
        notes=spec.notes or f"queued through the API (SLO {format_slo(slo)})",
        status=StudyStatus.QUEUED,
    )
