"""One streamed ``/v1/completions`` request, parsed from its server-sent events."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from tuner.domain import RequestRecord
from tuner.load.workloads import PlannedRequest

_ERROR_BODY_CHARS = 300


def _content(event: dict[str, Any]) -> str:
    choices = event.get("choices") or []
    return "".join(str(c.get("text") or "") for c in choices if isinstance(c, dict))


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


async def stream_completion(
    client: httpx.AsyncClient,
    model: str,
    planned: PlannedRequest,
    prompt: str | list[int],
    t0: float,
    timeout_s: float,
) -> RequestRecord:
    """Send one streamed completion and time it; never raises for a failure of the request.

    TTFT is the first chunk with text, ITL the mean gap between later text chunks, E2E the
    time until ``[DONE]``; token counts come from the final usage chunk (output falls back to
    the number of text chunks). Times in the record are seconds from ``t0``.
    """
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": planned.output_tokens,
        "min_tokens": planned.output_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()

    def failed(error: str, output_tokens: int = 0) -> RequestRecord:
        return RequestRecord(
            ok=False,
            prompt_tokens=planned.prompt_tokens,
            output_tokens=output_tokens,
            start_s=start - t0,
            ttft_s=None,
            e2e_s=None,
            itl_mean_s=None,
            error=error,
        )

    first: float | None = None
    last = 0.0
    gaps: list[float] = []
    chunks = 0
    usage: dict[str, Any] = {}
    try:
        async with (
            asyncio.timeout(timeout_s),
            client.stream("POST", "/v1/completions", json=body) as response,
        ):
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace")
                return failed(f"HTTP {response.status_code}: {text[:_ERROR_BODY_CHARS]}")
            done: float | None = None
            # Read to the end even after [DONE]: a fully read response lets the connection
            # go back to the pool instead of being closed and reopened for the next request.
            async for line in response.aiter_lines():
                if done is not None or not line.startswith("data:"):
                    continue  # blank separators, comments, "event:" lines
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    done = time.perf_counter()
                    continue
                event = json.loads(data)
                if not isinstance(event, dict):
                    return failed(f"unexpected stream data: {data[:_ERROR_BODY_CHARS]}")
                error = _stream_error(event)
                if error is not None:
                    return failed(f"error in stream: {error[:_ERROR_BODY_CHARS]}", chunks)
                if isinstance(event.get("usage"), dict):
                    usage = event["usage"]
                if _content(event):
                    now = time.perf_counter()
                    if first is None:
                        first = now
                    else:
                        gaps.append(now - last)
                    last = now
                    chunks += 1
            if done is None:
                return failed("stream ended before [DONE]", chunks)
    except TimeoutError:
        return failed(f"timed out after {timeout_s:g} s", chunks)
    except httpx.HTTPError as exc:
        return failed(f"{type(exc).__name__}: {exc}", chunks)
    except OSError as exc:
        return failed(f"{type(exc).__name__}: {exc}", chunks)
    except ValueError as exc:  # json.JSONDecodeError included
        return failed(f"malformed stream data: {exc}", chunks)
    return RequestRecord(
        ok=True,
        prompt_tokens=int(usage.get("prompt_tokens") or planned.prompt_tokens),
        output_tokens=int(usage.get("completion_tokens") or chunks),
        start_s=start - t0,
        ttft_s=None if first is None else first - start,
        e2e_s=done - start,
        itl_mean_s=sum(gaps) / len(gaps) if gaps else None,
    )
