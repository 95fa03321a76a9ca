"""Capacity of the load generator: streamed chunks per second one client process can take in.

Against tuner's null streaming server (``tuner.testing.null_server``, a separate process that
sends vLLM-shaped chunks as fast as the socket takes them), at 256 streams, measured side by
side in one run: the generator as it was before the rewrite (``bench/legacy_load.py``: httpx,
a JSON parse per chunk) and today's (aiohttp, a few byte searches per chunk). Whatever rate a
client reaches here is the most it could ever report; the new generator's windows must also
flag themselves client-bound here, since the client is the bottleneck by construction.

    .venv/bin/python bench/bench_load_capacity.py [--streams 256] [--tokens 256] [--requests 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.legacy_load import run as legacy_run  # noqa: E402
from tuner.domain import Workload  # noqa: E402
from tuner.load import LoadGenerator, PromptFactory  # noqa: E402
from tuner.runner.ports import free_port  # noqa: E402


def measure(per_write: int, args: argparse.Namespace) -> tuple[float, float, str]:
    """(legacy chunks/s, new chunks/s, the new generator's self-check) for one server mode."""
    port = free_port("127.0.0.1")
    server = subprocess.Popen(
        [sys.executable, "-m", "tuner.testing.null_server", "--port", str(port),
         "--events-per-write", str(per_write)],
        stdout=subprocess.PIPE, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "null server on ..."
        url = f"http://127.0.0.1:{port}"
        bodies = [
            {"model": "null", "prompt": "t1 t2", "max_tokens": args.tokens, "stream": True}
            for _ in range(args.requests)
        ]
        chunks, seconds = asyncio.run(legacy_run(url, bodies, args.streams))
        legacy = chunks / seconds
        workload = Workload(
            name="capacity",
            prompt_tokens=2,
            output_tokens=args.tokens,
            concurrency=args.streams,
            requests_per_window=args.requests,
            windows=1,
            warmup_requests=0,
            length_jitter=0.0,
        )
        report = LoadGenerator(url, "null", PromptFactory(1024, synthetic=True)).run(workload)
        window, records = report.windows[0], report.records[0]
        received = sum(len(r.itl_s) + 1 for r in records if r.ok)
        health = window.client
        check = (
            "no self-check"
            if health is None
            else (
                f"client-bound={health.client_bound} (CPU {health.client_cpu:.0%} of a core, "
                f"loop lag P99 {health.loop_lag_p99_ms:.0f} ms)"
            )
        )
        return legacy, received / window.duration_s, check
    finally:
        server.terminate()
        server.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--requests", type=int, default=1024)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, {args.streams} streams, {args.tokens} chunks per request")
    print("| server writes | legacy chunks/s | new chunks/s | new / legacy | new generator |")
    print("|---|---|---|---|---|")
    for per_write in (1, 16):
        legacy, new, check = measure(per_write, args)
        label = "1 chunk per write" if per_write == 1 else f"{per_write} chunks per write"
        print(f"| {label} | {legacy:,.0f} | {new:,.0f} | x{new / legacy:.1f} | {check} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
