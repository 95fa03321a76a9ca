"""Every error the API sends is JSON with a human message, never a stack trace::

    {"error": "not_found", "message": "no study named 'x'", "hint": "GET /v1/studies ...", ...}

``error`` is a stable machine-readable code, ``message`` says what is wrong and ``hint`` what to
do; some errors add fields (the 404 of a recommendation names the nearest measured ones).
tuner's own exceptions map to statuses by class; anything unexpected is logged with its
traceback and answered with a plain 500.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from api.schemas import ErrorOut
from tuner.errors import (
    AmbiguousModel,
    EnvironmentProblem,
    SpecError,
    StorageError,
    TunerError,
    UsageError,
)

log = logging.getLogger("tuner.api")


class ApiError(Exception):
    """An error answer: HTTP ``status``, a code, a message, a hint and optional extra fields."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        hint: str = "",
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.hint = hint
        self.extra = dict(extra or {})
        self.headers = dict(headers or {})


def not_found(message: str, hint: str = "", **extra: Any) -> ApiError:
    return ApiError(404, "not_found", message, hint=hint, extra=extra)


def bad_request(message: str, hint: str = "") -> ApiError:
    """A parameter that parsed but means nothing (an unknown objective, a bad SLO): 422."""
    return ApiError(422, "invalid", message, hint=hint)


def responses(statuses: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses=``: each error status it can answer, with when, as ErrorOut."""
    return {status: {"model": ErrorOut, "description": text} for status, text in statuses.items()}


# The errors every route reading the database can answer.
MALFORMED = {422: "a parameter is missing, malformed or out of range (problems names each)"}
UNAVAILABLE = {503: "the database does not answer"}


def error_body(code: str, message: str, hint: str = "", **extra: Any) -> dict[str, Any]:
    return {"error": code, "message": message, "hint": hint, **extra}


def _status_of(exc: TunerError) -> tuple[int, str]:
    # Most specific first: SpecError is a UsageError.
    if isinstance(exc, SpecError):
        return 422, "invalid_spec"
    if isinstance(exc, AmbiguousModel):  # which of them is a choice for the client
        return 409, "ambiguous_model"
    if isinstance(exc, UsageError):
        return 400, "bad_request"
    if isinstance(exc, StorageError):
        return 503, "storage_unavailable"
    if isinstance(exc, EnvironmentProblem):
        return 503, "environment"
    return 500, "tuner_error"


def describe_validation(errors: Sequence[Any]) -> list[dict[str, str]]:
    """pydantic's error list as ``[{"where": "query parameter limit", "problem": ...}]``."""
    out = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ())]
        if loc and loc[0] in ("query", "path", "header"):
            where = f"{loc[0]} parameter {'.'.join(loc[1:])}"
        elif loc and loc[0] == "body" and err.get("type") == "json_invalid":
            where = "request body"  # loc[1] is the character where decoding stopped
            at = f" at character {loc[1]}" if loc[1:] else ""
            error = (err.get("ctx") or {}).get("error")
            err = {**err, "msg": f"not valid JSON{at}" + (f" ({error})" if error else "")}
        elif loc and loc[0] == "body":
            where = "request body" + ("." + ".".join(loc[1:]) if loc[1:] else "")
        else:
            where = ".".join(loc) or "request"
        problem = str(err.get("msg", "invalid"))
        if err.get("type") == "string_pattern_mismatch" and loc:
            from api.bounds import pattern_problem  # bounds builds its 400s with this module

            problem = pattern_problem(loc[-1], err.get("input"))
        if "input" in err and loc and loc[0] != "body":
            problem += f" (got {err['input']!r})"
        out.append({"where": where, "problem": problem})
    return out


async def _api_error(_request: Request, exc: Exception) -> Any:
    assert isinstance(exc, ApiError)
    body = error_body(exc.code, exc.message, exc.hint, **exc.extra)
    return JSONResponse(body, exc.status, exc.headers)


async def _tuner_error(request: Request, exc: Exception) -> Any:
    assert isinstance(exc, TunerError)
    status, code = _status_of(exc)
    if status >= 500:
        log.error("%s %s failed: %s", request.method, request.url.path, exc)
    return JSONResponse(error_body(code, exc.message, exc.hint), status)


async def _validation_error(request: Request, exc: Exception) -> Any:
    assert isinstance(exc, RequestValidationError)
    problems = describe_validation(exc.errors())
    message = "; ".join(f"{p['where']}: {p['problem']}" for p in problems) or "invalid request"
    hint = "see /docs for the parameters this endpoint takes"
    sent = request.headers.get("content-type", "")
    if any(p["where"].startswith("request body") for p in problems) and "json" not in sent:
        # curl -d sends application/x-www-form-urlencoded unless told otherwise.
        hint = f"send the body as JSON with Content-Type: application/json (it came as {sent!r})"
    return JSONResponse(error_body("invalid", message, hint, problems=problems), 422)


async def _http_error(request: Request, exc: Exception) -> Any:
    assert isinstance(exc, StarletteHTTPException)
    method, path = request.method, request.url.path
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        message = f"no such endpoint: {method} {path}"
        if isinstance(exc.detail, str) and exc.detail != "Not Found":
            message = exc.detail
        body = error_body("not_found", message, "the endpoints are listed at /docs")
    elif exc.status_code == 405:
        allowed = ", ".join(_allowed_methods(request))
        headers["Allow"] = allowed
        message = f"{method} is not allowed on {path}"
        if allowed:
            message += f"; allowed: {allowed}"
        body = error_body("method_not_allowed", message, "the endpoints are listed at /docs")
    elif exc.status_code == 400:  # FastAPI's answer to a body it cannot decode
        hint = "send the body as UTF-8 JSON, nested at most a few hundred levels deep"
        body = error_body("bad_request", str(exc.detail), hint)
    else:
        body = error_body(f"http_{exc.status_code}", str(exc.detail))
    return JSONResponse(body, exc.status_code, headers)


def _allowed_methods(request: Request) -> list[str]:
    # Starlette's own Allow header names the first route on the path only, and FastAPI nests
    # included routers: ask the router which methods would match this path in full.
    allowed = []
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return allowed


async def _unexpected(request: Request, exc: Exception) -> Any:
    # The traceback goes to the server log only; the client learns nothing internal.
    log.error("%s %s raised an unexpected error", request.method, request.url.path, exc_info=exc)
    body = error_body(
        "internal", "internal error while answering this request", "the server log has details"
    )
    return JSONResponse(body, 500)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(TunerError, _tuner_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
