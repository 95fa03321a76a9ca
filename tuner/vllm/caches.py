"""vLLM's compile and kernel caches across the launches of a study: warm starts.

A vLLM start compiles: torch.compile's graphs (Inductor, Triton kernels), and on GPUs FlashInfer's
JIT kernels; then it captures CUDA graphs. The first start on a machine pays for all of it (on
the H200 145-250 s against 29-94 s with the caches warm). Three modes:

- ``shared`` (the default): every launch of the same *cache key* uses one directory under
  ``$TUNER_HOME/compile-cache/KEY``: vLLM's cache root, Inductor's, Triton's and FlashInfer's.
  The key is what decides which artefacts exist at all: the vLLM version, the model, the GPU, the
  dtype and quantization, and the knobs that pick kernels or turn compilation off (attention
  backend, FlashAttention version, KV-cache dtype, eager mode, compilation settings). vLLM keys
  the artefacts inside by a hash of its whole configuration besides, so two configurations
  that share a directory never load each other's graphs; the outer key keeps versions and
  models apart and lets one be removed alone.
- ``cold``: a fresh empty directory per launch, removed after it: every start is a first start
  (to measure what the caches save, or to rule them out as a suspect).
- ``system``: leave vLLM's own locations alone (``~/.cache/vllm`` and friends).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tuner.domain import ServingConfig

MODES = ("shared", "cold", "system")
# Typed knobs that change which kernels are built or whether anything is compiled.
_TYPED_KEYS = ("attention_backend", "flash_attn_version", "kv_cache_dtype", "enforce_eager")
# Other `vllm serve` flags (by dest) of the same kind.
_EXTRA_KEYS = (
    "quantization",
    "dtype",
    "compilation_config",
    "optimization_level",
    "cuda_graph_sizes",
    "cudagraph_capture_sizes",
    "max_cudagraph_capture_size",
    "attention_config",
    "speculative_config",
)


@dataclass(frozen=True)
class CacheDir:
    """Where one launch's caches live; ``warm``: the directory held artefacts before it."""

    path: Path | None  # None: vLLM's own locations (mode "system")
    mode: str
    warm: bool
    removable: bool = False

    def env(self) -> dict[str, str]:
        """The environment that points vLLM, Inductor, Triton and FlashInfer at ``path``."""
        if self.path is None:
            return {}
        return {
            "VLLM_CACHE_ROOT": str(self.path / "vllm"),
            "TORCHINDUCTOR_CACHE_DIR": str(self.path / "inductor"),
            "TRITON_CACHE_DIR": str(self.path / "triton"),
            "FLASHINFER_WORKSPACE_BASE": str(self.path / "flashinfer"),
        }

    @property
    def label(self) -> str:
        """ "warm", "cold" or "system": how the launch started, for its record."""
        if self.mode == "system":
            return "system"
        return "warm" if self.warm else "cold"

    def release(self) -> None:
        """Remove a ``cold`` launch's directory; the others stay for the next launch."""
        if self.removable and self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)


def cache_key(
    config: ServingConfig,
    *,
    vllm_version: str,
    model: str,
    gpu: str,
    dtype: str | None,
    extra_args: tuple[str, ...] = (),
) -> str:
    """The key of the directory a launch of ``config`` shares (see the module docstring)."""
    picked: Mapping[str, object] = {
        **{k: getattr(config, k) for k in _TYPED_KEYS},
        **{k: config.extra.get(k) for k in _EXTRA_KEYS},
    }
    facts = {
        "vllm": vllm_version,
        "model": model,
        "gpu": gpu,
        "dtype": dtype,
        "knobs": {k: v for k, v in picked.items() if v is not None},
        "extra_args": list(extra_args),
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:16]


def cache_dir(root: Path, mode: str, key: str, owner: str = "") -> CacheDir:
    """The directory of a launch with ``key`` in ``mode`` (created, except for "system"). A
    "cold" one is named ``cold-{owner}-{random}``: ``owner`` says whose it is, so that one
    left by a killed tuner can be told from a live one's (``tuner.runner.vllm``)."""
    if mode not in MODES:
        raise ValueError(f"compile cache mode {mode!r} is none of {MODES}")
    if mode == "system":
        return CacheDir(None, mode, warm=False)
    if mode == "cold":
        path = root / f"cold-{owner}-{uuid.uuid4().hex[:12]}"
        path.mkdir(parents=True)
        return CacheDir(path, mode, warm=False, removable=True)
    path = root / key
    warm = path.is_dir() and any(path.iterdir())
    path.mkdir(parents=True, exist_ok=True)
    return CacheDir(path, mode, warm=warm)
