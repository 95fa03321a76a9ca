"""The standings of a study: its measured search trials scored against vLLM's defaults and
ordered by the one ranking rule (:mod:`tuner.scoring.ranking`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tuner.db.repository import Repository
from tuner.db.rows import StudyRow, TrialRow
from tuner.domain import Estimate, Objective, ServingConfig, Slo, TrialStatus
from tuner.scoring import objectives as scoring
from tuner.scoring.ranking import Standing, best_first, canary_broken


@dataclass(frozen=True)
class Ranked:
    number: int
    config: ServingConfig
    score: float
    values: tuple[float, float, float]
    feasible: bool
    is_baseline: bool
    relative: bool = True  # the score is against vLLM's defaults (measured in this study)


def study_objective(study: StudyRow) -> Objective:
    """The study's objective preset; balanced for a name this tuner does not know."""
    try:
        return Objective(study.objective)
    except ValueError:
        return Objective.BALANCED


def baseline_row(repo: Repository, name: str) -> TrialRow | None:
    """The study's measured baseline trial (vLLM's defaults), None before it completed."""
    for row in repo.list_trials(name, status=TrialStatus.COMPLETE, phase="search", limit=None):
        if row.is_baseline:
            return row
    return None


def baseline_values(repo: Repository, name: str) -> list[float] | None:
    row = baseline_row(repo, name)
    return list(row.objective_values) if row is not None and row.objective_values else None


def rank(repo: Repository, name: str, objective: Objective) -> list[Ranked]:
    """Complete trials ranked by the preset's score: SLO-feasible ones first (the one rule,
    :mod:`tuner.scoring.ranking`); configurations that failed the canary in any launch of the
    study (its confirmation's included) are left out."""
    study = repo.get_study(name)
    slo = Slo(**(study.slo if study else {}))
    reference = baseline_values(repo, name)
    broken = canary_broken(repo.list_trials(name, status=TrialStatus.FAILED, limit=None))
    out = []
    for row in repo.list_trials(name, status=TrialStatus.COMPLETE, phase="search", limit=None):
        if not row.objective_values or row.config in broken:
            continue
        values = tuple(row.objective_values)
        constraints = row_constraints(row.metrics, slo, objective)
        out.append(
            Ranked(
                number=row.number,
                config=row.config,
                score=scoring.score_values(values, objective, reference),
                values=(values[0], values[1], values[2]),
                feasible=scoring.is_feasible(constraints),
                is_baseline=row.is_baseline,
                relative=reference is not None,
            )
        )
    return best_first(out, lambda r: Standing(r.feasible, r.score, number=r.number))


def row_constraints(
    metrics: Mapping[str, Estimate], slo: Slo, objective: Objective | None = None
) -> list[float]:
    return scoring.metric_constraints(metrics, slo, objective)
