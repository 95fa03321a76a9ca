"""The model catalog: aliases with the ``config.json`` facts of real models.

A catalogued model is served with random weights (``--load-format dummy``) from a directory
that :func:`tuner.catalog.materialize.materialize` writes, so its config must carry every key
vLLM and transformers read to build the architecture. The numbers below are the published
``config.json`` files of the hub ids named, copied key for key; ``tiny-ernie`` is a 2-layer
model of the ERNIE-4.5 architecture small enough for CPU tests.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tuner.domain import ModelSpec
from tuner.errors import AmbiguousModel, UsageError

# baidu/ERNIE-4.5-0.3B-PT in the transformers-native form (model_type ernie4_5, the class
# transformers >= 4.54 and vLLM register). vLLM builds it as a Llama with non-Neox rotary
# embeddings; it reads hidden_size, intermediate_size, hidden_act, rms_norm_eps, head_dim,
# num_key_value_heads, tie_word_embeddings, max_position_embeddings and the rope parameters.
_ERNIE_03B: dict[str, Any] = {
    "architectures": ["Ernie4_5ForCausalLM"],
    "model_type": "ernie4_5",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "max_position_embeddings": 131072,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "num_hidden_layers": 18,
    "rms_norm_eps": 1e-05,
    "use_cache": False,
    "vocab_size": 103424,
    "rope_theta": 500000.0,
    "use_bias": False,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}

# The same architecture at toy size: serves on CPU vLLM 0.32 (the e2e tests start it, tests/e2e/).
_TINY_ERNIE: dict[str, Any] = {
    **_ERNIE_03B,
    "hidden_size": 128,
    "intermediate_size": 256,
    "max_position_embeddings": 4096,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": 2,
    "vocab_size": 1024,
}

_QWEN25_COMMON: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
}

_QWEN25_05B: dict[str, Any] = {
    **_QWEN25_COMMON,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "max_window_layers": 21,
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "vocab_size": 151936,
}

_QWEN25_7B: dict[str, Any] = {
    **_QWEN25_COMMON,
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_window_layers": 28,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "vocab_size": 152064,
}

_QWEN25_14B: dict[str, Any] = {
    **_QWEN25_COMMON,
    "hidden_size": 5120,
    "intermediate_size": 13824,
    "max_window_layers": 70,
    "num_attention_heads": 40,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "vocab_size": 152064,
}

_LLAMA31_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 128256,
}


MODELS: dict[str, ModelSpec] = {
    spec.alias: spec
    for spec in (
        ModelSpec("ernie-0.3b", "baidu/ERNIE-4.5-0.3B-PT", _ERNIE_03B),
        ModelSpec(
            "tiny-ernie",
            "baidu/ERNIE-4.5-0.3B-PT",
            _TINY_ERNIE,
            notes="2-layer ERNIE-4.5 architecture for CPU tests; random weights only",
            weights_available=False,
        ),
        ModelSpec("qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B-Instruct", _QWEN25_05B),
        ModelSpec("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", _QWEN25_7B),
        ModelSpec("qwen2.5-14b", "Qwen/Qwen2.5-14B-Instruct", _QWEN25_14B),
        ModelSpec("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", _LLAMA31_8B),
    )
}

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
UNKNOWN_FACTS_NOTE = (
    "architecture facts unknown (no config.json found locally): memory and length rules are "
    "skipped for this model"
)


def resolve_model(name: str) -> ModelSpec:
    """Turn what the user typed into a :class:`ModelSpec`.

    In order: a catalog alias (random weights); an existing local directory with a
    ``config.json`` (``source`` = that directory, real weights); a hub id ``org/name``
    (``source`` = the hub id; the config comes from the catalog when the id is catalogued,
    else from the local Hugging Face cache, else it is ``{}`` and ``notes`` says the facts are
    unknown). Anything else raises :class:`UsageError` listing the aliases.
    """
    if name in MODELS:
        return MODELS[name]
    if not name.strip():  # Path("") is the current directory
        raise UsageError(
            "the model name is empty",
            hint="name a model directory, a hub id (org/name) or an alias: " + ", ".join(MODELS),
        )
    path = Path(name).expanduser()
    if path.is_dir():
        config_file = path / "config.json"
        if not config_file.is_file():
            raise UsageError(
                f"model directory {path} has no config.json",
                hint="point --model at a Hugging Face model directory, or use an alias: "
                + ", ".join(MODELS),
            )
        config = _read_config(config_file)
        _check_facts(config_file, config)
        source = str(path.resolve())
        return ModelSpec(
            alias=path.resolve().name,
            hub_id=str(config.get("_name_or_path") or source),
            config=config,
            source=source,
            dtype=_dtype_of(config),
        )
    if _HUB_ID.match(name):
        for spec in MODELS.values():
            # A catalogued hub id asks for the real weights of a model whose facts we know.
            if spec.hub_id == name and spec.weights_available:
                return dataclasses.replace(spec, source=name)
        cached = _hf_cached_config(name)
        return ModelSpec(
            alias=name.split("/", 1)[1],
            hub_id=name,
            config=cached or {},
            source=name,
            dtype=_dtype_of(cached or {}),
            notes="" if cached is not None else UNKNOWN_FACTS_NOTE,
        )
    raise UsageError(
        f"unknown model {name!r}: not a catalog alias, a directory or a hub id (org/name)",
        hint="catalogued models: " + ", ".join(MODELS),
    )


def model_key(alias: str, source: str | None) -> str:
    """Which model a stored study measured, for grouping studies and matching a request: a
    catalog alias names its model (dummy or real weights alike) when the study's source is the
    catalog's own (its hub id, or the directory tuner writes its facts to); any other model is
    its source (a hub id, a directory), since its alias is only the name's last part, which
    two fine-tunes (``orgA/foo``, ``orgB/foo``, or ``myorg/qwen2.5-7b`` beside the catalog's
    ``qwen2.5-7b``) share."""
    if not source:
        return alias
    spec = MODELS.get(alias)
    if spec is None:
        return source
    path = Path(source)
    materialized = path.parent.name == "models" and path.name.startswith(f"{alias}-")
    return alias if source == spec.hub_id or materialized else source


def check_one_model(name: str, keys: Iterable[str]) -> None:
    """UsageError when ``name`` fits several models measured here (``keys``: the
    :func:`model_key` of each study it matched): numbers of one would answer for another."""
    models = sorted(set(keys))
    if len(models) > 1:
        raise AmbiguousModel(
            f"model {name!r} names {len(models)} models measured here: " + ", ".join(models),
            hint="name one by its hub id or path",
        )


def has_facts(model: ModelSpec) -> bool:
    """Whether the model's config holds the architecture numbers the memory rules need."""
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    return all(key in model.facts for key in keys)


