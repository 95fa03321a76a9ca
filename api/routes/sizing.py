"""GET /v1/sizing: how many GPUs of the recommended configuration serve a target rate within
the SLO, with $/hour and $ per 1M output tokens (:mod:`tuner.results.sizing`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from pydantic import StringConstraints

from api.bounds import GPU_MAX, MODEL_MAX, WORKLOAD_MAX, GpuPriceQuery, slo_param, slo_query
from api.deps import RepoDep
from api.errors import MALFORMED, UNAVAILABLE, not_found, responses
from tuner.domain import to_jsonable
from tuner.domain.jsonable import finite_record
from tuner.results import Rate, size
from tuner.results.sizing import MAX_RATE

router = APIRouter(prefix="/v1", tags=["sizing"])


@router.get(
    "/sizing",
    responses=responses({400: "one gpu_price for studies on several GPU profiles",
                         404: "no measured study of that model (on those GPUs)",
                         409: "the model's name fits several models measured here",
                         **MALFORMED, **UNAVAILABLE}),
)  # fmt: skip
async def get_sizing(
    repo: RepoDep,
    model: Annotated[
        str, Query(min_length=1, max_length=MODEL_MAX, description="model alias, e.g. ernie-0.3b")
    ],
    rate: Annotated[
        float,
        Query(
            gt=0, le=MAX_RATE, allow_inf_nan=False, description="the target rate, in unit (e.g. 20)"
        ),  # as `tuner size --rate`
    ],
    unit: Annotated[
        Literal["req/s", "tok/s"],
        Query(description="requests/s, or output tokens/s"),
    ] = "req/s",
    gpu: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=GPU_MAX)]] | None,
        Query(max_length=64, description="GPU profile, repeatable (default: every one)"),
    ] = None,
    slo: Annotated[str | None, slo_param("the SLO to size for (default: each study's own)")] = None,
    workload: Annotated[
        str | None,
        Query(min_length=1, max_length=WORKLOAD_MAX, description="only this workload's studies"),
    ] = None,
    emulated: Annotated[bool, Query(description="size from emulated studies")] = False,
    gpu_price: GpuPriceQuery = None,
) -> dict[str, Any]:
    """One answer per study, fewest GPUs first: the recommended configuration, its capacity per
    GPU (median and the range over one launch's windows, or over those of the confirmation's
    launches of it, ``launches``), the GPUs for the rate from the low end of that range (and
    from the median and the high end), $/hour and $ per 1M output tokens at ``gpu_price`` or
    the study's price per GPU-hour (its source named); ``notes`` say what to read it with (a
    capacity only a lower bound, a pick whose ranking rested on one)."""
    target, wanted_slo = Rate(float(rate), unit), slo_query(slo)

    def sized(emulated: bool) -> list[Any]:
        return size(
            repo,
            model=model,
            rate=target,
            gpus=tuple(gpu or ()),
            workload=workload,
            slo=wanted_slo,
            emulated=emulated,
            gpu_price=gpu_price,
        )

    answers = await run_in_threadpool(sized, emulated)
    if not answers:  # said as `tuner size` says it
        where = (f" on {', '.join(gpu)}" if gpu else "") + (
            f" with workload {workload}" if workload else ""
        )
        kind = "emulated" if emulated else "measured"
        hint = "GET /v1/studies lists what was measured"
        if not emulated:
            emulated_ones = await run_in_threadpool(sized, True)
            if emulated_ones:
                hint = "emulated ones can be sized: add emulated=true"
        raise not_found(
            f"no {kind} study of {model!r}{where} to size from (none has a recommendation "
            "with stored windows)",
            hint,
        )
    return finite_record({"model": model, "rate": to_jsonable(target),
                          "sizes": to_jsonable(answers)})  # fmt: skip
