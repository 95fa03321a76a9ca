"""A knob's value typed by its ``vllm serve`` flag: one rule for specs, the command line and the
search space. A knob is a flag by its dest (``stream_interval``) or a key inside a JSON-valued
flag (``compilation_config.cudagraph_mode``); values are scalars, a JSON object its compact text.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from tuner.vllm.flags import Flag, FlagCatalog

# -- knobs: a flag, or a key inside a JSON-valued flag, with a typed value -------------------


def knob_flag(catalog: FlagCatalog, name: str) -> tuple[Flag, str | None] | None:
    """The flag a knob name means, and the key inside it for a JSON-valued flag's field:
    ``stream_interval`` / ``--stream-interval`` -> (stream-interval, None);
    ``compilation_config.cudagraph_mode`` -> (compilation-config, "cudagraph_mode").
    None when vLLM has no such flag."""
    head, dot, sub = name.strip().partition(".")
    flag = catalog.get(head)
    if flag is None:
        return None
    return flag, (sub.strip() if dot else None)


def knob_key(flag: Flag, sub: str | None = None) -> str:
    """How tuner names the knob: the flag's dest, ``dest.key`` inside a JSON-valued flag."""
    return flag.dest if sub is None else f"{flag.dest}.{sub}"


def typed_value(flag: Flag, raw: Any, sub: str | None = None) -> bool | int | float | str | None:
    """``raw`` (a TOML value, or a command-line word) as the value of ``flag`` (of the key
    ``sub`` inside it): None for ``"default"`` or vLLM's own default; ValueError saying what
    the flag takes otherwise. A JSON value becomes its compact text, keys sorted."""
    if raw is None or raw == "default":
        return None
    if sub is not None:
        if flag.type != "json":
            raise ValueError(f"{flag.option} takes no keys: it is not a JSON-valued flag")
        if not sub.isidentifier():
            raise ValueError(f"{sub!r} is not a key of {flag.option}")
        if isinstance(raw, float) and not math.isfinite(raw):
            raise ValueError(f"{flag.option}'s key {sub} takes a finite number, got {raw!r}")
        if isinstance(raw, bool | int | float | str):
            return raw
        raise ValueError(f"{flag.option}'s key {sub} takes a number, a name or true/false")
    if flag.takes_list:
        raise ValueError(
            f"{flag.option} takes a list of values; tuner searches single values only "
            "(pass a fixed list through [runner] extra_args)"
        )
    value = _converted(flag, raw)
    if flag.type != "json" and flag.default is not None and value == flag.default:
        return None  # vLLM's default spelled out: the same server as leaving it alone
    if flag.type == "bool" and value is False and not flag.negatable:
        if flag.default not in (None, False):
            raise ValueError(f"{flag.option} is a switch: it can only be turned on")
        return None
    return value


def _converted(flag: Flag, raw: Any) -> bool | int | float | str:
    kind = flag.type
    words = {"int": "an integer", "float": "a number", "bool": "true or false"}
    bad = ValueError(f"{flag.option} takes {words.get(kind, 'a value')}, got {raw!r}")
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        raise bad
    if isinstance(raw, bool):
        raise bad
    if kind == "int":
        if isinstance(raw, int):
            return raw
        if isinstance(raw, str) and re.fullmatch(r"-?\d+", raw.strip()):
            return int(raw)
        raise bad
    if kind == "float":
        if not isinstance(raw, int | float | str):
            raise bad
        try:
            number = float(raw)
        except ValueError:
            raise bad from None
        if not math.isfinite(number):
            raise ValueError(f"{flag.option} takes a finite number, got {raw!r}")
        return number
    if kind == "json":
        return _json_text(flag, raw)
    if not isinstance(raw, str | int | float):
        raise ValueError(f"{flag.option} takes a single value, got {raw!r}")
    text = str(raw)
    if flag.choices is not None and text not in flag.choices:
        shown = ", ".join(flag.choices[:12]) + (", ..." if len(flag.choices) > 12 else "")
        raise ValueError(f"{flag.option} takes one of {shown}; got {text!r}")
    return text


def _json_text(flag: Flag, raw: Any) -> str:
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            raise ValueError(f"{flag.option} takes a JSON object, got {raw!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{flag.option} takes a JSON object such as '{{\"key\": 1}}'")
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