# The architecture numbers ModelSpec reads, each with the least value it can take.
_FACT_MINIMA = {
    "hidden_size": 1,
    "intermediate_size": 1,
    "num_hidden_layers": 1,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
    "head_dim": 1,
    "max_position_embeddings": 1,
    "vocab_size": 2,
}


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}", hint="is it a valid config.json?") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} is not a JSON object", hint="is it a valid config.json?")
    return data


def _check_facts(path: Path, config: Mapping[str, Any]) -> None:
    """UsageError naming the file and key when an architecture number tuner reads (at the top
    level or in a multimodal model's text_config) is not a whole number in range."""
    nested = config.get("text_config")
    tables = [("", config), *([("text_config.", nested)] if isinstance(nested, dict) else [])]
    for prefix, table in tables:
        for key, least in _FACT_MINIMA.items():
            value = table.get(key)
            values = value if isinstance(value, list) and value else [value]  # one per layer
            if value is not None and not all(_whole_at_least(v, least) for v in values):
                raise UsageError(
                    f"{path}: {prefix}{key} is {json.dumps(value)}, not a whole number >= {least}",
                    hint="fix the model's config.json: tuner reads its architecture from it",
                )


def _whole_at_least(value: Any, least: int) -> bool:
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    return whole and not isinstance(value, bool) and value >= least


def _dtype_of(config: Mapping[str, Any]) -> str:
    # transformers >= 4.56 writes "dtype"; older files say "torch_dtype".
    value = config.get("dtype") or config.get("torch_dtype") or "bfloat16"
    return str(value)


def _hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def _hf_cached_config(hub_id: str) -> dict[str, Any] | None:
    """The config.json of ``hub_id`` in the local HF cache (the ``main`` snapshot if known);
    UsageError when it is read but its architecture numbers are wrong."""
    repo = _hf_cache_dir() / ("models--" + hub_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    candidates: list[Path] = []
    ref = repo / "refs" / "main"
    if ref.is_file():
        candidates.append(snapshots / ref.read_text(encoding="utf-8").strip() / "config.json")
    candidates += sorted(
        snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True
    )
    for candidate in candidates:
        if candidate.is_file():
            try:
                config = _read_config(candidate)
            except UsageError:
                return None
            _check_facts(candidate, config)
            return config
    return None
