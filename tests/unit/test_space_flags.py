"""SearchSpace over any vLLM flag: names resolved against the flag list (with the closest real
flags when one is not there), values typed, the levers' built-in candidates and rules, and
the trials Optuna asks for."""

from __future__ import annotations

import dataclasses
from typing import Any

import optuna
import pytest

from tuner.catalog import levers
from tuner.catalog.gpus import GPUS
from tuner.catalog.models import MODELS
from tuner.domain import FailureClass, ServingConfig, Workload
from tuner.errors import UsageError
from tuner.space import CPU_BASELINE_UTILIZATION, DEFAULT, KNOBS, SearchSpace
from tuner.vllm.flags import FlagCatalog, shipped
from tuner.vllm.flagvalues import knob_flag, typed_value

WORKLOAD = Workload("chat", prompt_tokens=400, output_tokens=200)
CPU = dataclasses.replace(GPUS["cpu"], memory_gib=24.0)
H200 = GPUS["h200"]
ERNIE, TINY = MODELS["ernie-0.3b"], MODELS["tiny-ernie"]


def flags(version: str) -> FlagCatalog:
    catalog = shipped(version)
    assert catalog is not None
    return catalog


def space(gpu: Any = H200, version: str = "0.26.0", **kwargs: Any) -> SearchSpace:
    model = TINY if gpu.is_cpu else ERNIE
    return SearchSpace(model, gpu, WORKLOAD, flags=flags(version), **kwargs)


def test_search_adds_any_flag_with_its_values_typed_and_defaults_collapsed() -> None:
    s = space(params=[], search={"--stream-interval": ["1", "8"], "block_size": [16, 32]})
    assert s.searched == ("stream_interval", "block_size")
    # 1 is vLLM's own default: the same server as "default", so it is not tried twice.
    assert s.choices == {"stream_interval": (DEFAULT, 8), "block_size": (DEFAULT, 16, 32)}
    assert s.baseline() == ServingConfig() and s.baseline_params() == {
        "stream_interval": DEFAULT,
        "block_size": DEFAULT,
    }


def test_search_comes_on_top_of_the_default_space() -> None:
    s = space(search={"stream_interval": [8]})
    assert s.searched[: len(KNOBS)] == KNOBS and s.searched[-1] == "stream_interval"


def test_a_misspelt_flag_names_the_closest_real_ones_and_the_version() -> None:
    with pytest.raises(UsageError) as caught:
        space(version="0.32.0", search={"stream_intervall": [1, 8]})
    assert "vLLM 0.32.0 has no flag 'stream_intervall'" in caught.value.message
    assert "--stream-interval" in caught.value.hint


def test_a_lever_gone_from_the_installed_vllm_says_where_it_was() -> None:
    with pytest.raises(UsageError, match=r"0\.32\.0 has no flag.*it is in vLLM 0\.26\.0"):
        space(version="0.32.0", params=["max_num_partial_prefills"])
    assert "max_num_partial_prefills" in space(params=["max_num_partial_prefills"]).searched


def test_levers_bring_their_candidates_when_named_without_values() -> None:
    s = space(params=["stream_interval", "max_num_seqs"], search={"async_scheduling": []})
    assert s.choices["stream_interval"] == (DEFAULT, 2, 4, 8, 16)
    assert s.choices["async_scheduling"] == (DEFAULT, True, False)
    assert "max_num_seqs" in s.searched
    cpu = space(CPU, "0.32.0", params=["stream_interval"])
    assert cpu.choices["stream_interval"] == (DEFAULT, 4, 8)
    with pytest.raises(UsageError, match="no candidate values"):
        space(CPU, "0.32.0", params=["block_size"])  # no built-in candidates on CPU
    with pytest.raises(UsageError, match="no candidate values"):
        space(params=["max_logprobs"])  # a flag tuner knows nothing about: give values


def test_every_lever_is_a_flag_of_a_shipped_vllm_and_its_candidates_type_check() -> None:
    for knob, lever in levers.LEVERS.items():
        present = []
        for version in ("0.26.0", "0.32.0"):
            found = knob_flag(flags(version), knob)
            if found is None:
                continue
            present.append(version)
            flag, sub = found
            for value in (*lever.gpu, *lever.cpu):
                assert typed_value(flag, value, sub) == value, (knob, version, value)
        assert present, knob
        for version in ("0.26.0", "0.32.0"):
            said = version in lever.versions and f"not in {version}" not in lever.versions
            assert said == (version in present), (knob, lever.versions)


def test_no_lever_is_searched_unless_asked_and_output_changing_ones_say_so() -> None:
    assert space().searched == KNOBS
    assert [k for k, lv in levers.LEVERS.items() if lv.changes_outputs] == ["quantization"]
    fp8 = ServingConfig(extra={"quantization": "fp8", "stream_interval": 8})
    assert levers.output_changing(fp8) == ["quantization=fp8"]
    assert levers.smoothness_knobs(fp8) == ["stream_interval=8"]


