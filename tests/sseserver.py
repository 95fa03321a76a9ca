"""A scripted HTTP server for load-generator tests: aiohttp.web in a thread of its own, each
request answered by a test's async handler, so the generator is exercised over real sockets."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def event(text: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    """One SSE data event as vLLM writes it (compact JSON)."""
    obj: dict[str, object] = {"object": "text_completion", "choices": []}
    if text is not None:
        obj["choices"] = [{"index": 0, "text": text}]
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


async def stream(
    request: web.Request, parts: list[bytes], gap_s: float = 0.002
) -> web.StreamResponse:
    """Send ``parts`` as a text/event-stream, ``gap_s`` apart."""
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    for part in parts:
        await asyncio.sleep(gap_s)
        await resp.write(part)
    await resp.write_eof()
    return resp


class FakeVllm:
    """Answers like vLLM: one text chunk per token, a usage chunk, then [DONE]; records the
    bodies and the most requests it had in flight."""

    def __init__(self, usage: bool = True, gap_s: float = 0.002) -> None:
        self.usage = usage
        self.gap_s = gap_s
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        n_out = int(body["max_tokens"])
        parts = [event(f" t{i}") for i in range(n_out)]
        if self.usage:
            n_in = (
                len(body["prompt"])
                if isinstance(body["prompt"], list)
                else len(str(body["prompt"]).split())
            )
            parts.append(event(None, {"prompt_tokens": n_in, "completion_tokens": n_out}))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await stream(request, [*parts, b"data: [DONE]\n\n"], self.gap_s)
        finally:
            self.in_flight -= 1


@contextmanager
def serving(handler: Handler) -> Iterator[str]:
    """Run ``handler`` for every POST on a free localhost port; yields the base URL."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def start() -> None:
        async def route(request: web.Request) -> web.StreamResponse:
            return await handler(request)

        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", route)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["runner"] = runner
        holder["port"] = runner.addresses[0][1]
        started.set()

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()
        loop.run_until_complete(holder["runner"].cleanup())
        loop.close()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert started.wait(10), "the scripted server did not start"
    try:
        yield f"http://127.0.0.1:{holder['port']}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


async def endless(request: web.Request, cancelled: list[int]) -> web.StreamResponse:
    """A stream that never ends; appends to ``cancelled`` when the client goes away."""
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    try:
        while True:
            await asyncio.sleep(0.01)
            await resp.write(event(" t1"))
    except (asyncio.CancelledError, ConnectionResetError):
        cancelled.append(1)
        raise


async def lines(request: web.Request, chunks: AsyncIterator[bytes]) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    async for c in chunks:
        await resp.write(c)
    return resp
