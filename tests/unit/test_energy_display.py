"""Measured GPU energy where people read results: the study page's rows, `tuner best`, the
JSON Lines / Markdown export and the vllm-bench-shaped files; on a CPU, said to be absent."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.unit.test_report_study import _est, _study, _trial
from tuner.domain import Estimate, RequestRecord, WindowEnergy
from tuner.load.benchjson import bench_result
from tuner.results import energy
from tuner.results.export import markdown_table
from tuner.results.recommend import Recommendation
from tuner.results.report import study_report
from tuner.results.report.study import trial_lines

ENERGY = {"joules_per_output_token": _est(0.25), "gpu_power_w": _est(400.0)}


def _gpu_trial(number: int, thr: float, **kw: Any) -> Any:
    t = _trial(number, thr, gpu_uuid="GPU-1", **kw)
    return dataclasses.replace(t, metrics={**t.metrics, **ENERGY})


def test_study_rows_carry_energy_and_the_page_says_why_a_cpu_has_none() -> None:
    gpu = [_gpu_trial(0, 100.0), _gpu_trial(1, 150.0)]
    lines = trial_lines(_study(), gpu)
    assert [t.joules_per_token for t in lines] == [0.25, 0.25]
    assert lines[0].gpu_power_w == 400.0
    assert study_report(_study(), gpu).energy_note == ""
    cpu = [_trial(0, 100.0, gpu=False), _trial(1, 120.0, gpu=False)]
    report = study_report(_study(gpu="cpu"), cpu)
    assert report.energy_note == energy.NOT_ON_CPU == "energy: not measured on CPU"
    assert all(t.joules_per_token is None for t in report.trials)
    # A GPU trial without energy (recorded before tuner measured it) is not called a CPU one.
    assert study_report(_study(), [_trial(0, 90.0, gpu_uuid="GPU-1")]).energy_note == (
        energy.NOT_MEASURED
    )


def _recommendation(metrics: dict[str, Any], note: str | None = None) -> Recommendation:
    return Recommendation(
        study="s",
        trial_number=3,
        is_baseline=False,
        score=1.2,
        flags=("--max-num-seqs", "64"),
        env={},
        serve_command="vllm serve m --max-num-seqs 64",
        metrics=metrics,
        baseline_metrics={"output_throughput": _est(100.0), **ENERGY},
        memory_gib=10.0,
        baseline_memory_gib=9.0,
        provenance={"gpu": "NVIDIA H200"},
        feasible=True,
        energy_note=note,
    )


def test_best_shows_energy_beside_the_throughput_or_why_there_is_none() -> None:
    text = _recommendation(
        {
            "output_throughput": _est(120.0),
            "joules_per_output_token": _est(0.2),
            "gpu_power_w": _est(450.0),
        }
    ).render()
    assert "J/out token: 0.200 [0.180, 0.220]   defaults 0.250 [0.225, 0.275]" in text
    assert "GPU watts: 450 [405, 495]   defaults 400 [360, 440]" in text
    lines = text.splitlines()
    assert lines.index(next(x for x in lines if "J/out token" in x)) > lines.index(
        next(x for x in lines if "output tok/s" in x)
    )
    cpu = _recommendation({"output_throughput": _est(120.0)}, energy.NOT_ON_CPU).render()
    assert "  energy: not measured on CPU" in cpu and "J/out token" not in cpu


def test_the_markdown_export_has_a_joules_column() -> None:
    record = {
        "number": 1, "phase": "search", "status": "complete", "failure_class": None,
        "is_baseline": False, "effective_backend": "FLASH_ATTN", "config": {"max_num_seqs": 8},
        "score": 1.1, "objective_values": [100.0, 10.0, 50.0],
        "metrics": {"output_throughput": {"median": 100.0, "low": 90.0, "high": 110.0},
                    "joules_per_output_token": {"median": 0.25, "low": 0.2, "high": 0.3}},
    }  # fmt: skip
    head, _, row = markdown_table([record]).splitlines()
    assert "J/out tok" in head
    assert "0.250 [0.200, 0.300]" in row


def test_bench_files_carry_the_window_energy_only_when_measured() -> None:
    records = [RequestRecord(True, 10, 20, 0.0, 0.01, 0.2, (0.01,) * 19)] * 4
    reading = WindowEnergy(
        joules=16.0, seconds=1.0, watts=16.0, method="counter", gpu_uuid="GPU-1"
    ).per_tokens(80)
    result = bench_result(records, 1.0, model="m", concurrency=4, request_rate=None, energy=reading)
    assert result["tuner_joules_per_output_token"] == pytest.approx(0.2)
    assert result["tuner_gpu_watts"] == 16.0
    assert result["tuner_energy"]["method"] == "counter"
    plain = bench_result(records, 1.0, model="m", concurrency=4, request_rate=None)
    assert not {"tuner_energy", "tuner_joules_per_output_token", "tuner_gpu_watts"} & set(plain)


def test_absent_is_none_when_measured() -> None:
    assert energy.absent(ENERGY, on_gpu=True) is None
    assert energy.absent({}, on_gpu=False) == energy.NOT_ON_CPU


def test_a_range_keeps_its_trailing_zeros_at_three_figures() -> None:
    assert Estimate(0.3, 0.287, 0.3, (0.287, 0.3)).figures() == "0.300 [0.287, 0.300]"
    assert Estimate(100.0, 99.5, 1234.0, ()).figures() == "100 [99.5, 1.23e+03]"


def test_a_slow_rate_keeps_its_figures_in_best_and_launch() -> None:
    """A CPU or long-output study serves well under 0.05 req/s: `tuner best` and `tuner
    launch` printed 'requests/s: 0.0 [0.0, 0.0]   defaults 0.0 [0.0, 0.0]', hiding a 40 %
    difference that `tuner size` showed (0.045 req/s)."""
    slow = Estimate(0.0452, 0.0441, 0.0463, (0.0441, 0.0452, 0.0463))
    assert slow.text() == "0.0452 [0.0441, 0.0463]"
    assert Estimate(13476.4, 13057.0, 14339.0, ()).text() == "13,476 [13,057, 14,339]"
    assert Estimate(52.64, 51.0, 56.01, ()).text() == "52.6 [51.0, 56.0]"
    from tuner.deploy.local import Measured

    measured = Measured(
        model="m", study="s", trial=1, flags=(), env={}, vllm_version="0.32.0", gpu="cpu",
        workload="chat", objective="balanced", source="t", metrics={"request_throughput": slow},
    )  # fmt: skip
    assert "requests/s: 0.0452 [0.0441, 0.0463]" in "\n".join(measured.describe())
