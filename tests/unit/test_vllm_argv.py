"""Rendering of vLLM flags per version: pure, so every case is a table row."""

from __future__ import annotations

import json
import shlex

import pytest

from tuner.domain import ServingConfig
from tuner.errors import UsageError
from tuner.vllm.argv import (
    VLLM_API_SERVER_MODULE,
    RenderedFlags,
    base_args,
    render_flags,
    serve_command,
    server_command,
)

NEW = "0.26.0"  # the GPU machine: --attention-backend and --attention-config exist
CPU = "0.32.0+cpu"
OLD = "0.12.0"  # last release before both flags (vLLM 0.13.0 added them)


def test_defaults_render_nothing() -> None:
    for version in (OLD, NEW, CPU):
        assert render_flags(ServingConfig(), version) == RenderedFlags(args=(), env={})


def test_every_knob_spelled_like_vllm() -> None:
    config = ServingConfig(
        max_model_len=4096,
        gpu_memory_utilization=0.85,
        enable_prefix_caching=False,
        max_num_seqs=128,
        max_num_batched_tokens=8192,
        kv_cache_dtype="fp8",
        enforce_eager=True,
    )
    flags = render_flags(config, NEW)
    assert flags.args == (
        "--max-model-len", "4096",
        "--gpu-memory-utilization", "0.85",
        "--no-enable-prefix-caching",
        "--max-num-seqs", "128",
        "--max-num-batched-tokens", "8192",
        "--kv-cache-dtype", "fp8",
        "--enforce-eager",
    )  # fmt: skip
    assert flags.env == {}


def test_prefix_caching_on_and_eager_off() -> None:
    flags = render_flags(ServingConfig(enable_prefix_caching=True, enforce_eager=False), NEW)
    assert flags.args == ("--enable-prefix-caching",)


def test_new_vllm_selects_backend_by_flag() -> None:
    flags = render_flags(ServingConfig(attention_backend="flashinfer"), NEW)
    assert flags.args == ("--attention-backend", "FLASHINFER")
    assert flags.env == {}


def test_new_vllm_carries_flash_attn_version_in_attention_config() -> None:
    config = ServingConfig(attention_backend="FLASH_ATTN", flash_attn_version=2)
    flags = render_flags(config, NEW)
    assert flags.args[0] == "--attention-config"
    assert json.loads(flags.args[1]) == {"backend": "FLASH_ATTN", "flash_attn_version": 2}
    # vLLM rejects --attention-backend next to attention_config.backend
    assert "--attention-backend" not in flags.args
    assert flags.env == {}


def test_flash_attn_version_without_backend_leaves_backend_to_vllm() -> None:
    flags = render_flags(ServingConfig(flash_attn_version=3), NEW)
    assert json.loads(flags.args[1]) == {"flash_attn_version": 3}


@pytest.mark.parametrize("version", ["0.13.0", "0.13.0rc1", "0.13.0+cpu", CPU, "v0.26.0"])
def test_threshold_counts_prereleases_and_local_builds(version: str) -> None:
    flags = render_flags(ServingConfig(attention_backend="TRITON_ATTN"), version)
    assert flags.args == ("--attention-backend", "TRITON_ATTN")


