"""``create_app(settings)``: the recommendations API as a FastAPI app.

The app receives its storage (a database URL or a ready Repository) through
:class:`api.settings.ApiSettings`; nothing is built at import time and there are no globals,
so tests build as many apps as they like. Routes read through ``app.state`` (see
:mod:`api.deps`); the dashboards (:mod:`api.dashboards`) are mounted beside them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import RedirectResponse

import tuner
from api.dashboards import mount_static, router
from api.deps import known_query
from api.docs import install_docs
from api.errors import install_error_handlers
from api.index import StudyIndex
from api.routes import catalog, health, recommendations, sizing, studies
from api.settings import ApiSettings
from tuner.db import Repository


def create_app(settings: ApiSettings) -> FastAPI:
    """Build the app over ``settings.storage``. Raises StorageError if the database is unusable."""
    engine = None
    if isinstance(settings.storage, Repository):
        repo = settings.storage
    else:
        from tuner.db import ensure_ready, make_engine

        ensure_ready(settings.storage, auto_upgrade=True)  # tuner's tables in an empty database
        engine = make_engine(settings.storage)
        repo = Repository(engine)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if engine is not None:  # only an engine this app opened
            engine.dispose()

    app = FastAPI(
        title=settings.title,
        version=tuner.__version__,
        summary="Measured vLLM serving configurations: recommendations, studies and trials.",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.repo = repo
    # The Optuna storage (same database) for the dashboards' parameter importances.
    app.state.storage_url = settings.storage if isinstance(settings.storage, str) else None
    app.state.index = StudyIndex(repo)
    install_error_handlers(app)
    install_docs(app)
    for module in (recommendations, studies, sizing, catalog, health):
        app.include_router(module.router, dependencies=[Depends(known_query)])
    app.include_router(router)
    mount_static(app)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    app.add_middleware(NoSniff)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "X-API-Key"],
        )
    return app


class NoSniff:
    """Every answer says ``X-Content-Type-Options: nosniff``: a browser takes JSON (and the log
    tails and names in it) for what its Content-Type says, never for a page or a script.
    Plain ASGI: it adds one header and nothing per request beyond that."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if not any(k.lower() == b"x-content-type-options" for k, _ in headers):
                    headers.append((b"x-content-type-options", b"nosniff"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, sending)
