"""The one rule that orders measured configurations, best first.

Every answer to "which configuration is best?" goes through :func:`best_first`: a study's own
ranking (``tuner best``, the progress line, the export's scores), the pick ``tuner launch``
makes across studies, ``GET /v1/recommendations`` and the dashboard's overview. Each caller
says how one of its items stands (:class:`Standing`); the order is decided here only:

1. meeting the SLO (and the error-rate ceiling) before missing it;
2. across studies, a score against vLLM's defaults before one without them (a study that never
   measured its defaults scores raw values, tok/s and not x defaults, which cannot be weighed
   against another study's score);
3. the higher score (a non-finite or missing score counts as the lowest);
4. on a tie, the more recently updated study (its numbers are the newer measurement);
5. then the earlier trial of the study (the first configuration found to reach that score).

Items that tie on all five keep the order they were given in. Configurations that failed the
canary are left out before any ordering (:func:`canary_broken`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tuner.domain import FailureClass, ServingConfig

T = TypeVar("T")


@dataclass(frozen=True)
class Standing:
    """Where one candidate stands: what the ranking compares, nothing else."""

    feasible: bool
    score: float | None
    updated_at: float = 0.0  # the study's last update (epoch seconds); 0 within one study
    number: int = 0  # the trial's number in its study
    # Across studies: the pick was decided by its study's confirmation (fresh launches against
    # the defaults), not a single search launch; it wins a tie before the newer study does.
    confirmed: bool = False
    relative: bool = True  # the score is against the defaults (see rule 2); False: raw values

    def key(self) -> tuple[bool, bool, float, bool, float, int]:
        """Larger is better."""
        score = self.score if self.score is not None and math.isfinite(self.score) else -math.inf
        return (
            bool(self.feasible),
            self.relative,
            score,
            self.confirmed,
            self.updated_at,
            -self.number,
        )


def best_first(items: Iterable[T], standing: Callable[[T], Standing]) -> list[T]:
    """``items`` ordered by :class:`Standing`, best first (stable for full ties)."""
    return sorted(items, key=lambda item: standing(item).key(), reverse=True)


class _Launched(Protocol):
    @property
    def config(self) -> ServingConfig: ...

    @property
    def failure(self) -> FailureClass | None: ...


def canary_broken(trials: Iterable[_Launched]) -> frozenset[ServingConfig]:
    """The configurations some launch of which failed the canary (:mod:`tuner.load.canary`).

    They are never ranked nor recommended, whatever another launch of them measured: a server
    that dies on a request shape a client may send is no recommendation.
    """
    return frozenset(t.config for t in trials if t.failure is FailureClass.CANARY_FAILED)
