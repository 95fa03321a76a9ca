"""Headless Chromium as tuner drives it: for the browser tests and for screenshots of the
dashboards (``scripts/result-screenshots.py``). Debian's ``chromium``, driven by Playwright;
no browser download."""

from __future__ import annotations

import os
import shutil

# Headless, no sandbox (CI runs as root), and nothing that reaches beyond loopback.
CHROMIUM_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
INSTALL_HINT = (
    "apt-get update && apt-get install -y chromium; "
    "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 .venv/bin/pip install playwright"
)


def chromium_executable() -> str | None:
    """``$TUNER_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH, else None."""
    return (
        os.environ.get("TUNER_CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )
