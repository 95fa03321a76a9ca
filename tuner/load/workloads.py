"""Workload presets, trace loading and the per-request plan a load run follows.

A :class:`tuner.domain.Workload` states means (prompt and output tokens, arrival rate); the
plan turns it into concrete requests, deterministically from a seed, so that every trial of a
study sends exactly the same request shapes.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuner.domain import SEED_MAX, TraceRequest, Workload
from tuner.domain.workload import Segments
from tuner.errors import UsageError
from tuner.load.traces import (
    FORMATS,
    TIMED_FORMATS,
    TokenCounter,
    apply_replay,
    read_trace,
    split_name,
)

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
    # Conversations of four turns: each turn's prompt carries the 256-token system prompt,
    # the earlier turns and their answers, then about 128 new tokens; the user thinks about
    # 0.5 s (exponential) before the next turn. Later turns repeat most of their prompt, so a
    # prefix cache decides their TTFT. Closed loop, at most 16 requests in flight.
    "multi-turn": Workload(
        name="multi-turn",
        prompt_tokens=384,
        output_tokens=96,
        shared_prefix_tokens=256,
        concurrency=16,
        requests_per_window=128,
        windows=3,
        warmup_requests=32,
        turns=4,
        think_time_s=0.5,
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
    (launch as soon as a concurrency slot is free). ``segments`` (when given, instead of
    ``shared_prefix_tokens``) name the prompt's shared prefixes (:data:`Segments`). A request
    of a ``session`` is sent after the session's previous request has finished and
    ``think_s`` more seconds have passed; ``turn`` counts its session's turns from 1.
    """

    prompt_tokens: int
    output_tokens: int
    shared_prefix_tokens: int
    arrival_s: float | None
    segments: Segments = ()
    session: str | None = None
    turn: int = 0
    think_s: float = 0.0

    def prefix_segments(self) -> Segments:
        """The prompt's shared prefixes, the system prompt (stream "") included."""
        if self.segments:
            return self.segments
        return (("", self.shared_prefix_tokens),) if self.shared_prefix_tokens else ()


def get_workload(
    name: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    count_tokens: TokenCounter | None = None,
    tokenizer: Path | None = None,
) -> Workload:
    """A preset by name, or ``FORMAT:FILE`` to replay a trace (:mod:`tuner.load.traces`),
    with ``overrides`` of its fields applied (a trace's replay options among them).

    A trace's text is counted by ``count_tokens``, else by the ``tokenizer.json`` at
    ``tokenizer`` (the model's directory or the file; a study passes its model's), else
    approximated; the workload's ``source`` says which (:func:`tuner.load.traces.text_counter`).
    Raises :class:`tuner.errors.UsageError` for an unknown name, a bad
    override or a malformed trace.
    """
    overrides = dict(overrides or {})
    if split_name(name) is not None:
        block = overrides.get("block_tokens", 512)
        workload = read_trace(name, count_tokens, block, tokenizer=tokenizer)
    else:
        try:
            workload = WORKLOADS[name]
        except KeyError:
            raise UsageError(
                f"unknown workload {name!r}",
                hint=f"choose one of: {', '.join(sorted(WORKLOADS))}, or {'/'.join(FORMATS)}:FILE "
                "(a trace; trace: tells the format)",
            ) from None
    check_overrides(workload, overrides)
    if overrides:
        try:
            workload = workload.replace(**overrides)
        except TypeError as exc:
            raise UsageError(f"bad workload override: {exc}") from None
    return apply_replay(workload, overrides)


