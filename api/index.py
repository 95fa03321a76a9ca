"""A read cache over the repository: each study's complete trials, kept until the study changes.

The recommendation endpoint ranks every complete trial of every matching study on each request;
reading and decoding those rows (JSON metrics and windows) is most of its cost. A study's
``updated_at`` moves whenever one of its trials starts or finishes or its status changes, so
``(id, updated_at, trial counts)`` is a version that says when a snapshot is stale (a
confirmation's comparisons are written before the study's final status change, which moves
``updated_at`` again). Answers computed from the snapshots are memoised until the repository's
change marker moves: a repeated question costs one aggregate query.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from tuner.db import Repository, StudyRow, TrialPhase, TrialRow
from tuner.domain import Objective, TrialStatus
from tuner.errors import UsageError
from tuner.scoring import canary_broken
from tuner.study import Confirmed, choose
from tuner.study.standings import Reference, baseline, score_reference

_Version = tuple[int, float, Mapping[TrialStatus, int], Mapping[TrialStatus, int]]
T = TypeVar("T")
MEMO_SIZE = 1024


@dataclass(frozen=True)
class StudySnapshot:
    """A study with its rankable trials (COMPLETE search trials with objective values, by
    number) and the verdict of its confirmation phase per objective, where it has one."""

    study: StudyRow
    trials: tuple[TrialRow, ...]
    # The trials of vLLM's defaults, the scores' reference (also where the canary broke them).
    defaults: tuple[TrialRow, ...]
    confirmed: Mapping[Objective, Confirmed] = field(default_factory=dict)

    def baseline(self, card: str | None = None) -> TrialRow | None:
        """The defaults a trial measured on ``card`` is scored against (:func:`baseline`)."""
        return baseline(self.defaults, card)

    @property
    def reference(self) -> Reference | None:
        return score_reference(self.defaults)


class StudyIndex:
    """Studies and snapshots of their complete trials, and answers computed from them.
    Thread-safe; never serves stale rows once the repository has committed a change."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[_Version, StudySnapshot]] = {}
        self._memo: OrderedDict[Hashable, Any] = OrderedDict()
        self._marker: object = None

    def memo(self, key: Hashable, compute: Callable[[list[StudySnapshot]], T]) -> T:
        """``compute(snapshots)`` for ``key``, remembered until any study changes.

        Checking for a change costs one aggregate query (:meth:`Repository.change_marker`);
        a hit costs nothing more. At most :data:`MEMO_SIZE` answers are kept (least recently used
        go first), since keys come from query parameters anyone can vary.
        """
        marker = self.repo.change_marker()
        with self._lock:
            if marker != self._marker:
                self._memo.clear()
                self._marker = marker
            elif key in self._memo:
                self._memo.move_to_end(key)
                return cast(T, self._memo[key])
        value = compute(self.snapshots())
        with self._lock:
            if marker == self._marker:  # not if a change came in while computing
                self._memo[key] = value
                while len(self._memo) > MEMO_SIZE:
                    self._memo.popitem(last=False)
        return value

    def snapshot(self, study: StudyRow) -> StudySnapshot | None:
        """The snapshot of ``study`` as listed; None if it was deleted meanwhile."""
        version = (study.id, study.updated_at, study.trial_counts, study.confirmation_counts)
        with self._lock:
            cached = self._cache.get(study.name)
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            rows = self.repo.list_trials(
                study.name, status=TrialStatus.COMPLETE, phase=TrialPhase.SEARCH, limit=None
            )
            comparisons = self.repo.list_comparisons(study.name)
            failed = self.repo.list_trials(study.name, status=TrialStatus.FAILED, limit=None)
        except UsageError:  # deleted between the listing and now
            return None
        broken = canary_broken(failed)  # never recommended (tuner.scoring.ranking)
        trials = tuple(
            r
            for r in rows
            if r.objective_values and len(r.objective_values) == 3 and r.config not in broken
        )
        defaults = tuple(r for r in rows if r.is_baseline)
        verdicts = {objective: choose(comparisons, objective) for objective in Objective}
        confirmed = {o: v for o, v in verdicts.items() if v is not None and v.config not in broken}
        snap = StudySnapshot(study=study, trials=trials, defaults=defaults, confirmed=confirmed)
        with self._lock:
            self._cache[study.name] = (version, snap)
        return snap

    def snapshots(self) -> list[StudySnapshot]:
        """Snapshots of all studies; forgets studies no longer listed."""
        listed = self.repo.list_studies()
        names = {s.name for s in listed}
        with self._lock:
            for gone in [n for n in self._cache if n not in names]:
                del self._cache[gone]
        return [s for s in (self.snapshot(row) for row in listed) if s is not None]
