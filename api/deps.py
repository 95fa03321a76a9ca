"""FastAPI dependencies: what a route may ask for. Everything comes from ``app.state``, which
:func:`api.app.create_app` fills; there are no module-level objects.

The dashboards package uses the same ones: ``RepoDep`` for the repository, ``IndexDep`` for the
cached snapshots of complete trials.
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError
from api.index import StudyIndex
from api.settings import ApiSettings
from tuner.db import Repository

_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="the API key")
_bearer = HTTPBearer(auto_error=False, description="the API key as a bearer token")


def _state(name: str) -> Any:
    def get(request: Request) -> Any:
        return getattr(request.app.state, name)

    return Depends(get)


def known_query(request: Request) -> None:
    """422 for a query parameter the route does not take: ``?status=failed`` on the trials
    route (whose filter is ``state``) answered every trial, as if it had filtered them."""
    from fastapi.exceptions import RequestValidationError

    route = request.scope.get("route")
    if getattr(route, "dependant", None) is None:
        return
    todo: list[Any] = [route.dependant]  # type: ignore[union-attr]
    taken: set[str] = set()
    while todo:  # the route's own parameters and those of its dependencies
        dependant = todo.pop()
        taken.update(p.alias for p in dependant.query_params)
        todo.extend(dependant.dependencies)
    unknown = [name for name in dict.fromkeys(request.query_params) if name not in taken]
    if unknown:
        takes = ", ".join(sorted(taken)) or "none"
        raise RequestValidationError(
            [
                {"type": "extra_forbidden", "loc": ("query", name), "msg": f"not a parameter "
                 f"of this endpoint (it takes: {takes})", "input": request.query_params[name]}
                for name in unknown
            ]
        )  # fmt: skip


SettingsDep = Annotated[ApiSettings, _state("settings")]
RepoDep = Annotated[Repository, _state("repo")]
IndexDep = Annotated[StudyIndex, _state("index")]


def require_api_key(
    settings: SettingsDep,
    api_key: Annotated[str | None, Security(_api_key_header)] = None,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)] = None,
) -> None:
    """Let a write through only with the configured key (``X-API-Key`` or ``Bearer``).

    403 when the server has no key (writes are off), 401 when the key is missing or wrong.
    """
    env = settings.api_key_env
    if settings.api_key is None:
        raise ApiError(
            403,
            "writes_disabled",
            "this server accepts no writes: no API key is configured",
            hint=f"set the environment variable {env} to a secret before `tuner serve` "
            f"(e.g. export {env}=$(openssl rand -hex 32)), then send it as X-API-Key",
        )
    given = api_key or (bearer.credentials if bearer is not None else None)
    if not given:
        message = "this endpoint needs an API key"
        hint = f"send the value of {env} as header X-API-Key or Authorization: Bearer"
    # compare_digest: the time taken must not tell how much of the key was right.
    elif not hmac.compare_digest(given.encode(), settings.api_key.encode()):
        message, hint = "wrong API key", f"send the value of {env} the server was started with"
    else:
        return
    raise ApiError(401, "unauthorized", message, hint=hint, headers={"WWW-Authenticate": "Bearer"})


WriteAccess = Depends(require_api_key)
