"""The heavy-load H200 report (docs/results/ernie-0.3b-h200-heavy.md) against its committed
data: every table re-derived, and the sentences' numbers what the datasets say."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bench.tables.splice import count_blocks, stale_blocks
from tuner.results.export import from_jsonl

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "ernie-0.3b-h200-heavy"
REPORT = ROOT / "docs" / "results" / "ernie-0.3b-h200-heavy.md"


def _rows(name: str) -> list[dict]:  # type: ignore[type-arg]
    return from_jsonl((DATA / name).read_text())


def test_every_table_is_derived_from_the_datasets() -> None:
    text = REPORT.read_text()
    assert count_blocks(text) == 3
    assert stale_blocks(text, ROOT) == []


def test_the_trials_are_real_h200_launches_that_passed_the_canary() -> None:
    for row in _rows("heavy-trials.jsonl") + _rows("chat-heavy-trials.jsonl"):
        assert row["status"] == "complete"
        assert row["provenance"]["gpu_name"] == "NVIDIA H200"
        assert row["provenance"]["vllm_version"] == "0.26.0"
        assert row["effective_backend"] == "FLASH_ATTN"


def test_the_confirmation_verdicts_are_what_the_report_says() -> None:
    (confirmation,) = _rows("heavy-confirmation.jsonl")
    verdicts = confirmation["verdicts"]
    assert verdicts["output_throughput"] == "no significant difference"
    assert verdicts["ttft_p99_ms"] == verdicts["e2e_p99_ms"] == "better"
    assert verdicts["itl_p99_ms"] == "worse"
    assert confirmation["b_config"] == {
        "max_model_len": 4096,
        "async_scheduling": True,
        "stream_interval": 4,
    }
    thr = next(m for m in confirmation["metrics"] if m["metric"] == "output_throughput")
    assert thr["low"] < 1.0 < thr["high"]  # the interval holds 1: no significant difference
    confirm = [r for r in _rows("heavy-trials.jsonl") if r["phase"] == "confirm"]
    candidate = [r for r in confirm if not r["is_baseline"]]
    defaults = [r for r in confirm if r["is_baseline"]]
    assert len(candidate) == len(defaults) == 3
    lowest_b = min(r["metrics"]["output_throughput"]["median"] for r in candidate)
    highest_a = max(r["metrics"]["output_throughput"]["median"] for r in defaults)
    assert lowest_b > highest_a  # every launch of #2 out-served every launch of the defaults


def test_the_chat_pair_breaks_its_itl_slo_with_bursts() -> None:
    base, bursts = sorted(_rows("chat-heavy-trials.jsonl"), key=lambda r: r["number"])
    assert base["is_baseline"] and bursts["config"]["stream_interval"] == 8
    assert base["metrics"]["itl_p99_ms"]["median"] < 50 < bursts["metrics"]["itl_p99_ms"]["median"]
    assert bursts["score"] < base["score"]


def test_the_databases_hold_the_studies_without_per_request_records() -> None:
    cases = [
        ("heavy-h200.db", "ernie-0.3b-h200-heavy", 9),
        ("chat-heavy-h200.db", "ernie-0.3b-h200-chat-heavy", 2),
    ]
    for name, study, trials in cases:
        uri = f"file:{DATA / name}?immutable=1"
        with sqlite3.connect(uri, uri=True) as db:
            n = db.execute(
                "SELECT count(*) FROM tuner_trials t JOIN tuner_studies s ON t.study_id = s.id "
                "WHERE s.name = ?",
                (study,),
            ).fetchone()[0]
            assert n == trials
            assert db.execute("SELECT count(*) FROM tuner_trial_requests").fetchone()[0] == 0


def test_tuner_size_writes_large_figures_with_grouped_digits(tmp_path: Path) -> None:
    """The H200's capacity of the small model read "1.35e+04 tok/s [1.251e+04, 1.408e+04]"
    (the ends at another precision than the median), and a low rate's cost "$4.38e+03 per 1M
    output tokens"; `tuner best` writes the same throughput 13,503."""
    import shutil

    from typer.testing import CliRunner

    from tests.studykit import make_repo
    from tuner.cli.app import app

    db = tmp_path / "chat-heavy.db"  # a copy: opening migrates, the committed file stays
    shutil.copyfile(DATA / "chat-heavy-h200.db", db)
    url = f"sqlite:///{db}"
    make_repo(url)
    size = ["size", "--model", "ernie-0.3b", "--storage", url, "--rate"]
    big = CliRunner().invoke(app, [*size, "50000tok/s"])
    assert big.exit_code == 0, big.output
    assert "capacity per GPU: at least 13,503 tok/s [12,513, 14,077]" in big.stdout
    low = CliRunner().invoke(app, [*size, "0.001"])
    assert low.exit_code == 0, low.output
    assert "$4,378 per 1M output tokens" in low.stdout
    assert "e+0" not in big.stdout + low.stdout
