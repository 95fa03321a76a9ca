"""The decode-bound study on the H200 (docs/results/plan-h200.md §7, 2026-12-05) against its
committed database: the export is what the database holds, the trials are real H200 launches,
and every table of the section (the diagnosis, the screening, the plan the current code makes
from the stored diagnosis) is re-derived here through the functions the study used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.tables.splice import stale_blocks
from tests.studykit import committed_repo
from tuner.catalog.gpus import get_gpu
from tuner.catalog.models import resolve_model
from tuner.db.repository import Repository
from tuner.domain import Objective
from tuner.load.workloads import get_workload
from tuner.results.export import from_jsonl, study_records, to_jsonl
from tuner.space import SearchSpace
from tuner.study.plan import Plan, make_plan, step_bytes
from tuner.vllm.flags import shipped

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "plan-h200" / "2026-12-05"
DB = DATA / "tuner-decode.db"
REPORT = ROOT / "docs" / "results" / "plan-h200.md"
STUDY = "decode-qwen7b-chat"


@pytest.fixture(scope="module")
def repo() -> Repository:
    return committed_repo(DB)


def _rows() -> list[dict[str, Any]]:
    return from_jsonl((DATA / f"{STUDY}-trials.jsonl").read_text())


def _plan(repo: Repository) -> Plan:
    row = repo.get_study(STUDY)
    assert row is not None
    return Plan.from_dict(row.spec["plan_record"])


def _card() -> SearchSpace:
    return SearchSpace(
        resolve_model("qwen2.5-7b"), get_gpu("h200"), get_workload("chat"), flags=shipped("0.26.0")
    )


def diagnosis_table(repo: Repository) -> str:
    d = _plan(repo).diagnosis
    f = d.figures
    weights, kv, _ = step_bytes(_card().model, _card().workload, f["requests_running_peak"])
    return (
        "| regime | API server, cores | engine core, cores | GPU busy | decode share of engine "
        "time | requests running, peak | KV cache used, peak | KV share of a decode step's "
        "reads |\n|---|---|---|---|---|---|---|---|\n"
        f"| {d.regime.value} | {f['api_server_cpu']:.2f} | {f['engine_core_cpu']:.2f} "
        f"| {f['gpu_utilization_mean']:.0%} | {1 - f['prefill_share']:.0%} "
        f"| {f['requests_running_peak']:.0f} | {f['kv_cache_usage_peak']:.1%} "
        f"| {kv / (weights + kv):.1%} |\n"
    )


def screening_table(repo: Repository) -> str:
    """Every trial of the study by its part in the screening, with the knob's share where its
    trial finished: the recipe's score over the score without the knob."""
    planned = {k.knob for k in _plan(repo).knobs}
    rows = _rows()
    recipe = next(r for r in rows if set(r["config"]) == planned)
    out = [
        "| trial | left out | backend | out tok/s, median [range of 3 windows] | P99 TTFT ms "
        "| P99 ITL ms | P99 E2E ms | start-up s | score | the knob's share (recipe / this) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        keys = set(row["config"])
        label = "defaults" if row["is_baseline"] else (
            "(all set: the recipe)" if keys == planned else (planned - keys).pop()
        )  # fmt: skip
        if row["status"] != "complete":
            out.append(f"| #{row['number']} | {label} | | {row['failure_class']} | | | | | | |")
            continue
        m = row["metrics"]
        t = m["output_throughput"]
        share = "" if row is recipe or row["is_baseline"] else (
            f"x{recipe['score'] / row['score']:.2f}"
        )  # fmt: skip
        out.append(
            f"| #{row['number']} | {label} | {row['effective_backend']} "
            f"| {t['median']:,.0f} [{t['low']:,.0f}-{t['high']:,.0f}] "
            f"| {m['ttft_p99_ms']['median']:,.0f} | {m['itl_p99_ms']['median']:.1f} "
            f"| {m['e2e_p99_ms']['median']:,.0f} | {row['startup_s']:.0f} | {row['score']:.3f} "
            f"| {share} |"
        )
    return "\n".join(out) + "\n"


def replanned_table(repo: Repository) -> str:
    was = _plan(repo)
    now = make_plan(was.diagnosis, _card(), Objective.BALANCED)
    assert now is not None
    gone = "; ".join(f"{k}: {why}" for k, why in now.skipped if k in {p.knob for p in was.knobs})
    return (
        "| screened as run | screened now | left out now, and why |\n|---|---|---|\n"
        f"| {', '.join(f'{k.knob}={k.screen}' for k in was.knobs)} "
        f"| {', '.join(f'{k.knob}={k.screen}' for k in now.knobs)} | {gone} |\n"
    )


def test_the_dataset_is_what_the_database_holds(repo: Repository) -> None:
    assert to_jsonl(study_records(repo, STUDY)) == (DATA / f"{STUDY}-trials.jsonl").read_text()
    assert stale_blocks(REPORT.read_text(), ROOT) == []


def test_the_trials_are_real_h200_launches_and_the_last_was_interrupted() -> None:
    rows = _rows()
    for row in rows[:-1]:
        assert row["status"] == "complete"
        assert row["provenance"]["gpu_name"] == "NVIDIA H200"
        assert row["provenance"]["vllm_version"] == "0.26.0"
    assert rows[-1]["failure_class"] == "interrupted" and rows[-1]["provenance"] is None
    # The recipe was launched before the defaults: the regime was predicted before launch.
    assert not rows[0]["is_baseline"] and rows[1]["is_baseline"]


def test_the_tables_of_the_section(repo: Repository) -> None:
    text = REPORT.read_text()
    assert _plan(repo).diagnosis.regime.value == "decode-bound"
    assert diagnosis_table(repo) in text
    assert screening_table(repo) in text
    assert replanned_table(repo) in text
