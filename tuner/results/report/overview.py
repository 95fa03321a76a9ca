"""Data for the overview page: the best measured configuration per model x GPU x workload."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tuner.db.rows import StudyRow, TrialRow
from tuner.results.report.study import TrialLine, best_line, trial_lines
from tuner.scoring import ranking
from tuner.study.confirm import Confirmed


@dataclass(frozen=True)
class BestEntry:
    """The best measured configuration for one model x GPU x workload, and where it is from."""

    model: str
    gpu: str
    workload: str
    study: str
    trial: TrialLine
    vllm_version: str
    other_studies: tuple[str, ...]
    # The study's confirmation phase, when it ran: its verdict decides ``trial`` (the confirmed
    # candidate, or the defaults when none was significantly better).
    confirmed: Confirmed | None = None


def overview(
    studies: Sequence[StudyRow],
    trials_by_study: Mapping[str, Sequence[TrialRow]],
    confirmed_by_study: Mapping[str, Confirmed] | None = None,
) -> tuple[BestEntry, ...]:
    """One entry per (model, measured GPU, workload): each study's pick competes with the
    others' on its score (each relative to its own study's baseline), feasible first. A study's
    pick is what its confirmation chose when it has one (:func:`tuner.study.confirm.choose`), else
    its best search trial."""
    confirmed_by_study = confirmed_by_study or {}
    groups: dict[tuple[str, str, str], list[tuple[StudyRow, TrialLine, TrialRow]]] = {}
    for s in studies:
        trials = trials_by_study.get(s.name, ())
        lines = trial_lines(s, trials)
        best = _confirmed_line(lines, confirmed_by_study.get(s.name)) or best_line(lines)
        if best is None:
            continue
        row = next(t for t in trials if t.number == best.number)
        key = (s.model, row.gpu_name or s.gpu, s.workload)
        groups.setdefault(key, []).append((s, best, row))
    out = []
    for (model, gpu, workload), entries in sorted(groups.items()):
        entries = ranking.best_first(
            entries,
            lambda e: ranking.Standing(
                bool(e[1].feasible), e[1].score, e[0].updated_at, e[1].number
            ),
        )
        s, line, row = entries[0]
        out.append(
            BestEntry(
                model=model,
                gpu=gpu,
                workload=workload,
                study=s.name,
                trial=line,
                vllm_version=row.vllm_version or s.vllm_version or "?",
                other_studies=tuple(e[0].name for e in entries[1:]),
                confirmed=confirmed_by_study.get(s.name),
            )
        )
    return tuple(out)


def _confirmed_line(lines: Sequence[TrialLine], confirmed: Confirmed | None) -> TrialLine | None:
    """The search line of the confirmed choice: trial N for "#N", the baseline for the
    defaults; None when there is no confirmation (or its trial is not among ``lines``)."""
    if confirmed is None:
        return None
    search = (t for t in lines if t.phase == "search" and t.score is not None and t.recommendable)
    return next((t for t in search if confirmed.chose(t.number, bool(t.is_baseline))), None)
