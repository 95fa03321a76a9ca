"""``tuner calibrate``'s core: launch one configuration several times so that the noise
profile of its key exists before anything is compared on it (see :mod:`tuner.cli.calibrate`).

The launches go through the A/B pipeline (:mod:`tuner.abtest.pipeline`): resumable from their
launch log, each one summarised in ``tuner_launches`` as it finishes; nothing is stored in
``tuner_comparisons``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tuner.abtest.compare import Arm, failure_texts
from tuner.abtest.pipeline import Bench, Group, Judgement, Watch, first_provenance
from tuner.abtest.profile import gpu_seconds, launches_profile
from tuner.domain import TrialResult, TrialStatus, Workload, to_jsonable
from tuner.scoring import NoiseProfile


@dataclass(frozen=True)
class Calibration:
    """What a calibration measured: the profile of its key from every stored launch on it."""

    arm: Arm
    workload: Workload
    results: tuple[TrialResult, ...]
    profile: NoiseProfile | None

    def stored(self) -> Judgement | None:
        return None  # launches only: the profile is read from tuner_launches

    @property
    def launched(self) -> int:
        return len(self.results)

    @property
    def completed(self) -> int:
        return sum(r.status is TrialStatus.COMPLETE for r in self.results)

    @property
    def gpu_minutes(self) -> float:
        return gpu_seconds(self.results) / 60.0

    def earlier_note(self) -> str | None:
        """Where this run completed too few launches for a profile of its own and the profile
        is that of launches stored before it, a line that says so; else None."""
        if self.profile is None or self.completed >= 2:
            return None
        return (
            f"this run completed {self.completed} launch{'' if self.completed == 1 else 'es'}: "
            "the profile above rests on the launches stored for this key before it (see its "
            "launch count)"
        )

    def to_json(self) -> dict[str, Any]:
        """What ``tuner calibrate --json`` prints."""
        return {
            "config": self.arm.config.to_dict(),
            "label": self.arm.label,
            "workload": self.workload.name,
            "launches": self.launched,
            "complete": self.completed,
            "gpu_minutes": self.gpu_minutes,
            "failures": list(failure_texts(self.results)),
            "profile": None if self.profile is None else self.profile.to_dict(),
            "provenance": to_jsonable(first_provenance(self.results)),
        }


def run_calibration(bench: Bench, workload: Workload, arm: Arm, watch: Watch) -> Calibration:
    """Launch ``arm`` ``bench.launches`` times on ``workload`` and read its key's profile."""

    def judge(_group: Group, results: list[list[TrialResult]]) -> Sequence[Calibration]:
        (runs,) = results
        profile = launches_profile(bench.repo, runs, bench.model, workload.name)
        return [Calibration(arm, workload, tuple(runs), profile)]

    ((calibration, _),) = bench.run([Group(workload, (arm,))], judge, watch=watch)
    return calibration
