"""Domain records to JSON columns and back.

Writing goes through :func:`tuner.domain.to_jsonable`. Two things are added here:

- non-finite floats (a NaN percentile, an infinite penalty) become the strings ``"nan"``,
  ``"inf"``, ``"-inf"``, because PostgreSQL's JSON rejects them; ``float()`` reads them back
  (:func:`numbers_back` in untyped JSON);
- reading ignores keys a record no longer has, so rows written by an older tuner still load
  as long as new fields have defaults (a missing tuple or mapping reads as empty).

A record is read back by its own fields' types (:func:`decode`), so a new field needs no
change here.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from tuner.domain import (
    Estimate,
    MemoryUsage,
    Provenance,
    RequestRecord,
    ServerInfo,
    ServingConfig,
    TrialResult,
    WindowMetrics,
    to_jsonable,
)

T = TypeVar("T")


def encode(obj: Any) -> Any:
    """``obj`` as JSON values that every supported database accepts."""
    return _finite(to_jsonable(obj))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf", "-inf"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def numbers_back(value: Any, keys: Collection[str]) -> Any:
    """Untyped JSON read from a column, with the strings :func:`encode` wrote for non-finite
    floats made floats again wherever they stand under one of ``keys`` (the names that hold
    numbers, or lists of them). Strings elsewhere stay: a label may read "nan"."""
    if isinstance(value, dict):
        return {k: _float_back(v) if k in keys else numbers_back(v, keys) for k, v in value.items()}
    if isinstance(value, list):
        return [numbers_back(v, keys) for v in value]
    return value


def _float_back(value: Any) -> Any:
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    if isinstance(value, list):
        return [_float_back(v) for v in value]
    return value


def decode(cls: type[T], data: Mapping[str, Any]) -> T:
    """A ``cls`` record (a domain dataclass) from ``encode(record)``."""
    return typing.cast(T, _record(cls, data))


@functools.cache
def _decoder(kind: Any) -> Callable[[Any], Any]:
    """How to read the JSON value of a field typed ``kind``."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):  # X | None
        read = _decoder(next(a for a in args if a is not type(None)))
        return lambda v: None if v is None else read(v)
    if origin is tuple:
        item = _decoder(args[0])
        return lambda v: tuple(item(x) for x in v or ())
    if origin in (Mapping, dict):
        item = _decoder(args[1])
        return lambda v: {k: item(x) for k, x in (v or {}).items()}
    if kind is ServingConfig:
        return ServingConfig.from_dict
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return functools.partial(_record, kind)
    if kind in (float, int) or (isinstance(kind, type) and issubclass(kind, enum.Enum)):
        return typing.cast(Callable[[Any], Any], kind)
    return lambda v: v  # str, bool: as JSON has them


@functools.cache
def _fields(cls: type) -> dict[str, tuple[Callable[[Any], Any], bool]]:
    """Each field's decoder, and whether it is read when missing (a tuple or mapping)."""
    hints = typing.get_type_hints(cls)
    containers = (tuple, Mapping, dict)
    return {
        f.name: (_decoder(hints[f.name]), typing.get_origin(hints[f.name]) in containers)
        for f in dataclasses.fields(cls)
    }


def _record(cls: type, data: Mapping[str, Any]) -> Any:
    return cls(
        **{
            name: read(data.get(name))
            for name, (read, container) in _fields(cls).items()
            if container or name in data
        }
    )


decode_estimate = functools.partial(decode, Estimate)
decode_window = functools.partial(decode, WindowMetrics)
decode_memory = functools.partial(decode, MemoryUsage)


def decode_metrics(data: Mapping[str, Any]) -> dict[str, Estimate]:
    return {name: decode(Estimate, est) for name, est in data.items()}


def decode_server(data: Mapping[str, Any] | None) -> ServerInfo | None:
    return None if data is None else decode(ServerInfo, data)


def decode_provenance(data: Mapping[str, Any] | None) -> Provenance | None:
    return None if data is None else decode(Provenance, data)


def decode_result(data: Mapping[str, Any]) -> TrialResult:
    """A :class:`TrialResult` from ``encode(result)`` (the inverse, for results kept outside
    the trials table, e.g. the launches of an interrupted comparison)."""
    return decode(TrialResult, data)


def encode_requests(windows: tuple[tuple[RequestRecord, ...], ...]) -> list[Any]:
    """Per-request records as the compact rows of ``tuner_trial_requests``."""

    def num(v: float | None) -> float | None:
        return None if v is None or not math.isfinite(v) else round(v, 6)

    return [
        [
            [
                num(r.start_s),
                num(r.ttft_s),
                num(r.e2e_s),
                r.prompt_tokens,
                r.output_tokens,
                r.error,
                [round(g * 1e6) for g in r.itl_s],
            ]
            for r in window
        ]
        for window in windows
    ]


def decode_requests(data: list[Any]) -> tuple[tuple[RequestRecord, ...], ...]:
    def one(row: list[Any]) -> RequestRecord:
        start, ttft, e2e, prompt, output, error, gaps = row
        return RequestRecord(
            ok=error is None,
            prompt_tokens=int(prompt),
            output_tokens=int(output),
            start_s=float(start or 0.0),
            ttft_s=None if ttft is None else float(ttft),
            e2e_s=None if e2e is None else float(e2e),
            itl_s=tuple(g / 1e6 for g in gaps),
            error=error,
        )

    return tuple(tuple(one(row) for row in window) for window in data)
