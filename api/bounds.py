"""The limits of what the API takes, defined once: what the database can hold, and the grammar
of the few strings it parses (an SLO, a vLLM version).

Routes put them in their ``Path``/``Query`` declarations and the POST body in its schema
(:mod:`api.spec_body`), so the OpenAPI document states them and FastAPI's validation enforces
them with the usual 422: an id or offset beyond what a column holds never reaches the database
(SQLite's integers are 64-bit, PostgreSQL's ``INTEGER`` 32-bit: the narrower one is the bound).
"""

from __future__ import annotations

from itertools import permutations
from typing import Annotated, Any

from fastapi import Query
from sqlalchemy import String
from sqlalchemy.orm import InstrumentedAttribute

from api.errors import bad_request
from tuner.catalog import MAX_GPU_PRICE
from tuner.db import StudyModel
from tuner.domain import Slo
from tuner.domain.workload import parse_slo

INT_MAX = 2**31 - 1  # tuner's Integer columns on PostgreSQL (SQLite would take 2**63 - 1)
PAGE_MAX = 1000  # trials in one page


def column_length(column: InstrumentedAttribute[str] | InstrumentedAttribute[str | None]) -> int:
    """The width of a String column of tuner's tables."""
    kind = column.property.columns[0].type
    assert isinstance(kind, String) and kind.length is not None, column
    return int(kind.length)


STUDY_NAME_MAX = column_length(StudyModel.name)
MODEL_MAX = column_length(StudyModel.model)
GPU_MAX = column_length(StudyModel.gpu)
WORKLOAD_MAX = column_length(StudyModel.workload)
VERSION_MAX = column_length(StudyModel.vllm_version)
TEXT_MAX = 10_000  # free text (notes, arguments): the columns have no width, a request has one

NO_NUL = r"^[^\x00]*$"  # PostgreSQL's text cannot hold NUL

# An SLO as tuner.domain.workload.parse_slo reads it: NAME=DURATION items, each name at most
# once (so every order of every subset is spelled out), a duration a positive number of ms or s,
# spaces allowed around the separators as on the command line.
_DURATION = r"(?:[1-9][0-9]{0,8}(?:\.[0-9]{1,16})?|0\.[0-9]{0,15}[1-9][0-9]{0,15})(?:ms|s)?"
SLO_NAMES = ("ttft_p99", "itl_p99", "e2e_p99")


def _slo_pattern() -> str:
    items = {name: f"{name}(?:_ms)? *= *{_DURATION}" for name in SLO_NAMES}
    orders = [
        " *, *".join(items[name] for name in order)
        for size in range(1, len(SLO_NAMES) + 1)
        for order in permutations(SLO_NAMES, size)
    ]
    return "^ *(?:|[Nn][Oo][Nn][Ee]|" + "|".join(f"(?:{o})" for o in orders) + ") *$"


SLO_PATTERN = _slo_pattern()
SLO_EXAMPLE = "ttft_p99=500ms,e2e_p99=10s"


def slo_param(description: str) -> Any:
    """The ``Query`` of an ``slo`` parameter (read by :func:`slo_query`)."""
    return Query(pattern=SLO_PATTERN, description=description, examples=[SLO_EXAMPLE])


def pattern_problem(name: str, value: object) -> str:
    """A parameter that does not match its pattern, in words rather than the pattern itself
    (the SLO's runs to kilobytes): the parser's own message where it has one."""
    if name == "slo" and isinstance(value, str):
        try:
            parse_slo(value)
        except ValueError as exc:
            return str(exc)
        return (
            "an SLO here takes NAME=DURATION items, each name once, a duration a plain decimal "
            f"number with ms or s, e.g. {SLO_EXAMPLE}"
        )
    return "does not have the form this parameter takes (its pattern is in /openapi.json)"


def slo_query(text: str | None) -> Slo | None:
    """The ``slo`` query parameter (SLO_PATTERN checked it); None when absent or empty."""
    if text is None or not text.strip():
        return None
    try:
        return parse_slo(text)
    except ValueError as exc:
        raise bad_request(f"query parameter slo: {exc}", "e.g. slo=ttft_p99=500ms") from None


# The price per GPU-hour a reading takes, as the CLI's --gpu-price (tuner best, tuner size):
# the catalog's bounds, stated in the schema, so that a price outside them is a 422.
GpuPriceQuery = Annotated[
    float | None,
    Query(
        ge=0,
        le=MAX_GPU_PRICE,
        allow_inf_nan=False,
        description="US dollars per GPU-hour for the $ figures, as the CLI's --gpu-price "
        "(default: the study's own price, else the catalog's list-price assumption)",
    ),
]


# A vLLM version as packaging reads it (a subset of PEP 440): 0.12.0, v0.11.1rc2, 0.32.0+cpu.
VERSION_PATTERN = (  # or empty: no version given, as for the other optional parameters
    r"^(?:v?[0-9]{1,4}(?:\.[0-9]{1,4}){0,3}(?:(?:a|b|rc)[0-9]{1,4})?(?:\.post[0-9]{1,4})?"
    r"(?:\.dev[0-9]{1,4})?(?:\+[a-z0-9]{1,16}(?:\.[a-z0-9]{1,16}){0,3})?)?$"
)
