"""The H100 decode study resumed and confirmed (docs/results/plan-h200.md §12, 2026-12-06):
its last search trials on a fourth card, the confirmation's interleaved launches and verdict,
and the shift between cards behind the search's score, re-derived from the committed database."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.studykit import stream_log
from tuner.db import TrialPhase, TrialRow
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import Objective, ServingConfig, TrialStatus
from tuner.study import choose

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "plan-h100" / "2026-12-06-resume"
REPORT = ROOT / "docs" / "results" / "plan-h200.md"
STUDY = "decode-qwen7b-chat-h100"
TRITON = ServingConfig(attention_backend="TRITON_ATTN")


@pytest.fixture(scope="module")
def rows() -> list[TrialRow]:
    repo = Repository(make_engine(f"sqlite:///{DATA / 'tuner-decode.db'}"))
    return repo.list_trials(STUDY, limit=None)


def _thr(row: TrialRow) -> float:
    return row.metrics["output_throughput"].median


def _cards(rows: list[TrialRow]) -> dict[str, int]:
    """Each GPU UUID the study measured on, numbered in the order it first measured."""
    seen: dict[str, int] = {}
    for r in rows:
        if r.gpu_uuid is not None:
            seen.setdefault(r.gpu_uuid, len(seen) + 1)
    return seen


def _minutes(r: TrialRow) -> float:
    assert r.started_at is not None and r.finished_at is not None
    return (r.finished_at - r.started_at) / 60


def search_table(rows: list[TrialRow]) -> str:
    """The study's complete search trials with the card each ran on, against its baseline."""
    cards = _cards(rows)
    search = [r for r in rows if r.phase is TrialPhase.SEARCH and r.status is TrialStatus.COMPLETE]
    ref = _thr(next(r for r in search if r.is_baseline))
    out = [
        "| trial | card | configuration | out tok/s, median [range of 3 windows] | x #2 "
        "| P99 E2E ms | start-up s | wall min |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in search:
        thr, s = r.metrics["output_throughput"], r.server
        assert r.gpu_uuid is not None and s is not None and s.startup_s is not None
        out.append(
            f"| #{r.number} | {cards[r.gpu_uuid]} | {r.config_label} | {thr.median:,.0f} "
            f"[{thr.low:,.0f}-{thr.high:,.0f}] | x{thr.median / ref:.3f} | "
            f"{r.metrics['e2e_p99_ms'].median:,.0f} | {s.startup_s:.0f} | {_minutes(r):.1f} |"
        )
    return "\n".join(out) + "\n"


def confirmation_table(rows: list[TrialRow]) -> str:
    out = [
        "| launch | configuration | out tok/s, median [range of 3 windows] | P99 E2E ms "
        "| P99 ITL ms | start-up s |",
        "|---|---|---|---|---|---|",
    ]
    for i, r in enumerate((r for r in rows if r.phase is TrialPhase.CONFIRM), 1):
        thr, s = r.metrics["output_throughput"], r.server
        assert s is not None and s.startup_s is not None
        out.append(
            f"| {i} | {r.config_label} | {thr.median:,.0f} [{thr.low:,.0f}-{thr.high:,.0f}] | "
            f"{r.metrics['e2e_p99_ms'].median:,.0f} | {r.metrics['itl_p99_ms'].median:,.1f} | "
            f"{s.startup_s:.0f} |"
        )
    return "\n".join(out) + "\n"


def _comparison() -> dict[str, Any]:
    repo = Repository(make_engine(f"sqlite:///{DATA / 'tuner-decode.db'}"))
    (row,) = [c for c in repo.list_comparisons(STUDY) if c.b_config == TRITON]
    results: dict[str, Any] = dict(row.results)
    return results


def verdict_lines() -> str:
    results = _comparison()
    decision = results["decision"]
    assert isinstance(decision, dict)
    out = [
        f"Confirmation, #7 against vLLM's defaults ({decision['launches']['a']} + "
        f"{decision['launches']['b']} launches interleaved, stopped "
        f"{decision['stopped']} at the first look; intervals {results['confidence']:.0%} "
        f"repeated, {decision['per_look_confidence']:.2%} at each look, "
        f"{decision['method']} noise profile, {decision['df']:.0f} df):"
    ]
    metrics = results["metrics"]
    assert isinstance(metrics, list)
    for m in metrics:
        out.append(
            f"- {m['label']}: x{m['ratio']:.3f} [{m['low']:.3f}, {m['high']:.3f}], {m['verdict']}"
        )
    return "\n".join(out) + "\n"


def shift_lines(rows: list[TrialRow]) -> str:
    """What the search's x1.02 was made of: the cards' shift and Triton's own effect."""
    search = {r.number: r for r in rows if r.phase is TrialPhase.SEARCH}
    confirm = [r for r in rows if r.phase is TrialPhase.CONFIRM]
    defaults_here = statistics.median(_thr(r) for r in confirm if r.is_baseline)
    triton_search = statistics.median(_thr(search[n]) for n in (6, 7, 8))
    triton_here = statistics.median(_thr(r) for r in confirm if r.config == TRITON)
    repeats = sum(_minutes(search[n]) for n in (7, 8))
    return (
        f"- The defaults served x{defaults_here / _thr(search[2]):.3f} on this card "
        f"(median of the confirmation's three launches, {defaults_here:,.0f}) of #2 on the "
        f"previous one ({_thr(search[2]):,.0f}).\n"
        f"- Triton's three search trials on this card (median {triton_search:,.0f}) served "
        f"x{triton_search / defaults_here:.3f} of those defaults; its three confirmation "
        f"launches (median {triton_here:,.0f}) x{triton_here / defaults_here:.3f}.\n"
        f"- #7 and #8 measured #6's configuration again: {repeats:.1f} GPU-minutes.\n"
    )


def test_the_tables_and_lines_of_the_section(rows: list[TrialRow]) -> None:
    report = REPORT.read_text()
    for part in (search_table(rows), confirmation_table(rows), verdict_lines(), shift_lines(rows)):
        assert part in report, part


def test_the_verdict_tuner_gives_today(rows: list[TrialRow]) -> None:
    """The stored comparison, judged by the current code: the defaults, the pick worse."""
    repo = Repository(make_engine(f"sqlite:///{DATA / 'tuner-decode.db'}"))
    confirmed = choose(repo.list_comparisons(STUDY), Objective.BALANCED)
    assert confirmed is not None and confirmed.label == "defaults"
    assert confirmed.details_from == "#7 against vLLM's defaults"
    assert confirmed.verdict_text() == (
        "worse than vLLM's defaults: output tok/s x0.980 [0.968, 0.992]: run vLLM's defaults"
    )


def test_a_fourth_card() -> None:
    """Each H100 session of this study ran on a card of its own (NVML's UUIDs)."""
    uuids = {
        (p / "nvidia-smi.csv").read_text().splitlines()[1].split(", ")[2]
        for p in DATA.parent.iterdir()
        if (p / "nvidia-smi.csv").exists()
    }
    assert len(uuids) == 4


def test_the_stream_log_says_what_the_study_printed() -> None:
    log = stream_log(DATA, "decode")
    assert "best: #7 score 1.026 (search phase, one launch)" in log
    assert "output tok/s: -2.0 % [-3.2, -0.8] -> worse" in log
    assert "[06:00:14] stream done" in log
