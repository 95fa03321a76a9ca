"""Latency of GET /v1/recommendations under an open-loop load, over loopback.

Builds a study database like the API tests do (tiny-ernie studies on h100, here through the
in-process fake runner so that many trials take seconds), starts ``tuner serve`` on a free
loopback port in a subprocess, sends requests at a fixed rate for a fixed time whatever the
answers take (open loop: a slow answer does not delay the next request), and prints the
latency percentiles, the achieved rate and the machine. Target: P99 < 10 ms at 200 req/s on
the 2-core CI machine. Bounded in time and count; stops the server itself.

    .venv/bin/python bench/bench_recommendations.py [--rate 200] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import psutil

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

QUERIES = (
    "/v1/recommendations?model=tiny-ernie&gpu=h100&workload=chat",
    "/v1/recommendations?model=tiny-ernie&gpu=h100&workload=chat&objective=throughput",
    "/v1/recommendations?model=tiny-ernie&gpu=h100&workload=smoke&vllm_version=0.12.0",
    "/v1/recommendations?model=tiny-ernie&gpu=h100&workload=chat&slo=e2e_p99=10s",
    "/v1/recommendations?model=tiny-ernie&gpu=a100-80g&workload=chat",  # 404 with suggestions
)


def build_database(url: str, trials: int) -> None:
    """Two finished studies of ``trials`` trials each, like the API tests' database."""
    from tuner.catalog.gpus import get_gpu
    from tuner.catalog.models import resolve_model
    from tuner.compose import StudyContext
    from tuner.db.migrate import upgrade
    from tuner.db.repository import Repository
    from tuner.db.session import make_engine
    from tuner.domain import Slo
    from tuner.load import WORKLOADS
    from tuner.space import SearchSpace
    from tuner.spec.study import StudySpec
    from tuner.study.loop import run_study
    from tuner.testing.fake_runner import FakeRunner

    upgrade(url)
    repo = Repository(make_engine(url))
    model, gpu = resolve_model("tiny-ernie"), get_gpu("h100")
    choices = {"gpu_memory_utilization": (0.5, 0.7, 0.85), "max_num_seqs": (1, 16, 64, 256)}
    for workload in ("chat", "smoke"):
        spec = StudySpec(
            model=model.alias,
            gpu=gpu.name,
            workload=workload,
            trials=trials,
            params=tuple(choices),
            choices=choices,
            name=f"bench-{workload}",
            confirm_launches=0,
        )
        load = WORKLOADS[workload]
        space = SearchSpace(model, gpu, load, params=spec.params, choices=spec.choices)
        ctx = StudyContext(
            name=spec.study_name(),
            spec=spec,
            model=model,
            gpu=gpu,
            workload=load,
            slo=Slo(),
            space=space,
            storage_url=url,
            vllm_version="0.32.0",
            serve_model=model.hub_id,
        )
        run_study(ctx, FakeRunner(), repo)


def start_server(url: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner", "serve", "--port", "0", "--storage", url],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    banner = proc.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", banner)
    if not match:
        stop_server(proc)
        raise SystemExit(f"tuner serve did not start: {banner!r}")
    base = f"http://127.0.0.1:{match.group(1)}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            time.sleep(0.1)
    stop_server(proc)
    raise SystemExit("tuner serve did not answer /healthz within 30 s")


