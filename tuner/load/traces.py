"""Trace readers: the request logs users already own, read into a :class:`Workload` to replay.

``--workload`` (and a spec's ``workload``) names a trace as ``FORMAT:FILE``:

============  ================================================================================
``trace:``    any format below, told from the file: ``.csv`` is BurstGPT; a JSON array is
              ShareGPT; JSON Lines by the keys of the first row (``prompt_tokens``: tuner's,
              ``input_length``: Mooncake, ``prompt``: vLLM custom).
``tuner:``    tuner's JSONL: ``{"prompt_tokens", "output_tokens", "arrival_s"}`` per line, with
              optional ``session`` (turns of one session go in order, one at a time, and share
              the session's prompt stream: a turn carries the earlier ones) and ``prefix`` with
              ``prefix_tokens`` (rows naming the same prefix share their first tokens).
``sharegpt:`` ShareGPT JSON: a list of ``{"conversations": [{"from", "value"}, ...]}``; as
              ``vllm bench serve`` does, one request per conversation: its first message is the
              prompt, the second the answer whose length is the output. No timestamps: closed
              loop. Entries with an empty first or second message, without a second, or of
              lengths vLLM's sampling drops (prompt or answer under 4 tokens, prompt over 1,024,
              both over 2,048) are skipped and counted.
``burstgpt:`` BurstGPT CSV: ``Timestamp`` (s), ``Request tokens``, ``Response tokens``; rows of
              0 response tokens (failed in the log) are skipped and counted in the source.
``mooncake:`` Mooncake JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``,
              ``hash_ids``: block ``i`` of the prompt is hash block ``hash_ids[i]`` of
              ``block_tokens`` tokens (512 unless the workload says), so rows sharing leading
              hash ids share those prompt blocks.
``custom:``   vLLM's custom JSONL: ``{"prompt": TEXT}`` per line, and tuner's optional
              ``"output_tokens": INT``; output tokens 256 where a row gives none, as ``vllm
              bench serve`` asks of every row unless given ``--custom-output-len``; closed loop.
============  ================================================================================

Text (ShareGPT, custom) is counted with the model's tokenizer when one is given (a model
directory or ``tokenizer.json``, read by :func:`tokenizer_counter`; or a counting function);
otherwise as ``ceil(characters / 4)``, a rule of thumb for English under BPE vocabularies. The
workload's ``source`` names the counter either way, so the fingerprint says which it was.

Bad input is a :class:`UsageError` naming the file, the line (or the ShareGPT entry) and the
field. Replay options (the workload's ``speed``, ``start_s``/``end_s``, ``max_requests``,
``arrival``) are applied by :func:`apply_replay` once the overrides are known.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.domain import TraceRequest, Workload
from tuner.domain.workload import ARRIVALS
from tuner.errors import UsageError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

TokenCounter = Callable[[str], int]
FORMATS = ("trace", "tuner", "sharegpt", "burstgpt", "mooncake", "custom")
TIMED_FORMATS = ("tuner", "burstgpt", "mooncake")  # rows with arrival times (a replay's clock)
TEXT_FORMATS = ("sharegpt", "custom")  # rows of text, counted (--tokenizer) into tokens
APPROXIMATION = "ceil(characters / 4)"
_HINTS = {
    "tuner": 'each line: {"prompt_tokens": INT, "output_tokens": INT, "arrival_s": SECONDS}',
    "sharegpt": 'a JSON list of {"conversations": [{"from": "human", "value": TEXT}, ...]}',
    "burstgpt": "a CSV with columns Timestamp, Request tokens, Response tokens",
    "mooncake": 'each line: {"timestamp": MS, "input_length": INT, "output_length": INT, '
    '"hash_ids": [INT, ...]}',
    "custom": 'each line: {"prompt": TEXT} or {"prompt": TEXT, "output_tokens": INT}',
}


# A JSON Lines trace's format, by the first of these keys its first row has.
_FIRST_KEYS = (("prompt_tokens", "tuner"), ("input_length", "mooncake"), ("prompt", "custom"))


def approximate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


def tokenizer_file(path: Path) -> Path | None:
    """The ``tokenizer.json`` of the model directory ``path`` (or ``path`` itself when it is
    that file), None when there is none."""
    file = path / "tokenizer.json" if path.is_dir() else path
    return file if file.name == "tokenizer.json" and file.is_file() else None


def tokenizer_counter(path: Path) -> TokenCounter | None:
    """A counter from the ``tokenizer.json`` in the model directory ``path`` (or that file),
    None when there is none. Special tokens are not added: a trace's text is counted as the
    prompt text it is (ShareGPT's length filter adds them: :func:`added_tokens`)."""
    file = tokenizer_file(path)
    if file is None:
        return None
    tokenizer = _tokenizer(file, file.stat().st_mtime_ns)

    def count(text: str) -> int:
        # UnicodeEncodeError for a lone surrogate (JSON "\ud83d"), which the tokenizer takes
        # for no text at all (TypeError: TextInputSequence must be str): _counted names where
        text.encode("utf-8")
        return max(1, len(tokenizer.encode(text, add_special_tokens=False).ids))

    return count


def added_tokens(path: Path | None) -> int:
    """The special tokens the ``tokenizer.json`` at ``path`` (as :func:`tokenizer_counter`
    finds it) adds to a text encoded alone (a BOS: 1), 0 without one: vLLM's ShareGPT sampler
    counts them in both lengths it filters on."""
    file = tokenizer_file(path) if path is not None else None
    if file is None:
        return 0
    processor = _tokenizer(file, file.stat().st_mtime_ns).post_processor
    return processor.num_special_tokens_to_add(False) if processor is not None else 0


@functools.lru_cache(maxsize=2)
def _tokenizer(file: Path, modified_ns: int) -> Tokenizer:
    """The tokenizer of ``file`` as of ``modified_ns``, read once for the counter and the
    special tokens."""
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # the tokenizers library raises its own bare Exception
        raise UsageError(
            f"cannot read the tokenizer {file}: {exc}",
            hint="give --tokenizer the directory of a model with a valid tokenizer.json",
        ) from None


def split_name(name: str) -> tuple[str, Path] | None:
    """``(format, path)`` when ``name`` names a trace (``FORMAT:FILE``), else None."""
    fmt, sep, rest = name.partition(":")
    if not sep or fmt not in FORMATS or not rest:
        return None
    return fmt, Path(rest).expanduser()  # the shell expands no ~ after "trace:"


def text_counter(
    count_tokens: TokenCounter | None = None, tokenizer: Path | None = None
) -> tuple[TokenCounter, str]:
    """How a trace's text is counted, and the words that say so in its ``source``:
    ``count_tokens`` when given, else the ``tokenizer.json`` found at ``tokenizer`` (a model
    directory or the file), else ``ceil(characters / 4)`` (naming where no tokenizer was
    found, when a place was given)."""
    if count_tokens is not None:
        return count_tokens, "counted with the given tokenizer"
    if tokenizer is not None:
        counter = tokenizer_counter(tokenizer)
        if counter is not None:
            return counter, f"counted with the tokenizer {tokenizer_file(tokenizer)}"
        return approximate_tokens, (
            f"approximated as {APPROXIMATION} (no tokenizer.json in {tokenizer})"
        )
    return approximate_tokens, f"approximated as {APPROXIMATION} (no tokenizer)"


def read_trace(
    name: str,
    count_tokens: TokenCounter | None = None,
    block_tokens: int = 512,
    *,
    tokenizer: Path | None = None,
) -> Workload:
    """The workload of the trace ``name`` (``FORMAT:FILE``, see the module), not yet replayed
    with any options; Mooncake hash blocks of ``block_tokens`` tokens. Text is counted as
    :func:`text_counter` says, from ``count_tokens`` or ``tokenizer``."""
    split = split_name(name)
    if split is None:
        raise UsageError(
            f"{name!r} names no trace", hint=f"write FORMAT:FILE with FORMAT one of {FORMATS}"
        )
    fmt, path = split
    given = fmt
    if block_tokens < 1:
        raise UsageError(f"workload {name!r}: block_tokens must be >= 1, got {block_tokens}")
    text = _read(path, name)
    if fmt == "trace":
        fmt = detect(path, text)
    note = dropped = ""  # dropped: the rows a format's reader skipped, said where it matters
    if fmt == "tuner":
        rows = _tuner_rows(path, text)
    elif fmt == "mooncake":
        rows = _mooncake_rows(path, text, block_tokens)
    elif fmt == "burstgpt":
        rows, skipped = _burstgpt_rows(path, text)
        rows_ = "row" if skipped == 1 else "rows"
        dropped = f"{skipped} {rows_} of 0 response tokens skipped" if skipped else ""
    elif fmt == "sharegpt":
        counter, counted = text_counter(count_tokens, tokenizer)
        added = 0 if count_tokens is not None else added_tokens(tokenizer)
        rows, skips = _sharegpt_rows(path, text, counter, added)
        dropped = "; ".join(
            f"{n} {'entry' if n == 1 else 'entries'} {why} skipped" for why, n in skips.items() if n
        )
        note = f"; prompt and output tokens {counted}"
    else:
        counter, counted = text_counter(count_tokens, tokenizer)
        rows, unsized = _custom_rows(path, text, counter)
        note = f"; prompt tokens {counted}"
        if unsized:
            rows_ = "row" if unsized == 1 else "rows"
            note += (
                f"; output tokens {CUSTOM_OUTPUT_TOKENS} where a row gives none ({unsized} {rows_})"
            )
    if dropped:
        note += f"; {dropped}"
    if not rows:
        raise UsageError(
            f"trace {path} has no requests" + (f" ({dropped})" if dropped else ""),
            hint=_HINTS[fmt],
        )
    timed = fmt in TIMED_FORMATS
    ordered = tuple(sorted(rows, key=lambda r: r.arrival_s))
    n = len(ordered)
    return Workload(
        name=f"{given}:{path.name}",
        prompt_tokens=round(sum(r.prompt_tokens for r in ordered) / n),
        output_tokens=round(sum(r.output_tokens for r in ordered) / n),
        # Streams of a closed loop; the cap in flight of Poisson draws of timed rows (a replay
        # at the trace's own times has none unless given: apply_replay).
        concurrency=64 if timed else 16,
        requests_per_window=n,
        windows=3,
        warmup_requests=min(16, n),
        length_jitter=0.0,
        trace=ordered,
        arrival="trace" if timed else "closed",
        source=f"{fmt} trace {path} ({n} request{'' if n == 1 else 's'}{note})",
    )


def detect(path: Path, text: str) -> str:
    """The format of a ``trace:`` file, from its extension and first row."""
    if path.suffix.lower() == ".csv":
        return "burstgpt"
    if text.lstrip().startswith("["):
        return "sharegpt"
    first = next((line for line in text.splitlines() if line.strip()), "")
    if not first:
        return "tuner"  # empty: said as a trace with no requests
    try:
        obj = json.loads(first)
    except _BAD_JSON:
        obj = None
    if isinstance(obj, dict):
        for key, fmt in _FIRST_KEYS:
            if key in obj:
                return fmt
    if obj is None:
        _refuse_spread(path, text)
        raise UsageError(
            f"{path}:1: not valid JSON", hint="a trace:FILE is JSON Lines, JSON or CSV"
        )
    raise UsageError(
        f"{path}: cannot tell the trace format from its first row",
        hint="name it: tuner:FILE, sharegpt:FILE, burstgpt:FILE, mooncake:FILE or custom:FILE",
    )


def _refuse_spread(path: Path, text: str) -> None:
    """UsageError when ``text`` opens with a JSON object written over several lines (pretty-
    printed): JSON Lines wants one object a line, and ":1: not valid JSON" would not say so."""
    body = text.lstrip()
    try:
        obj, end = json.JSONDecoder().raw_decode(body)
    except _BAD_JSON:
        return
    if isinstance(obj, dict) and "\n" in body[:end]:
        raise UsageError(
            f"{path}: its first JSON object spans {body[:end].count(chr(10)) + 1} lines; a trace "
            "of JSON Lines has one object a line",
            hint=f"write each on one line, e.g. jq -c . {path} > {path.stem}.jsonl",
        )


# What json raises for text that is no JSON: RecursionError for brackets nested past its depth
# (a line of 100,000 "[").
_BAD_JSON = (json.JSONDecodeError, RecursionError)


def _json_error(exc: Exception) -> str:
    return exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"


def trace_format(workload: Workload) -> str | None:
    """The format ``workload``'s trace was read as (``trace:`` told from the file), as its
    source names it; None for a preset."""
    fmt = workload.source.partition(" ")[0]
    return fmt if workload.trace is not None and fmt in FORMATS else None


def check_readable(name: str) -> None:
    """UsageError unless the trace ``name`` names (``FORMAT:FILE``) can be opened."""
    split = split_name(name)
    if split is None:
        raise UsageError(
            f"{name!r} names no trace", hint=f"write FORMAT:FILE with FORMAT one of {FORMATS}"
        )
    try:
        split[1].open("rb").close()
    except OSError as exc:
        raise _unreadable(split[1], name, exc) from None


def _unreadable(path: Path, name: str, exc: OSError) -> UsageError:
    return UsageError(
        f"cannot read trace {path}: {exc.strerror or exc}",
        hint=f"give the path of a trace file after {name.split(':', 1)[0]!r}:",
    )


def _read(path: Path, name: str) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # a BOM (spreadsheets write one) is no text
    except OSError as exc:
        raise _unreadable(path, name, exc) from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"trace {path} is not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x})",
            hint="save the trace as UTF-8",
        ) from None


