#!/usr/bin/env python3
"""Full-page PNG screenshots of the dashboards over recorded study databases.

For each ``--db PATH`` (paired in order with a ``--prefix``), the database is copied to a
temporary directory (serving may run migrations or write a WAL: the recorded file is never
touched), ``tuner serve`` is started on the copy on a free loopback port, and Debian's headless
Chromium, driven by Playwright (the Python package only: no browser is downloaded), saves:

- ``<prefix>overview.png``: the overview, ``/ui/``;
- ``<prefix>study-<name>.png``: the page of every study in the database;
- ``<prefix>compare-<id>.png``: the page of every comparison in the database.

Each page is captured once every plotly chart on it has drawn (or said it has nothing to draw).
The server is stopped at the end, also on error or Ctrl-C.

Usage (from the repository root)::

    .venv/bin/python scripts/result-screenshots.py --out docs/screenshots \\
        --db studies/results/ernie-0.3b-h200/tuner-gpu.db --prefix h200- \\
        --db studies/results/ernie-0.3b-h200/claims-h200.db --prefix h200-claims-

Exit status: 0 when every page answered 200 with no JavaScript error, 1 when some page did not
(its screenshot is still saved, to look at), 2 on bad arguments or a server that would not start.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tuner.testing.browser import CHROMIUM_ARGS, chromium_executable

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
# Every chart element has drawn: plotly's SVG is there, or charts.js said there is nothing to draw.
CHARTS_DRAWN = """() => Array.from(document.querySelectorAll('[data-chart]')).every(
    el => el.querySelector('.main-svg') !== null || el.classList.contains('chart-empty'))"""


class ScriptError(Exception):
    """Something the user must fix (arguments, missing browser, server not starting)."""


@dataclass
class Shot:
    path: Path
    url: str
    status: int
    problems: list[str] = field(default_factory=list)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Screenshots of the tuner dashboards over recorded databases.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="--db and --prefix pair up in order: the Nth --prefix names the Nth --db's files.",
    )
    parser.add_argument("--db", action="append", required=True, type=Path, help="SQLite file")
    parser.add_argument(
        "--prefix", action="append", default=None, help="file name prefix, e.g. h200-"
    )
    parser.add_argument("--out", required=True, type=Path, help="directory for the PNGs")
    parser.add_argument("--width", type=int, default=1280, help="viewport width (px)")
    parser.add_argument("--height", type=int, default=900, help="viewport height (px)")
    parser.add_argument(
        "--python", type=Path, default=DEFAULT_PYTHON, help="python that has tuner installed"
    )
    parser.add_argument(
        "--chromium", default=None, help="browser binary (default: $TUNER_CHROMIUM, chromium)"
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per wait")
    args = parser.parse_args(argv)
    prefixes = args.prefix or []
    if len(prefixes) != len(args.db):
        parser.error(
            f"{len(args.db)} --db but {len(prefixes)} --prefix: give one --prefix per --db"
        )
    for db in args.db:
        if not db.is_file():
            parser.error(f"--db {db}: no such file")
    return args


def find_chromium(given: str | None) -> str:
    """The Chromium binary, found as the browser tests find it."""
    exe = given or chromium_executable()
    if exe is None:
        raise ScriptError("chromium not found: apt-get install -y chromium, or pass --chromium")
    return exe


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def copy_db(src: Path, into: Path) -> Path:
    """A copy of ``src`` (and its -wal/-shm files) in ``into``; the original is only read."""
    dest = into / src.name
    shutil.copyfile(src, dest)
    for suffix in ("-wal", "-shm"):
        side = src.with_name(src.name + suffix)
        if side.exists():
            shutil.copyfile(side, into / side.name)
    return dest


@contextmanager
def served(python: Path, db: Path, log: Path, timeout: float) -> Iterator[str]:
    """``tuner serve`` on ``db``; yields its base URL once /healthz answers, stops it after."""
    port = free_port()
    cmd = [str(python), "-m", "tuner", "serve", "--storage", f"sqlite:///{db}"]
    cmd += ["--port", str(port)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TUNER_API_KEY", None)  # read-only: no writes, whatever the caller's shell holds
    with log.open("wb") as sink:
        # Its own process group, so that stopping it stops anything it started.
        proc = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(proc, base, log, timeout)
        yield base
    finally:
        stop(proc)


def wait_healthy(proc: subprocess.Popen[bytes], base: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise ScriptError(f"tuner serve exited with {proc.returncode}:\n{tail(log)}")
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise ScriptError(f"tuner serve: no /healthz within {timeout:g} s:\n{tail(log)}")
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT (uvicorn's clean shutdown), then SIGKILL to the group if it lingers."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def tail(log: Path, lines: int = 20) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def study_names(base: str) -> list[str]:
    """Every study the API lists, oldest first (the API lists newest first)."""
    with urllib.request.urlopen(base + "/v1/studies", timeout=10) as answer:
        body = json.load(answer)
    return [item["name"] for item in reversed(body["items"])]


def comparison_ids(db: Path) -> list[int]:
    """The comparison ids in the (copied) database: the API has no route that lists them."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT id FROM tuner_comparisons ORDER BY id").fetchall()
    finally:
        conn.close()
    return [int(r[0]) for r in rows]


