"""Today's load generator as it was before the aiohttp rewrite (httpx streaming, a full JSON
parse of every chunk), kept only so that ``bench_load_capacity.py`` can measure the new one
beside it in the same run. Not used by tuner."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx


def _has_text(event: dict[str, Any]) -> bool:
    return any(isinstance(c, dict) and c.get("text") for c in event.get("choices") or [])


async def _one(client: httpx.AsyncClient, body: dict[str, Any]) -> int:
    """One request as the old ``stream_completion`` handled it; returns the chunks seen."""
    chunks = 0
    async with client.stream("POST", "/v1/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                continue
            event = json.loads(data)
            if _has_text(event):
                time.perf_counter()
                chunks += 1
    return chunks


async def run(base_url: str, bodies: list[dict[str, Any]], concurrency: int) -> tuple[int, float]:
    """Send ``bodies`` closed-loop at ``concurrency``; (chunks received, seconds)."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=600) as client:
        slots = asyncio.Semaphore(concurrency)

        async def guarded(body: dict[str, Any]) -> int:
            async with slots:
                return await _one(client, body)

        t0 = time.perf_counter()
        counts = await asyncio.gather(*(guarded(b) for b in bodies))
        return sum(counts), time.perf_counter() - t0
