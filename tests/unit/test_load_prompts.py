"""Prompts of exact token length, checked with a real WordLevel tokenizer."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from tuner.load.prompts import FALLBACK_VOCAB_SIZE, PromptFactory

VOCAB = 1024


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    """The synthetic tokenizer tuner writes for catalogued models."""
    tok = Tokenizer(WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tok.pre_tokenizer = Whitespace()
    return tok


@pytest.mark.parametrize(("length", "shared"), [(1, 0), (7, 3), (128, 32), (3500, 0)])
def test_synthetic_prompts_have_exact_token_counts(
    tokenizer: Tokenizer, length: int, shared: int
) -> None:
    factory = PromptFactory(VOCAB, synthetic=True, seed=1)
    prompt = factory.make(length, shared)
    assert isinstance(prompt, str)
    encoding = tokenizer.encode(prompt, add_special_tokens=False)
    assert len(encoding.ids) == length
    # Every word is in the vocabulary: none fell back to the unknown token by accident.
    assert [f"t{i}" for i in encoding.ids] == prompt.split()


def test_shared_prefix_is_the_same_for_every_prompt_and_the_rest_varies() -> None:
    factory = PromptFactory(VOCAB, synthetic=True, seed=2)
    a = factory.token_ids(100, 32)
    b = factory.token_ids(60, 32)
    c = factory.token_ids(200, 64)
    assert a[:32] == b[:32] == c[:32]
    assert c[:64] == factory.token_ids(70, 64)[:64]
    assert a[32:60] != b[32:60]
    assert PromptFactory(VOCAB, synthetic=True, seed=2).token_ids(100, 32) == a
    assert PromptFactory(VOCAB, synthetic=True, seed=3).token_ids(100, 32)[:32] != a[:32]


def test_real_model_prompts_are_token_ids_clear_of_special_ids() -> None:
    factory = PromptFactory(151_936, synthetic=False, seed=0)
    prompt = factory.make(5000, 100)
    assert isinstance(prompt, list) and len(prompt) == 5000
    assert all(isinstance(t, int) for t in prompt)
    assert min(prompt) >= 100
    assert max(prompt) < 151_936 - 1024
    assert factory.make(300, 100)[:100] == prompt[:100]


def test_an_unknown_vocabulary_gives_ids_every_vocabulary_has() -> None:
    prompt = PromptFactory(None, synthetic=False, seed=0).make(5000, 100)
    assert isinstance(prompt, list) and len(prompt) == 5000
    assert min(prompt) >= 100 and max(prompt) < FALLBACK_VOCAB_SIZE == 1024


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        PromptFactory(1, synthetic=True)
    factory = PromptFactory(VOCAB, synthetic=True)
    with pytest.raises(ValueError, match="shared_prefix_tokens"):
        factory.make(10, 11)
    with pytest.raises(ValueError, match="prompt_tokens"):
        factory.make(0)


def test_a_phases_streams_are_dropped_once_its_prompts_are_made() -> None:
    """A session's turns and a trace's hash blocks are streams of one phase (``...@PHASE``):
    kept for the whole run, a Mooncake trace's tens of thousands of 512-token blocks a window
    took gigabytes as Python ints. The generator drops them once a phase's prompts are made;
    shared prefixes stay, and a stream made again is the same tokens (seeded by its name)."""
    f = PromptFactory(1000, synthetic=False, seed=3)
    segs = (("", 4), ("prefix:sys@v2", 6), ("session:7@p0w1", 8))
    first = f.segment_ids(30, segs)
    f.forget_phase_streams()
    assert sorted(f._streams) == ["", "prefix:sys@v2"]  # a user's prefix name, "@" and all
    again = f.segment_ids(30, segs)
    assert again[:18] == first[:18]  # the same stream, made again from its name
    assert all(isinstance(t, int) for t in again)  # JSON-ready, not numpy ints
