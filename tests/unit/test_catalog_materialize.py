"""The random-weight model directory and its synthetic tokenizer."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from tuner.catalog.materialize import materialize, special_ids, tokenizer_dir
from tuner.catalog.models import MODELS
from tuner.domain import ModelSpec
from tuner.errors import UsageError

TINY = MODELS["tiny-ernie"]


def _json(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return materialize(TINY, tmp_path_factory.mktemp("models"))


@pytest.mark.parametrize("sub", [False, True])
def test_tokenizer_encodes_words_to_their_numbers(tiny_dir: Path, sub: bool) -> None:
    where = tokenizer_dir(tiny_dir) if sub else tiny_dir
    tokenizer = Tokenizer.from_file(str(where / "tokenizer.json"))
    encoding = tokenizer.encode("t5 t17 t3")
    assert encoding.ids == [5, 17, 3]
    assert tokenizer.decode(encoding.ids) == "t5 t17 t3"
    assert tokenizer.get_vocab_size() == 1024


def test_special_words_do_not_match_inside_other_words(tiny_dir: Path) -> None:
    # bos is t1, eos t2, pad/unk t0: "t17" must stay one token, not t1 + unknown.
    tokenizer = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    assert tokenizer.encode("t1 t17 t2 t20 t0 t1023").ids == [1, 17, 2, 20, 0, 1023]
    assert tokenizer.encode("t5 bogus").ids == [5, 0]  # unknown words are unk (t0)


def test_files_carry_the_model_facts(tiny_dir: Path) -> None:
    assert _json(tiny_dir / "config.json") == dict(TINY.config)
    generation = _json(tiny_dir / "generation_config.json")
    assert (generation["bos_token_id"], generation["eos_token_id"]) == (1, 2)
    tok = _json(tiny_dir / "tokenizer_config.json")
    assert tok == _json(tokenizer_dir(tiny_dir) / "tokenizer_config.json")
    assert tok["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (tok["bos_token"], tok["eos_token"], tok["pad_token"], tok["unk_token"]) == (
        "t1",
        "t2",
        "t0",
        "t0",
    )
    assert tok["model_max_length"] == 4096
    assert "message['content']" in str(tok["chat_template"])
    # Only a stub config beside the tokenizer: never the model's own (see the module doc).
    stub = json.loads((tokenizer_dir(tiny_dir) / "config.json").read_text())
    assert stub["model_type"] == "gpt2"


def test_llama_specials_come_from_its_config() -> None:
    ids = special_ids(MODELS["llama-3.1-8b"].config)
    # eos list -> its first; no pad -> eos; unk -> t0 rather than an end-of-sequence word
    assert ids == {"bos": 128000, "eos": 128001, "pad": 128001, "unk": 0}


def test_idempotent_and_keyed_by_content(tmp_path: Path) -> None:
    first = materialize(TINY, tmp_path)
    stamp = (first / "config.json").stat().st_mtime_ns
    assert materialize(TINY, tmp_path) == first
    assert (first / "config.json").stat().st_mtime_ns == stamp
    other = ModelSpec(
        alias=TINY.alias, hub_id=TINY.hub_id, config={**TINY.config, "num_hidden_layers": 3}
    )
    assert materialize(other, tmp_path) != first


def test_concurrent_writers_end_with_one_complete_directory(tmp_path: Path) -> None:
    results: list[Path] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(materialize(TINY, tmp_path))
        except BaseException as exc:  # pragma: no cover - reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(results)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [results[0].name]  # no temp dirs left
    assert (results[0] / "tokenizer.json").is_file()


def test_unknown_facts_cannot_be_materialized(tmp_path: Path) -> None:
    spec = ModelSpec(alias="x", hub_id="org/x", config={}, source="org/x")
    with pytest.raises(UsageError, match=r"config\.json is unknown"):
        materialize(spec, tmp_path)


def test_a_model_cache_that_cannot_be_written_is_said_not_a_traceback(tmp_path: Path) -> None:
    """$TUNER_HOME/models a file (or under one) ended `tuner run` and `tuner launch --print`
    in a traceback from mkdir (`tuner launch --print`: test_launch_choice.py)."""
    from tuner.errors import EnvironmentProblem

    (tmp_path / "models").write_text("not a folder")
    with pytest.raises(EnvironmentProblem, match="models is not a directory") as refused:
        materialize(TINY, tmp_path / "models")
    assert "point TUNER_HOME at a writable directory" in (refused.value.hint or "")
    with pytest.raises(EnvironmentProblem, match="cannot be created"):
        materialize(TINY, tmp_path / "models" / "under")
