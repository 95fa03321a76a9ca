"""What tuner knows before it measures: GPU profiles and their prices (``gpus``), the models and
their ``config.json`` facts (``models``, written out for vLLM by ``materialize``), the rules a
configuration must keep on a GPU (``rules``) and the levers beyond the card's knobs, with the
regimes they move and vLLM's own defaults per GPU (``levers``)."""

from typing import TYPE_CHECKING

from tuner import face

if TYPE_CHECKING:
    from tuner.catalog.gpus import (
        FLASH_ATTN,
        GPUS,
        MAX_GPU_PRICE,
        MEMORY_BANDWIDTH_GBS,
        GpuPrice,
        get_gpu,
        gpu_price,
        match_detected,
        price_problem,
    )
    from tuner.catalog.levers import LEVERS
    from tuner.catalog.materialize import tokenizer_dir
    from tuner.catalog.models import (
        MODELS,
        check_one_model,
        has_facts,
        model_key,
        resolve_model,
    )
    from tuner.catalog.rules import VLLM_DEFAULT_GPU_MEMORY_UTILIZATION, dominated_by

__all__ = [
    "FLASH_ATTN",
    "GPUS",
    "LEVERS",
    "MAX_GPU_PRICE",
    "MEMORY_BANDWIDTH_GBS",
    "MODELS",
    "VLLM_DEFAULT_GPU_MEMORY_UTILIZATION",
    "GpuPrice",
    "check_one_model",
    "dominated_by",
    "get_gpu",
    "gpu_price",
    "has_facts",
    "match_detected",
    "model_key",
    "price_problem",
    "resolve_model",
    "tokenizer_dir",
]

__getattr__, __dir__ = face(__name__)
