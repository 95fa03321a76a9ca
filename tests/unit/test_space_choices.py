"""SearchSpace: knobs, candidate values, baseline and suggest() with real optuna trials."""

from __future__ import annotations

import dataclasses
from typing import Any

import optuna
import pytest

from tuner.catalog.gpus import GPUS
from tuner.catalog.models import MODELS
from tuner.domain import ModelSpec, ServingConfig, Workload
from tuner.errors import UsageError
from tuner.space import CPU_BASELINE_UTILIZATION, DEFAULT, KNOBS, SearchSpace, kernel_twins

WORKLOAD = Workload("chat", prompt_tokens=400, output_tokens=200)  # longest request: 751
CPU = dataclasses.replace(GPUS["cpu"], memory_gib=24.0)  # not this host's size
H200, A10G = GPUS["h200"], GPUS["a10g"]
ERNIE, TINY = MODELS["ernie-0.3b"], MODELS["tiny-ernie"]


def space(gpu: Any = H200, model: ModelSpec = ERNIE, **kwargs: Any) -> SearchSpace:
    return SearchSpace(model, gpu, WORKLOAD, **kwargs)


def test_h200_searches_every_knob_with_the_default_sentinel_first() -> None:
    s = space()
    assert s.searched == KNOBS
    for knob in s.searched:
        assert s.choices[knob][0] == DEFAULT
        assert len(s.choices[knob]) >= 3
    assert s.choices["flash_attn_version"] == (DEFAULT, 2, 3)
    assert s.choices["kv_cache_dtype"] == (DEFAULT, "fp8", "fp8_e4m3", "fp8_e5m2")
    assert s.choices["max_model_len"] == (DEFAULT, 1024, 2048, 4096, 8192)
    assert all(0.5 <= v <= 0.95 for v in s.choices["gpu_memory_utilization"][1:])
    assert s.fixed == {}


def test_ampere_drops_knobs_with_a_single_value() -> None:
    s = space(A10G)
    assert "flash_attn_version" not in s.searched  # FA2 only
    assert "kv_cache_dtype" not in s.searched  # no fp8 before sm89
    assert "attention_backend" in s.searched


def test_max_model_len_candidates_stop_below_the_model_positions() -> None:
    assert space(model=TINY).choices["max_model_len"] == (DEFAULT, 1024, 2048)
    unknown = ModelSpec(alias="x", hub_id="org/x", config={}, source="org/x")
    assert "max_model_len" not in space(model=unknown).searched


def test_cpu_space_and_its_baseline_utilization() -> None:
    s = space(CPU, TINY)
    assert "attention_backend" not in s.searched and "kv_cache_dtype" not in s.searched
    util = s.choices["gpu_memory_utilization"]
    assert DEFAULT not in util and CPU_BASELINE_UTILIZATION in util
    assert max(util) <= 0.3
    assert max(s.choices["max_num_seqs"][1:]) <= 64
    assert s.baseline() == ServingConfig(gpu_memory_utilization=CPU_BASELINE_UTILIZATION)
    assert s.baseline_params()["gpu_memory_utilization"] == CPU_BASELINE_UTILIZATION


def test_cpu_unsearched_utilization_is_held_at_the_baseline_value() -> None:
    s = space(CPU, TINY, params=["max_num_seqs"])
    assert s.fixed == {"gpu_memory_utilization": CPU_BASELINE_UTILIZATION}
    trial = optuna.trial.FixedTrial({"max_num_seqs": 8})
    assert s.suggest(trial) == ServingConfig(gpu_memory_utilization=0.1, max_num_seqs=8)


def test_cpu_default_utilization_only_when_asked_for() -> None:
    s = space(CPU, TINY, choices={"gpu_memory_utilization": ["default", 0.2]})
    assert s.choices["gpu_memory_utilization"] == (DEFAULT, 0.2, CPU_BASELINE_UTILIZATION)
    trial = optuna.trial.FixedTrial({**s.baseline_params(), "gpu_memory_utilization": DEFAULT})
    assert s.suggest(trial).gpu_memory_utilization is None


