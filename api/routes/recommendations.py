"""GET /v1/recommendations: the best measured configuration for a model x GPU x workload."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool

from api import recommendations
from api.bounds import (
    GPU_MAX,
    MODEL_MAX,
    VERSION_MAX,
    VERSION_PATTERN,
    WORKLOAD_MAX,
    GpuPriceQuery,
    slo_param,
    slo_query,
)
from api.deps import IndexDep
from api.errors import MALFORMED, UNAVAILABLE, ApiError, bad_request, responses
from api.index import StudySnapshot
from api.schemas import RecommendationOut
from tuner.domain import Objective
from tuner.errors import EnvironmentProblem
from tuner.vllm import parse_version

router = APIRouter(prefix="/v1", tags=["recommendations"])

_NOT_FOUND = (
    "nothing measured for that combination (the body names the nearest ones), "
    "or nothing measured meets the SLO"
)


_AMBIGUOUS = "the model's name fits several models measured here (two hub ids' last part)"


@router.get(
    "/recommendations",
    response_model=RecommendationOut,
    responses=responses({404: _NOT_FOUND, 409: _AMBIGUOUS, **MALFORMED, **UNAVAILABLE}),
)
async def get_recommendation(
    index: IndexDep,
    model: Annotated[
        str, Query(min_length=1, max_length=MODEL_MAX, description="catalog alias, e.g. ernie-0.3b")
    ],
    gpu: Annotated[
        str, Query(min_length=1, max_length=GPU_MAX, description="GPU profile, e.g. h200")
    ],
    workload: Annotated[
        str,
        Query(min_length=1, max_length=WORKLOAD_MAX, description="workload preset, e.g. chat"),
    ],
    objective: Annotated[
        Objective | None, Query(description="rank by this preset (default: the study's)")
    ] = None,
    slo: Annotated[
        str | None,
        slo_param(
            "only trials meeting it: NAME=DURATION items (ttft_p99, itl_p99, e2e_p99; ms or s), "
            "each name once"
        ),
    ] = None,
    vllm_version: Annotated[
        str | None,
        Query(
            max_length=VERSION_MAX,
            pattern=VERSION_PATTERN,
            description="spell the flags for this vLLM, e.g. 0.12.0 (default: as measured)",
        ),
    ] = None,
    emulated: Annotated[
        bool, Query(description="recommend from emulated results instead of real ones")
    ] = False,
    gpu_price: GpuPriceQuery = None,
) -> RecommendationOut:
    """The best *measured* configuration: flags, a ready `vllm serve` line, metrics (medians
    with their range over the measurement windows), memory, $ per 1M output tokens at
    ``gpu_price`` or the study's price per GPU-hour (its source named), vLLM's defaults from
    the same study, and provenance."""
    query = recommendations.Query(
        model=model,
        gpu=gpu,
        workload=workload,
        objective=objective,
        slo=slo_query(slo),
        vllm_version=_version(vllm_version),
        emulated=emulated,
        gpu_price=gpu_price,
    )
    # async, with the database work in one threadpool hop: a sync endpoint would take a
    # second hop for validating the response model (half the cost of a cached answer).
    answer = await run_in_threadpool(
        index.memo, ("recommendation", query), lambda snaps: _answer(snaps, query)
    )
    if isinstance(answer, ApiError):
        # A fresh exception each time: re-raising one instance grows its traceback.
        raise ApiError(
            answer.status, answer.code, answer.message, hint=answer.hint, extra=answer.extra
        )
    return answer


def _answer(
    snapshots: list[StudySnapshot], query: recommendations.Query
) -> RecommendationOut | ApiError:
    """The recommendation, or the ApiError refusing it (remembered without its traceback, which
    would keep the frames that raised it alive)."""
    try:
        return recommendations.recommend(snapshots, query)
    except ApiError as exc:
        return exc.with_traceback(None)


def _version(text: str | None) -> str | None:
    if text is None or not text.strip():
        return None
    try:
        parse_version(text)
    except EnvironmentProblem:
        raise bad_request(
            f"query parameter vllm_version: {text!r} is not a version", "e.g. vllm_version=0.12.0"
        ) from None
    return text.strip()
