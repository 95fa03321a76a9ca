"""The model catalog and resolve_model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.catalog.models import MODELS, UNKNOWN_FACTS_NOTE, has_facts, resolve_model
from tuner.errors import UsageError

# Published parameter counts (model cards); our estimate ignores biases and norms' details.
PARAMS_BILLIONS = {
    "ernie-0.3b": 0.36,
    "qwen2.5-0.5b": 0.49,
    "qwen2.5-7b": 7.6,
    "qwen2.5-14b": 14.7,
    "llama-3.1-8b": 8.0,
}


def test_catalog_has_the_briefed_models_with_their_hub_ids() -> None:
    assert {alias: spec.hub_id for alias, spec in MODELS.items()} == {
        "ernie-0.3b": "baidu/ERNIE-4.5-0.3B-PT",
        "tiny-ernie": "baidu/ERNIE-4.5-0.3B-PT",
        "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
        "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
        "qwen2.5-14b": "Qwen/Qwen2.5-14B-Instruct",
        "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    }
    for alias, spec in MODELS.items():
        assert spec.alias == alias
        assert spec.source is None  # catalogued models run with random weights
        assert has_facts(spec)


@pytest.mark.parametrize("alias", sorted(PARAMS_BILLIONS))
def test_parameter_counts_match_the_model_cards(alias: str) -> None:
    billions = MODELS[alias].parameter_count() / 1e9
    assert billions == pytest.approx(PARAMS_BILLIONS[alias], rel=0.05)


def test_ernie_facts() -> None:
    c = MODELS["ernie-0.3b"].config
    assert c["architectures"] == ["Ernie4_5ForCausalLM"]
    assert c["model_type"] == "ernie4_5"
    assert (c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]) == (1024, 18, 3072)
    assert (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]) == (16, 2, 128)
    assert (c["vocab_size"], c["max_position_embeddings"]) == (103424, 131072)
    assert c["tie_word_embeddings"] is True and c["rope_theta"] == 500000.0
    assert c["rms_norm_eps"] == 1e-5 and c["torch_dtype"] == "bfloat16"
    # vLLM builds it as a Llama: these keys must be present for the dummy load.
    for key in ("hidden_act", "rms_norm_eps", "bos_token_id", "eos_token_id", "pad_token_id"):
        assert key in c


def test_tiny_ernie_is_the_cpu_test_shape() -> None:
    tiny = MODELS["tiny-ernie"]
    c = tiny.config
    assert c["architectures"] == MODELS["ernie-0.3b"].config["architectures"]
    assert (c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"]) == (2, 128, 4)
    assert (c["num_key_value_heads"], c["head_dim"], c["vocab_size"]) == (2, 32, 1024)
    assert tiny.max_position_embeddings == 4096
    assert tiny.weight_bytes() < 2_000_000


def test_llama_keeps_its_rope_scaling_and_eos_list() -> None:
    c = MODELS["llama-3.1-8b"].config
    assert c["rope_scaling"]["rope_type"] == "llama3"
    assert c["eos_token_id"] == [128001, 128008, 128009]
    assert MODELS["llama-3.1-8b"].num_kv_heads == 8


def test_resolve_alias_returns_the_catalog_entry() -> None:
    assert resolve_model("tiny-ernie") is MODELS["tiny-ernie"]


def test_resolve_local_directory_reads_its_config(tmp_path: Path) -> None:
    config = {**MODELS["qwen2.5-0.5b"].config, "torch_dtype": "float16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = resolve_model(str(tmp_path))
    assert spec.source == str(tmp_path.resolve())
    assert spec.config == config
    assert spec.dtype == "float16"
    assert spec.num_layers == 24


def test_a_multimodal_config_gives_the_facts_of_its_text_config(tmp_path: Path) -> None:
    text = MODELS["qwen2.5-0.5b"].config
    config = {"architectures": ["Qwen2VLForConditionalGeneration"], "text_config": text}
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = resolve_model(str(tmp_path))
    assert has_facts(spec) and spec.architecture == "Qwen2VLForConditionalGeneration"
    assert (spec.num_layers, spec.vocab_size) == (24, 151936)
    assert spec.parameter_count() == MODELS["qwen2.5-0.5b"].parameter_count()


def test_a_null_fact_counts_as_absent(tmp_path: Path) -> None:
    config = {**MODELS["qwen2.5-0.5b"].config, "num_key_value_heads": None, "head_dim": None}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert resolve_model(str(tmp_path)).num_kv_heads == 14  # as many as the attention heads


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"num_hidden_layers": "two"}, 'num_hidden_layers is "two", not a whole number >= 1'),
        ({"hidden_size": float("nan")}, "hidden_size is NaN"),
        ({"vocab_size": 0}, "vocab_size is 0, not a whole number >= 2"),
        ({"num_hidden_layers": -2}, "num_hidden_layers is -2"),
        ({"num_attention_heads": 0}, "num_attention_heads is 0"),
        ({"head_dim": True}, "head_dim is true"),
        ({"text_config": {"vocab_size": 1.5}}, "text_config.vocab_size is 1.5"),
    ],
)
def test_wrong_architecture_numbers_are_refused_naming_file_and_key(
    change: dict[str, object], words: str, tmp_path: Path
) -> None:
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps({**MODELS["qwen2.5-0.5b"].config, **change}))
    with pytest.raises(UsageError) as info:
        resolve_model(str(tmp_path))
    assert str(config_file) in info.value.message and words in info.value.message


def test_wrong_architecture_numbers_in_the_hf_cache_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snapshot = tmp_path / "models--someorg--some-model" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    config = {**MODELS["llama-3.1-8b"].config, "num_hidden_layers": 0}
    (snapshot / "config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError, match="num_hidden_layers is 0"):
        resolve_model("someorg/some-model")


def test_whole_floats_and_nulls_are_fine_facts(tmp_path: Path) -> None:
    config = {**MODELS["qwen2.5-0.5b"].config, "hidden_size": 896.0, "head_dim": None}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert resolve_model(str(tmp_path)).head_dim == 64


def test_a_number_given_per_layer_is_a_fact_not_a_mistake(tmp_path: Path) -> None:
    """Gemma 3n's config gives intermediate_size per layer: the facts check called the valid
    file a mistake to fix. A list of whole numbers is taken as the mean of its layers'."""
    layers = MODELS["qwen2.5-0.5b"].config["num_hidden_layers"]
    sizes = [4864, 9728] * (layers // 2)
    config = {**MODELS["qwen2.5-0.5b"].config, "intermediate_size": sizes}
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = resolve_model(str(tmp_path))
    assert model.facts["intermediate_size"] == 7296
    assert model.parameter_count() > MODELS["qwen2.5-0.5b"].parameter_count()  # wider on average
    config["intermediate_size"] = [4864, 0]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError, match=r"intermediate_size is \[4864, 0\]"):
        resolve_model(str(tmp_path))


