"""The noise key of a launch: which model it names. Two local model directories that share
their last name are two models; a catalogued model is its alias."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.abtest.profile import noise_key
from tuner.catalog import resolve_model
from tuner.domain import Estimate, FailureClass, Provenance, ServingConfig, TrialResult, TrialStatus


def _launch(uuid: str | None = "GPU-1", hostname: str = "vm") -> TrialResult:
    windows = (9.5, 9.6, 9.7)
    return TrialResult(
        config=ServingConfig(),
        status=TrialStatus.COMPLETE,
        metrics={"output_throughput": Estimate(9.6, 9.5, 9.7, windows)},
        provenance=Provenance(
            gpu_name="NVIDIA H200", gpu_uuid=uuid, driver_version=None,
            vllm_version="0.26.0", model="llama", workload="chat", hostname=hostname,
        ),
    )  # fmt: skip


def _model_dir(root: Path) -> Path:
    path = root / "llama"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return path


def test_two_local_models_of_one_name_have_two_keys(tmp_path: Path) -> None:
    a = resolve_model(str(_model_dir(tmp_path / "a")))
    b = resolve_model(str(_model_dir(tmp_path / "b")))
    assert a.alias == b.alias == "llama"  # the alias alone would pool their launches
    key_a, key_b = noise_key(_launch(), a, "chat"), noise_key(_launch(), b, "chat")
    assert key_a is not None and key_b is not None
    assert key_a != key_b and key_a.model == str((tmp_path / "a" / "llama").resolve())
    assert key_a.windows == 3 and key_a.host == "GPU-1" and key_a.gpu == "NVIDIA H200"


def test_a_catalogued_model_is_keyed_by_its_alias() -> None:
    key = noise_key(_launch(), resolve_model("tiny-ernie"), "chat")
    assert key is not None and key.model == "tiny-ernie"
    failed = TrialResult(ServingConfig(), TrialStatus.FAILED, FailureClass.START_FAILED)
    assert noise_key(failed, resolve_model("tiny-ernie"), "chat") is None


def test_the_machine_is_the_card_where_there_is_one_else_the_host() -> None:
    model = resolve_model("tiny-ernie")
    # Two lent cards whose machines both call themselves "vm": two profiles.
    one, two = (
        noise_key(_launch("GPU-1"), model, "chat"),
        noise_key(_launch("GPU-2"), model, "chat"),
    )
    assert one is not None and two is not None and one != two
    # One card under two container host names (Docker gives each run a new one): one profile.
    again = noise_key(_launch("GPU-1", hostname="3f2a9c1d"), model, "chat")
    assert again == one and one.text().startswith("NVIDIA H200 card GPU-1, vLLM 0.26.0")
    # No GPU (CPU vLLM): the host name.
    cpu = noise_key(_launch(None, hostname="build-7"), model, "chat")
    assert cpu is not None and cpu.host == "build-7" and " on build-7, " in cpu.text()
