"""Static files of the dashboards: our CSS and script under ``/ui/static``, and plotly.js from
the installed ``plotly`` Python package (never a CDN: the pages work offline)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from tuner.errors import EnvironmentProblem

STATIC = Path(__file__).parent / "static"
STATIC_PREFIX = "/ui/static"


def mount_static(app: FastAPI) -> None:
    """Serve ``static/`` at ``/ui/static``, then answer any other ``/ui/`` address with the 404
    page (call once per app, after including the router)."""
    from api.dashboards.routes import unknown_page

    app.mount(STATIC_PREFIX, StaticFiles(directory=STATIC), name="ui-static")
    app.add_api_route(
        "/ui/{rest:path}",
        unknown_page,
        methods=["GET", "HEAD"],
        response_class=HTMLResponse,
        include_in_schema=False,
    )


def plotly_js_path() -> Path:
    """``plotly.min.js`` as the ``plotly`` package ships it (under ``package_data/``).

    Found without importing plotly (its import is slow and not needed to serve a file).
    Raises EnvironmentProblem when the package is missing.
    """
    spec = importlib.util.find_spec("plotly")
    origin = spec.origin if spec is not None else None
    path = Path(origin).parent / "package_data" / "plotly.min.js" if origin else None
    if path is None or not path.is_file():
        raise EnvironmentProblem(
            "plotly.min.js not found: the dashboards need the `plotly` Python package",
            hint="pip install plotly (it ships plotly.js; no CDN is used)",
        )
    return path
