"""Workload presets, trace loading and the per-request plan a load run follows.

A :class:`tuner.domain.Workload` states means (prompt and output tokens, arrival rate); the
plan turns it into concrete requests, deterministically from a seed, so that every trial of a
study sends exactly the same request shapes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tuner.domain import TraceRequest, Workload
from tuner.errors import UsageError

TRACE_PREFIX = "trace:"

WORKLOADS: dict[str, Workload] = {
    # A chat assistant: one system prompt shared by every conversation, varied user turns.
    "chat": Workload(
        name="chat",
        prompt_tokens=512,
        output_tokens=256,
        shared_prefix_tokens=128,
        concurrency=16,
        requests_per_window=96,
        windows=3,
        warmup_requests=32,
    ),
    # Retrieval-augmented generation: long contexts, short answers; prefill dominates.
    "rag": Workload(
        name="rag",
        prompt_tokens=3500,
        output_tokens=128,
        concurrency=8,
        requests_per_window=48,
        windows=3,
        warmup_requests=16,
    ),
    # Code completion / generation: medium context, long outputs; decode dominates.
    "code": Workload(
        name="code",
        prompt_tokens=1000,
        output_tokens=512,
        concurrency=8,
        requests_per_window=48,
        windows=3,
        warmup_requests=16,
    ),
    # The seed article's benchmark: fixed shapes, so numbers compare with it directly.
    "seed-bench": Workload(
        name="seed-bench",
        prompt_tokens=512,
        output_tokens=256,
        concurrency=8,
        requests_per_window=64,
        windows=3,
        warmup_requests=16,
        length_jitter=0.0,
    ),
    # Heavy load for today's vLLM on a big GPU: 256 streams in a closed loop, where the
    # frontend's per-token work shows (on the H200, vLLM 0.26, ernie-0.3b: 19.6k output tok/s
    # and 76 req/s with vLLM's defaults). Four requests per stream per window.
    "throughput-256": Workload(
        name="throughput-256",
        prompt_tokens=512,
        output_tokens=256,
        concurrency=256,
        requests_per_window=1024,
        windows=3,
        warmup_requests=256,
    ),
    # A chat service near capacity: Poisson arrivals at 60 req/s (about 80 % of what the
    # H200 served with vLLM's defaults at 256 streams), up to 512 in flight, judged by its
    # recommended SLO (RECOMMENDED_SLOS): a knob that wins throughput by streaming in bursts
    # (stream_interval) must still keep the gap between chunks, P99 ITL, within 50 ms.
    # Other model x GPU pairs: set [workload] request_rate near their own capacity.
    "chat-heavy": Workload(
        name="chat-heavy",
        prompt_tokens=512,
        output_tokens=256,
        shared_prefix_tokens=128,
        concurrency=512,
        request_rate=60.0,
        requests_per_window=600,
        windows=3,
        warmup_requests=128,
    ),
    # Small enough for vLLM's CPU build on a 2-core CI machine.
    "smoke": Workload(
        name="smoke",
        prompt_tokens=128,
        output_tokens=64,
        shared_prefix_tokens=32,
        concurrency=8,
        # About 6 s per window for tiny-ernie on 2 CPU cores: windows much shorter than that
        # measured +-30 % run to run.
        requests_per_window=48,
        windows=3,
        warmup_requests=8,
    ),
}


# The SLO a study of the preset takes when its spec names none (`slo = "none"`: no SLO).
# ITL is tuner's: every gap between streamed chunks, pooled over the window's requests, so a
# server that streams 8 tokens per chunk shows 8 tokens' worth of gap.
RECOMMENDED_SLOS: dict[str, str] = {
    "chat-heavy": "ttft_p99=1s,itl_p99=50ms",
}


def recommended_slo(name: str) -> str:
    """The SLO the workload preset ``name`` recommends ("" for none)."""
    return RECOMMENDED_SLOS.get(name, "")


@dataclass(frozen=True)
class PlannedRequest:
    """One request to send. ``prompt_tokens`` includes the ``shared_prefix_tokens``.

    ``arrival_s`` is the launch offset from the window start, or None in a closed loop
    (launch as soon as a concurrency slot is free).
    """

    prompt_tokens: int
    output_tokens: int
    shared_prefix_tokens: int
    arrival_s: float | None


def _allowed_names() -> str:
    return ", ".join(sorted(WORKLOADS)) + f", or {TRACE_PREFIX}PATH (a JSONL trace)"


def get_workload(name: str) -> Workload:
    """A preset by name, or ``trace:PATH`` to replay a JSONL trace.

    Raises :class:`tuner.errors.UsageError` for an unknown name or a malformed trace.
    """
    if name.startswith(TRACE_PREFIX):
        return load_trace(Path(name[len(TRACE_PREFIX) :]))
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UsageError(
            f"unknown workload {name!r}", hint=f"choose one of: {_allowed_names()}"
        ) from None


def _trace_row(obj: object, where: str) -> TraceRequest:
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in ("prompt_tokens", "output_tokens", "arrival_s") if k not in obj]
    if missing:
        raise UsageError(
            f"{where}: missing field(s) {missing}",
            hint='each line: {"prompt_tokens": INT, "output_tokens": INT, "arrival_s": SECONDS}',
        )
    counts: dict[str, int] = {}
    for key in ("prompt_tokens", "output_tokens"):
        value = obj[key]
        # bool is an int subclass; true/false as a token count is surely a mistake.
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{where}: {key} must be an integer >= 1, got {value!r}")
        counts[key] = value
    arrival = obj["arrival_s"]
    if (
        isinstance(arrival, bool)
        or not isinstance(arrival, int | float)
        or not math.isfinite(arrival)
        or arrival < 0
    ):
        raise UsageError(f"{where}: arrival_s must be a number of seconds >= 0, got {arrival!r}")
    return TraceRequest(counts["prompt_tokens"], counts["output_tokens"], float(arrival))


def load_trace(path: Path) -> Workload:
    """Read a JSONL trace into a workload; one window replays the whole trace.

    Each non-blank line is ``{"prompt_tokens": int, "output_tokens": int, "arrival_s": float}``
    with the arrival as an offset in seconds; rows are replayed in arrival order.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(
            f"cannot read trace {path}: {exc.strerror or exc}",
            hint="give the path of a JSONL file after 'trace:'",
        ) from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"trace {path} is not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x})",
            hint="a trace is JSON Lines in UTF-8: one JSON object per line",
        ) from None
    rows: list[TraceRequest] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: not valid JSON ({exc.msg})") from None
        rows.append(_trace_row(obj, where))
    if not rows:
        raise UsageError(f"trace {path} has no requests", hint="add one JSON object per line")
    rows.sort(key=lambda r: r.arrival_s)
    n = len(rows)
    return Workload(
        name=f"{TRACE_PREFIX}{path.name}",
        prompt_tokens=round(sum(r.prompt_tokens for r in rows) / n),
        output_tokens=round(sum(r.output_tokens for r in rows) / n),
        # A cap, not a target: the trace's own arrival times set the load.
        concurrency=64,
        requests_per_window=n,
        windows=3,
        warmup_requests=min(16, n),
        length_jitter=0.0,
        trace=tuple(rows),
    )


