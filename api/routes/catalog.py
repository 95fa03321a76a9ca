"""The catalog: models and GPU profiles tuner knows, and A/B comparisons."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.bounds import INT_MAX
from api.deps import RepoDep
from api.errors import MALFORMED, UNAVAILABLE, not_found, responses
from api.schemas import ComparisonOut, GpuOut, ModelOut, from_row
from tuner.catalog import GPUS, MODELS

router = APIRouter(prefix="/v1", tags=["catalog"])


@router.get("/models", response_model=list[ModelOut])
def list_models() -> list[ModelOut]:
    """Catalogued models (aliases a study spec may name)."""
    return [
        from_row(
            ModelOut,
            m,
            alias=alias,
            layers=m.num_layers,
            parameters=m.parameter_count(),
            max_model_len=m.max_position_embeddings,
        )
        for alias, m in MODELS.items()
    ]


@router.get("/gpus", response_model=list[GpuOut])
def list_gpus() -> list[GpuOut]:
    """GPU profiles: memory, compute capability, attention backends and KV cache dtypes."""
    return [
        from_row(
            GpuOut,
            g,
            name=name,
            compute_capability=None
            if g.compute_capability is None
            else f"{g.compute_capability[0]}.{g.compute_capability[1]}",
        )
        for name, g in GPUS.items()
    ]


@router.get(
    "/compare/{comparison_id}",
    response_model=ComparisonOut,
    tags=["comparisons"],
    responses=responses({404: "no comparison with that id", **MALFORMED, **UNAVAILABLE}),
)
def get_comparison(
    repo: RepoDep,
    comparison_id: Annotated[int, Path(ge=1, le=INT_MAX, description="as `tuner compare` printed")],
) -> ComparisonOut:
    """One A/B comparison as `tuner compare` recorded it: both configs, results and verdicts."""
    row = repo.get_comparison(comparison_id)
    if row is None:
        raise not_found(
            f"no comparison with id {comparison_id}",
            "`tuner compare` records comparisons; its output names the id",
        )
    return ComparisonOut.of(row)
