"""GET /healthz: the process is up and the database answers."""

from __future__ import annotations

from fastapi import APIRouter

import tuner
from api.deps import IndexDep
from api.errors import UNAVAILABLE, responses
from api.schemas import HealthOut

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthOut, responses=responses(UNAVAILABLE))
@router.head("/healthz", response_model=HealthOut, include_in_schema=False)
def healthz(index: IndexDep) -> HealthOut:
    """``ok`` with the number of studies; a database that does not answer gives a 503. HEAD
    asks the same without the body (load balancers probe with it)."""
    studies, *_ = index.repo.change_marker()  # one aggregate query
    return HealthOut(status="ok", version=tuner.__version__, studies=studies)