def stop_server(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


async def drive(
    base: str, rate: float, seconds: float
) -> tuple[list[float], Counter[str], float, float]:
    """Send ``rate * seconds`` requests on schedule; return latencies (s), outcomes, duration
    and the worst lag of a send behind its schedule (s): a stalled load generator, not a slow
    server, shows up there."""
    total = int(rate * seconds)
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(base_url=base, timeout=5.0, limits=limits) as client:
        for i in range(50):  # warm-up: connections, the server's snapshot cache
            await client.get(QUERIES[i % len(QUERIES)])

        async def one(path: str) -> None:
            start = time.perf_counter()
            try:
                r = await client.get(path)
                outcomes[str(r.status_code)] += 1
            except httpx.HTTPError as exc:
                outcomes[type(exc).__name__] += 1
                return
            latencies.append(time.perf_counter() - start)

        tasks = []
        lag = 0.0
        t0 = time.perf_counter()
        for i in range(total):
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            lag = max(lag, -delay)
            tasks.append(asyncio.create_task(one(QUERIES[i % len(QUERIES)])))
        await asyncio.gather(*tasks)
        return latencies, outcomes, time.perf_counter() - t0, lag


def machine() -> str:
    cpu = platform.processor() or "?"
    try:
        text = Path("/proc/cpuinfo").read_text()
        cpu = re.search(r"model name\s*:\s*(.+)", text).group(1)  # type: ignore[union-attr]
    except (OSError, AttributeError):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem = psutil.virtual_memory().total / 1024**3
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    fast = [m for m in ("httptools", "uvloop") if importlib.util.find_spec(m) is not None]
    return (
        f"{cpu}, {cores} usable cores, {mem:.0f} GiB RAM, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}; load average {load}; "
        f"uvicorn with {' + '.join(fast) or 'h11 + asyncio'}"
    )


def _steal_ticks() -> int:
    """Clock ticks the hypervisor took from this machine's CPUs (0 where unknown)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) if len(fields) > 8 else 0
    except OSError:
        return 0


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of the load")
    parser.add_argument("--trials", type=int, default=40, help="trials per study")
    args = parser.parse_args()
    if not (0 < args.rate <= 2000 and 0 < args.seconds <= 120):
        parser.error("keep --rate within (0, 2000] and --seconds within (0, 120]")
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        t = time.perf_counter()
        build_database(url, args.trials)
        print(f"database: 2 studies x {args.trials} trials in {time.perf_counter() - t:.1f} s")
        proc, base = start_server(url)
        try:
            server, client = psutil.Process(proc.pid), psutil.Process()
            before = (_cpu(server), _cpu(client))
            # Building the database left a large heap here: a full collection of it stalls the
            # load generator for 100+ ms, which would be charged to the server. Freeze it.
            gc.collect()
            gc.freeze()
            steal = _steal_ticks()
            latencies, outcomes, duration, lag = asyncio.run(drive(base, args.rate, args.seconds))
            # Building the database left a large heap here: a full collection of it stalls the
            # load generator for 100+ ms, which would be charged to the server. Freeze it.
            gc.collect()
            gc.freeze()
            steal = _steal_ticks() - steal
            spent = (_cpu(server) - before[0], _cpu(client) - before[1])
        finally:
            stop_server(proc)
    done = sorted(latencies)
    ms = [v * 1000 for v in done]
    print(f"machine: {machine()}")
    print(
        f"GET /v1/recommendations, open loop at {args.rate:g} req/s for {args.seconds:g} s, "
        f"{len(QUERIES)} query variants (one a 404)"
    )
    print(f"answers: {dict(sorted(outcomes.items()))}")
    sent = max(1, sum(outcomes.values()))
    print(f"achieved rate: {sent / duration:.1f} req/s")
    print(
        f"worst send lag behind schedule: {lag * 1000:.1f} ms; CPU time stolen by the "
        f"hypervisor: {steal * 1000 / os.sysconf('SC_CLK_TCK'):.0f} ms"
    )
    print(
        f"CPU per request: server {spent[0] / sent * 1000:.2f} ms, "
        f"load generator {spent[1] / sent * 1000:.2f} ms (incl. 50 warm-up requests)"
    )
    if ms:
        print(
            f"latency ms: p50 {percentile(ms, 0.50):.2f}  p90 {percentile(ms, 0.90):.2f}  "
            f"p99 {percentile(ms, 0.99):.2f}  max {ms[-1]:.2f}  mean {statistics.fmean(ms):.2f}"
        )
        verdict = "meets" if percentile(ms, 0.99) < 10.0 else "MISSES"
        print(f"target P99 < 10 ms: {verdict}")


if __name__ == "__main__":
    main()