def test_fixed_knobs_apply_to_baseline_and_trials() -> None:
    s = space(CPU, TINY, fixed={"enforce_eager": True, "gpu_memory_utilization": 0.2})
    assert "enforce_eager" not in s.searched and "gpu_memory_utilization" not in s.searched
    assert s.baseline() == ServingConfig(enforce_eager=True, gpu_memory_utilization=0.2)
    config = s.suggest(optuna.trial.FixedTrial({**s.baseline_params(), "max_num_seqs": 16}))
    assert config == ServingConfig(enforce_eager=True, gpu_memory_utilization=0.2, max_num_seqs=16)


def test_fixed_default_holds_vllm_default() -> None:
    s = space(fixed={"max_model_len": "default"})
    assert "max_model_len" not in s.searched
    assert s.baseline() == ServingConfig()


def test_params_and_choices_select_and_override() -> None:
    s = space(params=["max_num_seqs", "enforce_eager"], choices={"max_num_seqs": [8, 8, 300]})
    assert s.searched == ("max_num_seqs", "enforce_eager")
    assert s.choices["max_num_seqs"] == (DEFAULT, 8, 300)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"params": ["bogus"]}, "unknown knob"),
        ({"choices": {"bogus": [1]}}, "unknown knob"),
        ({"fixed": {"bogus": 1}}, "unknown knob"),
        ({"params": ["max_num_seqs"], "fixed": {"max_num_seqs": 8}}, "both searched"),
        ({"choices": {"max_num_seqs": [8]}, "fixed": {"max_num_seqs": 8}}, "both fixed"),
        ({"params": ["enforce_eager"], "choices": {"max_num_seqs": [8]}}, "not in params"),
        ({"choices": {"max_num_seqs": []}}, "non-empty list"),
        ({"choices": {"max_num_seqs": "16"}}, "non-empty list"),
        ({"choices": {"max_num_seqs": [16, "many"]}}, "not a valid value"),
        ({"choices": {"max_num_seqs": [True]}}, "not a valid value"),
        ({"choices": {"max_num_seqs": [0]}}, "not a valid value"),
        ({"choices": {"gpu_memory_utilization": [1.5]}}, "not a valid value"),
        ({"choices": {"gpu_memory_utilization": [float("nan")]}}, "not a valid value"),
        ({"choices": {"max_num_seqs": [float("inf")]}}, "not a valid value"),
        ({"fixed": {"gpu_memory_utilization": float("nan")}}, "not a valid value"),
        ({"fixed": {"enforce_eager": "yes"}}, "not a valid value"),
        ({"fixed": {"flash_attn_version": 4}}, "not a valid value"),
        ({"params": ["flash_attn_version"]}, "never be FLASH_ATTN"),
    ],
)
def test_bad_input_is_a_usage_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        space(**kwargs)


def test_knob_without_candidates_cannot_be_searched() -> None:
    with pytest.raises(UsageError, match="no candidate values"):
        space(A10G, params=["kv_cache_dtype"])
    # ...unless the caller gives them (the rules will then explain why fp8 fails there)
    assert space(A10G, choices={"kv_cache_dtype": ["fp8"]}).choices["kv_cache_dtype"] == (
        DEFAULT,
        "fp8",
    )


def test_integer_utilization_is_accepted_as_float() -> None:
    s = space(fixed={"gpu_memory_utilization": 1})
    assert s.baseline().gpu_memory_utilization == 1.0


def test_suggest_with_fixed_trial_maps_default_to_none() -> None:
    s = space()
    params = {**s.baseline_params(), "attention_backend": "FLASH_ATTN", "flash_attn_version": 2}
    params |= {"max_num_seqs": 64, "enforce_eager": False, "kv_cache_dtype": DEFAULT}
    config = s.suggest(optuna.trial.FixedTrial(params))
    assert config == ServingConfig(
        attention_backend="FLASH_ATTN", flash_attn_version=2, max_num_seqs=64, enforce_eager=False
    )


def test_flash_attn_version_is_only_asked_with_flash_attn() -> None:
    s = space()
    params = {**s.baseline_params(), "attention_backend": "TRITON_ATTN", "flash_attn_version": 3}
    assert s.suggest(optuna.trial.FixedTrial(params)).flash_attn_version is None
    assert "flash_attn_version" not in s.baseline_params()
    fixed_fa = space(fixed={"attention_backend": "FLASH_ATTN"})
    assert fixed_fa.baseline_params()["flash_attn_version"] == DEFAULT