def check_workload(workload: Workload) -> None:
    """UsageError for counts a load run cannot take (no stream, window or request), checked
    where a workload is resolved, before any server starts, and again by the generator."""
    for field in ("concurrency", "requests_per_window", "windows"):
        if getattr(workload, field) < 1:
            raise UsageError(f"workload {workload.name!r}: {field} must be >= 1")
    if workload.requests_per_window > MAX_POINT_REQUESTS:
        raise UsageError(
            f"workload {workload.name!r}: requests_per_window would send "
            f"{workload.requests_per_window:,} requests a window, more than "
            f"{MAX_POINT_REQUESTS:,}",
            hint="set fewer (a window of more is hours of load at any server's pace)",
        )
    if workload.warmup_requests < 0:
        raise UsageError(f"workload {workload.name!r}: warmup_requests must be >= 0")
    if workload.concurrency_ladder and workload.rate_ladder:
        raise UsageError(
            f"workload {workload.name!r}: give a concurrency ladder or a rate ladder, not both"
        )
    if any(c < 1 for c in workload.concurrency_ladder):
        raise UsageError(f"workload {workload.name!r}: every concurrency must be >= 1")
    if any(not 0 < r < math.inf for r in workload.rate_ladder):
        raise UsageError(f"workload {workload.name!r}: every request rate must be > 0 and finite")
    if not 0 <= workload.seed <= SEED_MAX:
        raise UsageError(f"workload {workload.name!r}: seed must be 0 to {SEED_MAX}")
    if workload.trace is not None and workload.arrival == "poisson" and workload.concurrency_ladder:
        raise UsageError(
            f"workload {workload.name!r}: arrival = 'poisson' draws its rows at a request rate, "
            "so streams (concurrency_ladder, --concurrency) would not set the load",
            hint="give a rate ladder (rate_ladder in [workload], --request-rate with tuner "
            "load), or arrival = 'closed' for a closed loop of streams",
        )
    rated = workload.rate_ladder or workload.request_rate is not None
    if workload.trace is not None and workload.arrival == "poisson" and not rated:
        # Such a trace was drawn at as many requests a second as it has rows, labelled its
        # mean rate (a 500-row ShareGPT file: 500 req/s).
        raise UsageError(
            f"workload {workload.name!r}: arrival = 'poisson' draws the rows at a request rate, "
            "and the trace has no arrival times (or one row) to take its mean rate from",
            hint="give the rate: request_rate or rate_ladder in [workload] in a spec, "
            "--request-rate with tuner load",
        )
    if workload.trace is not None and workload.arrival != "poisson" and rated:
        how = "replays the trace's own times" if workload.arrival == "trace" else "is a closed loop"
        raise UsageError(
            f"workload {workload.name!r}: arrival = {workload.arrival!r} {how}, so a request "
            "rate (request_rate, rate_ladder) would change nothing but the labels",
            hint="set arrival = 'poisson' to draw the trace's rows at that rate, as `tuner load "
            "--request-rate` and vllm bench serve's --request-rate do",
        )


def check_shapes(workload: Workload) -> None:
    """UsageError for request shapes no plan can draw (a shared prefix past the prompt, no
    output, a jitter, rate, turn count or think time out of range, Poisson arrivals of
    conversations): checked where a study's workload is resolved
    (:func:`tuner.compose.resolve_workload`) and again for each plan (:func:`plan_requests`)."""
    shared = workload.shared_prefix_tokens
    if shared < 0 or (shared >= workload.prompt_tokens and not workload.trace):
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
    if workload.turns < 1:
        raise UsageError(f"workload {workload.name!r}: turns must be >= 1, got {workload.turns}")
    try:
        think = float(workload.think_time_s)
    except OverflowError:  # an integer past any float
        think = math.inf
    if not (math.isfinite(think) and think >= 0):
        raise UsageError(
            f"workload {workload.name!r}: think_time_s must be >= 0 and finite, got {think}",
            hint="think_time_s is the mean seconds between an answer and the next turn",
        )
    rate = workload.request_rate
    if rate is not None and not 0 < rate < math.inf:
        raise UsageError(
            f"workload {workload.name!r}: request_rate must be > 0 and finite, got {rate}"
        )
    _check_span(workload)
    if workload.turns > 1 and any(p.request_rate is not None for p in workload.load_points()):
        raise UsageError(
            f"workload {workload.name!r}: conversations of {workload.turns} turns are paced by "
            "their streams and think time (each turn waits for the answer before it), so a "
            "request rate (request_rate, rate_ladder, --request-rate) would change nothing",
            hint="set the load with streams: concurrency or concurrency_ladder in [workload], "
            "--concurrency with tuner load; for Poisson arrivals take a preset of single "
            "requests (turns = 1)",
        )


