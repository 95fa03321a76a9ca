"""OpenAPI docs served from this machine: Swagger UI and ReDoc without any CDN.

FastAPI's default /docs loads swagger-ui from a CDN, which a machine without internet access
(a GPU box in a closed network) cannot reach. The ``fastapi-offline`` package ships Swagger UI
5 (which renders OpenAPI 3.1, unlike the 4.x that other bundles carry) and ReDoc; we serve its
files and write the two pages with FastAPI's own helpers pointed at them.

Both pages carry a content-security policy: scripts from this app only, plus the one inline
script Swagger UI's page starts itself with, allowed by its SHA-256 (computed from the page
as written, so it cannot drift from it); a script injected anywhere else would not run.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = Path(fastapi_offline.__file__).parent / "static"
STATIC_PREFIX = "/_docs-static"
_INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", re.DOTALL)


def csp(page: str) -> str:
    """The content-security policy of a docs page: this app's scripts and the page's own inline
    ones (by hash); inline styles, which both UIs set; ReDoc's workers run from blobs."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"
        for body in _INLINE_SCRIPT.findall(page)
    )
    return (
        f"default-src 'self'; script-src 'self' {hashes}".rstrip()
        + "; style-src 'self' 'unsafe-inline'; img-src 'self' data:; worker-src 'self' blob:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


def _serve(app: FastAPI, path: str, page: HTMLResponse) -> None:
    """Serve the fixed ``page`` at ``path`` with its content-security policy."""
    body = bytes(page.body).decode()
    headers = {"Content-Security-Policy": csp(body)}
    app.get(path, include_in_schema=False)(lambda: HTMLResponse(body, headers=headers))


def install_docs(app: FastAPI) -> None:
    """Serve Swagger UI at ``/docs`` and ReDoc at ``/redoc`` from local files only.

    The app must be built with ``docs_url=None, redoc_url=None`` (FastAPI's CDN pages off).
    """
    app.mount(STATIC_PREFIX, StaticFiles(directory=ASSETS), name="docs-static")
    openapi_url, title = app.openapi_url or "/openapi.json", f"{app.title} API"
    oauth_redirect = "/docs/oauth2-redirect"
    favicon = f"{STATIC_PREFIX}/favicon.png"
    swagger = get_swagger_ui_html(
        openapi_url=openapi_url,
        title=title,
        swagger_js_url=f"{STATIC_PREFIX}/swagger-ui-bundle.js",
        swagger_css_url=f"{STATIC_PREFIX}/swagger-ui.css",
        swagger_favicon_url=favicon,
        oauth2_redirect_url=oauth_redirect,
        # No validator badge: Swagger UI would send the spec to validator.swagger.io.
        swagger_ui_parameters={"validatorUrl": None},
    )
    _serve(app, "/docs", swagger)
    _serve(app, oauth_redirect, get_swagger_ui_oauth2_redirect_html())
    redoc = get_redoc_html(
        openapi_url=openapi_url,
        title=title,
        redoc_js_url=f"{STATIC_PREFIX}/redoc.standalone.js",
        redoc_favicon_url=favicon,
        with_google_fonts=False,
    )
    _serve(app, "/redoc", redoc)
