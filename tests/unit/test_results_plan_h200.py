"""The H200 lever-plan run (docs/results/plan-h200.md) against its committed database: the
exported datasets are what the database holds, and every table of the report (the regimes,
the screening, the plan this code makes now from the stored diagnoses, energy and cost, the
fleet) is re-derived here through the functions tuner itself uses."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench.tables.splice import count_blocks, stale_blocks
from tests.studykit import committed_repo
from tuner.catalog.gpus import CATALOG_PRICES, get_gpu
from tuner.catalog.models import resolve_model
from tuner.db.repository import Repository
from tuner.domain import Objective
from tuner.load.workloads import get_workload
from tuner.results.export import from_jsonl, study_records, to_jsonl
from tuner.results.sizing import Rate, fleet_size, size
from tuner.scoring.cost import usd_per_million
from tuner.space import SearchSpace
from tuner.study.plan import RECIPE, Plan, make_plan, screened
from tuner.vllm.flags import shipped

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "plan-h200" / "2026-12-03"
DB = DATA / "tuner-plan.db"
REPORT = ROOT / "docs" / "results" / "plan-h200.md"
STUDIES = {  # study: (model, workload)
    "plan-qwen7b-chat": ("qwen2.5-7b", "chat"),
    "plan-ernie-256": ("ernie-0.3b", "throughput-256"),
}
TARGET = 1_000_000.0  # output tok/s, the fleet's target rate


@pytest.fixture(scope="module")
def repo() -> Repository:
    return committed_repo(DB)


def _rows(study: str) -> list[dict[str, Any]]:
    return from_jsonl((DATA / f"{study}-trials.jsonl").read_text())


def _plan(repo: Repository, study: str) -> Plan:
    row = repo.get_study(study)
    assert row is not None
    return Plan.from_dict(row.spec["plan_record"])


def _card(study: str) -> SearchSpace:
    model, workload = STUDIES[study]
    return SearchSpace(
        resolve_model(model), get_gpu("h200"), get_workload(workload), flags=shipped("0.26.0")
    )


def _median(row: dict[str, Any], metric: str) -> float:
    return float(row["metrics"][metric]["median"])


def _flags(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(config.items())) or "(vLLM's defaults)"


def regimes_table(repo: Repository) -> str:
    out = [
        "| study | model, workload | regime | API server, cores | engine core, cores "
        "| GPU busy | decode share of engine time | screened (as run) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for study, (model, workload) in STUDIES.items():
        plan = _plan(repo, study)
        f = plan.diagnosis.figures
        decode = 1.0 - f["prefill_share"]
        screened_knobs = ", ".join(f"{k.knob}={k.screen}" for k in plan.knobs)
        out.append(
            f"| {study} | {model}, {workload} ({plan.diagnosis.streams} streams) "
            f"| {plan.diagnosis.regime.value} | {f['api_server_cpu']:.2f} "
            f"| {f['engine_core_cpu']:.2f} | {f['gpu_utilization_mean']:.0%} | {decode:.0%} "
            f"| {screened_knobs} |"
        )
    return "\n".join(out) + "\n"


def _screening(repo: Repository, study: str) -> dict[str, dict[str, Any]]:
    """The screening trials by label: RECIPE (every planned knob set) or the knob left out."""
    plan = _plan(repo, study)
    planned = {k.knob for k in plan.knobs}
    out = {}
    for row in _rows(study):
        keys = set(row["config"])
        if row["status"] != "complete" or not keys <= planned or len(keys) < len(planned) - 1:
            continue
        out[RECIPE if keys == planned else (planned - keys).pop()] = row
    return out


def screening_table(repo: Repository, study: str) -> str:
    plan = _plan(repo, study)
    trials = _screening(repo, study)
    base = next(r for r in _rows(study) if r["is_baseline"])
    out = [
        "| trial | left out | out tok/s, median [range of 3 windows] | P99 TTFT ms | "
        "P99 E2E ms | score | the knob's share (recipe / this) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, row in [("defaults", base), *trials.items()]:
        t = row["metrics"]["output_throughput"]
        share = plan.effects.get(label)
        out.append(
            f"| #{row['number']} | {'(all set: the recipe)' if label == RECIPE else label} "
            f"| {t['median']:,.0f} [{t['low']:,.0f}-{t['high']:,.0f}] "
            f"| {_median(row, 'ttft_p99_ms'):,.0f} | {_median(row, 'e2e_p99_ms'):,.0f} "
            f"| {row['score']:.3f} | {'' if share is None else f'x{share:.2f}'} |"
        )
    return "\n".join(out) + "\n"


def replanned_table(repo: Repository) -> str:
    """The plan the current code makes from each stored diagnosis, against the one run."""
    out = ["| study | screened as run | screened now | left out now, and why |"]
    out.append("|---|---|---|---|")
    for study in STUDIES:
        plan = _plan(repo, study)
        now = make_plan(plan.diagnosis, _card(study), Objective.BALANCED)
        assert now is not None
        was = {k.knob for k in plan.knobs}
        gone = "; ".join(f"{k}: {why}" for k, why in now.skipped if k in was)
        out.append(
            f"| {study} | {', '.join(k.knob for k in plan.knobs)} "
            f"| {', '.join(f'{k.knob}={k.screen}' for k in now.knobs)} | {gone} |"
        )
    return "\n".join(out) + "\n"


def energy_table(repo: Repository) -> str:
    price = CATALOG_PRICES["h200"]
    out = [
        "| study | configuration | out tok/s | J per out token [range] | GPU W | "
        "$/1M out tok | GPUs for 1M out tok/s (low end; median; high end) |",
        "|---|---|---|---|---|---|---|",
    ]
    for study in STUDIES:
        srow = repo.get_study(study)
        assert srow is not None
        rows = _rows(study)
        best = size(repo, model=STUDIES[study][0], rate=Rate(TARGET, "tok/s"))
        (fleet_best,) = [f for f in best if f.study == study]
        base = next(r for r in rows if r["is_baseline"])
        pairs = [(base, True)]
        if fleet_best.trial_number != base["number"]:
            pairs.append((next(r for r in rows if r["number"] == fleet_best.trial_number), False))
        for row, is_base in pairs:
            trial = repo.get_trial(study, row["number"])
            assert trial is not None
            fleet = fleet_size(srow, trial, (), Rate(TARGET, "tok/s"), is_baseline=is_base)
            assert fleet is not None
            j = row["metrics"]["joules_per_output_token"]
            tok = _median(row, "output_throughput")
            label = "defaults" if is_base else f"#{row['number']} (tuner best)"
            out.append(
                f"| {study} | {label}: {_flags(row['config'])} | {tok:,.0f} "
                f"| {j['median']:.4f} [{j['low']:.4f}-{j['high']:.4f}] "
                f"| {_median(row, 'gpu_power_w'):.0f} | {usd_per_million(tok, price):.4f} "
                f"| {fleet.gpus}; {fleet.gpus_at_median}; {fleet.gpus_at_high} |"
            )
    return "\n".join(out) + "\n"


def test_the_datasets_are_what_the_database_holds(repo: Repository) -> None:
    for study in STUDIES:
        assert to_jsonl(study_records(repo, study)) == (DATA / f"{study}-trials.jsonl").read_text()


def test_every_trials_table_is_derived_from_the_datasets() -> None:
    text = REPORT.read_text()
    assert count_blocks(text) == 2
    assert stale_blocks(text, ROOT) == []


def test_the_trials_are_real_h200_launches(repo: Repository) -> None:
    for study in STUDIES:
        for row in _rows(study):
            if row["status"] != "complete":  # stopped before it measured anything
                assert row["failure_class"] == "interrupted" and row["provenance"] is None
                continue
            assert row["provenance"]["gpu_name"] == "NVIDIA H200"
            assert row["provenance"]["vllm_version"] == "0.26.0"


def test_the_two_studies_were_diagnosed_in_two_regimes_with_two_plans(repo: Repository) -> None:
    assert regimes_table(repo) in REPORT.read_text()
    ernie, qwen = _plan(repo, "plan-ernie-256"), _plan(repo, "plan-qwen7b-chat")
    assert ernie.diagnosis.regime.value == "frontend-bound"
    assert qwen.diagnosis.regime.value == "decode-bound"
    assert {k.knob for k in ernie.knobs} != {k.knob for k in qwen.knobs}


def test_the_screening_is_judged_from_the_trials_as_the_study_judged_it(repo: Repository) -> None:
    text = REPORT.read_text()
    for study in STUDIES:
        plan = _plan(repo, study)
        trials = _screening(repo, study)
        if plan.kept is None:  # screening not complete (the qwen study had one trial of it)
            assert set(trials) == {RECIPE}
            continue
        scores = {label: row["score"] for label, row in trials.items()}
        again = screened(plan, scores, None, "")
        assert again.effects == pytest.approx(plan.effects)
        assert again.kept == plan.kept == ("stream_interval",)
        assert screening_table(repo, study) in text
    assert screening_table(repo, "plan-qwen7b-chat") in text


def test_the_plan_now_skips_what_measured_nothing(repo: Repository) -> None:
    assert replanned_table(repo) in REPORT.read_text()


def test_energy_cost_and_fleet_of_the_defaults_and_the_recommendation(repo: Repository) -> None:
    text = REPORT.read_text()
    assert energy_table(repo) in text
    (ernie,) = size(repo, model="ernie-0.3b", rate=Rate(TARGET, "tok/s"))
    assert ernie.trial_number == 5 and not ernie.is_baseline
    assert ernie.gpus == math.ceil(TARGET / ernie.capacity.low)
    assert f"{ernie.gpus} GPUs" in text


def test_the_interrupted_trial_is_recorded_as_such(repo: Repository) -> None:
    last = _rows("plan-ernie-256")[-1]
    assert last["failure_class"] == "interrupted" and last["config"] == {"stream_interval": 16}
    assert json.dumps(last["config"]) in REPORT.read_text()


def test_the_study_replays_with_its_diagnosis_read_from_its_telemetry() -> None:
    """bench/plan_replay.py --dataset h200-plan: a spec stored with ``params = null`` loads,
    and the defaults' stored telemetry names the regime (no --regime assumption)."""
    from bench.replay import load_table
    from tuner.scoring.regime import diagnose

    table = load_table(DB, "plan-ernie-256", "h200-plan")
    assert len(table.rows) == 6 and table.baseline.config.to_dict() == {}
    assert set(table.knobs) == {
        "stream_interval", "api_server_count", "async_scheduling", "max_num_seqs"
    }  # fmt: skip
    repo = committed_repo(DB)
    base = repo.get_trial("plan-ernie-256", 0)
    assert base is not None
    assert diagnose(base.to_result()).regime.value == "frontend-bound"