def _check_span(workload: Workload) -> None:
    """UsageError where a window's arrivals would take longer than :data:`MAX_WINDOW_S` on
    average (its requests at a point's rate, or a conversation's think times): a rate of
    1e-6 req/s or a think time of 1e6 s was queued, and its trial waited for days."""
    if not workload.trace or workload.arrival == "poisson":  # a trace's own clock: _plan_trace
        for point in workload.load_points():
            if point.request_rate is None or not point.request_rate > 0:
                continue
            span = point.requests_per_window / point.request_rate
            if span > MAX_WINDOW_S:
                raise UsageError(
                    f"workload {workload.name!r}: a window of {point.requests_per_window} "
                    f"requests at {point.request_rate:g} req/s takes {_hours(span)} hours of "
                    f"arrivals (at most {MAX_WINDOW_S / 3600:.0f})",
                    hint="raise the request rate, or send fewer requests a window "
                    "(requests_per_window)",
                )
    think = (workload.turns - 1) * float(workload.think_time_s)  # finite: check_shapes
    if workload.turns > 1 and think > MAX_WINDOW_S:
        raise UsageError(
            f"workload {workload.name!r}: a conversation of {workload.turns} turns thinks "
            f"{_hours(think)} hours on average (think_time_s {workload.think_time_s:g}; at most "
            f"{MAX_WINDOW_S / 3600:.0f} hours a window)",
            hint="think_time_s is the mean seconds between an answer and the next turn: lower it",
        )


def _hours(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:,.1f}" if seconds < 1e9 else f"{hours:.3g}"


def check_overrides(workload: Workload, overrides: Mapping[str, Any]) -> None:
    """UsageError for override fields ``workload`` does not read: a preset's drawn shapes on a
    trace (its rows set their own), a trace's replay options on a preset, a request rate
    beside a ladder (whose points set the load); and for a ladder that gives a point twice
    (measured once: the points are a set)."""
    idle = sorted(set(overrides) & (SHAPE_FIELDS if workload.trace else REPLAY_FIELDS))
    if idle:
        what = "a trace's rows set" if workload.trace else "only a trace's replay reads"
        them = "them" if len(idle) > 1 else "it"
        raise UsageError(
            f"workload {workload.name!r}: the override of {', '.join(idle)} would change "
            f"nothing ({what} {them})",
            hint=f"leave {them} out"
            + (", or pick a preset to draw shapes from" if workload.trace else ""),
        )
    from tuner.load.traces import trace_format

    fmt = trace_format(workload)
    for fields, formats, missing in (
        (CLOCK_FIELDS, TIMED_FORMATS, "arrival times"),
        ({"block_tokens"}, ("mooncake",), "hash blocks"),
    ):
        idle = sorted(set(overrides) & fields)
        if fmt is not None and fmt not in formats and idle:
            them = "them" if len(idle) > 1 else "it"
            takes = ", ".join(f"{f}:" for f in formats)
            raise UsageError(
                f"workload {workload.name!r}: the override of {', '.join(idle)} would change "
                f"nothing (a {fmt}: trace has no {missing})",
                hint=f"leave {them} out: only a trace with {missing} reads {them} ({takes})",
            )
    for ladder, what in _LADDERS.items():
        if "request_rate" in overrides and ladder in overrides:
            raise UsageError(
                f"workload {workload.name!r}: the override of request_rate would change nothing "
                f"beside {ladder} ({what})",
                hint="leave request_rate out"
                + ("" if ladder == "rate_ladder" else ", or give the rates as rate_ladder"),
            )
        points = list(overrides.get(ladder) or ())
        twice = sorted({p for p in points if points.count(p) > 1})
        if twice and len(set(points)) > 1:  # one rate given twice: one load (compose says so)
            raise UsageError(
                f"workload {workload.name!r}: the override of {ladder} gives "
                f"{', '.join(f'{p:g}' for p in twice)} twice: the points must be distinct",
                hint=f"give each point once: {', '.join(f'{p:g}' for p in sorted(set(points)))}",
            )


