"""Emulating a smaller GPU's memory on a larger one: labelled, scaled, refused when it cannot be."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tuner.catalog import rules
from tuner.catalog.gpus import get_gpu
from tuner.catalog.models import resolve_model
from tuner.compose import check_fits
from tuner.domain import ServingConfig
from tuner.errors import HardwareMismatch, UsageError
from tuner.load.workloads import get_workload
from tuner.results.recommend import Recommendation
from tuner.runner.hardware import check_hardware
from tuner.runner.vllm import RunnerSettings, VllmTrialRunner
from tuner.spec.study import StudySpec
from tuner.telemetry.nvml import DetectedGpu

H200 = DetectedGpu(
    index=0,
    name="NVIDIA H200",
    uuid="GPU-h200",
    memory_total_bytes=150_754_820_096,
    compute_capability=(9, 0),
    driver_version="580.159.04",
    cuda_driver_version="13.0",
)
L4 = DetectedGpu(
    index=0,
    name="NVIDIA L4",
    uuid="GPU-l4",
    memory_total_bytes=24_000_000_000,
    compute_capability=(8, 9),
    driver_version="580",
    cuda_driver_version="13.0",
)


def test_emulating_an_a10g_on_an_h200_is_labelled_and_scaled() -> None:
    a10g = get_gpu("a10g")
    hw = check_hardware(a10g, [H200], emulate=True)
    assert hw.emulated and hw.is_gpu and hw.uuid == "GPU-h200"
    assert "emulating" in hw.name and "H200" in hw.name
    assert hw.memory_scale == pytest.approx(a10g.memory_bytes / H200.memory_total_bytes)


def test_emulation_needs_a_larger_gpu_and_a_gpu_at_all() -> None:
    with pytest.raises(HardwareMismatch, match="at least"):
        check_hardware(get_gpu("h100"), [L4], emulate=True)
    with pytest.raises(HardwareMismatch, match="no NVIDIA GPU"):
        check_hardware(get_gpu("a10g"), [], emulate=True)
    with pytest.raises(HardwareMismatch):
        check_hardware(get_gpu("cpu"), [H200], emulate=True)


def test_utilization_is_rescaled_at_launch_only() -> None:
    hw = check_hardware(get_gpu("a10g"), [H200], emulate=True)
    settings = RunnerSettings(python=sys.executable, vllm_version="0.26.0", model_path="/m")
    runner = VllmTrialRunner(settings, resolve_model("ernie-0.3b"), hw)
    scale = hw.memory_scale or 0
    launched = runner._launch_config(ServingConfig(gpu_memory_utilization=0.5, max_num_seqs=8))
    assert launched.gpu_memory_utilization == pytest.approx(0.5 * scale, abs=1e-4)
    assert launched.max_num_seqs == 8
    # vLLM's default (0.92 of the emulated GPU) is made explicit too.
    assert runner._launch_config(ServingConfig()).gpu_memory_utilization == pytest.approx(
        0.92 * scale, abs=1e-4
    )
    plain = VllmTrialRunner(
        settings, resolve_model("ernie-0.3b"), check_hardware(get_gpu("h200"), [H200])
    )
    assert plain._launch_config(ServingConfig()) == ServingConfig()


def test_emulated_studies_get_their_own_names() -> None:
    spec = StudySpec(model="ernie-0.3b", gpu="a10g", workload="chat", emulate=True)
    assert "emulated" in spec.study_name()
    assert "emulated" not in spec.with_overrides(emulate=False).study_name()


def test_a_14b_model_in_bf16_does_not_fit_a_24_gb_card_and_says_why() -> None:
    with pytest.raises(UsageError) as err:
        check_fits(resolve_model("qwen2.5-14b"), get_gpu("rtx4090"))
    message = err.value.message
    assert "29.5 GB" in message and "RTX 4090" in message and "weights" in message
    check_fits(resolve_model("ernie-0.3b"), get_gpu("a10g"))  # fits: no error


def test_cli_refuses_the_14b_on_a_4090_at_once(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "run",
            "--model",
            "qwen2.5-14b",
            "--gpu",
            "rtx4090",
            "--emulate",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TUNER_HOME": str(tmp_path / "h")},
    )
    assert proc.returncode == 2, proc.stderr
    assert "does not fit" in proc.stderr and "GB" in proc.stderr
    assert not (tmp_path / "tuner.db").exists(), "nothing is written for bad input"


def _recommendation(memory_gib: float, emulated_memory_gib: float | None) -> Recommendation:
    return Recommendation(
        study="s",
        trial_number=0,
        is_baseline=True,
        score=1.0,
        flags=(),
        env={},
        serve_command="vllm serve m",
        metrics={},
        baseline_metrics=None,
        memory_gib=memory_gib,
        baseline_memory_gib=memory_gib,
        provenance={"gpu": "NVIDIA H200 emulating NVIDIA A10G (22.5 GiB)", "emulated": True},
        feasible=True,
        emulated_memory_gib=emulated_memory_gib,
    )


def test_an_emulated_peak_above_the_emulated_gpu_is_flagged() -> None:
    # Measured on the H200: vLLM's defaults emulating an A10G peaked at 23.51 GiB.
    over = _recommendation(23.51, get_gpu("a10g").memory_gib)
    assert over.emulation_warning() is not None
    assert "23.51 GiB" in over.render() and "may not start" in over.render()
    assert _recommendation(20.0, get_gpu("a10g").memory_gib).emulation_warning() is None
    assert _recommendation(140.0, None).emulation_warning() is None  # not emulated


def test_fp8_weights_make_the_14b_fit_a_4090_as_the_second_seed_asks() -> None:
    qwen, rtx = resolve_model("qwen2.5-14b"), get_gpu("rtx4090")
    fp8 = qwen.weight_bytes("fp8")
    assert 0.5 < fp8 / qwen.weight_bytes() < 0.6  # embeddings and LM head stay bf16
    check_fits(qwen, rtx, "fp8")  # 16.3 GB of weights in 24 GB: no error
    with pytest.raises(UsageError, match="bfloat16 weights"):
        check_fits(qwen, rtx)
    fp8_config = ServingConfig(
        gpu_memory_utilization=0.95, max_model_len=8192, extra={"quantization": "fp8"}
    )
    chat = get_workload("chat")
    assert rules.violations(qwen, rtx, chat, fp8_config) == []
    bf16 = rules.violations(qwen, rtx, chat, fp8_config.replace(extra={}))
    assert any("do not fit" in v for v in bf16)
