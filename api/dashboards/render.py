"""Templates and the filters they use. Everything user-supplied reaches the page escaped:

- HTML: Jinja2 autoescape is on for every template (study names, notes, configs, failure
  details and log text are all plain strings to it);
- data for the charts: :func:`script_json`, which is embedded in a
  ``<script type="application/json">`` block, so nothing in it can end the block or open a tag.
"""

from __future__ import annotations

import functools
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
import markupsafe

from tuner.domain.jsonable import finite
from tuner.study import runner_gone

TEMPLATES = Path(__file__).parent / "templates"
# The characters script_json escapes, to their JSON escapes (\uXXXX).
_SCRIPT_ESCAPES = {ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}


def script_json(value: Any) -> str:
    """``value`` as JSON that is safe inside a ``<script>`` element.

    ``<``, ``>`` and ``&`` become ``\\u003c``/``\\u003e``/``\\u0026`` (so ``</script>`` or
    ``<!--`` cannot appear), and U+2028/U+2029 are escaped for old JavaScript parsers.
    ``JSON.parse`` reads the text back unchanged. NaN and infinity, which JSON lacks, become
    null (a gap in a chart).
    """
    text = json.dumps(finite(value)[0], ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.translate(_SCRIPT_ESCAPES)


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for a table cell; an em dash when there is none."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:,.{digits}f}"


def timestamp(value: float | None) -> str:
    if value is None:
        return "—"
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M UTC")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def url_part(value: str) -> str:
    """One path segment: every reserved character (``/`` too) percent-encoded."""
    return quote(value, safe="")


@functools.cache
def environment() -> jinja2.Environment:
    """The one environment, built on first use (it only caches compiled templates)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,  # a misspelt variable is an error, not a blank
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        # Markup: the text is already safe in a <script> block (see script_json), and HTML
        # escaping would turn its quotes into entities, which a script block does not decode.
        script_json=lambda value: markupsafe.Markup(script_json(value)),
        fmt=fmt,
        timestamp=timestamp,
        duration=duration,
        url_part=url_part,
        runner_gone=runner_gone,
    )
    return env