@pytest.mark.parametrize("gpu", [H200, A10G, CPU])
def test_baseline_round_trips_through_an_enqueued_trial(gpu: Any) -> None:
    s = space(gpu, TINY)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    study.enqueue_trial(s.baseline_params())
    trial = study.ask()
    assert s.suggest(trial) == s.baseline()
    assert trial.params == s.baseline_params()
    study.tell(trial, 1.0)


def test_tpe_study_only_proposes_values_from_the_choices() -> None:
    s = space(choices={"max_num_seqs": [16, 48]})
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=1, n_startup_trials=5))
    study.enqueue_trial(s.baseline_params())
    seen: set[tuple[str, Any]] = set()
    for _ in range(25):
        trial = study.ask()
        config = s.suggest(trial)
        for knob, value in trial.params.items():
            assert value in s.choices[knob]
            seen.add((knob, value))
            expected = None if value == DEFAULT else value
            assert getattr(config, knob) == expected
        if config.flash_attn_version is not None:
            assert config.attention_backend == "FLASH_ATTN"
        study.tell(trial, float(config.max_num_seqs or 0))
    assert ("max_num_seqs", 48) in seen and ("max_num_seqs", 16) in seen
    assert study.trials[0].params == s.baseline_params()  # the enqueued baseline came first


def test_enqueued_entry_round_trips_through_params_for() -> None:
    s = space(CPU, TINY, fixed={"enforce_eager": True})
    config = s.config_from({"max_num_seqs": 32, "enable_prefix_caching": "default"})
    assert config == ServingConfig(
        gpu_memory_utilization=CPU_BASELINE_UTILIZATION, max_num_seqs=32, enforce_eager=True
    )
    params = s.params_for(config)
    assert params["max_num_seqs"] == 32 and params["enable_prefix_caching"] == DEFAULT
    assert s.suggest(optuna.trial.FixedTrial(params)) == config
    # None means "the baseline's value", also for the cpu utilization
    assert s.params_for(ServingConfig()) == s.baseline_params()


def test_enqueued_flash_attn_version_is_kept() -> None:
    s = space()
    config = s.config_from({"attention_backend": "FLASH_ATTN", "flash_attn_version": 2})
    params = s.params_for(config)
    assert params["flash_attn_version"] == 2
    assert s.suggest(optuna.trial.FixedTrial(params)) == config


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"max_num_seqs": 33}, "not among the study's choices"),
        ({"enforce_eager": False}, "fixes it to True"),
        ({"bogus": 1}, "unknown knob"),
        ({"max_num_seqs": "lots"}, "not a valid value"),
        ({"gpu_memory_utilization": float("nan")}, "not a valid value"),
    ],
)
def test_impossible_enqueued_entries_are_usage_errors(item: dict[str, Any], message: str) -> None:
    s = space(CPU, TINY, fixed={"enforce_eager": True})
    with pytest.raises(UsageError, match=message):
        s.params_for(s.config_from(item))


def test_params_for_rejects_knobs_the_study_does_not_search() -> None:
    s = space(params=["max_num_seqs"])
    with pytest.raises(UsageError, match="does not search kv_cache_dtype"):
        s.params_for(ServingConfig(kv_cache_dtype="fp8"))


def test_kernel_twins_fill_only_what_vllm_chose() -> None:
    """The knob changes that leave a launch the same: the backend and FlashAttention version
    vLLM chose, set where the configuration left them to it, never where it named them."""
    unset = {"attention_backend": None, "flash_attn_version": None}
    assert kernel_twins(unset, "FLASH_ATTN", 3) == [
        {},
        {"attention_backend": "FLASH_ATTN"},
        {"flash_attn_version": 3},
        {"attention_backend": "FLASH_ATTN", "flash_attn_version": 3},
    ]
    assert kernel_twins(unset, "FLASHINFER", 3) == [{}, {"attention_backend": "FLASHINFER"}]
    named = {"attention_backend": "FLASH_ATTN", "flash_attn_version": None}
    assert kernel_twins(named, "FLASH_ATTN", 2) == [{}, {"flash_attn_version": 2}]
    assert kernel_twins({"attention_backend": "TRITON_ATTN"}, "TRITON_ATTN", None) == [{}]
    assert kernel_twins(unset, None, None) == [{}]  # the log said nothing
    params = {"attention_backend": DEFAULT, "max_num_seqs": 64}  # Optuna's params
    assert kernel_twins(params, "FLASH_ATTN", None, unset=DEFAULT) == [
        {},
        {"attention_backend": "FLASH_ATTN"},
    ]
