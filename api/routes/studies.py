"""Studies and their trials: list, detail, paginated trials, the Pareto front; queue a study,
or withdraw it before a worker takes it."""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Response

from api import queue, spec_body
from api.bounds import GPU_MAX, INT_MAX, MODEL_MAX, PAGE_MAX, STUDY_NAME_MAX, WORKLOAD_MAX
from api.deps import IndexDep, RepoDep, SettingsDep, WriteAccess
from api.errors import MALFORMED, UNAVAILABLE, ApiError, not_found, responses
from api.index import StudyIndex, StudySnapshot
from api.schemas import (
    ObjectiveOut,
    ParetoOut,
    QueuedStudyOut,
    StudyDetailOut,
    StudyListOut,
    StudyOut,
    TrialDetailOut,
    TrialOut,
    TrialPageOut,
    json_safe,
)
from tuner.db import Repository, StudyRow, StudyStatus, TrialPhase, TrialRow
from tuner.domain import TrialStatus
from tuner.errors import UsageError
from tuner.results.report.study import non_dominated
from tuner.scoring import objectives as scoring
from tuner.study import study_objective, trial_score

router = APIRouter(prefix="/v1/studies", tags=["studies"])

READS = responses({**MALFORMED, **UNAVAILABLE})
NAMED = responses({404: "no study by that name", **MALFORMED, **UNAVAILABLE})
StudyName = Annotated[
    str, Path(min_length=1, max_length=STUDY_NAME_MAX, description="the study's name")
]


def _study(repo: Repository, name: str) -> StudyRow:
    row = repo.get_study(name)
    if row is None:
        raise not_found(f"no study named {name!r}", "GET /v1/studies lists the studies")
    return row


def _scorer(index: StudyIndex, study: StudyRow) -> Any:
    snap = index.snapshot(study)
    objective = study_objective(study)

    def score(trial: TrialRow) -> float | None:
        return None if snap is None else trial_score(trial, snap.reference, objective)

    return score


@router.get("", response_model=StudyListOut, responses=READS)
def list_studies(
    repo: RepoDep,
    status: Annotated[StudyStatus | None, Query(description="only studies in this state")] = None,
    model: Annotated[str | None, Query(max_length=MODEL_MAX)] = None,
    gpu: Annotated[str | None, Query(max_length=GPU_MAX)] = None,
    workload: Annotated[
        str | None,
        Query(
            max_length=WORKLOAD_MAX,
            description="a workload's name (every study of it, whatever values it changed) or "
            "a study's workload_label (chat[turns=2]: those values only)",
        ),
    ] = None,
) -> StudyListOut:
    """All studies, newest first, with trial counts by status; optionally filtered."""
    rows = [
        s
        for s in repo.list_studies()
        if (status is None or s.status == status)
        and (model is None or model in (s.model, s.model_source))
        and (gpu is None or s.gpu == gpu.lower())
        and (workload is None or workload in (s.workload, s.workload_label))
    ]
    return StudyListOut(total=len(rows), items=[StudyOut.of(s) for s in rows])


_QUEUED = {
    "description": "queued for a worker",
    "headers": {
        "Location": {"description": "the study's URL", "schema": {"type": "string"}},
    },
}
_BODY_SCHEMA = {"type": "object", **spec_body.openapi_schema(), "examples": [queue.EXAMPLE]}


