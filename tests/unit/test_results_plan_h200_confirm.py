"""The README study's search and confirmation on the H200 (docs/results/plan-h200.md §6,
2026-12-04) against its committed database: the exports are what the database holds, the
resumed database still holds the first session's trials as they were, and every table of the
section (the search trials, the confirmation's launches and intervals, the verdict, the
GPU-minutes) is re-derived here through the functions the study used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.studykit import committed_repo
from tuner.db.repository import Repository
from tuner.domain import Objective
from tuner.results.export import from_jsonl, study_records, to_jsonl
from tuner.scoring import BETTER
from tuner.study.confirm import CONFIRM_NUMBER_BASE, choose

ROOT = Path(__file__).resolve().parents[2]
DAY1 = ROOT / "studies" / "results" / "plan-h200" / "2026-12-03"
DATA = ROOT / "studies" / "results" / "plan-h200" / "2026-12-04"
DB = DATA / "tuner-plan.db"
REPORT = ROOT / "docs" / "results" / "plan-h200.md"
STUDY = "plan-ernie-256"
FIRST_SESSION = 7  # trials #0-#6 ran on 2026-12-03


@pytest.fixture(scope="module")
def repo() -> Repository:
    return committed_repo(DB)


def _trials() -> list[dict[str, Any]]:
    return from_jsonl((DATA / f"{STUDY}-trials.jsonl").read_text())


def _comparison() -> dict[str, Any]:
    (row,) = from_jsonl((DATA / f"{STUDY}-comparisons.jsonl").read_text())
    return row


def _flags(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(config.items())) or "(vLLM's defaults)"


def search_table() -> str:
    out = [
        "| trial | config | out tok/s, median [range of 3 windows] | P99 TTFT ms | P99 E2E ms "
        "| score |",
        "|---|---|---|---|---|---|",
    ]
    for row in _trials():
        if row["phase"] != "search" or row["number"] < FIRST_SESSION or row["status"] != "complete":
            continue
        m = row["metrics"]
        thr = m["output_throughput"]
        out.append(
            f"| #{row['number']} | {_flags(row['config'])} | {thr['median']:,.0f} "
            f"[{thr['low']:,.0f}-{thr['high']:,.0f}] | {m['ttft_p99_ms']['median']:,.0f} "
            f"| {m['e2e_p99_ms']['median']:,.0f} | {row['score']:.3f} |"
        )
    return "\n".join(out) + "\n"


def launches_table() -> str:
    metrics = {m["metric"]: m for m in _comparison()["metrics"]}
    thr, e2e = metrics["output_throughput"], metrics["e2e_p99_ms"]
    out = [
        "| launch | defaults out tok/s | #5 out tok/s | defaults P99 E2E ms | #5 P99 E2E ms |",
        "|---|---|---|---|---|",
    ]
    for i, (ta, tb, ea, eb) in enumerate(
        zip(thr["a"]["values"], thr["b"]["values"], e2e["a"]["values"], e2e["b"]["values"],
            strict=True),
        start=1,
    ):  # fmt: skip
        out.append(f"| {i} | {ta:,.0f} | {tb:,.0f} | {ea:,.0f} | {eb:,.0f} |")
    return "\n".join(out) + "\n"


def intervals_table() -> str:
    c = _comparison()
    level = c["decision"]["per_look_confidence"] * 100
    out = [
        f"| metric | #5 / defaults | interval ({level:.2f} % per look, 95 % overall) | verdict |",
        "|---|---|---|---|",
    ]
    for m in c["metrics"]:
        out.append(
            f"| {m['label']} | x{m['ratio']:.3f} | [{m['low']:.3f}, {m['high']:.3f}] "
            f"| {m['verdict']} |"
        )
    return "\n".join(out) + "\n"


def _part(number: int, phase: str) -> tuple[str, str]:
    """A trial's session and phase."""
    day = "2026-12-03" if number < FIRST_SESSION else "2026-12-04"
    if phase == "confirm":
        return day, "confirmation"
    return day, ("defaults and screening" if number < FIRST_SESSION - 1 else "search")


def gpu_minutes_table(repo: Repository) -> str:
    """GPU-minutes per session and phase: each launch's start to its end (start-up, canary,
    warm-up, windows and shutdown; an interrupted launch until it stopped), from the trial
    rows."""
    minutes: dict[tuple[str, str], list[float]] = {}
    for t in repo.list_trials(STUDY, limit=None):
        if t.started_at is not None and t.finished_at is not None:
            spent = (t.finished_at - t.started_at) / 60.0
            minutes.setdefault(_part(t.number, t.phase), []).append(spent)
    out = ["| session | phase | launches | GPU-minutes |", "|---|---|---|---|"]
    for (day, phase), spent in minutes.items():
        out.append(f"| {day} | {phase} | {len(spent)} | {sum(spent):.1f} |")
    launches = sum(len(v) for v in minutes.values())
    total = sum(sum(v) for v in minutes.values())
    out.append(f"| both | the whole study | {launches} | {total:.1f} |")
    return "\n".join(out) + "\n"


def test_the_datasets_are_what_the_database_holds(repo: Repository) -> None:
    assert to_jsonl(study_records(repo, STUDY)) == (DATA / f"{STUDY}-trials.jsonl").read_text()
    (row,) = repo.list_comparisons(STUDY)
    assert row.results["b_label"] == _comparison()["b_label"] == "#5"


def test_the_resumed_database_keeps_the_first_session_as_it_was() -> None:
    before = from_jsonl((DAY1 / f"{STUDY}-trials.jsonl").read_text())
    after = [r for r in _trials() if r["number"] < FIRST_SESSION]
    assert after == before


def test_the_new_launches_are_real_h200_launches() -> None:
    new = [r for r in _trials() if r["number"] >= FIRST_SESSION]
    assert len(new) == 8 and all(r["status"] == "complete" for r in new)
    for r in new:
        assert r["provenance"]["gpu_name"] == "NVIDIA H200"
        assert r["provenance"]["vllm_version"] == "0.26.0"
    confirms = [r for r in new if r["number"] >= CONFIRM_NUMBER_BASE]
    assert [r["is_baseline"] for r in confirms] == [True, False] * 3


def test_the_tables_are_derived_from_the_data(repo: Repository) -> None:
    text = REPORT.read_text()
    assert search_table() in text
    assert launches_table() in text
    assert intervals_table() in text
    assert gpu_minutes_table(repo) in text


def test_the_verdict_is_what_the_looks_stopped_on(repo: Repository) -> None:
    c = _comparison()
    assert c["decision"]["stopped"] == "significant" and c["decision"]["launches"] == {
        "a": 3, "b": 3
    }  # fmt: skip
    confirmed = choose(repo.list_comparisons(STUDY), Objective.BALANCED)
    assert confirmed is not None and confirmed.verdict == BETTER and confirmed.label == "#5"
    # The composite's own interval holds 1: the rule before 2026-12-04 called this "no
    # significant difference" after the looks had stopped on output tok/s.
    assert confirmed.score_low < 1.0 < confirmed.score
    assert confirmed.verdict_text() in REPORT.read_text()