def test_resolve_directory_without_config_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no config\.json"):
        resolve_model(str(tmp_path))


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_model_name_is_refused_not_read_as_the_current_directory(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(MODELS["qwen2.5-0.5b"].config))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="model name is empty"):
        resolve_model(name)


def test_resolve_catalogued_hub_id_asks_for_real_weights() -> None:
    spec = resolve_model("Qwen/Qwen2.5-7B-Instruct")
    assert spec.source == "Qwen/Qwen2.5-7B-Instruct"
    assert spec.config == MODELS["qwen2.5-7b"].config


def test_resolve_unknown_hub_id_has_unknown_facts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    spec = resolve_model("someorg/some-model")
    assert (spec.source, spec.hub_id, spec.alias) == (
        "someorg/some-model",
        "someorg/some-model",
        "some-model",
    )
    assert spec.config == {}
    assert spec.notes == UNKNOWN_FACTS_NOTE
    assert not has_facts(spec)


def test_resolve_hub_id_reads_the_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    repo = tmp_path / "models--someorg--some-model"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(MODELS["llama-3.1-8b"].config))
    spec = resolve_model("someorg/some-model")
    assert spec.config == MODELS["llama-3.1-8b"].config
    assert has_facts(spec)


def test_unknown_name_lists_the_aliases() -> None:
    with pytest.raises(UsageError) as info:
        resolve_model("no-such-model")
    for alias in MODELS:
        assert alias in info.value.hint