@router.post(
    "",
    response_model=QueuedStudyOut,
    status_code=201,
    dependencies=[WriteAccess],
    responses={
        201: _QUEUED,
        **responses(
            {
                400: "the body cannot be decoded (not UTF-8)",
                401: "API key missing or wrong",
                403: "the server has no API key (writes are off), or the body passes "
                "runner.extra_args, which this server does not take",
                409: "a study with that name exists",
                422: "the spec is invalid (the message says why)",
                **UNAVAILABLE,
            }
        ),
    },
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {"schema": _BODY_SCHEMA}}}
    },
)
def queue_study(
    repo: RepoDep,
    settings: SettingsDep,
    response: Response,
    body: Annotated[dict[str, Any], Body()],
) -> QueuedStudyOut:
    """Queue a study for a worker. The body is a spec file's structure as JSON (sections study,
    workload, space, enqueue, confirm, runner), checked by the spec file's rules within the
    schema below. The search space is fitted to the GPU, model and workload: a knob that cannot
    be searched there is left at vLLM's default, an enqueued configuration that cannot run is
    dropped, a fixed value the rules refuse there is left at vLLM's default, and
    ``adjustments`` lists each change; the stored spec is the fitted one. ``warnings`` says
    what will stop the study on the worker before any launch (a workload the model cannot
    hold). Knobs:
    tuner's nine typed ones and its levers (``stream_interval``, ``async_scheduling``,
    ``block_size``, ``compilation_config.cudagraph_mode``, fp8 ``quantization``, ...), each
    with the values the schema lists; any other ``vllm serve`` flag needs ``tuner run
    --search``, which checks it against the installed vLLM. ``runner.extra_args`` reach
    ``vllm serve`` on the worker as given, so they are refused (403) unless the server was
    started with ``tuner serve --allow-extra-args``."""
    try:
        parsed = queue.read(body)
    except UsageError as exc:  # SpecError included
        raise ApiError(422, "invalid_spec", exc.message, hint=exc.hint) from None
    spec = parsed.spec
    if spec.extra_args and not settings.allow_extra_args:
        raise ApiError(
            403,
            "extra_args_disabled",
            "this server does not take runner.extra_args: they reach `vllm serve` on the "
            "worker as given (--trust-remote-code would run a model repository's code there)",
            hint="leave runner.extra_args out, queue the study with `tuner run` on the worker, "
            "or start the API with `tuner serve --allow-extra-args`",
        )
    name = spec.study_name()
    if repo.get_study(name) is not None:
        raise ApiError(
            409,
            "conflict",
            f"a study named {name!r} already exists",
            hint="pick another study.name",
        )
    try:
        row = queue.queue(repo, spec)
    except UsageError as exc:  # the name is valid (parse checked it): another writer took it
        raise ApiError(409, "conflict", exc.message, hint=exc.hint) from None
    response.headers["Location"] = f"/v1/studies/{row.name}"
    return QueuedStudyOut.of(
        row, adjustments=list(parsed.adjustments), warnings=list(parsed.warnings)
    )


@router.get("/{name}", response_model=StudyDetailOut, responses=NAMED)
def get_study(repo: RepoDep, name: StudyName) -> StudyDetailOut:
    """One study with its spec and trial counts."""
    return StudyDetailOut.of(_study(repo, name))


@router.delete(
    "/{name}",
    status_code=204,
    dependencies=[WriteAccess],
    responses={
        204: {"description": "withdrawn: no worker will take it"},
        **responses(
            {
                401: "API key missing or wrong",
                403: "the server has no API key (writes are off)",
                404: "no study by that name",
                409: "a worker has taken the study (or it has run): it is not withdrawn",
                **MALFORMED,
                **UNAVAILABLE,
            }
        ),
    },
)
def withdraw_study(repo: RepoDep, name: StudyName) -> Response:
    """Withdraw a queued study before a worker takes it, freeing its name. A study a worker
    has taken is left as it is (409): what it measured stays, and stopping it is its worker's
    (Ctrl-C there records the running trial as interrupted)."""
    if repo.delete_study(name, status=StudyStatus.QUEUED):
        return Response(status_code=204)
    row = _study(repo, name)
    raise ApiError(
        409,
        "conflict",
        f"study {name!r} is {row.status.value}, not queued: only a study no worker has taken "
        "is withdrawn",
        hint="stop the worker that runs it (Ctrl-C records its running trial as interrupted)"
        if row.status in (StudyStatus.RUNNING, StudyStatus.CONFIRMING)
        else "its results stay; queue the next study under another study.name",
    )


