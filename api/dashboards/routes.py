"""The dashboard pages: ``/ui/`` (overview), ``/ui/studies/{name}``, ``/ui/compare/{id}``.

Contract with the app (see :func:`api.app.create_app`): ``app.state.repo``, the
:class:`~tuner.db.repository.Repository` to read, and ``app.state.storage_url``, the Optuna
storage URL for parameter importances (None: the study page uses
:func:`tuner.results.report.fallback_importances`).

Pages only read. An unknown study or comparison is a 404 page, an unreadable database a 503
page, each saying what to do; never a stack trace.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, HTMLResponse

from api.bounds import INT_MAX
from api.dashboards.assets import plotly_js_path
from api.dashboards.charts import compare_chart, study_charts
from api.dashboards.render import environment
from api.deps import RepoDep
from tuner.domain import Objective
from tuner.errors import TunerError
from tuner.results import (
    any_capacity,
    capacity_bound_note,
    comparison_report,
    overview,
    study_curves,
    study_report,
    trial_capacities,
)
from tuner.results.report.study import confirmation

log = logging.getLogger("tuner.dashboards")

router = APIRouter(prefix="/ui", include_in_schema=False)


def get_storage_url(request: Request) -> str | None:
    url = getattr(request.app.state, "storage_url", None)
    return url if isinstance(url, str) else None


StorageUrlDep = Annotated[str | None, Depends(get_storage_url)]


# Scripts only from this app (plotly.js and charts.js); an injected inline script would not run
# even if escaping failed somewhere. plotly.js sets inline styles, hence 'unsafe-inline' there.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)


def _page(template: str, status_code: int = 200, **context: object) -> HTMLResponse:
    return HTMLResponse(
        environment().get_template(template).render(**context),
        status_code=status_code,
        headers={"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"},
    )


def _error(status_code: int, title: str, error: TunerError | str, hint: str = "") -> HTMLResponse:
    message = error.message if isinstance(error, TunerError) else error
    hint = error.hint if isinstance(error, TunerError) else hint
    return _page(
        "error.html", status_code, title=title, message=message, hint=hint, status=status_code
    )


@router.get("/", response_class=HTMLResponse)
@router.head("/", response_class=HTMLResponse)
def overview_page(repo: RepoDep) -> HTMLResponse:
    try:
        studies = repo.list_studies()
        # Every trial: the failed ones say which configurations the canary broke.
        trials = {s.name: repo.list_trials(s.name, limit=None) for s in studies}
        comparisons = repo.list_comparisons()
    except TunerError as e:
        return _error(503, "storage unavailable", e)
    names = {s.id: s for s in studies}
    confirmed, unconfirmed = {}, {}
    for study_id in {c.study_id for c in comparisons if c.study_id in names}:
        study = names[study_id]
        own = [c for c in comparisons if c.study_id == study_id]
        summary = confirmation(study, trials[study.name], own)
        if summary is not None:
            confirmed[study.name] = summary.confirmed
            unconfirmed[study.name] = summary.not_confirmed
    others = [comparison_report(c) for c in comparisons if c.study_id is None]
    return _page(
        "overview.html",
        studies=studies,
        best=overview(studies, trials, confirmed, unconfirmed),
        comparisons=others,
    )


@router.get("/studies/{name:path}", response_class=HTMLResponse)
@router.head("/studies/{name:path}", response_class=HTMLResponse)
def study_page(name: str, repo: RepoDep, storage_url: StorageUrlDep) -> HTMLResponse:
    try:
        study = repo.get_study(name)
        if study is None:
            return _error(
                404, "no such study", f"no study named {name!r}", "the overview lists the studies"
            )
        trials = repo.list_trials(name, limit=None)
        comparisons = repo.list_comparisons(name)
    except TunerError as e:
        return _error(503, "storage unavailable", e)
    importances = _importances(storage_url, study.optuna_study_name, study.objective)
    report = study_report(study, trials, importances, comparisons)
    curves = study_curves(study, trials)
    capacities = trial_capacities(trials, study.spec)
    return _page(
        "study.html",
        r=report,
        curves=curves,
        capacities=capacities,
        show_capacity=any_capacity(capacities),
        capacity_note=capacity_bound_note(capacities),
        charts=study_charts(report, curves),
    )


def _importances(url: str | None, optuna_name: str, objective: str) -> dict[str, float] | None:
    """Optuna's importances, or None (the report then falls back) when they cannot be had."""
    if url is None:
        return None
    from tuner.results.importance import param_importances  # imports optuna: only when needed

    try:
        return param_importances(url, optuna_name, objective=Objective(objective))
    except (TunerError, ValueError) as e:
        # A study created without Optuna (imported rows) or an unreadable Optuna schema: the
        # page is still useful with the fallback.
        log.info("importances of %r from Optuna unavailable: %s", optuna_name, e)
        return None


@router.get("/compare/{comparison_id}", response_class=HTMLResponse)
@router.head("/compare/{comparison_id}", response_class=HTMLResponse)
def compare_page(comparison_id: str, repo: RepoDep) -> HTMLResponse:
    # Any text is a page: one that names no stored id is the 404 page, not a JSON 422 (or a
    # storage error past the columns' range).
    digits = comparison_id.isascii() and comparison_id.isdigit() and len(comparison_id) < 12
    number = int(comparison_id) if digits else 0
    try:
        row = repo.get_comparison(number) if 1 <= number <= INT_MAX else None
        studies = repo.list_studies() if row is not None and row.study_id is not None else []
    except TunerError as e:
        return _error(503, "storage unavailable", e)
    if row is None:
        return _error(
            404,
            "no such comparison",
            f"no comparison with id {comparison_id}",
            "`tuner compare` and confirmation runs record comparisons; the overview lists them",
        )
    study_name = next((s.name for s in studies if s.id == row.study_id), None)
    report = comparison_report(row)
    return _page("compare.html", c=report, study_name=study_name, charts=compare_chart(report))


@router.get("/vendor/plotly.min.js")
@router.head("/vendor/plotly.min.js")
def plotly_js() -> FileResponse:
    """plotly.js from the installed ``plotly`` Python package: the pages never load a CDN."""
    return FileResponse(
        plotly_js_path(),
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=86400"},
    )


def unknown_page(rest: str) -> HTMLResponse:
    """Any other address under /ui/: the 404 page, pointing at the overview (routed by
    :func:`api.dashboards.assets.mount_static`, after the static files)."""
    return _error(404, "no such page", f"no page at /ui/{rest}", "the overview is at /ui/")
