"""Domain records as JSON values, and JSON that never holds a bare NaN or infinity."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Mapping
from typing import Any


def to_jsonable(obj: Any) -> Any:
    """Turn domain records (nested dataclasses, enums, tuples, mappings) into JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: to_jsonable(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if not f.metadata.get("stored_apart")
        }
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    return obj


NULL_REASONS = "null_reasons"


def finite(value: Any, path: str = "") -> tuple[Any, dict[str, str]]:
    """``value`` with every NaN or infinity replaced by None, and why each None is there.

    JSON has no NaN or infinity (Python's ``json`` writes bare ``NaN``/``Infinity`` tokens that
    other parsers refuse). The reasons map a dotted path (``metrics.ttft_p99_ms.median``) to
    ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``: a latency no request reached, a ratio to zero.
    """
    reasons: dict[str, str] = {}

    def walk(v: Any, at: str) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            reasons[at] = "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
            return None
        if isinstance(v, Mapping):
            return {str(k): walk(x, f"{at}.{k}" if at else str(k)) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [walk(x, f"{at}[{i}]") for i, x in enumerate(v)]
        return v

    return walk(value, path), reasons


def finite_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON object without NaN or infinity; where one was, ``null_reasons`` says what it was."""
    clean, reasons = finite(record)
    if reasons:
        clean[NULL_REASONS] = reasons
    return dict(clean)


def dumps(value: Any, **kwargs: Any) -> str:
    """Strict JSON of ``value`` (records in a list each get their own ``null_reasons``)."""
    if isinstance(value, Mapping):
        value = finite_record(value)
    elif isinstance(value, list | tuple) and all(isinstance(v, Mapping) for v in value):
        value = [finite_record(v) for v in value]
    else:
        value, _ = finite(value)
    return json.dumps(value, allow_nan=False, **kwargs)
