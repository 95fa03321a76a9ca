"""Launches of an A/B run (``tuner compare``, ``tuner verify-claims``) kept on disk as each one
finishes, so that a run stopped part-way (Ctrl-C, SIGTERM, a lost machine) resumes where it
stopped instead of launching everything again.

One JSON Lines file per run under ``$TUNER_HOME/launches/``, named by a hash of what defines the
run (command, model, GPU, vLLM version, workload, configurations, launches per configuration):
the same command line finds its earlier launches; any change starts afresh. Each line is
``{"arm": label, "config": {...}, "result": encoded TrialResult}``. Launches that completed, or
failed with a *finding* (the configuration cannot start here), are reused; interrupted launches
and faults are launched again. The file is removed once the run's result is stored.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tuner.abtest.compare import Arm
from tuner.db import decode_result, encode
from tuner.domain import FailureClass, TrialResult, TrialStatus
from tuner.errors import UsageError

log = logging.getLogger(__name__)


def run_key(**parts: Any) -> str:
    """A stable short hash of the JSON of ``parts`` (the run's defining facts)."""
    text = json.dumps(encode(parts), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def reusable(result: TrialResult) -> bool:
    """Whether a launch counts toward a resumed run: every launch that ended on its own
    (complete, a finding, a crash or a timeout), as it counted in the run that made it; not
    one the tuner's stop cut short. A resumed run launched a crashed one again, and ended with
    other launches than the same command run through."""
    if result.status is TrialStatus.COMPLETE:
        return True
    return result.failure is not None and result.failure is not FailureClass.INTERRUPTED


# The options of each command with launch logs that define its run (and so its log), besides
# the model, GPU, workload, vLLM and database; compare's for any other.
_OPTIONS = {"calibrate": "--launches"}
_DESIGN_OPTIONS = "--repeats/--max-launches, --confidence, --min-effect, --trend/--no-trend"


class LaunchLog:
    def __init__(self, path: Path, command: str = "compare") -> None:
        self.path = path
        self.command = command

    @property
    def options(self) -> str:
        """The command's own options that define its run, as a user types them."""
        return _OPTIONS.get(self.command, _DESIGN_OPTIONS)

    @classmethod
    def for_run(cls, home: Path, kind: str, key: str) -> LaunchLog:
        return cls(home / "launches" / f"{kind}-{key}.jsonl", kind)

    @classmethod
    def for_arms(
        cls, home: Path, command: str, arms: Sequence[Arm], launches: int, **facts: Any
    ) -> LaunchLog:
        """The log of ``command`` measuring ``arms`` ``launches`` times each, where ``facts``
        (model, GPU, hardware, vLLM version, workload, ...) say what else defines the run."""
        configs = [arm.config.to_dict() for arm in arms]
        key = run_key(command=command, configs=configs, launches=launches, **facts)
        return cls.for_run(home, command, key)

    def load(self, arms: Sequence[Arm], *, warn: bool = True) -> list[list[TrialResult]]:
        """Earlier reusable launches per arm (matched on the configuration, then on the arm's
        label), in launch order. Where several arms run one configuration (an A/A comparison)
        each launch goes to the arm it was logged for, else to the one with fewest so far. A
        line that cannot be read (a write cut short) is skipped, said where ``warn``."""
        done: list[list[TrialResult]] = [[] for _ in arms]
        if not self.path.exists():
            return done
        for n, line in enumerate(self.path.read_text().splitlines(), 1):
            try:
                entry = json.loads(line)
                result = decode_result(entry["result"])
            except (ValueError, KeyError, TypeError) as exc:
                if warn:
                    log.warning("%s line %d unreadable, launched again: %s", self.path, n, exc)
                continue
            same = [i for i, arm in enumerate(arms) if arm.config == result.config]
            pool = [i for i in same if arms[i].label == entry.get("arm")] or same
            if pool and reusable(result):
                done[min(pool, key=lambda i: len(done[i]))].append(result)
        return done

    def elsewhere(
        self, arms: Sequence[Arm], besides: Collection[Path] = ()
    ) -> list[tuple[Path, int]]:
        """Other logs of this command (not among ``besides``: the same run's other groups)
        holding reusable launches of every one of these configurations, an interrupted run of
        them with other options (model, GPU, workload, launch budget, design, vLLM, database),
        each with its count. A log that shares one arm only (the defaults, in most runs) is
        another run."""
        kind = self.path.name.rsplit("-", 1)[0]
        found = []
        for other in sorted(self.path.parent.glob(f"{kind}-*.jsonl")):
            if other == self.path or other in besides or other.name.rsplit("-", 1)[0] != kind:
                continue
            done = LaunchLog(other).load(arms, warn=False)  # another run may be writing it
            if all(done):
                found.append((other, sum(map(len, done))))
        return found

    def record(self, arm: Arm, result: TrialResult) -> None:
        """Append one finished launch, flushed to disk before the next launch starts."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(
            {"arm": arm.label, "config": arm.config.to_dict(), "result": encode(result)}
        )
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """This log for one run alone, while it lasts (a lock file beside it, released when
        the process ends however it ends): UsageError when another run holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.with_suffix(".lock").open("a") as lock:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError(
                    "another run measures these configurations with these options now (its "
                    f"launches go to {self.path})",
                    hint="let it finish (its comparison is stored), or stop it and run this "
                    "again to go on from its launches",
                ) from None
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def describe_resumed(
    done: Sequence[Sequence[TrialResult]],
    arms: Sequence[Arm],
    log: LaunchLog | None = None,
    besides: Collection[Path] = (),
) -> str | None:
    """ "resuming: 2 launches of defaults, 1 of fa2 from an interrupted run", or None; where
    nothing is resumed but ``log``'s command kept launches of these configurations under other
    options (:meth:`LaunchLog.elsewhere`), a line that says where, and how to use or drop
    them."""
    labels = [a.label for a in arms]
    if len(set(labels)) < len(labels):  # A against itself: each side by its letter
        labels = [f"{label} ({chr(ord('A') + i)})" for i, label in enumerate(labels)]
    counts: Mapping[str, int] = {label: len(d) for label, d in zip(labels, done, strict=True) if d}
    if not counts:
        others = log.elsewhere(arms, besides) if log is not None else []
        if log is None or not others:
            return None
        n, paths = sum(n for _, n in others), " ".join(str(path) for path, _ in others)
        return (
            f"not resumed: an interrupted run of these configurations with other options "
            f"(model, GPU, workload, vLLM, the database, {log.options}) kept {n} launch"
            f"{'' if n == 1 else 'es'} in {paths}; its exact options again reuse them, and "
            "deleting the file drops them (unless a run still going writes it)"
        )
    listed = ", ".join(f"{n} of {label}" for label, n in counts.items())
    return f"resuming: {listed} already measured by an interrupted run of this command"
