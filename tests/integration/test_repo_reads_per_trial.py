"""The study loop reads the repository a bounded number of times per trial, whatever the
number of trials: at most 3 (issue 28). A real SQLite repository behind a proxy that counts
the calls of its reading methods; the loop's reads are told apart from the setup before it and
the final ranking after it, and split per trial at each trial's end."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tuner.study.loop as loop
from tests.studykit import make_context, make_repo
from tuner.compose import StudyContext, build_space, plan_wanted, study_flags
from tuner.db.repository import Repository
from tuner.domain import TrialResult
from tuner.study.loop import Ranked, SilentReporter, run_study
from tuner.testing.fake_runner import FakeRunner

# Repository methods that only read (every other method writes, or claims by writing).
READS = frozenset(
    {
        "get_study",
        "list_studies",
        "change_marker",
        "trial_requests",
        "list_trials",
        "count_trials",
        "get_trial",
        "failed_configs",
        "list_comparisons",
        "get_comparison",
        "list_launches",
    }
)
PER_TRIAL = 3
SETUP = 2  # before the loop: the study's row, looked up as the study is opened and after
FINAL = 2  # after the loop: the final ranking (the study's SLO, its rows)


def test_the_read_set_names_only_methods_of_the_repository() -> None:
    public = {n for n in vars(Repository) if not n.startswith("_")}
    assert public >= READS
    # Nothing new that reads is left out: the read set is every public method whose name
    # says it reads (a new get_/list_/count_ method has to be sorted here).
    looks_like_a_read = {n for n in public if n.startswith(("get_", "list_", "count_"))}
    assert looks_like_a_read <= READS


class Counting:
    """``repo`` with its reads counted, by the part of the study they fall in."""

    def __init__(self, repo: Repository) -> None:
        self._repo = repo
        self.part = "setup"
        self.reads: Counter[str] = Counter()
        self.by_method: Counter[tuple[str, str]] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._repo, name)
        if name not in READS:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.reads[self.part] += 1
            self.by_method[(self.part, name)] += 1
            return attr(*args, **kwargs)

        return counted


class TrialEnds(SilentReporter):
    """Notes the read count at each trial's end: the reads of trial k are those since the
    end of trial k-1 (or the start of the loop)."""

    def __init__(self, counting: Counting) -> None:
        self.counting = counting
        self.ends: list[int] = []

    def trial_finished(self, number: int, result: TrialResult, best: Ranked | None) -> None:
        self.ends.append(self.counting.reads["loop"])


@dataclasses.dataclass
class Reads:
    setup: int
    per_trial: list[int]
    closing: int  # the loop's last look, which finds the budget spent
    final: int
    by_method: Counter[tuple[str, str]]

    @property
    def loop(self) -> int:
        return sum(self.per_trial) + self.closing


def _counted_study(
    ctx: StudyContext, runner: FakeRunner, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> Reads:
    counting = Counting(make_repo(db_url))
    reporter = TrialEnds(counting)
    inner: Callable[..., None] = loop._loop

    def counted_loop(*args: Any, **kwargs: Any) -> None:
        counting.part = "loop"
        try:
            inner(*args, **kwargs)
        finally:
            counting.part = "final"

    monkeypatch.setattr(loop, "_loop", counted_loop)
    run_study(ctx, runner, counting, reporter=reporter)  # type: ignore[arg-type]
    ends = reporter.ends
    assert len(ends) == ctx.spec.trials
    return Reads(
        setup=counting.reads["setup"],
        per_trial=[b - a for a, b in zip([0, *ends], ends, strict=False)],
        closing=counting.reads["loop"] - ends[-1],
        final=counting.reads["final"],
        by_method=counting.by_method,
    )


def _plain(db_url: str, trials: int) -> StudyContext:
    return make_context(
        db_url,
        trials=trials,
        enqueue=[{"gpu_memory_utilization": 0.95}],  # a finding: failed configs matter
        choices={"gpu_memory_utilization": (0.5, 0.8, 0.95), "max_num_seqs": (1, 16, 64)},
    )


def _early_stop(db_url: str, trials: int) -> StudyContext:
    ctx = make_context(
        db_url, trials=trials, params=("max_num_seqs",), choices={"max_num_seqs": (1, 16, 256)},
        enqueue=[{"max_num_seqs": 256}, {"max_num_seqs": 1}],
    )  # fmt: skip
    return dataclasses.replace(ctx, spec=ctx.spec.with_overrides(early_stop=True))


def _planned(db_url: str, trials: int) -> StudyContext:
    """A study that leaves its space to the lever plan, as ``tuner run`` builds it."""
    ctx = make_context(db_url, trials=trials)
    spec = dataclasses.replace(ctx.spec, params=None, choices={})
    assert plan_wanted(spec)
    flags = study_flags("python", ctx.vllm_version, fake_server=True)
    space = build_space(spec, ctx.model, ctx.gpu, ctx.workload, flags)
    return dataclasses.replace(ctx, spec=spec, space=space)


STUDIES = {"plain": _plain, "early_stop": _early_stop, "planned": _planned}


@pytest.mark.parametrize("kind", sorted(STUDIES))
def test_reads_per_trial_are_at_most_three_whatever_the_number_of_trials(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = {}
    for trials in (3, 8):
        db_url = f"sqlite:///{tmp_path / f'{kind}-{trials}.db'}"
        seen[trials] = _counted_study(
            STUDIES[kind](db_url, trials), FakeRunner(max_utilization=0.9), db_url, monkeypatch
        )
    for trials, reads in seen.items():
        what = f"{kind}, {trials} trials: {reads}"
        assert max(reads.per_trial) <= PER_TRIAL, what
        assert reads.closing <= 1, what
        assert reads.loop / trials <= PER_TRIAL, what
        assert reads.setup <= SETUP and reads.final <= FINAL, what
    # Not growing with the study: the five more trials cost at most five trials' reads.
    assert seen[8].loop - seen[3].loop <= PER_TRIAL * 5, seen
    if kind == "planned":  # the plan's path was taken: a plan stored, its screening judged
        row = make_repo(f"sqlite:///{tmp_path / 'planned-8.db'}").get_study("s1")
        assert row is not None and (row.spec.get("plan_record") or {}).get("kept"), row
        assert seen[8].by_method[("loop", "list_launches")] == 1, seen[8]
