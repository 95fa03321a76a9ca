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


def _console_writes(path: Path, root: Path = ROOT) -> list[str]:
    """Where ``path`` prints: print(), sys.stdout/stderr (or their __ originals), a terminal
    library (rich, typer, click) imported."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "print":
                found.append(f"{where} print()")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "sys" and node.attr.strip("_") in ("stdout", "stderr"):
                found.append(f"{where} sys.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "sys" and any(
                a.name.strip("_") in ("stdout", "stderr") for a in node.names
            ):
                found.append(f"{where} from sys import stdout/stderr")
            if node.module.split(".")[0] in ("rich", "typer", "click"):
                found.append(f"{where} imports {node.module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("rich", "typer", "click"):
                    found.append(f"{where} imports {alias.name}")
    return found


def test_the_load_generator_prints_nothing() -> None:
    """``tuner load``'s table and messages are the command line's (tuner/cli/load.py); the
    load package returns numbers and raises errors, and logs through ``logging`` only."""
    offenders = [line for path in _modules("tuner/load") for line in _console_writes(path)]
    assert offenders == []


def test_the_console_check_sees_each_way_of_printing(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sys\nimport rich.console\nfrom sys import stderr\nimport logging\n"
        "print('x')\nsys.stdout.write('x')\nsys.__stderr__.flush()\nlogging.info('x')\n"
    )
    assert sorted(_console_writes(probe, tmp_path)) == [
        "probe.py:2 imports rich.console",
        "probe.py:3 from sys import stdout/stderr",
        "probe.py:5 print()",
        "probe.py:6 sys.stdout",
        "probe.py:7 sys.__stderr__",
    ]


PROCESS_MODULES = ("subprocess", "signal", "multiprocessing")
PROCESS_CALLS = ("kill", "killpg", "system", "popen", "fork", "setsid", "waitpid")
# The flag probe runs in tuner.runner.interpreter; tuner/vllm/ keeps vLLM's language only.
VLLM_PROCESS_LEFT: set[str] = set()


def _process_handling(path: Path, root: Path = ROOT) -> list[str]:
    """Where ``path`` runs or signals processes: subprocess/signal/multiprocessing imported,
    os.kill and its kin called."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
            if node.module == "os":
                names += [f"os.{a.name}" for a in node.names if a.name in PROCESS_CALLS]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in PROCESS_CALLS
        ):
            found.append(f"{where} os.{node.attr}")
        for name in names:
            if name.split(".")[0] in PROCESS_MODULES or name.startswith("os."):
                found.append(f"{where} imports {name}")
    return found


def test_vllm_knows_flags_versions_and_logs_and_runs_no_process() -> None:
    """The vLLM process (start, watch, stop, signals, leases, ports) is tuner/runner/'s;
    tuner/vllm/ holds what vLLM says and takes: flags, versions, log language."""
    offenders = {line for path in _modules("tuner/vllm") for line in _process_handling(path)}
    assert offenders == VLLM_PROCESS_LEFT


def test_the_process_check_sees_each_way_of_handling_processes(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os\nimport subprocess\nfrom signal import SIGTERM\nfrom os import killpg\n"
        "os.kill(1, 0)\nos.path.join('a')\nimport multiprocessing.pool\n"
    )
    assert sorted(_process_handling(probe, tmp_path)) == [
        "probe.py:2 imports subprocess",
        "probe.py:3 imports signal",
        "probe.py:4 imports os.killpg",
        "probe.py:5 os.kill",
        "probe.py:7 imports multiprocessing.pool",
    ]


def test_the_package_docstring_quotes_the_import_layers() -> None:
    """tuner/__init__.py draws the layers; they are the import-linter contract's, in order."""
    import tomllib

    import tuner

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c["name"] == "imports point down the pipeline"
    ]
    assert tuner.__doc__ is not None
    drawn = []
    for line in tuner.__doc__.splitlines():
        words = line.strip().split("  ")[0] if line.startswith("    ") else ""
        if words.startswith(("tuner.", "api")):
            drawn.append(words)
    assert drawn == contract["layers"]
