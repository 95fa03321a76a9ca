"""The fake server's answers: the JSON and server-sent events vLLM's OpenAI endpoints send,
with the form vLLM gives them for ``n``, ``logprobs`` (completions), ``stop`` and streaming
with usage. The text is the fake engine's (:mod:`tuner.testing.fake_engine`).

Two parts of the API server's own cost are modelled here: ``stream_interval`` groups tokens
into events as vLLM's ``--stream-interval`` does (the first token alone, then one event per
``stream_interval`` tokens, the rest with the last), and ``chunk_cpu_s`` is CPU time spent in
the event loop for every event that carries text (and once for a whole non-streamed answer),
so that a loaded server saturates its core."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from tuner.testing.fake_engine import FakeEngine


def _json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))  # compact, as pydantic writes vLLM's chunks


@dataclass(frozen=True)
class Options:
    """The sampling options the fake honours in the answer's form (not in its text)."""

    stream: bool = False
    include_usage: bool = False
    n: int = 1
    logprobs: int | None = None
    stop: tuple[str, ...] = ()

    @classmethod
    def of(cls, body: dict[str, Any]) -> Options:
        stop = body.get("stop") or ()
        logprobs = body.get("logprobs")
        n = int(body.get("n") or 1)
        if n < 1:
            raise ValueError("n must be at least 1")
        return cls(
            stream=bool(body.get("stream")),
            include_usage=bool((body.get("stream_options") or {}).get("include_usage")),
            n=n,
            logprobs=int(logprobs) if isinstance(logprobs, int) and logprobs is not True else None,
            stop=(stop,) if isinstance(stop, str) else tuple(str(s) for s in stop),
        )


def _stopped(tokens: list[str], stop: Sequence[str]) -> tuple[list[str], str]:
    """The tokens up to the first stop string (excluded, as vLLM does), and the reason."""
    text = ""
    for i, token in enumerate(tokens):
        text += token
        if any(s and s in text for s in stop):
            return tokens[:i], "stop"
    return tokens, "length"


def _logprobs(tokens: list[str], k: int) -> dict[str, Any]:
    return {
        "tokens": tokens,
        "token_logprobs": [-0.5] * len(tokens),
        "top_logprobs": [{t: -0.5, **{f" t{j}": -1.0 - j for j in range(k)}} for t in tokens],
        "text_offset": list(itertools.accumulate(map(len, tokens), initial=0))[:-1],
    }


def burn_cpu(seconds: float) -> None:
    """Spin until this thread has used ``seconds`` of CPU time, holding the event loop (on a
    busy host this takes longer than ``seconds`` of wall time, as real work would)."""
    if seconds <= 0:
        return
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def respond(
    engine: FakeEngine,
    model: str,
    chat: bool,
    prompt: list[str],
    max_tokens: int,
    options: Options,
    *,
    stream_interval: int = 1,
    chunk_cpu_s: float = 0.0,
) -> Response:
    stream, include_usage = options.stream, options.include_usage
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    head = {
        "id": rid,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
    }
    usage = {
        "prompt_tokens": len(prompt),
        "total_tokens": len(prompt) + max_tokens,
        "completion_tokens": max_tokens,
    }

    def choice(text: str, finish: str | None) -> dict[str, Any]:
        if chat:
            return {
                "index": 0,
                "delta": {"content": text},
                "logprobs": None,
                "finish_reason": finish,
            } | ({"stop_reason": None} if finish else {})
        return {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
            "prompt_token_ids": None,
            "token_ids": None,
        }

    if not stream:
        bodies, produced = [], 0
        for index in range(options.n):
            generated = [t async for t in engine.generate(prompt, max_tokens)]
            tokens, finish = _stopped(generated, options.stop)
            produced += len(tokens)
            text = "".join(tokens)
            if chat:
                body = {
                    "index": index,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                }
            else:
                body = choice(text, finish) | {"index": index}
                if options.logprobs is not None:
                    body["logprobs"] = _logprobs(tokens, options.logprobs)
            bodies.append(body)
        usage = usage | {"completion_tokens": produced, "total_tokens": len(prompt) + produced}
        burn_cpu(chunk_cpu_s)
        obj = "chat.completion" if chat else "text_completion"
        return JSONResponse({**head, "object": obj, "choices": bodies, "usage": usage})

    async def events() -> AsyncIterator[str]:
        if chat:  # vLLM opens a chat stream with the role
            first = {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            yield f"data: {_json({**head, 'choices': [first]})}\n\n"
        produced = 0
        pending: list[str] = []  # tokens not sent yet
        async for token in engine.generate(prompt, max_tokens):
            produced += 1
            pending.append(token)
            last = produced == max_tokens
            if not (produced == 1 or last or len(pending) >= stream_interval):
                continue
            finish = "length" if last else None
            burn_cpu(chunk_cpu_s)
            yield f"data: {_json({**head, 'choices': [choice(''.join(pending), finish)]})}\n\n"
            pending = []
        if include_usage:
            yield f"data: {_json({**head, 'choices': [], 'usage': usage})}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")
