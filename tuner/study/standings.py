"""Which configuration is best, from stored rows: a study's :func:`standings` (its search trials
scored against its :func:`baseline`, vLLM's defaults, ordered by :mod:`tuner.scoring.ranking`)
and :func:`best_across` studies of one model, GPU and workload (scores are ratios to each study's
defaults, so they compare). ``tuner best``, ``tuner launch``, the API and the dashboard ask here."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tuner.db import Repository, StudyRow, TrialPhase, TrialRow
from tuner.domain import FailureClass, Objective, ServingConfig, Slo, TrialStatus
from tuner.scoring import Standing, best_first, canary_broken
from tuner.scoring import objectives as scoring
from tuner.space import kernel_twins
from tuner.study.confirm import Confirmed, study_pick


@dataclass(frozen=True)
class Ranked:
    row: TrialRow = field(compare=False, repr=False)  # the stored trial
    number: int
    config: ServingConfig
    score: float
    values: tuple[float, float, float]
    feasible: bool
    is_baseline: bool
    relative: bool = True  # the score is against vLLM's defaults (measured in this study)
    updated_at: float = 0.0  # the study's, where its standing meets other studies'
    confirmed: bool = False  # its study's confirmation chose it (see :func:`chosen`)

    @property
    def standing(self) -> Standing:
        return Standing(
            self.feasible, self.score, self.updated_at, self.number, self.confirmed, self.relative
        )


def study_objective(study: StudyRow) -> Objective:
    """The study's objective preset; balanced for a name this tuner does not know."""
    try:
        return Objective(study.objective)
    except ValueError:
        return Objective.BALANCED


def _measured(row: TrialRow) -> bool:
    done = row.status is TrialStatus.COMPLETE and row.phase is TrialPhase.SEARCH
    return done and len(row.objective_values or ()) == 3


def baseline(rows: Iterable[TrialRow], card: str | None = None) -> TrialRow | None:
    """The study's measured baseline among ``rows``: its first complete search trial of vLLM's
    defaults; with ``card`` (a GPU's NVML UUID), the first measured on that card where the
    study measured them there (:class:`Reference`). None before one completed."""
    measured = _defaults(rows)
    here = (r for r in measured if card is not None and r.gpu_uuid == card)
    return next(here, None) or next(iter(measured), None)


def _defaults(rows: Iterable[TrialRow]) -> list[TrialRow]:
    """The complete search trials of vLLM's defaults among ``rows``, in their order."""
    return [r for r in rows if r.is_baseline and _measured(r)]


@dataclass(frozen=True)
class Reference:
    """The objective values a study's scores are ratios to: its :func:`baseline`'s, and on
    each GPU (NVML UUID) where the study measured vLLM's defaults, the first of those. A trial
    is scored against the defaults of its own card where there are some: two cards of one model
    served x1.047 of each other (docs/results/plan-h200.md §12), the size of the effects a
    search looks for, and a resumed study's search took that shift for a better kernel."""

    values: tuple[float, ...]
    cards: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def of(self, card: str | None) -> tuple[float, ...]:
        """The reference of a trial measured on ``card`` (None: unknown, or a CPU)."""
        return self.cards.get(card, self.values) if card else self.values


def measured_before(rows: Iterable[TrialRow], config: ServingConfig) -> TrialRow | None:
    """The first measured search trial of ``config`` among ``rows``, or of a configuration that
    launched as ``config`` would (:func:`ran_as`); None: not measured yet."""
    return next((r for r in rows if _measured(r) and config in ran_as(r)), None)


def ran_as(row: TrialRow) -> list[ServingConfig]:
    """``row``'s configuration, and the same with the attention kernel its server chose where
    it left that to vLLM (:func:`tuner.space.kernel_twins`)."""
    server = row.server
    if server is None:
        return [row.config]
    config = row.config
    values = {
        "attention_backend": config.attention_backend,
        "flash_attn_version": config.flash_attn_version,
    }
    twins = kernel_twins(values, server.effective_backend, server.flash_attn_version)
    return [config.replace(**twin) for twin in twins]


def score_reference(rows: Iterable[TrialRow]) -> Reference | None:
    """The :class:`Reference` of the study's scores among ``rows``; None before its defaults
    were measured. Defaults that served nothing (a capacity of 0: no load point met the SLO)
    are no yardstick: every trial that served would be "x inf" of them, and a ratio that says
    nothing ranked a trial of 420 tok/s level with one of 1,200. Without defaults that served,
    the study's scores are raw values (as before its defaults were measured)."""
    defaults = [r for r in _defaults(rows) if (r.objective_values or (0.0,))[0] > 0]
    if not defaults:
        return None
    cards: dict[str, tuple[float, ...]] = {}
    for r in defaults:
        if r.gpu_uuid is not None:
            cards.setdefault(r.gpu_uuid, tuple(r.objective_values or ()))
    return Reference(tuple(defaults[0].objective_values or ()), cards)