def _json_lines(path: Path, text: str, fmt: str) -> list[tuple[str, dict[str, Any]]]:
    rows: list[tuple[str, dict[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except _BAD_JSON as exc:
            if not rows:
                _refuse_spread(path, text)
            raise UsageError(
                f"{where}: not valid JSON ({_json_error(exc)})", hint=_HINTS[fmt]
            ) from None
        if not isinstance(obj, dict):
            raise UsageError(
                f"{where}: expected a JSON object, got {type(obj).__name__}", hint=_HINTS[fmt]
            )
        rows.append((where, obj))
    return rows


def _need(obj: Mapping[str, Any], keys: tuple[str, ...], where: str, fmt: str) -> None:
    missing = [k for k in keys if k not in obj]
    if missing:
        raise UsageError(f"{where}: missing field(s) {missing}", hint=_HINTS[fmt])


# Tokens in one row at the most: past any model's context (the longest are about 10M), so a
# larger count is a unit or a column mixed up, and its prompt would not fit in memory.
MAX_ROW_TOKENS = 2**24


def _count(value: Any, key: str, where: str) -> int:
    # bool is an int subclass; true/false as a token count is surely a mistake.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{where}: {key} must be an integer >= 1, got {value!r}")
    if value > MAX_ROW_TOKENS:
        raise UsageError(
            f"{where}: {key} of {value:,} is longer than any model's context "
            f"(at most {MAX_ROW_TOKENS:,} tokens a row)",
            hint="check that the column counts tokens, not characters or bytes",
        )
    return value


def _seconds(value: Any, key: str, where: str) -> float:
    seconds = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an integer past any float
            seconds = math.inf
    if not (math.isfinite(seconds) and seconds >= 0):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise UsageError(f"{where}: {key} must be a number >= 0, got {shown}")
    return seconds


def _name(value: Any, key: str, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise UsageError(f"{where}: {key} must be a non-empty string or an integer, got {value!r}")
    return str(value)


def _tuner_rows(path: Path, text: str) -> list[TraceRequest]:
    rows = []
    for where, obj in _json_lines(path, text, "tuner"):
        _need(obj, ("prompt_tokens", "output_tokens", "arrival_s"), where, "tuner")
        prompt = _count(obj["prompt_tokens"], "prompt_tokens", where)
        output = _count(obj["output_tokens"], "output_tokens", where)
        arrival = _seconds(obj["arrival_s"], "arrival_s", where)
        segments: list[tuple[str, int]] = []
        if "prefix" in obj or "prefix_tokens" in obj:
            _need(obj, ("prefix", "prefix_tokens"), where, "tuner")
            prefix = _name(obj["prefix"], "prefix", where)
            tokens = _count(obj["prefix_tokens"], "prefix_tokens", where)
            if tokens > prompt:
                raise UsageError(
                    f"{where}: prefix_tokens ({tokens}) must not exceed prompt_tokens ({prompt})"
                )
            segments.append((f"prefix:{prefix}", tokens))
        session = None
        if "session" in obj:
            session = _name(obj["session"], "session", where)
            # The session's own stream after the prefix: a later turn repeats the earlier ones.
            rest = prompt - sum(n for _, n in segments)
            if rest:
                segments.append((f"session:{session}", rest))
        rows.append(TraceRequest(prompt, output, arrival, session, tuple(segments)))
    return rows


def _mooncake_rows(path: Path, text: str, block: int = 512) -> list[TraceRequest]:
    rows = []
    for where, obj in _json_lines(path, text, "mooncake"):
        _need(obj, ("timestamp", "input_length", "output_length"), where, "mooncake")
        stamp = _seconds(obj["timestamp"], "timestamp", where)
        prompt = _count(obj["input_length"], "input_length", where)
        output = _count(obj["output_length"], "output_length", where)
        hashes = obj.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hashes
        ):
            raise UsageError(f"{where}: hash_ids must be a list of integers, got {hashes!r}")
        if len(hashes) > math.ceil(prompt / block):
            raise UsageError(
                f"{where}: hash_ids has {len(hashes)} blocks but input_length {prompt} needs "
                f"{math.ceil(prompt / block)} of {block} tokens",
                hint="set the trace's block size: [workload] block_tokens in a spec, "
                "--workload-set block_tokens=N with tuner load",
            )
        # Hash block i is `block` tokens of the stream hash:ID; the last is cut to fit the
        # prompt (tokens beyond the listed blocks are the request's own).
        blocks = tuple((f"hash:{h}", min(block, prompt - i * block)) for i, h in enumerate(hashes))
        rows.append(TraceRequest(prompt, output, stamp / 1000.0, segments=blocks))
    return rows


def _burstgpt_rows(path: Path, text: str) -> tuple[list[TraceRequest], int]:
    reader = csv.DictReader(io.StringIO(text))
    columns = ("Timestamp", "Request tokens", "Response tokens")
    missing = [c for c in columns if c not in (reader.fieldnames or ())]
    if missing:
        raise UsageError(f"{path}:1: missing column(s) {missing}", hint=_HINTS["burstgpt"])
    rows, skipped = [], 0
    for row in reader:
        where = f"{path}:{reader.line_num}"
        values: dict[str, float] = {}
        for column in columns:
            raw = row.get(column)
            try:
                values[column] = float(raw) if raw is not None else math.nan
            except ValueError:
                values[column] = math.nan
            value = values[column]
            whole = column == "Timestamp" or value.is_integer()
            if not math.isfinite(value) or value < 0 or not whole:
                kind = "a number >= 0" if column == "Timestamp" else "an integer >= 0"
                raise UsageError(f"{where}: {column} must be {kind}, got {raw!r}")
        if values["Response tokens"] == 0:
            skipped += 1
            continue
        prompt = _count(int(values["Request tokens"]), "Request tokens", where)
        output = _count(int(values["Response tokens"]), "Response tokens", where)
        rows.append(TraceRequest(prompt, output, values["Timestamp"]))
    return rows, skipped


def _text(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise UsageError(f"{where}: {key} must be non-empty text, got {value!r}")
    return value


# vLLM's ShareGPT sampling (``is_valid_sequence`` in vllm/benchmarks/datasets.py) keeps an
# entry whose prompt and answer have 4 tokens or more, the prompt at most 1,024 and the two at
# most 2,048: kept, a file's rare long entries (10,100 tokens) set a workload's
# max_request_tokens past the context of configs that run vLLM's benchmark of it. It counts
# with the tokenizer's special tokens (a BOS where it adds one), so the filter does too.
SHAREGPT_MIN_TOKENS, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL = 4, 1024, 2048
# Why a ShareGPT entry is skipped, as the source counts them.
_EMPTY, _UNANSWERED = "with an empty message", "without an answer"
_UNSAMPLED = (
    f"outside vLLM's lengths (prompt and answer {SHAREGPT_MIN_TOKENS} tokens or more, "
    f"prompt at most {SHAREGPT_MAX_PROMPT:,}, both at most {SHAREGPT_MAX_TOTAL:,})"
)


def _vllm_samples(prompt: int, output: int) -> bool:
    """Whether vLLM's ShareGPT sampling keeps an entry of these lengths."""
    return (
        min(prompt, output) >= SHAREGPT_MIN_TOKENS
        and prompt <= SHAREGPT_MAX_PROMPT
        and prompt + output <= SHAREGPT_MAX_TOTAL
    )


def _sharegpt_rows(
    path: Path, text: str, count: TokenCounter, added: int
) -> tuple[list[TraceRequest], dict[str, int]]:
    """The requests, and how many entries were skipped, by why: an empty prompt or answer
    (the public ShareGPT files hold some), fewer than two messages (no answer to size the
    output), or lengths vLLM's sampling drops (:func:`_vllm_samples`, each length counted with
    the ``added`` special tokens); vLLM's benchmark skips all of them."""
    try:
        data = json.loads(text)
    except _BAD_JSON as exc:
        at = f"{path}:{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else str(path)
        raise UsageError(
            f"{at}: not valid JSON ({_json_error(exc)})", hint=_HINTS["sharegpt"]
        ) from None
    if not isinstance(data, list):
        raise UsageError(f"{path}: expected a JSON list of conversations", hint=_HINTS["sharegpt"])
    rows: list[TraceRequest] = []
    skipped = dict.fromkeys((_EMPTY, _UNANSWERED, _UNSAMPLED), 0)
    for index, entry in enumerate(data):
        where = f"{path}: entry {index}"
        if not isinstance(entry, dict) or "conversations" not in entry:
            raise UsageError(f"{where}: missing field conversations", hint=_HINTS["sharegpt"])
        turns = entry["conversations"]
        if not isinstance(turns, list):
            raise UsageError(f"{where}: conversations must be a list, got {turns!r}")
        if len(turns) < 2:
            skipped[_UNANSWERED] += 1
            continue
        messages = []
        for k in (0, 1):
            turn = turns[k]
            if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                raise UsageError(f"{where}: conversations[{k}] needs a field value (text)")
            messages.append(turn["value"])
        lengths = [
            _counted(count, m, f"conversations[{k}] value", where) if m.strip() else 0
            for k, m in enumerate(messages)
        ]
        if min(lengths) < 1:
            skipped[_EMPTY] += 1
        elif not _vllm_samples(lengths[0] + added, lengths[1] + added):
            skipped[_UNSAMPLED] += 1
        else:
            # Both lengths as vLLM's sampler counts them (with a BOS): its text prompt gains
            # the BOS on the server, tuner's token ids do not, and max_tokens counts it.
            rows.append(TraceRequest(lengths[0] + added, lengths[1] + added, 0.0))
    return rows, skipped


# The output length of a custom row that gives none: vLLM's --custom-output-len default.
CUSTOM_OUTPUT_TOKENS = 256


def _counted(count: TokenCounter, text: str, key: str, where: str) -> int:
    """``count(text)``; a lone surrogate in ``text`` (half of a UTF-16 pair, JSON "\\ud83d"),
    which no tokenizer can encode, is a UsageError naming ``where`` and ``key``. Not counted
    as a replacement character: the text would not be the file's, nor the count of it."""
    try:
        return count(text)
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        raise UsageError(
            f"{where}: {key} holds a lone surrogate {bad!r} at character {exc.start} (half of "
            "a UTF-16 pair, not text): the tokenizer cannot count it",
            hint="write the whole pair there (e.g. \\ud83d\\ude00, one emoji) or remove it",
        ) from None


def _custom_rows(path: Path, text: str, count: TokenCounter) -> tuple[list[TraceRequest], int]:
    """The requests, and how many rows gave no ``output_tokens`` (vLLM's own files give none:
    its benchmark takes ``--custom-output-len``, 256 unless set, for every row)."""
    rows, unsized = [], 0
    for where, obj in _json_lines(path, text, "custom"):
        _need(obj, ("prompt",), where, "custom")
        prompt = _counted(count, _text(obj["prompt"], "prompt", where), "prompt", where)
        output = obj.get("output_tokens", CUSTOM_OUTPUT_TOKENS)
        unsized += "output_tokens" not in obj
        rows.append(TraceRequest(prompt, _count(output, "output_tokens", where), 0.0))
    return rows, unsized


def apply_replay(workload: Workload, explicit: Mapping[str, Any]) -> Workload:
    """A read trace with its replay options applied: hash blocks sized, the window and the
    cap cut, arrivals scaled by ``speed`` and offset to start at 0, and ``poisson`` arrivals
    without a ``request_rate`` given the trace's mean rate where its rows have times.
    ``explicit``: the overrides given (a ``requests_per_window`` among them is kept, else the
    selection's count; a ``concurrency`` among them is the cap in flight of a replay at the
    rows' own times, else a window's every request may be in flight at once, as ``vllm bench
    serve`` sends them without ``--max-concurrency``)."""
    if workload.trace is None:
        return workload
    name = workload.name
    if "requests_per_window" in explicit and workload.requests_per_window < 1:
        # before it becomes the cap in flight, which would be the field named
        raise UsageError(f"workload {name!r}: requests_per_window must be >= 1")
    if not (math.isfinite(workload.speed) and workload.speed > 0):
        raise UsageError(f"workload {name!r}: speed must be > 0, got {workload.speed}")
    if workload.arrival not in ARRIVALS:
        raise UsageError(
            f"workload {name!r}: arrival must be one of {ARRIVALS}, got {workload.arrival!r}"
        )
    end = workload.end_s if workload.end_s is not None else math.inf
    if not 0 <= workload.start_s < end:
        raise UsageError(
            f"workload {name!r}: need 0 <= start_s < end_s, got {workload.start_s}, {end}"
        )
    rows = [r for r in workload.trace if workload.start_s <= r.arrival_s < end]
    if workload.max_requests is not None:
        if workload.max_requests < 1:
            raise UsageError(f"workload {name!r}: max_requests must be >= 1")
        rows = rows[: workload.max_requests]
    if not rows:
        raise UsageError(
            f"workload {name!r}: no request of the trace arrives in [{workload.start_s}, {end}) s",
            hint="widen start_s/end_s (seconds of the trace's own clock)",
        )
    first = rows[0].arrival_s
    scaled = tuple(
        dataclasses.replace(r, arrival_s=(r.arrival_s - first) / workload.speed) for r in rows
    )

    n = len(scaled)
    changes: dict[str, Any] = {
        "trace": scaled,
        "prompt_tokens": round(sum(r.prompt_tokens for r in scaled) / n),
        "output_tokens": round(sum(r.output_tokens for r in scaled) / n),
    }
    if "requests_per_window" not in explicit:
        changes["requests_per_window"] = n
    if "warmup_requests" not in explicit:
        changes["warmup_requests"] = min(workload.warmup_requests, n)
    span = scaled[-1].arrival_s
    # Uncapped, unless told or stepped through a concurrency ladder (whose headline rung the
    # concurrency names, 64 by default, as before); rows of one arrival time (span 0: one row,
    # equal timestamps) too, all sent at once, not 64 at a time as a closed loop of 64 streams.
    uncapped = not {"concurrency", "concurrency_ladder"} & set(explicit)
    if workload.arrival == "trace" and uncapped and not workload.concurrency_ladder:
        changes["concurrency"] = changes.get("requests_per_window", workload.requests_per_window)
    if workload.arrival == "poisson" and workload.request_rate is None and span > 0:
        # The trace's mean rate, stated on the workload: its load points, their labels and
        # vLLM's request_rate then name the rate the rows are drawn at. Rows without times
        # (ShareGPT, custom: all at 0) have none, and need a rate given (check_workload).
        changes["request_rate"] = (n - 1) / span
    return workload.replace(**changes)
