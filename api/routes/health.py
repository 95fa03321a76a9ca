"""GET /healthz: the process is up and the database answers."""

from __future__ import annotations

from fastapi import APIRouter

import tuner
from api.deps import IndexDep
from api.errors import UNAVAILABLE, responses
from api.schemas import HealthOut

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthOut, responses=responses(UNAVAILABLE))
def healthz(index: IndexDep) -> HealthOut:
    """``ok`` with the number of studies; a database that does not answer gives a 503."""
    studies, *_ = index.repo.change_marker()  # one aggregate query
    return HealthOut(status="ok", version=tuner.__version__, studies=studies)
