"""tuner: measures vLLM serving configurations on real servers and recommends the best.

The packages stand in layers, top to bottom as the import-linter contract "imports point down
the pipeline" in pyproject.toml lists them: a module imports from its own package and from
the layers below, never from one above; packages that share a layer (``|``) do not import
each other::

    tuner.cli                                      the commands: arguments and printing
    api                                            the REST service and dashboards
    tuner.deploy | tuner.results | tuner.doctor    launch; recommendation, reports; doctor
    tuner.study                                    the Optuna loop, standings, the queue worker
    tuner.abtest                                   interleaved launches, comparisons, claims
    tuner.compose                                  a spec resolved into a study's context and runner
    tuner.runner                                   the vLLM process; one measured launch per trial
    tuner.spec                                     study specs
    tuner.space                                    the knobs tried, the rules against combinations
    tuner.telemetry | tuner.vllm | tuner.db | tuner.catalog | tuner.scoring
                                                   telemetry; vLLM's flags; storage; models; scores
    tuner.load                                     streaming load, windows, statistics
    tuner.errors                                   the one exception tree
    tuner.domain                                   frozen records and enums

The names below are the public API; they are imported on first use, so ``import tuner`` stays
cheap. Everything else may change between versions.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__version__ = "0.1.0"

_PUBLIC = {
    "prepare": "tuner.compose",
    "Repository": "tuner.db.repository",
    "Estimate": "tuner.domain",
    "FailureClass": "tuner.domain",
    "Objective": "tuner.domain",
    "ServingConfig": "tuner.domain",
    "Slo": "tuner.domain",
    "TrialResult": "tuner.domain",
    "TrialStatus": "tuner.domain",
    "Workload": "tuner.domain",
    "TunerError": "tuner.errors",
    "LoadGenerator": "tuner.load.generator",
    "recommendation": "tuner.results.recommend",
    "TrialRunner": "tuner.runner.vllm",
    "VllmTrialRunner": "tuner.runner.vllm",
    "Standing": "tuner.scoring.ranking",
    "best_first": "tuner.scoring.ranking",
    "SearchSpace": "tuner.space",
    "StudySpec": "tuner.spec.study",
    "load_spec": "tuner.spec.study",
    "run_study": "tuner.study.loop",
    "rank": "tuner.study.standings",
}

__all__ = sorted([*_PUBLIC, "__version__", "face"])


def face(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for its face: the names its ``if
    TYPE_CHECKING:`` block imports are its public ones, each imported from its module on first
    use. Type checkers read that block as plain imports; at run time importing one module of a
    package does not import all the others (the storage face would load Alembic and Optuna
    for a name lookup), and the block is the one list of what the package offers."""
    where: dict[str, str] = {}

    def getattr_(name: str) -> Any:
        here = sys.modules[package]
        if not where:
            where.update(_type_checking_imports(Path(here.__file__ or "")))
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(here, name, value)  # the next lookup is an ordinary attribute
        return value

    def dir_() -> list[str]:
        return sorted(getattr(sys.modules[package], "__all__", ()))

    return getattr_, dir_


def _type_checking_imports(source: Path) -> dict[str, str]:
    """name -> module of each ``from module import name`` under ``if TYPE_CHECKING:``."""
    found: dict[str, str] = {}
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.module:
                    found.update({a.asname or a.name: imp.module for a in imp.names})
    return found


def __getattr__(name: str) -> Any:
    # tuner's own names, by module path: an import here, even under TYPE_CHECKING, would tie
    # every package that imports ``face`` to every layer in the import contract
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'tuner' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return list(__all__)
