"""Data for the overview page: the best measured configuration per model x GPU x workload."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tuner.db.rows import StudyRow, TrialRow
from tuner.report.study import TrialLine, best_line, trial_lines


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


def overview(
    studies: Sequence[StudyRow], trials_by_study: Mapping[str, Sequence[TrialRow]]
) -> tuple[BestEntry, ...]:
    """One entry per (model, measured GPU, workload): each study's best trial competes with the
    others' on its score (each relative to its own study's baseline), feasible first."""
    groups: dict[tuple[str, str, str], list[tuple[StudyRow, TrialLine, TrialRow]]] = {}
    for s in studies:
        trials = trials_by_study.get(s.name, ())
        best = best_line(trial_lines(s, trials))
        if best is None:
            continue
        row = next(t for t in trials if t.number == best.number)
        key = (s.model, row.gpu_name or s.gpu, s.workload)
        groups.setdefault(key, []).append((s, best, row))
    out = []
    for (model, gpu, workload), entries in sorted(groups.items()):
        entries.sort(key=lambda e: (bool(e[1].feasible), e[1].score or 0.0), reverse=True)
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
            )
        )
    return tuple(out)
