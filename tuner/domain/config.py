"""What is tuned and on what: a server configuration, a model's facts, a GPU profile."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

# A knob beyond the nine typed fields: a `vllm serve` flag by its dest (stream_interval), or a
# key inside a JSON-valued flag (compilation_config.cudagraph_mode).
_KNOB_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)?$")
Scalar = bool | int | float | str


class Knobs(Mapping[str, Scalar]):
    """Knobs beyond the typed fields, by name: immutable, hashable, in sorted order.

    Values are scalars (a JSON-valued flag's value is its compact JSON text), so that a
    configuration can be a dict key and an Optuna categorical; a None value means "vLLM's
    default" and is left out."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        clean: dict[str, Scalar] = {}
        for name, value in pairs:
            if not isinstance(name, str) or not _KNOB_NAME.match(name):
                raise ValueError(f"{name!r} is not a knob name (a vLLM flag's dest)")
            if value is None:
                continue
            if not isinstance(value, bool | int | float | str):
                raise ValueError(f"knob {name} must be a scalar, got {type(value).__name__}")
            clean[name] = value
        self._items: tuple[tuple[str, Scalar], ...] = tuple(sorted(clean.items()))

    def __getitem__(self, key: str) -> Scalar:
        return dict(self._items)[key]

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._items) == dict(other)

    def __repr__(self) -> str:
        return f"Knobs({dict(self._items)!r})"


@dataclass(frozen=True)
class ServingConfig:
    """The vLLM knobs tuner searches. ``None`` means "leave vLLM's default alone".

    ``ServingConfig()`` is therefore vLLM's defaults: the baseline trial of every study.
    ``extra`` holds any other ``vllm serve`` flag, by dest (``{"stream_interval": 8}``); its
    flag list and value types come from the installed vLLM (:mod:`tuner.vllm.flags`). In
    :meth:`to_dict` (the database's JSON, the API) they sit beside the typed knobs.
    """

    attention_backend: str | None = None  # e.g. FLASH_ATTN, FLASHINFER, TRITON_ATTN, CPU_ATTN
    flash_attn_version: int | None = None  # 2 or 3, only with FLASH_ATTN
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    enable_prefix_caching: bool | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str | None = None  # "auto", "fp8", "fp8_e4m3", "fp8_e5m2", ...
    enforce_eager: bool | None = None
    extra: Mapping[str, Scalar] = field(default_factory=Knobs)

    def __post_init__(self) -> None:
        extra = self.extra if isinstance(self.extra, Knobs) else Knobs(self.extra)
        typed = sorted(set(extra) & set(typed_knobs()))
        if typed:
            raise ValueError(f"{typed} are typed knobs: set them as fields, not in extra")
        object.__setattr__(self, "extra", extra)

    def is_default(self) -> bool:
        return self == ServingConfig()

    def to_dict(self) -> dict[str, Any]:
        """Only the knobs that are set, extra ones after the typed; ``{}`` for the defaults."""
        typed = {k: getattr(self, k) for k in typed_knobs()}
        return {**{k: v for k, v in typed.items() if v is not None}, **dict(self.extra)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServingConfig:
        """The inverse of :meth:`to_dict`; also reads ``to_jsonable``'s form (``extra`` as a
        table). A name that is no knob name raises ValueError; which flags exist is the
        flag list's business (:mod:`tuner.vllm.flags`), not this record's."""
        names = set(typed_knobs())
        extra: dict[str, Any] = dict(data.get("extra") or {})
        typed: dict[str, Any] = {}
        for key, value in data.items():
            if key in names:
                typed[key] = value
            elif key != "extra":
                extra[key] = value
        try:
            return cls(**typed, extra=Knobs(extra))
        except ValueError as exc:
            raise ValueError(f"{exc}; typed knobs: {sorted(names)}") from None

    def replace(self, **changes: Any) -> ServingConfig:
        return dataclasses.replace(self, **changes)

    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.to_dict().items()) or "defaults"


def typed_knobs() -> tuple[str, ...]:
    """The names of :class:`ServingConfig`'s typed knobs (its fields but ``extra``)."""
    return tuple(f.name for f in dataclasses.fields(ServingConfig) if f.name != "extra")


