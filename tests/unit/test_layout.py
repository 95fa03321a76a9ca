"""The tree keeps the shape the layout issue gave it: few modules at the top of ``tuner/``,
the commands under ``tuner/cli/`` and no module too long to read. One concept is one module
whatever its length: the line budget only flags a module that has clearly become several."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_TOP_MODULES = 8
MAX_LINES = 1000


def _modules(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py"))


def test_few_modules_at_the_top_of_tuner() -> None:
    top = sorted(p.name for p in (ROOT / "tuner").glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_no_module_is_over_the_line_budget() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _modules("tuner", "api")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_typer_is_imported_by_the_command_line_only() -> None:
    """Commands (typer) live in tuner/cli/; the core below it never parses arguments."""
    offenders = []
    for path in _modules("tuner", "api"):
        if (ROOT / "tuner" / "cli") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "typer" or n.startswith("typer.") for n in names):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