def measured_overrides(name: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` of workload ``name`` as a tuner before :func:`check_overrides` refused
    what a workload does not read measured them: a request rate beside a ladder dropped, a
    rung given twice measured once, a replay option the trace has no use for dropped. For a
    stored study's spec, which its resumes and workers must still read."""
    kept = dict(overrides)
    for ladder in _LADDERS:
        if ladder in kept:
            kept.pop("request_rate", None)
            kept[ladder] = type(kept[ladder])(dict.fromkeys(kept[ladder]))
    fmt = (split_name(name) or ("", None))[0]
    if fmt and fmt != "trace":  # "trace:" is told from the file: kept, for check_overrides
        idle = (set() if fmt in TIMED_FORMATS else CLOCK_FIELDS) | (
            set() if fmt == "mooncake" else {"block_tokens"}
        )
        kept = {k: v for k, v in kept.items() if k not in idle}
    return kept


# What each ladder sets at each of its points.
_LADDERS = {
    "concurrency_ladder": "each point is a closed loop of that many streams",
    "rate_ladder": "each point sends Poisson arrivals at its own rate",
}


# Workload fields that only one kind of workload reads: a preset's drawn shapes (a trace's
# rows set their own lengths and sessions) and a trace's replay options.
SHAPE_FIELDS = frozenset(
    {"prompt_tokens", "output_tokens", "length_jitter", "turns", "think_time_s"}
)
REPLAY_FIELDS = frozenset({"speed", "start_s", "end_s", "max_requests", "arrival", "block_tokens"})
# Replay options of a trace's own clock: a trace without times (all its rows at 0) reads none.
CLOCK_FIELDS = frozenset({"speed", "start_s", "end_s"})


def _jittered(mean: int, jitter: float, u: float) -> int:
    """``mean`` scaled by ``1 + jitter * u`` (u in [-1, 1]), at least 1 and never above the
    ``int(mean * (1 + jitter))`` bound that :attr:`Workload.max_request_tokens` promises."""
    upper = max(1, int(mean * (1.0 + jitter)))
    return min(upper, max(1, round(mean * (1.0 + jitter * u))))


def _poisson_arrivals(
    rng: np.random.Generator, rate: float | None, count: int
) -> list[float | None]:
    """``count`` arrival times of a Poisson process of ``rate`` per second; all None (a closed
    loop) without a rate. As `vllm bench serve` sends them: the first request waits its own
    exponential gap too (a window opens with that gap idle), and the gaps are scaled so that
    the last request is sent at ``count / rate``. A window then offers the rate it is labelled
    with, whatever its seed (unscaled, 64 requests drawn with seed 1 offered 13 % more, at
    every rung of a ladder alike), and the same rate as vLLM's window of as many requests
    (sending the first at 0 and the last at ``(count - 1) / rate`` offered 3 % more at 32)."""
    if rate is None or not count:
        return [None] * count
    arrivals = np.cumsum(rng.exponential(1.0 / rate, count))
    if arrivals[-1] > 0:
        arrivals *= count / rate / arrivals[-1]
    return [float(t) for t in arrivals]


_PER_PHASE = ("session:", "hash:")  # a trace's streams a phase (and a replay's cycle) owns


def _trace_request(
    r: TraceRequest, shared: int, arrival: float | None, phase: str
) -> PlannedRequest:
    """One trace row as a request of ``phase``: a session's history and Mooncake's hash
    blocks become streams of this phase alone, so that a warm-up or an earlier window never
    leaves them in the server's cache for the next (a replay's first turn, its first sight of
    a block, is a miss, as in the trace); a prefix group (``prefix:``, a system prompt) and the
    workload's own shared prefix (``""``) stay warm across phases, as they would be in
    steady serving."""
    segments = tuple(
        (f"{k}@{phase}" if k.startswith(_PER_PHASE) else k, n) for k, n in r.segments
    ) or ((("", min(shared, r.prompt_tokens - 1)),) if shared else ())
    return PlannedRequest(
        prompt_tokens=r.prompt_tokens,
        output_tokens=r.output_tokens,
        shared_prefix_tokens=sum(n for _, n in segments),
        arrival_s=arrival,
        segments=segments,
    )


def _own_blocks(rows: tuple[TraceRequest, ...]) -> frozenset[str]:
    """The hash blocks (Mooncake's) that one row of the trace alone names."""
    naming = Counter(k for r in rows for k in {k for k, _ in r.segments if k.startswith("hash:")})
    return frozenset(k for k, n in naming.items() if n == 1)


def _drawn(r: TraceRequest, draw: int, own: frozenset[str]) -> TraceRequest:
    """Row ``r`` as the ``draw``-th row drawn at random (with replacement): a fresh prompt of
    its length. Its session's stream and the hash blocks no other row names (``own``) become
    streams of this draw alone; kept, a row drawn twice, or a later turn drawn after an
    earlier one, repeated a whole earlier prompt (about 240 of 400 Poisson draws of 100
    sessions of 4 turns were entire prefix-cache hits). A drawn row is no turn of a
    conversation. Prefix groups and the hash blocks several rows name stay shared: that is the
    trace's own prefix sharing, which a draw replays."""
    segments = tuple(
        (f"{k}#{draw}" if k.startswith("session:") or k in own else k, n) for k, n in r.segments
    )
    return dataclasses.replace(r, segments=segments)


# What one window may replay of a trace's own clock: a longer one is a trace in the wrong time
# unit (milliseconds read as seconds), or a window no one means to wait for.
MAX_WINDOW_S = 24 * 3600.0
# Requests one window (one load point) may send: a million is hours of load on any server.
MAX_POINT_REQUESTS = 1_000_000


def check_replay(workload: Workload, count: int) -> None:
    """UsageError when a window of ``count`` requests replaying ``workload``'s trace at its own
    times (in order, from the top again past its last row, one mean gap after it) would take
    more than :data:`MAX_WINDOW_S` of the trace's clock."""
    ordered = workload.trace or ()
    if not ordered:
        return
    end = _replay_at(ordered, max(count - 1, 0))
    if end > MAX_WINDOW_S:
        raise UsageError(
            f"workload {workload.name!r}: a window of {count} requests would replay "
            f"{_hours(end)} hours of the trace (more than {MAX_WINDOW_S / 3600:.0f})",
            hint="check the trace's time unit; or replay a part (start_s, end_s, "
            "max_requests, or fewer requests a window) or faster (speed): [workload] in a "
            "spec, --workload-set with tuner load",
        )


def _replay_at(ordered: Sequence[TraceRequest], i: int) -> float:
    """When the ``i``-th request of a replay arrives on the trace's clock (0 at its first row):
    the rows in order, from the top again past the last, a cycle one mean gap after the last
    row of the one before."""
    first = ordered[0].arrival_s
    span = ordered[-1].arrival_s - first
    gap = span / (len(ordered) - 1) if len(ordered) > 1 else 0.0
    cycle, row = divmod(i, len(ordered))
    # a first cycle has no offset, even where span + gap overflows (0 x inf: nan)
    return ordered[row].arrival_s - first + (cycle * (span + gap) if cycle else 0.0)


def _plan_trace(
    workload: Workload, count: int, seed: int, phase: str, timed: bool = True
) -> list[PlannedRequest]:
    """A trace's requests. ``arrival = "trace"`` replays the rows in order with their own
    times, cycling when ``count`` exceeds them (a cycle starts one mean gap after the last);
    a session's turns keep their order and a turn waits for the previous one. ``poisson`` and
    ``closed`` draw rows (their lengths and prefixes, not their sessions) at random: see
    :func:`_drawn`."""
    ordered = workload.trace or ()
    shared = workload.shared_prefix_tokens
    if workload.arrival != "trace":
        rng = np.random.default_rng([workload.seed, seed, 3])
        rows = [ordered[int(i)] for i in rng.integers(0, len(ordered), count)]
        # Poisson at request_rate (the trace's mean rate unless given: apply_replay's)
        rate = workload.request_rate if workload.arrival == "poisson" else None
        arrivals = _poisson_arrivals(rng, rate, count)
        own = _own_blocks(ordered)
        return [
            _trace_request(_drawn(r, i, own), shared, a, phase)
            for i, (r, a) in enumerate(zip(rows, arrivals, strict=True))
        ]
    if timed:  # a warm-up sends its rows at once: no clock to wait for
        check_replay(workload, count)
    plan = []
    turns: dict[str, int] = {}
    for i in range(count):
        cycle, row = divmod(i, len(ordered))
        r = ordered[row]
        p = _trace_request(r, shared, _replay_at(ordered, i), phase)
        if cycle:  # a new copy of the trace: its conversations and hash blocks are new streams
            segments = tuple((f"{k}#{cycle}" if k.startswith(_PER_PHASE) else k, n)
                             for k, n in p.segments)  # fmt: skip
            p = dataclasses.replace(p, segments=segments)
        if r.session is not None:
            session = f"{r.session}#{cycle}" if cycle else r.session
            turn = turns[session] = turns.get(session, 0) + 1
            p = dataclasses.replace(p, session=session, turn=turn)
        plan.append(p)
    return plan


def _plan_turns(workload: Workload, count: int, seed: int, phase: str) -> list[PlannedRequest]:
    """Conversations of ``workload.turns`` turns, ``count`` requests in all (the last
    conversation cut short). Turn ``k`` carries turn ``k-1``'s prompt and answer, then new
    tokens; the carried part is the first tokens of the conversation's own stream."""
    rng = np.random.default_rng([workload.seed, seed, 4])
    shared = workload.shared_prefix_tokens
    own_mean = workload.prompt_tokens - shared
    jitter = workload.length_jitter
    plan: list[PlannedRequest] = []
    conversation = 0
    while len(plan) < count:
        session = f"{phase}c{conversation}"
        carried = 0
        for turn in range(1, workload.turns + 1):
            if len(plan) == count:
                break
            new = _jittered(own_mean, jitter, float(rng.uniform(-1.0, 1.0)))
            output = _jittered(workload.output_tokens, jitter, float(rng.uniform(-1.0, 1.0)))
            think = float(rng.exponential(workload.think_time_s)) if turn > 1 else 0.0
            segments: Segments = (("", shared),) if shared else ()
            segments += ((f"conversation:{session}", carried + new),)
            plan.append(
                PlannedRequest(
                    prompt_tokens=shared + carried + new,
                    output_tokens=output,
                    shared_prefix_tokens=shared,
                    arrival_s=None,
                    segments=segments,
                    session=session,
                    turn=turn,
                    think_s=think,
                )
            )
            # The answer joins the conversation: the next turn's prompt repeats it (as tokens
            # of the conversation's stream; the server's own answer text is not re-sent).
            carried += new + output
        conversation += 1
    return plan


def plan_requests(
    workload: Workload, count: int, seed: int, phase: str | None = None, *, timed: bool = True
) -> list[PlannedRequest]:
    """The ``count`` requests of one phase (warm-up or a window), deterministic in
    ``(workload.seed, seed)``. ``phase`` (default ``w{seed}``) names the streams of the phase's
    conversations and trace sessions: a phase of its own name finds none of another's in the
    server's prefix cache (a load curve's points reuse the windows' seeds, not their names).

    Lengths are uniform within +-``length_jitter`` of the means (at least one token); the
    jitter applies to the part of the prompt after the shared prefix, so the prompt mean stays
    ``workload.prompt_tokens``. With ``request_rate`` set, arrivals are a Poisson process
    timed as `vllm bench serve` times its own (:func:`_poisson_arrivals`). A trace replays its
    rows in order, cycling when ``count`` exceeds it.
    ``timed=False`` (a warm-up, whose arrival times are dropped) skips the check that a window
    replays at most :data:`MAX_WINDOW_S` of a trace's clock.
    """
    if count < 0 or seed < 0:
        raise ValueError(f"count and seed must be >= 0, got count={count}, seed={seed}")
    check_shapes(workload)
    if workload.trace:
        return _plan_trace(workload, count, seed, phase or f"w{seed}", timed)

    if workload.turns > 1:
        return _plan_turns(workload, count, seed, phase or f"w{seed}")

    rng = np.random.default_rng([workload.seed, seed])
    jitter, shared = workload.length_jitter, workload.shared_prefix_tokens
    u_prompt = rng.uniform(-1.0, 1.0, count)
    u_output = rng.uniform(-1.0, 1.0, count)
    arrivals = _poisson_arrivals(rng, workload.request_rate, count)
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
