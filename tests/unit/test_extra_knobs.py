"""Knobs beyond the nine typed ones: their place in ServingConfig (labels, JSON, old rows), their
values typed by the flag, and their argv, each flag exactly once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tuner.domain import ServingConfig, to_jsonable
from tuner.errors import UsageError
from tuner.vllm import argv
from tuner.vllm.flags import FlagCatalog, shipped
from tuner.vllm.flagvalues import knob_flag, knob_key, typed_value


def flags(version: str = "0.32.0") -> FlagCatalog:
    catalog = shipped(version)
    assert catalog is not None
    return catalog


# -- ServingConfig.extra ------------------------------------------------------------------------


def test_extra_knobs_are_part_of_the_config_its_label_and_its_json() -> None:
    config = ServingConfig(max_num_seqs=64, extra={"stream_interval": 8, "block_size": 32})
    assert config.label() == "max_num_seqs=64,block_size=32,stream_interval=8"
    assert config.to_dict() == {"max_num_seqs": 64, "block_size": 32, "stream_interval": 8}
    assert ServingConfig.from_dict(config.to_dict()) == config
    assert ServingConfig.from_dict(to_jsonable(config)) == config  # a TrialResult's encoding
    assert to_jsonable(config)["extra"] == {"block_size": 32, "stream_interval": 8}
    # Hashable and order-blind: configurations are dict keys and set members.
    same = ServingConfig(max_num_seqs=64, extra={"block_size": 32, "stream_interval": 8})
    assert same == config and hash(same) == hash(config) and len({same, config}) == 1
    assert config != ServingConfig(max_num_seqs=64, extra={"stream_interval": 8})
    assert not config.is_default()
    assert ServingConfig(extra={"stream_interval": None}).is_default()  # None: vLLM's default


def test_rows_written_before_extra_knobs_still_read() -> None:
    old = {"max_num_seqs": 128, "gpu_memory_utilization": 0.9, "enable_prefix_caching": False}
    config = ServingConfig.from_dict(old)
    assert config.extra == {} and config.to_dict() == old
    assert ServingConfig.from_dict({}) == ServingConfig()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"max_num_seqs": 8}, "typed knobs"),
        ({"Stream-Interval": 8}, "not a knob name"),
        ({"stream_interval": [1, 8]}, "must be a scalar"),
    ],
)
def test_what_extra_refuses(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServingConfig(extra=extra)


# -- values typed by the flag --------------------------------------------------------------------


def typed(name: str, raw: Any, version: str = "0.32.0") -> Any:
    found = knob_flag(flags(version), name)
    assert found is not None, name
    flag, sub = found
    return typed_value(flag, raw, sub)


def test_values_are_typed_by_their_flag() -> None:
    assert typed("stream_interval", 8) == 8 and typed("stream_interval", "8") == 8
    assert typed("stream_interval", 1) is None  # vLLM's default spelled out
    assert typed("stream_interval", "default") is None
    assert typed("gpu_memory_utilization", 1) == 1.0
    assert typed("async_scheduling", "false") is False and typed("async_scheduling", True) is True
    assert typed("headless", True) is True and typed("headless", False) is None  # a bare switch
    assert typed("kv_cache_dtype", "fp8") == "fp8"
    assert typed("optimization_level", 3) == 3 and typed("optimization_level", 2) is None
    assert typed("compilation_config", {"mode": 3, "cudagraph_mode": "FULL"}) == (
        '{"cudagraph_mode":"FULL","mode":3}'
    )
    assert typed("compilation_config", '{"mode": 3}') == '{"mode":3}'
    assert typed("compilation_config.cudagraph_mode", "FULL") == "FULL"
    assert typed("-cc.max_cudagraph_capture_size", 512) == 512


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("stream_interval", "eight", "takes an integer"),
        ("stream_interval", True, "takes an integer"),
        ("gpu_memory_utilization", "most", "takes a number"),
        ("gpu_memory_utilization", float("nan"), "takes a finite number"),
        ("gpu_memory_utilization", "inf", "takes a finite number"),
        ("compilation_config.x", float("-inf"), "takes a finite number"),
        ("async_scheduling", "yes", "true or false"),
        ("kv_cache_dtype", "fp7", "takes one of auto"),
        ("compilation_config", "[1]", "JSON object"),
        ("compilation_config", "{oops", "JSON object"),
        ("stream_interval.x", 1, "not a JSON-valued flag"),
        ("cudagraph_capture_sizes", 8, "takes a list"),
    ],
)
def test_bad_values_say_what_the_flag_takes(name: str, raw: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        typed(name, raw)


def test_knob_keys() -> None:
    found = knob_flag(flags(), "--compilation-config.cudagraph_mode")
    assert found is not None and knob_key(*found) == "compilation_config.cudagraph_mode"
    assert knob_flag(flags(), "no_such_flag.x") is None


# -- argv: each flag once ------------------------------------------------------------------------


def test_extra_knobs_render_after_the_typed_ones_by_their_type() -> None:
    config = ServingConfig(
        max_num_seqs=16,
        extra={
            "stream_interval": 8,
            "async_scheduling": False,
            "enable_chunked_prefill": True,
            "gpu_memory_utilization_extra_test": 0.5,
            "compilation_config.cudagraph_mode": "FULL",
            "compilation_config.max_cudagraph_capture_size": 512,
            "speculative_config": '{"method":"ngram","num_speculative_tokens":3}',
        },
    )
    args = argv.render_flags(config, "0.32.0").args
    assert args == (
        "--max-num-seqs",
        "16",
        "--no-async-scheduling",
        "--compilation-config",
        '{"cudagraph_mode":"FULL","max_cudagraph_capture_size":512}',
        "--enable-chunked-prefill",
        "--gpu-memory-utilization-extra-test",
        "0.5",
        "--speculative-config",
        '{"method":"ngram","num_speculative_tokens":3}',
        "--stream-interval",
        "8",
    )
    line = argv.serve_command("org/m", argv.render_flags(config, "0.32.0"))
    assert "--stream-interval 8" in line and line.count("--compilation-config") == 1


def test_a_json_flag_set_whole_and_by_key_merges_or_refuses_a_clash() -> None:
    merged = argv.extra_args(
        {"compilation_config": '{"mode":3}', "compilation_config.cudagraph_mode": "FULL"}
    )
    assert merged == ["--compilation-config", '{"cudagraph_mode":"FULL","mode":3}']
    with pytest.raises(UsageError, match="both whole and by key"):
        argv.extra_args({"compilation_config": '{"mode":3}', "compilation_config.mode": 1})


@pytest.mark.parametrize("knob", ["port", "model", "attention_config", "attention_config.backend"])
def test_flags_tuner_sets_itself_are_no_knobs(knob: str) -> None:
    assert argv.reserved(knob)
    with pytest.raises(UsageError, match="cannot be searched"):
        argv.extra_args({knob: 1})


@pytest.mark.parametrize(
    "extra",
    [
        ["--stream-interval", "4"],
        ["--stream_interval=4"],
        ["--no-async-scheduling"],
        ["-asc", "2"],
        ["--compilation-config.mode", "3"],
        ["--max-num-seqs", "8"],
    ],
)
def test_extra_args_may_not_set_a_knob_of_the_study(extra: list[str]) -> None:
    knobs = ["stream_interval", "async_scheduling", "api_server_count", "max_num_seqs"]
    with pytest.raises(UsageError, match="vLLM would get it twice"):
        argv.once(extra, [*knobs, "compilation_config.cudagraph_mode"], flags())


def test_extra_args_that_set_other_flags_pass() -> None:
    argv.once(["--dtype", "float32", "--seed", "-1", "--revision", "main"], ["max_num_seqs"], None)
    # Without the flag list an alias is not recognised, but the spelling still is.
    argv.once(["-asc", "2"], ["api_server_count"], None)
    with pytest.raises(UsageError):
        argv.once(["--api-server-count", "2"], ["api_server_count"], None)


def test_the_json_of_a_json_knob_is_compact_and_sorted() -> None:
    value = typed("speculative_config", {"num_speculative_tokens": 3, "method": "ngram"})
    assert value == json.dumps(json.loads(value), sort_keys=True, separators=(",", ":"))