@pytest.mark.parametrize("version", [OLD, "0.11.2", "0.8.5.post1"])
def test_old_vllm_selects_backend_by_environment(version: str) -> None:
    config = ServingConfig(attention_backend="FLASH_ATTN", flash_attn_version=3, max_num_seqs=8)
    flags = render_flags(config, version)
    assert flags.args == ("--max-num-seqs", "8")
    assert flags.env == {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN", "VLLM_FLASH_ATTN_VERSION": "3"}


def test_never_emits_enable_flash_attn() -> None:
    config = ServingConfig(attention_backend="FLASH_ATTN", flash_attn_version=2)
    for version in (OLD, NEW):
        flags = render_flags(config, version)
        assert not any("enable-flash-attn" in a for a in flags.args)


def test_flash_attn_version_with_another_backend_is_refused() -> None:
    config = ServingConfig(attention_backend="FLASHINFER", flash_attn_version=2)
    with pytest.raises(UsageError, match="only applies to the FLASH_ATTN backend"):
        render_flags(config, NEW)


def test_backend_name_must_be_a_name() -> None:
    with pytest.raises(UsageError, match="not a backend name"):
        render_flags(ServingConfig(attention_backend="FLASH_ATTN; rm -rf /"), NEW)


def test_base_args_identity_and_loading() -> None:
    args = base_args(
        "/models/ernie",
        served_model_name="trial-7",
        host="127.0.0.1",
        port=8123,
        load_format="dummy",
        tokenizer="/models/tok",
        dtype="bfloat16",
        extra=("--seed", "0"),
    )
    assert args == (
        "--model", "/models/ernie", "--served-model-name", "trial-7",
        "--host", "127.0.0.1", "--port", "8123", "--load-format", "dummy",
        "--tokenizer", "/models/tok", "--dtype", "bfloat16", "--seed", "0",
    )  # fmt: skip


def test_base_args_leaves_out_unset_options() -> None:
    args = base_args(
        "m", served_model_name="s", host="::1", port=1, load_format=None, tokenizer=None, dtype=None
    )
    assert args == ("--model", "m", "--served-model-name", "s", "--host", "::1", "--port", "1")


@pytest.mark.parametrize("model", ["", "--help"])
def test_base_args_refuses_models_that_look_like_flags(model: str) -> None:
    with pytest.raises(UsageError):
        base_args(model, served_model_name="s", host="h", port=1, load_format=None,
                  tokenizer=None, dtype=None)  # fmt: skip


def test_base_args_refuses_bad_port() -> None:
    with pytest.raises(UsageError, match="port"):
        base_args("m", served_model_name="s", host="h", port=70000, load_format=None,
                  tokenizer=None, dtype=None)  # fmt: skip


def test_hostile_model_name_stays_one_argv_element() -> None:
    hostile = "org/model; rm -rf / && echo $(whoami) `id` 'quoted'"
    args = base_args(hostile, served_model_name="s", host="h", port=2, load_format=None,
                     tokenizer=None, dtype=None)  # fmt: skip
    argv = server_command("/venv/bin/python", args)
    assert argv[argv.index("--model") + 1] == hostile
    assert argv.count(hostile) == 1


def test_server_command_runs_module_with_args() -> None:
    assert server_command("/py", ["--port", "1"]) == [
        "/py", "-m", VLLM_API_SERVER_MODULE, "--port", "1",
    ]  # fmt: skip
    assert server_command("/py", [], module="tuner.testing.fake_server") == [
        "/py", "-m", "tuner.testing.fake_server",
    ]  # fmt: skip


def test_serve_command_is_pasteable_and_round_trips() -> None:
    hostile = "my model; rm -rf /"
    flags = render_flags(ServingConfig(attention_backend="FLASH_ATTN", max_num_seqs=4), OLD)
    line = serve_command(hostile, flags)
    assert line.startswith("VLLM_ATTENTION_BACKEND=FLASH_ATTN vllm serve ")
    words = shlex.split(line)
    assert words == ["VLLM_ATTENTION_BACKEND=FLASH_ATTN", "vllm", "serve", hostile,
                     "--max-num-seqs", "4"]  # fmt: skip


def test_serve_command_quotes_attention_config_json() -> None:
    flags = render_flags(ServingConfig(attention_backend="FLASH_ATTN", flash_attn_version=2), NEW)
    line = serve_command("m", flags)
    assert '\'{"backend":"FLASH_ATTN","flash_attn_version":2}\'' in line
    assert shlex.split(line)[-1] == '{"backend":"FLASH_ATTN","flash_attn_version":2}'