def slug(text: str) -> str:
    """A file-name-safe form of a study name (they may hold / or spaces)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "unnamed"


def capture(context: Any, url: str, path: Path, timeout: float) -> Shot:
    """Load ``url``, wait for its charts, save a full-page PNG; note what went wrong."""
    page = context.new_page()
    shot = Shot(path, url, 0)
    page.on("console", lambda m: shot.problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: shot.problems.append(f"uncaught: {e}"))
    try:
        response = page.goto(url, wait_until="load", timeout=timeout * 1000)
        shot.status = 0 if response is None else response.status
        try:
            page.wait_for_function(CHARTS_DRAWN, timeout=timeout * 1000)
        except Exception as exc:  # Playwright's TimeoutError: still save what is there
            shot.problems.append(f"charts not drawn within {timeout:g} s: {exc}")
        page.evaluate("() => document.fonts.ready")
        # plotly lays out once more after a resize observer fires; one frame settles it.
        page.wait_for_timeout(300)
        page.screenshot(path=str(path), full_page=True, type="png")
    finally:
        page.close()
    if shot.status != 200:
        shot.problems.append(f"HTTP {shot.status}")
    return shot


def shoot_db(context: Any, args: argparse.Namespace, db: Path, prefix: str) -> list[Shot]:
    with tempfile.TemporaryDirectory(prefix="tuner-shots-") as tmp:
        copy = copy_db(db, Path(tmp))
        with served(args.python, copy, Path(tmp) / "serve.log", args.timeout) as base:
            pages = [("/ui/", f"{prefix}overview.png")]
            pages += [
                (f"/ui/studies/{quote(name, safe='')}", f"{prefix}study-{slug(name)}.png")
                for name in study_names(base)
            ]
            pages += [
                (f"/ui/compare/{cid}", f"{prefix}compare-{cid}.png") for cid in comparison_ids(copy)
            ]
            shots = []
            for path, name in pages:
                shot = capture(context, base + path, args.out / name, args.timeout)
                if shot.status >= 500:  # the server's traceback says why
                    shot.problems.append("server log:\n" + tail(Path(tmp) / "serve.log", 6))
                shots.append(shot)
            return shots


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        chromium = find_chromium(args.chromium)
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("the playwright Python package is not installed", file=sys.stderr)
        return 2
    except ScriptError as exc:
        print(exc, file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    shots: list[Shot] = []
    try:
        with (
            tempfile.TemporaryDirectory(prefix="tuner-chromium-") as profile,
            sync_playwright() as pw,
        ):
            context = pw.chromium.launch_persistent_context(
                user_data_dir=profile,
                executable_path=chromium,
                headless=True,
                args=list(CHROMIUM_ARGS),
                viewport={"width": args.width, "height": args.height},
            )
            try:
                for db, prefix in zip(args.db, args.prefix, strict=True):
                    shots += shoot_db(context, args, db, prefix)
            finally:
                context.close()
    except ScriptError as exc:
        print(exc, file=sys.stderr)
        return 2
    for shot in shots:
        size = shot.path.stat().st_size // 1024 if shot.path.exists() else 0
        state = "ok" if not shot.problems else "PROBLEMS: " + "; ".join(shot.problems)
        print(f"{shot.path}  {size} KB  {shot.url}  {state}")
    return 1 if any(s.problems for s in shots) else 0


if __name__ == "__main__":
    sys.exit(main())