@router.get("/{name}/trials", response_model=TrialPageOut, responses=NAMED)
def list_trials(
    repo: RepoDep,
    index: IndexDep,
    name: StudyName,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 50,
    offset: Annotated[int, Query(ge=0, le=INT_MAX)] = 0,
    state: Annotated[TrialStatus | None, Query(description="only trials in this state")] = None,
    phase: Annotated[TrialPhase | None, Query(description="search or confirm")] = None,
) -> TrialPageOut:
    """A page of the study's trials by number, with the total count matching the filter."""
    study = _study(repo, name)
    rows = repo.list_trials(name, status=state, phase=phase, limit=limit, offset=offset)
    total = repo.count_trials(name, status=state, phase=phase)
    score = _scorer(index, study)
    return TrialPageOut(
        study=name,
        total=page_total(total, offset=offset, limit=limit, returned=len(rows)),
        limit=limit,
        offset=offset,
        items=[TrialOut.of(t, study, score(t)) for t in rows],
    )


@router.get(
    "/{name}/trials/{number}",
    response_model=TrialDetailOut,
    responses=responses(
        {404: "no study by that name, or no such trial in it", **MALFORMED, **UNAVAILABLE}
    ),
)
def get_trial(
    repo: RepoDep,
    index: IndexDep,
    name: StudyName,
    number: Annotated[int, Path(ge=0, le=INT_MAX, description="the trial's number in the study")],
) -> TrialDetailOut:
    """One trial in full: windows, server facts, server metrics and the log tail."""
    study = _study(repo, name)
    trial = repo.get_trial(name, number)
    if trial is None:
        raise not_found(f"study {name!r} has no trial {number}", f"GET /v1/studies/{name}/trials")
    return TrialDetailOut.of(
        trial,
        study,
        _scorer(index, study)(trial),
        windows=json_safe(trial.windows),
        server=json_safe(trial.server),
        server_metrics=json_safe(trial.server_metrics),
    )


def page_total(counted: int, *, offset: int, limit: int, returned: int) -> int:
    """The total to send with a page of ``returned`` rows, consistent with the page itself.

    The page and the count are two reads, and a running study may add a trial between them
    (SQLite gives each its own snapshot): a short page is the last one, so it fixes the total
    exactly; otherwise there are at least ``offset + returned`` rows. An empty page past the
    end says nothing of where the end is: the count stands, at most ``offset``.
    """
    if returned == 0 and offset > 0:
        return min(counted, offset)
    if returned < limit:
        return offset + returned
    return max(counted, offset + returned)


def pareto_front(snap: StudySnapshot) -> list[TrialRow]:
    """The complete trials no other complete trial dominates, by trial number."""

    def key(t: TrialRow) -> tuple[float, ...]:
        thr, mem, p99 = t.objective_values or (0.0, math.inf, math.inf)
        # Each minimised (throughput negated); NaN compares false both ways, which would make a
        # trial undominatable: treat as worst.
        return tuple(v if math.isfinite(v) else math.inf for v in (-thr, mem, p99))

    on_front = non_dominated([key(t) for t in snap.trials])
    return [t for t, on in zip(snap.trials, on_front, strict=True) if on]


@router.get("/{name}/pareto", response_model=ParetoOut, responses=NAMED)
def get_pareto(repo: RepoDep, index: IndexDep, name: StudyName) -> ParetoOut:
    """Non-dominated complete trials: output tok/s up, memory down, P99 E2E latency down."""
    study = _study(repo, name)
    snap = index.snapshot(study)
    if snap is None:
        raise not_found(f"no study named {name!r}", "GET /v1/studies lists the studies")
    score = _scorer(index, study)
    return ParetoOut(
        study=name,
        objectives=[
            ObjectiveOut(name=n, direction=d)
            for n, d in zip(scoring.OBJECTIVE_NAMES, scoring.DIRECTIONS, strict=True)
        ],
        trials=[TrialOut.of(t, study, score(t)) for t in pareto_front(snap)],
    )
