"""A null streaming server: answers ``POST /v1/completions`` with the chunks vLLM would send,
as fast as the socket takes them, doing no other work.

It measures a load generator's own ceiling: whatever rate a client reaches against it is the
most that client can ever report. Each response streams ``max_tokens`` chunks of one token
(compact JSON, as vLLM's pydantic writes them), a usage chunk and ``[DONE]``, over HTTP/1.1
chunked encoding with keep-alive. ``--events-per-write`` sets how many chunks go in one socket
write (1: one HTTP chunk per token, as a real server at low load; more: the coalesced reads a
client sees from a busy GPU server).

    python -m tuner.testing.null_server --port 8000 [--events-per-write 16]

With ``--step-ms S`` it behaves instead like an engine with a known schedule, to calibrate
clients: every ``S`` ms each running request gets one token, and a request's first token goes
out at the first step at least ``--prefill-ms P`` after it arrived. The server records when it
wrote each request's first chunk (its TTFT as the server knows it); ``GET /stats`` returns those
TTFTs in ms and ``POST /stats/reset`` clears them, so a client's measured TTFT can be compared
with the truth.

    python -m tuner.testing.null_server --port 8000 --step-ms 10 --prefill-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

_TOKEN = (
    b'data: {"id":"cmpl-null","object":"text_completion","created":0,"model":"null",'
    b'"choices":[{"index":0,"text":" t1","logprobs":null,"finish_reason":null,'
    b'"stop_reason":null}],"usage":null}\n\n'
)
_DONE = b"data: [DONE]\n\n"
_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def _usage(prompt: int, completion: int) -> bytes:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    event = {"id": "cmpl-null", "object": "text_completion", "choices": [], "usage": usage}
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _prompt_len(prompt: object) -> int:
    if isinstance(prompt, list):
        return len(prompt)
    return len(str(prompt).split())


@dataclass
class _Running:
    writer: asyncio.StreamWriter
    arrived: float
    tokens: int
    prompt: int
    done: asyncio.Future[None]
    sent: int = 0


@dataclass
class Engine:
    """A step loop: every ``step_s`` each running request past its prefill gets a token."""

    step_s: float
    prefill_s: float
    running: list[_Running] = field(default_factory=list)
    ttfts_ms: list[float] = field(default_factory=list)

    async def run(self) -> None:
        next_step = time.perf_counter()
        while True:
            next_step += self.step_s
            await asyncio.sleep(max(0.0, next_step - time.perf_counter()))
            now = time.perf_counter()
            still = []
            for r in self.running:
                if now - r.arrived < self.prefill_s:
                    still.append(r)
                    continue
                if r.sent == 0:
                    self.ttfts_ms.append((now - r.arrived) * 1000.0)
                r.writer.write(_chunk(_TOKEN))
                r.sent += 1
                if r.sent < r.tokens:
                    still.append(r)
                    continue
                r.writer.write(_chunk(_usage(r.prompt, r.tokens) + _DONE) + b"0\r\n\r\n")
                if not r.done.done():
                    r.done.set_result(None)
            self.running = still


def _json_response(body: bytes, status: bytes = b"200 OK") -> bytes:
    head = b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % (status, len(body)) + body


async def _serve_one(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    per_write: int,
    engine: Engine | None = None,
) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = json.loads(await reader.readexactly(length)) if length else {}
            arrived = time.perf_counter()
            reply = None
            if engine is not None and head.startswith((b"GET /stats", b"POST /stats/reset")):
                if head.startswith(b"POST"):
                    engine.ttfts_ms.clear()
                reply = _json_response(json.dumps({"ttft_ms": engine.ttfts_ms}).encode())
            elif engine is not None and head.startswith(b"GET /v1/models"):
                models = {"object": "list", "data": [{"id": "null"}]}
                reply = _json_response(json.dumps(models).encode())
            elif not head.startswith(b"POST /v1/completions"):
                reply = _json_response(b'{"error":{"message":"not found"}}', b"404 Not Found")
            if reply is not None:
                writer.write(reply)
                await writer.drain()
                continue
            tokens = int(body.get("max_tokens") or 16)
            writer.write(_HEAD)
            if engine is not None:
                done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                prompt = _prompt_len(body.get("prompt"))
                engine.running.append(_Running(writer, arrived, tokens, prompt, done))
                await done
                await writer.drain()
                continue
            for start in range(0, tokens, per_write):
                writer.write(_chunk(_TOKEN * min(per_write, tokens - start)))
                await writer.drain()
            writer.write(_chunk(_usage(_prompt_len(body.get("prompt")), tokens) + _DONE))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except ConnectionError:
        return
    finally:
        writer.close()


async def serve(
    host: str,
    port: int,
    per_write: int,
    ready: asyncio.Event | None = None,
    engine: Engine | None = None,
    announce: str | None = None,
) -> None:
    server = await asyncio.start_server(
        lambda r, w: _serve_one(r, w, per_write, engine),
        host,
        port,
        reuse_address=True,
        backlog=1024,
    )
    stepper = asyncio.create_task(engine.run()) if engine is not None else None
    for sock in server.sockets:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if ready is not None:
        ready.set()
    if announce is not None:
        print(announce, flush=True)  # only now: a client that read it can connect
    try:
        async with server:
            await server.serve_forever()
    finally:
        if stepper is not None:
            stepper.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--events-per-write", type=int, default=1)
    parser.add_argument("--step-ms", type=float, help="engine mode: one token per step")
    parser.add_argument("--prefill-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    engine = None
    if args.step_ms:
        engine = Engine(step_s=args.step_ms / 1000.0, prefill_s=args.prefill_ms / 1000.0)
    line = f"null server on http://{args.host}:{args.port}"
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            serve(args.host, args.port, max(1, args.events_per_write), engine=engine, announce=line)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
