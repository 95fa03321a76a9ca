"""tuner: measures vLLM serving configurations on real servers and recommends the best.

The pipeline, one package per stage (each imports only the stages below it)::

    spec      a study spec (TOML or CLI options)           tuner.spec
    space     the knobs tried and the rules that rule combinations out   tuner.space
    runner    one measured server launch per trial          tuner.runner, tuner.vllm
    load      streaming load, windows, statistics           tuner.load, tuner.telemetry
    scoring   objectives, SLOs, the one ranking rule        tuner.scoring
    study     the Optuna loop and its confirmation          tuner.study, tuner.abtest
    storage   SQLite / PostgreSQL, migrations               tuner.db
    results   recommendation, datasets, reports             tuner.results
    API       the REST service and dashboards               api (beside this package)

The names below are the public API; they are imported on first use, so ``import tuner`` stays
cheap. Everything else may change between versions.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC = {
    # records
    "ServingConfig": "tuner.domain",
    "Workload": "tuner.domain",
    "Slo": "tuner.domain",
    "Objective": "tuner.domain",
    "TrialResult": "tuner.domain",
    "TrialStatus": "tuner.domain",
    "FailureClass": "tuner.domain",
    "Estimate": "tuner.domain",
    "TunerError": "tuner.errors",
    # stages
    "StudySpec": "tuner.spec.study",
    "load_spec": "tuner.spec.study",
    "SearchSpace": "tuner.space",
    "TrialRunner": "tuner.runner.vllm",
    "VllmTrialRunner": "tuner.runner.vllm",
    "LoadGenerator": "tuner.load.generator",
    "prepare": "tuner.compose",
    "run_study": "tuner.study.loop",
    "rank": "tuner.study.loop",
    "best_first": "tuner.scoring.ranking",
    "Standing": "tuner.scoring.ranking",
    "Repository": "tuner.db.repository",
    "recommendation": "tuner.results.recommend",
}

__all__ = ["__version__", *sorted(_PUBLIC)]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'tuner' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return list(__all__)