@dataclass(frozen=True)
class ModelSpec:
    """A model as tuner needs it: what to pass to vLLM and the architecture facts.

    ``config`` holds the ``config.json`` facts. A catalogued model runs with random weights
    (``--load-format dummy``) from a directory tuner writes; ``source`` set to a local
    directory or hub id makes vLLM load the real weights instead.
    """

    alias: str
    hub_id: str
    config: Mapping[str, Any]
    source: str | None = None  # a local directory or hub id with real weights
    dtype: str = "bfloat16"
    notes: str = ""
    # False for test architectures that exist only as config facts (tiny-ernie): there are no
    # weights to load, so a ready `vllm serve` line must keep --load-format dummy.
    weights_available: bool = True

    @property
    def facts(self) -> Mapping[str, Any]:
        """The architecture numbers of ``config``: its top level over a multimodal model's
        ``text_config`` (its language model's), a key set to null counted as absent, and a
        number given per layer (Gemma 3n's intermediate_size) as the mean of its layers'."""
        nested = self.config.get("text_config")
        merged = {**(nested if isinstance(nested, Mapping) else {}), **self.config}
        return {key: _per_layer_mean(value) for key, value in merged.items() if value is not None}

    @property
    def architecture(self) -> str:
        archs = self.config.get("architectures") or ["?"]
        return str(archs[0])

    @property
    def max_position_embeddings(self) -> int:
        return int(self.facts.get("max_position_embeddings", 2048))

    @property
    def vocab_size(self) -> int:
        return int(self.facts["vocab_size"])

    @property
    def num_layers(self) -> int:
        return int(self.facts["num_hidden_layers"])

    @property
    def num_kv_heads(self) -> int:
        c = self.facts
        return int(c.get("num_key_value_heads", c["num_attention_heads"]))

    @property
    def head_dim(self) -> int:
        c = self.facts
        return int(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])

    def kv_bytes_per_token(self, kv_dtype_bytes: int = 2) -> int:
        """Bytes of KV cache one token occupies across all layers (K and V)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * kv_dtype_bytes

    def parameter_count(self) -> int:
        """Approximate parameter count of a dense decoder from its config."""
        c = self.facts
        h = int(c["hidden_size"])
        inter = int(c.get("intermediate_size", 4 * h))
        n_heads = int(c["num_attention_heads"])
        attn = h * (n_heads * self.head_dim) * 2 + h * (self.num_kv_heads * self.head_dim) * 2
        mlp = 3 * h * inter
        per_layer = attn + mlp + 2 * h
        emb = self.vocab_size * h
        lm_head = 0 if c.get("tie_word_embeddings", False) else emb
        return self.num_layers * per_layer + emb + lm_head + h

    def weight_bytes(self, quantization: str | None = None) -> int:
        """Bytes of the weights as vLLM holds them. With ``quantization`` = ``fp8`` (vLLM's
        online FP8: the linear layers one byte a weight) the embeddings and the LM head keep
        the model's dtype."""
        per_param = 4 if self.dtype in ("float32", "float") else 2
        if quantization != "fp8":
            return self.parameter_count() * per_param
        c = self.facts
        emb = self.vocab_size * int(c["hidden_size"])
        kept = emb * (1 if c.get("tie_word_embeddings", False) else 2)
        return kept * per_param + (self.parameter_count() - kept)


@dataclass(frozen=True)
class GpuProfile:
    """What tuner knows about a kind of accelerator (or ``cpu``)."""

    name: str  # catalog key: a10g, h100, cpu, ...
    display_name: str
    memory_gib: float
    compute_capability: tuple[int, int] | None  # None for cpu
    attention_backends: tuple[str, ...]
    flash_attn_versions: tuple[int, ...]
    kv_cache_dtypes: tuple[str, ...]
    nvml_names: tuple[str, ...] = ()  # substrings of NVML's device name that identify it

    @property
    def is_cpu(self) -> bool:
        return self.compute_capability is None

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * 1024**3)


def _per_layer_mean(value: Any) -> Any:
    """A list of numbers (one per layer) as their mean, rounded; anything else as it is."""
    numbers = (
        isinstance(value, list)
        and value
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    )
    return round(sum(value) / len(value)) if numbers else value