def test_fixed_enqueued_and_suggested_extra_knobs() -> None:
    s = space(
        CPU,
        "0.32.0",
        params=["max_num_seqs"],
        search={"stream_interval": [8]},
        fixed={"kv-cache-memory-bytes": 268435456},
    )
    base = s.baseline()
    assert base.extra == {"kv_cache_memory_bytes": 268435456}
    assert base.gpu_memory_utilization == CPU_BASELINE_UTILIZATION
    wanted = s.config_from({"--stream-interval": 8, "max_num_seqs": 8})
    assert wanted.extra == {"kv_cache_memory_bytes": 268435456, "stream_interval": 8}
    params = s.params_for(wanted)
    assert params == {"max_num_seqs": 8, "stream_interval": 8}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial(params)
    assert s.suggest(study.ask()) == wanted
    seen = set()
    for _ in range(12):
        config = s.suggest(study.ask())
        assert config.extra["kv_cache_memory_bytes"] == 268435456
        seen.add(config.extra.get("stream_interval"))
    assert seen == {None, 8}
    with pytest.raises(UsageError, match="fixes it"):
        s.config_from({"kv_cache_memory_bytes": 1})
    with pytest.raises(UsageError, match="does not search block_size"):
        s.params_for(ServingConfig(extra={"block_size": 16}))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"search": {"stream_interval": [1]}}, "all vLLM's default"),
        ({"search": {"stream_interval": ["x"]}}, "takes an integer"),
        ({"search": {"port": [8001]}}, "picks a free port"),
        ({"search": {"attention-config": ['{"backend":"X"}']}}, "renders it from"),
        ({"search": {"cudagraph_capture_sizes": [8]}}, "takes a list"),
        ({"search": {"block_size": [16]}, "choices": {"block_size": [32]}}, "both search"),
        ({"search": {"block_size": [16]}, "fixed": {"block_size": 32}}, "both fixed"),
        ({"params": ["stream_interval"], "fixed": {"stream_interval": 8}}, "both searched"),
        ({"params": [], "choices": {"stream_interval": [8]}}, "not in params"),
    ],
)
def test_what_the_space_refuses(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        space(**kwargs)


def test_without_a_flag_list_only_the_typed_knobs_are_known() -> None:
    with pytest.raises(UsageError, match="needs vLLM's flag list"):
        SearchSpace(ERNIE, H200, WORKLOAD, search={"stream_interval": [8]})
    # A typed knob under a flag spelling needs no list.
    s = SearchSpace(ERNIE, H200, WORKLOAD, params=[], search={"--max-num-seqs": [16, 64]})
    assert s.choices == {"max_num_seqs": (DEFAULT, 16, 64)}


def test_lever_rules_rule_out_hopeless_combinations() -> None:
    s = space(params=[], search={"enable_chunked_prefill": [False], "block_size": [16]})

    def why(**knobs: Any) -> list[str]:
        typed = {k: v for k, v in knobs.items() if k in KNOBS}
        extra = {k.replace("__", "."): v for k, v in knobs.items() if k not in KNOBS}
        return s.violations(ServingConfig(**typed, extra=extra))

    assert why(enable_chunked_prefill=False, block_size=16) == []
    assert (
        "a whole prompt must fit"
        in why(enable_chunked_prefill=False, max_num_batched_tokens=2048, max_model_len=4096)[0]
    )
    assert why(enable_chunked_prefill=True, max_num_batched_tokens=2048, max_model_len=4096) == []
    assert (
        "chunked prefill only" in why(enable_chunked_prefill=False, max_num_partial_prefills=2)[0]
    )
    assert "above max_model_len" in why(long_prefill_token_threshold=8192, max_model_len=4096)[0]
    assert (
        "turns CUDA graphs off"
        in why(enforce_eager=True, compilation_config__cudagraph_mode="FULL")[0]
    )
    assert "-O0" in why(optimization_level=0, max_cudagraph_capture_size=512)[0]
    assert "one GPU per launch" in why(data_parallel_size=2)[0]
    assert "draft model" in why(speculative_config='{"method":"eagle","model":"x"}')[0]
    assert why(speculative_config='{"method":"ngram","num_speculative_tokens":3}') == []
    cpu = space(CPU, "0.32.0", params=[], search={"stream_interval": [8]})
    assert (
        "turns async scheduling off"
        in cpu.violations(ServingConfig(extra={"async_scheduling": True}))[0]
    )


def test_failures_dominate_only_configs_with_the_same_extra_knobs() -> None:
    s = space(params=["gpu_memory_utilization"], search={"block_size": [16, 32]})
    failed = ServingConfig(gpu_memory_utilization=0.9, extra={"block_size": 32})
    failures = [(failed, FailureClass.MEMORY_EXCEEDED)]
    assert s.dominated_by(ServingConfig(gpu_memory_utilization=0.95), failures) is None
    same = ServingConfig(gpu_memory_utilization=0.95, extra={"block_size": 32})
    assert s.dominated_by(same, failures) == failed
