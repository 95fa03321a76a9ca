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
    "rank": "tuner.study.standings",
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