def trial_score(row: TrialRow, reference: Reference | None, objective: Objective) -> float | None:
    """The score a stored trial shows (CLI, API, page, export): a search trial's objective
    values against the study's :func:`score_reference` (its card's defaults) by the preset.
    None where the trial or the defaults were not measured (without them it is no score), and
    for a confirmation launch (the comparison it belongs to judges it, not its one launch).
    The column stored at a trial's end is not read: it is relative to whatever baseline
    existed then (none, for the defaults' own trial when they ran second)."""
    if reference is None or not _measured(row):
        return None
    score = scoring.score_values(row.objective_values or (), objective, reference.of(row.gpu_uuid))
    return score if math.isfinite(score) else None


def failed_configs(rows: Iterable[TrialRow]) -> list[tuple[ServingConfig, FailureClass]]:
    """The configurations of the FAILED and PRUNED trials among ``rows`` with their failure
    class, by trial number: :meth:`Repository.failed_configs` of rows already read."""
    failed = (TrialStatus.FAILED, TrialStatus.PRUNED)
    return [
        (r.config, r.failure)
        for r in sorted(rows, key=lambda r: r.number)
        if r.status in failed and r.failure is not None
    ]


def standings(
    rows: Iterable[TrialRow],
    objective: Objective,
    slo: Slo,
    *,
    updated_at: float = 0.0,
    by_curve: bool = True,
    reference: Reference | None = None,
) -> list[Ranked]:
    """The study's complete search trials among ``rows`` by the preset's score against its
    :func:`baseline`, SLO-feasible first, less any configuration that failed the canary in a
    launch among ``rows``. ``by_curve`` judges the capacity and cost presets' SLO by the load
    curve, as the study did; False, on the fixed-load metrics (a request's own SLO).
    ``reference``: the defaults' objective values where ``rows`` lack them (rows read without
    the trials the canary broke, the defaults' own among them); else :func:`score_reference`."""
    rows = list(rows)
    if reference is None:
        reference = score_reference(rows)
    broken = canary_broken(r for r in rows if r.status is TrialStatus.FAILED)
    judged = objective if by_curve else None
    out = []
    for row in rows:
        if not _measured(row) or row.config in broken:
            continue
        thr, mem, p99 = values = row.objective_values or (0.0, 0.0, 0.0)
        try:
            constraints = scoring.metric_constraints(row.metrics, slo, judged)
        except KeyError:  # a metric the check needs was never recorded
            constraints = [scoring.VIOLATED]
        out.append(
            Ranked(
                row=row,
                number=row.number,
                config=row.config,
                score=scoring.score_values(
                    values, objective, reference.of(row.gpu_uuid) if reference else None
                ),
                values=(thr, mem, p99),
                feasible=scoring.is_feasible(constraints),
                is_baseline=row.is_baseline,
                relative=reference is not None,
                updated_at=updated_at,
            )
        )
    return best_first(out, lambda r: r.standing)


def best_across(
    studies: Iterable[tuple[StudyRow, Sequence[TrialRow], Objective, Confirmed | None]],
) -> list[tuple[StudyRow, Ranked]]:
    """Each study's pick for its objective, best first (the one rule: a tie goes to a pick its
    study's confirmation decided, then to the more recently updated study). A study's pick is
    its confirmation's verdict where it had one (the winner, or the defaults when nothing beat
    them), else the top of its :func:`standings`."""
    picks = []
    for study, rows, objective, confirmed in studies:
        table = standings(rows, objective, study_slo(study), updated_at=study.updated_at)
        if (top := study_pick(table, confirmed)) is not None:
            picks.append((study, chosen(top, confirmed)))
    return best_first(picks, lambda p: p[1].standing)


def pick(study: StudyRow, rows: Sequence[TrialRow], confirmed: Confirmed | None) -> Ranked | None:
    """The study's recommendation, the one trial `tuner best`, the API and the study page name:
    its confirmation's verdict where it had one (``confirmed``), else the top of its standings
    for its own objective and SLO; None before a trial completed."""
    return study_pick(standings(rows, study_objective(study), study_slo(study)), confirmed)


def chosen(ranked: Ranked, confirmed: Confirmed | None) -> Ranked:
    """``ranked``, marked where its study's confirmation chose it: such a pick wins a tie with
    another study's (fresh launches against the defaults decided it, not one search launch)."""
    picked = confirmed is not None and confirmed.chose(ranked.number, ranked.is_baseline)
    return dataclasses.replace(ranked, confirmed=picked) if picked else ranked


def study_slo(study: StudyRow | None) -> Slo:
    """The SLO stored with ``study``, which its standings are judged by (None: no SLO)."""
    return Slo(**(study.slo if study else {}))


def with_row(rows: Iterable[TrialRow], row: TrialRow) -> list[TrialRow]:
    """``rows`` with ``row`` in place of the one of its number (or added), by number: the
    rows of a study kept in memory, brought up to date as one of its trials finishes."""
    return sorted([*(r for r in rows if r.number != row.number), row], key=lambda r: r.number)


def rank(repo: Repository, name: str, objective: Objective) -> list[Ranked]:
    """:func:`standings` of the stored study ``name`` against its own SLO."""
    slo = study_slo(repo.get_study(name))
    return standings(repo.list_trials(name, limit=None), objective, slo)
