"""optuna-dashboard (the Optuna project's web UI) on a tuner store, in headless Chromium: it names
the objectives as tuner does and shows tuner's numbers as user attributes (``tuner.study.attrs``).

The dashboard runs as its own process (its CLI, on a free loopback port) over the database the
other browser tests browse (``tests/browser/dashdata.py``): a real study through the fake server
and a capacity study over a load curve. Skipped without optuna-dashboard, unless
TUNER_REQUIRE_BROWSER=1 (then it fails and says what to install).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.conftest import _unavailable
from tests.browser.dashdata import CURVE_STUDY, STUDY, DashboardDb
from tuner.domain import Objective, TrialStatus
from tuner.runner.ports import free_port
from tuner.study.attrs import metric_names

START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class OptunaDashboard:
    base_url: str
    study_ids: dict[str, int]  # Optuna's study id by name, as the dashboard's API lists them
    db: DashboardDb


@pytest.fixture(scope="module")
def dashboard_cli(chromium: str) -> str:
    """The optuna-dashboard command (after ``chromium``: no browser skips first)."""
    exe = Path(sys.executable).with_name("optuna-dashboard")
    found = str(exe) if exe.exists() else shutil.which("optuna-dashboard")
    if importlib.util.find_spec("optuna_dashboard") is None or found is None:
        _unavailable("optuna-dashboard is not installed (pip install optuna-dashboard)")
    assert found is not None
    return found


@pytest.fixture(scope="module")
def optuna_dashboard(
    dashboard_cli: str, dashboard_db: DashboardDb, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OptunaDashboard]:
    """``optuna-dashboard sqlite:///... --host 127.0.0.1 --port N`` in a subprocess, one server
    process (wsgiref), stopped at the end of the module."""
    port = free_port("127.0.0.1")
    log = tmp_path_factory.mktemp("optuna-dashboard") / "server.log"
    argv = [dashboard_cli, dashboard_db.url, "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen([*argv, "--server", "wsgiref", "--quiet"], stdout=out, stderr=out)
    try:
        base = f"http://127.0.0.1:{port}"
        yield OptunaDashboard(base, _wait_for_studies(proc, base, log), dashboard_db)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _wait_for_studies(proc: subprocess.Popen[bytes], base: str, log: Path) -> dict[str, int]:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"optuna-dashboard exited ({proc.returncode}): {log.read_text()}")
        try:
            studies = httpx.get(f"{base}/api/studies", timeout=5).json()["study_summaries"]
            return {s["study_name"]: s["study_id"] for s in studies}
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"optuna-dashboard did not answer: {log.read_text()}") from None
            time.sleep(0.1)


@pytest.fixture()
def page(browser: Any, optuna_dashboard: OptunaDashboard) -> Iterator[Any]:
    """A page that fails the test if the dashboard loads anything from beyond it."""
    page = browser.new_page()
    foreign: list[str] = []
    local = (optuna_dashboard.base_url, "data:", "blob:")
    page.on("request", lambda r: None if r.url.startswith(local) else foreign.append(r.url))
    try:
        yield page
        assert foreign == [], f"requests outside optuna-dashboard: {foreign}"
    finally:
        page.close()


def test_study_pages_name_the_objectives(
    page: Any, optuna_dashboard: OptunaDashboard, screenshots: Path
) -> None:
    ids = optuna_dashboard.study_ids
    assert {STUDY, CURVE_STUDY} <= set(ids)
    for name, objective in ((CURVE_STUDY, Objective.CAPACITY), (STUDY, Objective.BALANCED)):
        page.goto(f"{optuna_dashboard.base_url}/dashboard/studies/{ids[name]}")
        for metric in metric_names(objective):
            page.get_by_text(metric).first.wait_for(timeout=15_000)
        assert "Objective 0" not in page.inner_text("body")
    page.locator("#graph-hyperparameter-importances .main-svg").first.wait_for(timeout=15_000)
    page.screenshot(path=str(screenshots / "optuna-dashboard.png"), full_page=True)


def test_trial_list_shows_tuner_user_attributes(
    page: Any, optuna_dashboard: OptunaDashboard, screenshots: Path
) -> None:
    repo = optuna_dashboard.db.repo
    trials = {t.number: t for t in repo.list_trials(STUDY, limit=None)}
    baseline, finding = trials[0], trials[1]
    assert baseline.status is TrialStatus.COMPLETE and baseline.effective_backend
    assert finding.failure is not None

    study_id = optuna_dashboard.study_ids[STUDY]
    page.goto(f"{optuna_dashboard.base_url}/dashboard/studies/{study_id}/trials")
    details = page.get_by_text("User Attributes").locator("..")
    details.wait_for(timeout=15_000)
    text = details.inner_text()  # the first trial: vLLM's defaults
    for attr in ("output_throughput_tok_s", "ttft_p99_ms", "e2e_p99_ms", "attention_backend"):
        assert attr in text
    assert "gpu_memory_gib" in text or "host_rss_gib" in text  # no GPU telemetry on a test host
    assert baseline.effective_backend in text
    page.screenshot(path=str(screenshots / "optuna-dashboard-trial.png"), full_page=True)

    page.get_by_text("Trial 1", exact=True).first.click()  # the finding: it did not fit
    page.get_by_text(finding.failure.value).first.wait_for(timeout=15_000)
    assert "failure_class" in page.get_by_text("User Attributes").locator("..").inner_text()
    page.screenshot(path=str(screenshots / "optuna-dashboard-finding.png"), full_page=True)
