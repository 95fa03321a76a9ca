"""Write a model directory vLLM can serve with ``--load-format dummy``.

The directory holds the model's ``config.json`` and a synthetic tokenizer: a ``tokenizers``
WordLevel model whose vocabulary is the words ``t0`` ... ``t{V-1}`` (``V`` = the model's
vocab size, the id of ``tN`` is ``N``) split on whitespace. A prompt of ``n`` such words is
exactly ``n`` tokens, which lets the load generator control prompt lengths to the token, and
every id the random-weight model samples decodes to a word.

The tokenizer files are written twice: beside ``config.json`` and in ``tokenizer/``
(:func:`tokenizer_dir`). Serve with ``--tokenizer DIR/tokenizer``: transformers >= 5 ignores
``tokenizer_class`` for some model types (qwen2 among them) and rebuilds its own BPE
tokenizer from ``tokenizer.json``, which turns every prompt into zero tokens; without a
``config.json`` of the model beside them the files load as the generic fast tokenizer for
every model. vLLM still asks for a config there (and retries for 6 s per process when there is
none), so ``tokenizer/`` gets a stub ``config.json`` naming a model type (gpt2) whose tokenizer
transformers takes from the files as they are.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from tuner.catalog.models import has_facts
from tuner.domain import ModelSpec
from tuner.errors import EnvironmentProblem, UsageError

# Bump when the files written change, so old directories are not reused.
_FORMAT = 3
# See the module docstring: a config vLLM can parse that does not redirect the tokenizer.
_TOKENIZER_STUB_CONFIG = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}

_SPECIAL_FLAGS: dict[str, bool] = {
    "single_word": True,
    "lstrip": False,
    "rstrip": False,
    "normalized": False,
    "special": True,
}

# Message contents joined by spaces: no role words, so a chat prompt has as many tokens as
# the words of its messages.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ message['content'] }}{% if not loop.last %} {% endif %}"
    "{%- endfor -%}"
)


def tokenizer_dir(model_dir: Path) -> Path:
    """Where :func:`materialize` puts the tokenizer for ``--tokenizer`` (see module doc)."""
    return Path(model_dir) / "tokenizer"


def word(token_id: int) -> str:
    return f"t{token_id}"


def materialize(model: ModelSpec, cache_dir: Path) -> Path:
    """Return a directory under ``cache_dir`` holding ``model`` ready for ``--load-format dummy``.

    Idempotent: the directory name is a hash of everything written, and an existing one is
    returned as is. Atomic: files are written to a temporary directory that is renamed into
    place, so a concurrent tuner sees either no directory or a complete one.
    Raises :class:`UsageError` when the model's architecture facts are unknown, and
    :class:`EnvironmentProblem` when ``cache_dir`` cannot be a writable directory.
    """
    if not has_facts(model):
        raise UsageError(
            f"cannot write a random-weight copy of {model.hub_id!r}: its config.json is unknown",
            hint="download the model (it then loads with its real weights) or use a catalog alias",
        )
    files = _contents(model)
    digest = hashlib.sha256(
        json.dumps({"format": _FORMAT, "files": files}, sort_keys=True).encode()
    ).hexdigest()[:16]
    safe_alias = re.sub(r"[^A-Za-z0-9._-]+", "_", model.alias) or "model"
    target = Path(cache_dir) / f"{safe_alias}-{digest}"
    if (target / "config.json").is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{safe_alias}-", dir=target.parent))
    except OSError as exc:
        raise _unusable(target.parent, exc) from None
    try:
        tokenizer = _tokenizer(model)
        tokenizer_dir(tmp).mkdir()
        for name, content in files.items():
            text = json.dumps(content, indent=2) + "\n"
            (tmp / name).write_text(text, encoding="utf-8")
            if name == "tokenizer_config.json":
                (tokenizer_dir(tmp) / name).write_text(text, encoding="utf-8")
        stub = json.dumps(_TOKENIZER_STUB_CONFIG, indent=2) + "\n"
        (tokenizer_dir(tmp) / "config.json").write_text(stub, encoding="utf-8")
        for where in (tmp, tokenizer_dir(tmp)):
            tokenizer.save(str(where / "tokenizer.json"))
            where.chmod(0o755)  # mkdtemp makes 0700; others may serve from a shared cache
        try:
            os.rename(tmp, target)
        except OSError:
            # Another process renamed its complete copy first: theirs is as good as ours.
            if not (target / "config.json").is_file():
                raise
    except OSError as exc:
        raise _unusable(target.parent, exc) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _unusable(cache_dir: Path, exc: OSError) -> EnvironmentProblem:
    """A model cache that is a file, under a file, read-only or full: said as tuner's home
    itself is (:func:`tuner.compose.writable_home`), not as a traceback."""
    if not cache_dir.exists():
        why = "cannot be created"
    else:
        why = "is not a directory" if not cache_dir.is_dir() else "cannot be written"
    return EnvironmentProblem(
        f"tuner's model cache {cache_dir} {why} ({exc.strerror or exc})",
        hint="point TUNER_HOME at a writable directory (tuner creates it when missing)",
    )


def special_ids(config: Mapping[str, Any]) -> dict[str, int]:
    """bos/eos/pad/unk ids for the tokenizer, from the config where it names them.

    A list of eos ids (Llama 3.1) contributes its first. A missing pad falls back to eos.
    unk is the config's pad when it names one (ERNIE: 0), else ``t0``, so that unknown words
    do not read as end-of-sequence.
    """
    vocab = int(config["vocab_size"])

    def pick(key: str, fallback: int) -> int:
        value = config.get(key)
        if isinstance(value, list):
            value = value[0] if value else None
        return int(value) if isinstance(value, int) and 0 <= value < vocab else fallback

    bos = pick("bos_token_id", min(1, vocab - 1))
    eos = pick("eos_token_id", min(2, vocab - 1))
    pad = pick("pad_token_id", eos)
    unk = pick("pad_token_id", 0)
    return {"bos": bos, "eos": eos, "pad": pad, "unk": unk}


def _contents(model: ModelSpec) -> dict[str, Any]:
    config = dict(model.config)
    ids = special_ids(config)
    generation: dict[str, Any] = {
        "bos_token_id": config.get("bos_token_id", ids["bos"]),
        "eos_token_id": config.get("eos_token_id", ids["eos"]),
        "pad_token_id": config.get("pad_token_id", ids["pad"]),
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": {
            str(i): {"content": word(i), **_SPECIAL_FLAGS} for i in sorted(set(ids.values()))
        },
        "bos_token": word(ids["bos"]),
        "eos_token": word(ids["eos"]),
        "pad_token": word(ids["pad"]),
        "unk_token": word(ids["unk"]),
        "model_max_length": model.max_position_embeddings,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    return {
        "config.json": config,
        "generation_config.json": generation,
        "tokenizer_config.json": tokenizer_config,
    }


def _tokenizer(model: ModelSpec) -> Tokenizer:
    vocab = {word(i): i for i in range(model.vocab_size)}
    ids = special_ids(model.config)
    tokenizer = Tokenizer(WordLevel(vocab, unk_token=word(ids["unk"])))
    tokenizer.pre_tokenizer = Whitespace()
    # Special tokens are matched in the raw text before pre-tokenization; single_word keeps
    # bos "t1" from matching inside "t17".
    tokenizer.add_special_tokens(
        [AddedToken(word(i), **_SPECIAL_FLAGS) for i in sorted(set(ids.values()))]
    )
    return tokenizer
