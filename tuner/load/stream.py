"""One streamed ``/v1/completions`` request over aiohttp, timed as ``vllm bench serve`` times it.

The per-chunk work is kept to a few byte searches so that one client process keeps up with a
GPU's event rate (hundreds of streams, tens of thousands of chunks per second): a chunk is
recognised by its bytes, and only the rare chunks that matter as documents (the final usage
chunk, an error event, anything unexpected) are parsed as JSON.

A chunk "with choices" is a token event, whatever its text (vLLM's benchmark counts it the
same way: text can be empty for special tokens); TTFT is the first one, every later one adds a
gap to the ITL list, and E2E ends at the last one (``[DONE]`` ends the stream, and a
response without it fails).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

from tuner.domain import RequestRecord

_ERROR_BODY_CHARS = 300
_EMPTY_CHOICES = (b'"choices":[]', b'"choices": []')  # compact (vLLM) and spaced JSON
_ERROR_KEY = b'"error"'


def request_body(model: str, prompt: str | list[int], output_tokens: int) -> bytes:
    """The JSON body of one streamed completion that generates exactly ``output_tokens``."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": output_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "min_tokens": output_tokens,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def _stream_error(event: dict[str, Any]) -> str | None:
    """The message of an error event (vLLM sends one as a data line, then ``[DONE]``)."""
    err = event.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)
    if err is not None:
        return str(err)
    if event.get("object") == "error":  # the format of older vLLM versions
        return str(event.get("message") or event)
    return None


class _Stream:
    """The state of one response while its server-sent events arrive."""

    __slots__ = ("chunks", "done", "error", "first", "gaps", "last", "usage")

    def __init__(self) -> None:
        self.first: float | None = None
        self.last = 0.0
        self.gaps: list[float] = []
        self.chunks = 0
        self.usage: dict[str, Any] = {}
        self.done: float | None = None
        self.error: str | None = None

    def feed(self, event: bytes, now: float) -> None:
        """One event block (the bytes between two blank lines)."""
        if not event.startswith(b"data:"):
            # Comments, "event:" lines, or a block of several lines: the slow path.
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self.feed(line, now)
            return
        payload = event[5:].strip()
        if payload == b"[DONE]":
            self.done = now
            return
        if (
            _ERROR_KEY in payload
            or not payload.startswith(b"{")
            or not payload.endswith(b"}")
            or _EMPTY_CHOICES[0] in payload
            or _EMPTY_CHOICES[1] in payload
            or b'"choices"' not in payload
        ):
            self._document(payload)
            return
        self._token(now)

    def _token(self, now: float) -> None:
        if self.first is None:
            self.first = now
        else:
            self.gaps.append(now - self.last)
        self.last = now
        self.chunks += 1

    def _document(self, payload: bytes) -> None:
        try:
            event = json.loads(payload)
        except ValueError as exc:
            self.error = f"malformed stream data: {exc}: {payload[:_ERROR_BODY_CHARS]!r}"
            return
        if not isinstance(event, dict):
            self.error = f"unexpected stream data: {payload[:_ERROR_BODY_CHARS]!r}"
            return
        message = _stream_error(event)
        if message is not None:
            self.error = f"error in stream: {message[:_ERROR_BODY_CHARS]}"
            return
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if event.get("choices"):
            self._token(time.perf_counter())


async def stream_completion(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    prompt_tokens: int,
    t0: float,
    timeout_s: float,
    stall_s: float | None = None,
) -> RequestRecord:
    """Send one streamed completion and time it; never raises for a failure of the request.

    Token counts come from the final usage chunk (output falls back to the number of chunks
    with choices). ``start_s`` is seconds from ``t0``, the other times from the request's send.
    ``timeout_s`` bounds the whole request; ``stall_s`` (None: no bound of its own) the wait
    for the server's first byte and between two reads, so that a stalled server fails the
    request within it.
    """
    start = time.perf_counter()
    state = _Stream()

    def failed(error: str) -> RequestRecord:
        return RequestRecord(
            ok=False,
            prompt_tokens=prompt_tokens,
            output_tokens=state.chunks,
            start_s=start - t0,
            ttft_s=None,
            e2e_s=None,
            error=error,
        )

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    stalled = [False]  # whether the window that ran out was the stall bound

    def wait_more(window: asyncio.Timeout) -> None:
        if stall_s is not None:
            until = loop.time() + stall_s
            stalled[0] = until < deadline
            window.reschedule(min(until, deadline))

    try:
        async with asyncio.timeout_at(deadline) as window:
            wait_more(window)  # until the headers come
            async with session.post(
                url, data=body, headers={"Content-Type": "application/json"}
            ) as resp:
                if resp.status != 200:
                    text = (await resp.read()).decode("utf-8", "replace")
                    return failed(f"HTTP {resp.status}: {text[:_ERROR_BODY_CHARS]}")
                buffer = b""
                # Read to the end even after [DONE]: a fully read response lets the connection
                # go back to the pool instead of being closed and reopened for the next request.
                feed = state.feed
                wait_more(window)  # the headers came; then the stream's first byte
                async for data in resp.content.iter_any():
                    if stall_s is not None:
                        wait_more(window)
                    now = time.perf_counter()
                    buffer += data
                    if b"\r" in buffer:
                        buffer = buffer.replace(b"\r\n", b"\n")
                    # Walk the events by position: one copy per event, not one of the rest.
                    pos = 0
                    end = buffer.find(b"\n\n")
                    while end >= 0:
                        if state.done is None and state.error is None:
                            feed(buffer[pos:end], now)
                        pos = end + 2
                        end = buffer.find(b"\n\n", pos)
                    if pos:
                        buffer = buffer[pos:]
                if buffer.strip() and state.done is None and state.error is None:
                    state.feed(buffer.strip(), time.perf_counter())  # a last event without "\n\n"
    except TimeoutError:
        if stalled[0]:
            return failed(f"stalled: the server sent nothing for {stall_s:g} s")
        return failed(f"timed out after {timeout_s:g} s")
    except (aiohttp.ClientError, OSError) as exc:
        return failed(f"{type(exc).__name__}: {exc}")
    if state.error is not None:
        return failed(state.error)
    if state.done is None:
        return failed("stream ended before [DONE]")
    if state.first is None:  # vLLM's benchmark fails it too: no token, no TTFT to count
        return failed("no token before [DONE]")
    usage = state.usage
    return RequestRecord(
        ok=True,
        prompt_tokens=int(usage.get("prompt_tokens") or prompt_tokens),
        output_tokens=int(usage.get("completion_tokens") or state.chunks),
        start_s=start - t0,
        ttft_s=state.first - start,
        # As vLLM's benchmark ends a request: at its last token, not at the usage chunk or
        # [DONE] after it (a busy API server may send those later).
        e2e_s=state.last - start,
        itl_s=tuple(state.gaps),
    )
