"""Data for the overview page: the best measured configuration per model x GPU x workload."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tuner.catalog import model_key
from tuner.db import StudyRow, TrialRow
from tuner.results.report.study import TrialLine, trial_lines
from tuner.study import Confirmed, best_across, study_objective
from tuner.study.standings import Ranked


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
    # Why no candidate could be confirmed, where none was measured (the verdict above then
    # rests on no measurement); "" otherwise (ConfirmationSummary.not_confirmed).
    not_confirmed: str = ""


def overview(
    studies: Sequence[StudyRow],
    trials_by_study: Mapping[str, Sequence[TrialRow]],
    confirmed_by_study: Mapping[str, Confirmed] | None = None,
    not_confirmed_by_study: Mapping[str, str] | None = None,
) -> tuple[BestEntry, ...]:
    """One entry per (model, measured GPU, workload): each study's pick competes with the
    others' as :func:`tuner.study.standings.best_across` orders them (a score is relative to its
    own study's baseline, feasible first). A study's pick is what its confirmation chose when it
    has one (:func:`tuner.results.report.study.confirmation`), else its best search trial;
    ``not_confirmed_by_study``: why none of its candidates could be confirmed, where none was
    measured."""
    confirmed_by_study = confirmed_by_study or {}
    picks = best_across(
        (
            (s, trials_by_study.get(s.name, ()), study_objective(s), confirmed_by_study.get(s.name))
            for s in studies
        ),
    )
    groups: dict[tuple[str, str, str], list[tuple[StudyRow, Ranked]]] = {}
    for s, top in picks:  # best first, so each group's too
        key = (model_key(s.model, s.model_source), top.row.gpu_name or s.gpu, s.workload_label)
        groups.setdefault(key, []).append((s, top))
    out = []
    for (model, gpu, workload), entries in sorted(groups.items()):
        s, top = entries[0]
        lines = trial_lines(s, trials_by_study.get(s.name, ()))
        out.append(
            BestEntry(
                model=model,
                gpu=gpu,
                workload=workload,
                study=s.name,
                trial=next(line for line in lines if line.number == top.number),
                vllm_version=top.row.vllm_version or s.vllm_version or "?",
                other_studies=tuple(e[0].name for e in entries[1:]),
                confirmed=confirmed_by_study.get(s.name),
                not_confirmed=(not_confirmed_by_study or {}).get(s.name, ""),
            )
        )
    return tuple(out)
