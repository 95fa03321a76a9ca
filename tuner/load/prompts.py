"""Prompts of an exact token length.

Catalogued models run with a *synthetic* tokenizer: a WordLevel vocabulary of the words
``t0 ... t{V-1}`` (ids ``0 ... V-1``) with a whitespace pre-tokenizer and no special tokens,
so ``k`` space-separated such words are exactly ``k`` tokens. For a real model, whose tokenizer
tuner does not know, prompts are lists of token ids, which ``/v1/completions`` accepts as is.
"""

from __future__ import annotations

import zlib

import numpy as np

# Real vocabularies keep their special and control tokens at the low ids (BOS, EOS, pad,
# unk, byte fallbacks) and, in Llama 3 / Qwen style, reserved tokens at the very top.
_REAL_LOW_RESERVED = 100
_REAL_HIGH_RESERVED = 1024
# The vocabulary prompts draw from when the model's vocab_size is unknown (its config.json
# does not say): ids every tokenizer has, clear of the special ones.
FALLBACK_VOCAB_SIZE = 1024
UNKNOWN_VOCAB_NOTE = (
    f"prompts are token ids {_REAL_LOW_RESERVED} to {FALLBACK_VOCAB_SIZE - 1}, which every "
    "vocabulary has: the model's config.json gives no vocab_size"
)


def _per_phase(name: str) -> bool:
    """Whether stream ``name`` is one phase's (tuner.load.workloads names them so): a trace's
    session or hash block (``session:...@PHASE``, ``hash:...@PHASE``) or a conversation of a
    workload's (``conversation:PHASE...``); a prefix group's name is the user's, ``@`` and all."""
    return name.startswith("conversation:") or (
        name.startswith(("session:", "hash:")) and "@" in name
    )


class PromptFactory:
    """Makes prompts for one load run; every prompt shares the same prefix tokens.

    ``make`` is deterministic in ``seed`` and the sequence of calls. ``vocab_size`` None: the
    model's is unknown, and ids stay below :data:`FALLBACK_VOCAB_SIZE`.
    """

    def __init__(self, vocab_size: int | None, synthetic: bool, seed: int = 0) -> None:
        if vocab_size is None:
            vocab_size = FALLBACK_VOCAB_SIZE
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
        self.synthetic = synthetic
        self._seed = seed
        if synthetic:
            self._low, self._high = 0, vocab_size
        else:
            low = min(_REAL_LOW_RESERVED, vocab_size // 4)
            top = _REAL_HIGH_RESERVED if vocab_size > 8 * _REAL_HIGH_RESERVED else 0
            self._low, self._high = low, vocab_size - top
        self._rng = np.random.default_rng(seed)
        # Named prefix streams (tuner.domain.Segments): one generator and its tokens per name,
        # as int32 (a Mooncake trace names tens of thousands of 512-token blocks a window: as
        # Python ints, about 43 bytes a token). The system prompt, "", is drawn once from its
        # own stream, so its content does not depend on how long the longest prefix asked for
        # turns out to be.
        self._streams: dict[str, tuple[np.random.Generator, np.ndarray]] = {
            "": (np.random.default_rng([seed, 1]), np.empty(0, np.int32))
        }

    def token_ids(self, prompt_tokens: int, shared_prefix_tokens: int = 0) -> list[int]:
        """``prompt_tokens`` ids: the factory's fixed prefix, then random ids."""
        if prompt_tokens < 1 or not 0 <= shared_prefix_tokens <= prompt_tokens:
            raise ValueError(
                f"need 1 <= prompt_tokens and 0 <= shared_prefix_tokens <= prompt_tokens, got "
                f"prompt_tokens={prompt_tokens}, shared_prefix_tokens={shared_prefix_tokens}"
            )
        return self.segment_ids(prompt_tokens, (("", shared_prefix_tokens),))

    def _stream(self, name: str, n: int) -> np.ndarray:
        if name not in self._streams:
            seeds = [self._seed, 2, zlib.crc32(name.encode())]
            self._streams[name] = (np.random.default_rng(seeds), np.empty(0, np.int32))
        rng, tokens = self._streams[name]
        if n > len(tokens):
            more = rng.integers(self._low, self._high, n - len(tokens)).astype(np.int32)
            tokens = np.concatenate((tokens, more))
            self._streams[name] = (rng, tokens)
        return tokens[:n]

    def forget_phase_streams(self) -> None:
        """Drop the streams of one phase once its prompts are made: a trace's sessions and hash
        blocks (``...@PHASE``) and a workload's conversations (``conversation:PHASE...``). No
        later phase names them, and a long trace's would otherwise be kept for the whole run.
        Shared prefixes stay."""
        for name in [k for k in self._streams if _per_phase(k)]:
            del self._streams[name]

    def segment_ids(self, prompt_tokens: int, segments: tuple[tuple[str, int], ...]) -> list[int]:
        """``prompt_tokens`` ids: the first ``n`` ids of each named stream ``(name, n)`` in
        order (the same for every prompt of this factory that names it; ``""`` is the shared
        prefix of :meth:`token_ids`), then random ids."""
        shared = sum(n for _, n in segments)
        if prompt_tokens < 1 or shared > prompt_tokens or any(n < 0 for _, n in segments):
            raise ValueError(
                f"need 1 <= prompt_tokens and segments of >= 0 tokens that fit in it, got "
                f"prompt_tokens={prompt_tokens}, segments={segments}"
            )
        parts = [self._stream(name, n) for name, n in segments]
        parts.append(self._rng.integers(self._low, self._high, prompt_tokens - shared))
        ids: list[int] = np.concatenate(parts).tolist()  # Python ints, ready for JSON
        return ids

    def make_segments(
        self, prompt_tokens: int, segments: tuple[tuple[str, int], ...]
    ) -> str | list[int]:
        """As :meth:`make`, with the prompt's shared prefixes named by ``segments``."""
        return self._render(self.segment_ids(prompt_tokens, segments))

    def _render(self, ids: list[int]) -> str | list[int]:
        if self.synthetic:
            return " ".join(f"t{i}" for i in ids)
        return ids

    def make(self, prompt_tokens: int, shared_prefix_tokens: int = 0) -> str | list[int]:
        """A prompt of exactly ``prompt_tokens`` tokens whose first ``shared_prefix_tokens``
        are the same for every prompt of this factory: text of ``tN`` words when synthetic,
        a list of token ids otherwise."""
        return self._render(self.token_ids(prompt_tokens, shared_prefix_tokens))
