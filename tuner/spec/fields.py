"""Checks shared by everything tuner reads from people: study specs, claims files and command-line
options. Reading a TOML file, the type of one value, a workload override, a load ladder, an
interval level; and :func:`find_line`, which gives an error the line of the key it is about.

Each reader passes its own :class:`Fail`, which turns a problem into the error it reports (a
:class:`SpecError` naming the file and line, a :class:`UsageError` naming the option).
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Any, Protocol, get_args, get_origin, get_type_hints

from tuner.domain import Workload
from tuner.errors import SpecError


def _override_type(hint: Any) -> type:
    """``int`` for ``int``, ``float`` for ``float | None``, ``tuple`` for ``tuple[int, ...]``."""
    if isinstance(hint, UnionType):
        (hint,) = (t for t in get_args(hint) if t is not type(None))
    found: type = get_origin(hint) or hint
    return found


# Types of the workload overrides: Workload's fields but its name, trace and source; a float
# field also takes an integer.
WORKLOAD_TYPES: Mapping[str, type] = {
    name: _override_type(hint)
    for name, hint in get_type_hints(Workload).items()
    if name not in ("name", "trace", "source")
}
_KIND_NAMES: Mapping[type, str] = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
}


class Fail(Protocol):
    """Builds the error for a problem with ``key`` (its line looked up at or after the header
    of ``section`` when given); the checks raise what it returns."""

    def __call__(
        self, msg: str, key: str | None = None, hint: str = "", section: str | None = None
    ) -> Exception: ...


def read_toml(path: Path, what: str) -> tuple[dict[str, Any], str]:
    """The data and text of the TOML file ``path``; SpecError naming the file (and the line of
    a syntax error) when it cannot be read or parsed. ``what``: "spec", "claims"."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read {what} file: {exc.strerror}", path=str(path)) from None
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x})",
            path=str(path),
            line=exc.object[: exc.start].count(b"\n") + 1,
            hint="TOML files are UTF-8: save the file as UTF-8",
        ) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        # Python < 3.14 gives the line in the message only: "... (at line 3, column 5)".
        match = re.search(r"line (\d+)", str(exc))
        line = getattr(exc, "lineno", None) or (int(match.group(1)) if match else None)
        raise SpecError(f"not valid TOML: {exc}", path=str(path), line=line) from None


def typed_value(value: Any, kind: type, key: str, fail: Fail, section: str) -> Any:
    """``value`` itself when it is of ``kind`` (int, float, str or bool), else ``fail``'s error."""
    # bool is an int subclass, but `trials = true` is surely a mistake; an int is a fine float.
    accepted: tuple[type, ...] = (int, float) if kind is float else (kind,)
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, accepted):
        raise fail(f"{key} must be {_KIND_NAMES[kind]}, got {value!r}", key, section=section)
    return value


def workload_field(key: str, value: Any, fail: Fail) -> Any:
    """One override of a workload's field, typed: the value itself (a ladder as a tuple);
    problems (an unknown field, a value of the wrong type) raised through ``fail``."""
    kind = WORKLOAD_TYPES.get(key)
    if kind is None:
        raise fail(f"unknown workload field {key!r}", key, hint=f"fields: {sorted(WORKLOAD_TYPES)}")
    if kind is tuple:
        return ladder(value, key, fail)
    return typed_value(value, kind, key, fail, "workload")


def _number(text: str) -> Any:
    """``text`` as an int or a float where it is one, else as it is (refused by the check)."""
    for kind in (int, float):
        try:
            return kind(text.strip())
        except ValueError:
            pass
    return text


def ladder(value: Any, key: str, fail: Fail) -> tuple[float, ...] | tuple[int, ...]:
    """A load ladder: a non-empty list of positive numbers (integers for concurrencies); on
    the command line (``--workload-set``, whose commas part fields) its rungs are parted by
    semicolons, ``concurrency_ladder=4;16;64``, and one number is a ladder of one rung."""
    integers = key == "concurrency_ladder"
    kind = int if integers else (int, float)
    if isinstance(value, str) and ";" in value:
        value = [_number(v) for v in value.split(";") if v.strip()]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    if (
        not isinstance(value, list)
        or not value
        or not all(
            isinstance(v, kind) and not isinstance(v, bool) and 0 < v < math.inf for v in value
        )
    ):
        what = "positive integers" if integers else "positive numbers (requests per second)"
        raise fail(
            f"{key} must be a non-empty list of {what}, got {value!r} (on the command line: "
            f"{key}=4;16;64)",
            key,
            section="workload",
        )
    return tuple(int(v) for v in value) if integers else tuple(float(v) for v in value)


def valid_confidence(value: float) -> bool:
    """Whether ``value`` is an interval level tuner accepts (strictly between 0.5 and 1)."""
    return 0.5 < value < 1.0


def find_line(text: str, key: str, section: str | None = None) -> int | None:
    """The first line that defines ``key`` (a table header, ``key =``, ``{key =`` inside an
    inline table, or ``"key"`` inside an array), at or after ``section``'s header if given:
    the same key may be valid in an earlier section."""
    k, q = re.escape(key), "[\"']?"  # a key may be quoted ("compilation_config.x" must be)
    pattern = re.compile(
        rf"^\s*(\[+\s*{k}\s*\]+|{q}{k}{q}\s*=)|[{{,]\s*{q}{k}{q}\s*=|(^|[\[,])\s*[\"']{k}[\"']"
    )
    lines = text.splitlines()
    start = 0
    if section is not None:
        header = re.compile(rf"^\s*\[+\s*{re.escape(section)}\s*\]+")
        start = next((i for i, line in enumerate(lines) if header.match(line)), 0)
    for number, line in enumerate(lines[start:], start=start + 1):
        if pattern.search(line.split("#", 1)[0]):
            return number
    return None