def _jittered(mean: int, jitter: float, u: float) -> int:
    """``mean`` scaled by ``1 + jitter * u`` (u in [-1, 1]), at least 1 and never above the
    ``int(mean * (1 + jitter))`` bound that :attr:`Workload.max_request_tokens` promises."""
    upper = max(1, int(mean * (1.0 + jitter)))
    return min(upper, max(1, round(mean * (1.0 + jitter * u))))


def _plan_trace(trace: tuple[TraceRequest, ...], count: int, shared: int) -> list[PlannedRequest]:
    ordered = sorted(trace, key=lambda r: r.arrival_s)
    first = ordered[0].arrival_s
    span = ordered[-1].arrival_s - first
    # A cycle starts one mean gap after the previous one ended, so the rate stays the trace's.
    gap = span / (len(ordered) - 1) if len(ordered) > 1 else 0.0
    plan = []
    for i in range(count):
        cycle, row = divmod(i, len(ordered))
        r = ordered[row]
        plan.append(
            PlannedRequest(
                prompt_tokens=r.prompt_tokens,
                output_tokens=r.output_tokens,
                shared_prefix_tokens=min(shared, r.prompt_tokens - 1),
                arrival_s=r.arrival_s - first + cycle * (span + gap),
            )
        )
    return plan


def plan_requests(workload: Workload, count: int, seed: int) -> list[PlannedRequest]:
    """The ``count`` requests of one phase (warm-up or a window), deterministic in
    ``(workload.seed, seed)``.

    Lengths are uniform within +-``length_jitter`` of the means (at least one token); the
    jitter applies to the part of the prompt after the shared prefix, so the prompt mean stays
    ``workload.prompt_tokens``. With ``request_rate`` set, arrivals are a Poisson process
    starting at 0. A trace replays its rows in order, cycling when ``count`` exceeds it.
    """
    if count < 0 or seed < 0:
        raise ValueError(f"count and seed must be >= 0, got count={count}, seed={seed}")
    shared = workload.shared_prefix_tokens
    if workload.trace:
        return _plan_trace(workload.trace, count, shared)
    if shared < 0 or shared >= workload.prompt_tokens:
        raise UsageError(
            f"workload {workload.name!r}: shared_prefix_tokens ({shared}) must be >= 0 and "
            f"below prompt_tokens ({workload.prompt_tokens})",
            hint="the shared prefix is part of the prompt; leave room for each request's own text",
        )
    if workload.output_tokens < 1:
        raise UsageError(f"workload {workload.name!r}: output_tokens must be >= 1")
    if not 0.0 <= workload.length_jitter < 1.0:
        raise UsageError(
            f"workload {workload.name!r}: length_jitter must be in [0, 1), "
            f"got {workload.length_jitter}"
        )
    rate = workload.request_rate
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise UsageError(f"workload {workload.name!r}: request_rate must be > 0, got {rate}")

    rng = np.random.default_rng([workload.seed, seed])
    jitter = workload.length_jitter
    u_prompt = rng.uniform(-1.0, 1.0, count)
    u_output = rng.uniform(-1.0, 1.0, count)
    arrivals: list[float | None] = [None] * count
    if rate is not None and count:
        gaps = rng.exponential(1.0 / rate, count)
        gaps[0] = 0.0  # the first request goes at once: no idle lead-in in the window
        arrivals = [float(t) for t in np.cumsum(gaps)]
    own_mean = workload.prompt_tokens - shared
    return [
        PlannedRequest(
            prompt_tokens=shared + _jittered(own_mean, jitter, float(u_prompt[i])),
            output_tokens=_jittered(workload.output_tokens, jitter, float(u_output[i])),
            shared_prefix_tokens=shared,
            arrival_s=arrivals[i],
        )
        for i in range(count)
    ]
