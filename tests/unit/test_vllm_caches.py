"""Compile-cache directories (tuner.vllm.caches): keyed so that only compatible launches share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.domain import ServingConfig
from tuner.vllm.caches import cache_dir, cache_key

BASE = {"vllm_version": "0.32.0", "model": "/models/tiny-ernie", "gpu": "NVIDIA H200"}


def key(config: ServingConfig, **changes: object) -> str:
    return cache_key(config, **{**BASE, "dtype": None, **changes})  # type: ignore[arg-type]


def test_knobs_that_pick_no_kernel_share_a_directory() -> None:
    base = key(ServingConfig())
    assert key(ServingConfig(gpu_memory_utilization=0.5, max_num_seqs=64)) == base
    assert key(ServingConfig(enable_prefix_caching=False, extra={"stream_interval": 8})) == base


@pytest.mark.parametrize(
    "config",
    [
        ServingConfig(attention_backend="FLASHINFER"),
        ServingConfig(attention_backend="FLASH_ATTN", flash_attn_version=2),
        ServingConfig(kv_cache_dtype="fp8"),
        ServingConfig(enforce_eager=True),
        ServingConfig(extra={"quantization": "fp8"}),
        ServingConfig(extra={"compilation_config": '{"cudagraph_mode": "FULL"}'}),
    ],
    ids=lambda c: c.label(),
)
def test_knobs_that_change_the_kernels_get_a_directory_of_their_own(config: ServingConfig) -> None:
    assert key(config) != key(ServingConfig())


def test_versions_models_gpus_and_dtypes_never_share() -> None:
    base = key(ServingConfig())
    assert key(ServingConfig(), vllm_version="0.26.0") != base
    assert key(ServingConfig(), model="/models/other") != base
    assert key(ServingConfig(), gpu="NVIDIA A10G") != base
    assert key(ServingConfig(), dtype="float32") != base
    assert key(ServingConfig(), extra_args=("--dtype", "float16")) != base


def test_shared_is_warm_the_second_time_cold_is_never_and_is_removed(tmp_path: Path) -> None:
    first = cache_dir(tmp_path, "shared", "k1")
    assert first.label == "cold" and first.path == tmp_path / "k1"
    env = first.env()
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "k1" / "vllm")
    assert set(env) == {
        "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
        "FLASHINFER_WORKSPACE_BASE",
    }  # fmt: skip
    Path(env["VLLM_CACHE_ROOT"]).mkdir()  # what vLLM leaves behind
    again = cache_dir(tmp_path, "shared", "k1")
    assert again.label == "warm"
    again.release()
    assert (tmp_path / "k1").is_dir(), "a shared directory outlives its launch"
    cold = cache_dir(tmp_path, "cold", "k1")
    assert cold.label == "cold" and cold.path != first.path
    assert cold.path is not None and cold.path.is_dir()
    cold.release()
    assert not cold.path.exists()
    system = cache_dir(tmp_path, "system", "k1")
    assert system.env() == {} and system.label == "system"
    with pytest.raises(ValueError, match="none of"):
        cache_dir(tmp_path, "lukewarm", "k1")
