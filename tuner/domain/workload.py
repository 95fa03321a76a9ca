"""What the server is asked to do: workloads (synthetic or traced) and their SLO."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# How a prompt is built: segments (stream, tokens), in order, then the request's own tokens.
# A segment is the first ``tokens`` tokens of the named stream, so two prompts whose segments
# agree share that prefix token for token (a system prompt, a conversation's earlier turns,
# Mooncake's hash blocks). The stream "" is the workload's shared system prompt.
Segments = tuple[tuple[str, int], ...]

# Arrival processes a trace can be replayed with: its own timestamps, Poisson arrivals at
# ``request_rate`` (or the trace's mean rate), or a closed loop at ``concurrency`` streams.
ARRIVALS = ("trace", "poisson", "closed")


@dataclass(frozen=True)
class TraceRequest:
    prompt_tokens: int
    output_tokens: int
    arrival_s: float  # offset from the start of the replay
    session: str | None = None  # turns of one session are sent in order, one at a time
    segments: Segments = ()  # shared prompt prefixes (see Segments)


# A random seed (a workload's draws, the samplers'): numpy's limit.
SEED_MAX = 2**32 - 1


@dataclass(frozen=True)
class Workload:
    """A load shape. Token counts are means; lengths vary by ``length_jitter`` around them.

    ``request_rate`` None means closed-loop at ``concurrency`` streams; a number means Poisson
    arrivals at that many requests per second (``concurrency`` then caps requests in flight).
    """

    name: str
    prompt_tokens: int
    output_tokens: int
    shared_prefix_tokens: int = 0  # e.g. a system prompt shared by every request
    concurrency: int = 8
    request_rate: float | None = None
    requests_per_window: int = 64
    windows: int = 3
    warmup_requests: int = 16
    length_jitter: float = 0.25
    seed: int = 0
    trace: tuple[TraceRequest, ...] | None = None
    # A load curve: the same server measured at several concurrency levels (closed loop) or
    # Poisson request rates, lowest first; empty means the one load point above.
    concurrency_ladder: tuple[int, ...] = ()
    rate_ladder: tuple[float, ...] = ()
    # Multi-turn conversations (turns > 1): each turn's prompt carries the earlier turns and
    # their answers, then ``prompt_tokens - shared_prefix_tokens`` new tokens (the mean);
    # exponential think time of mean ``think_time_s`` between a turn's answer and the next.
    turns: int = 1
    think_time_s: float = 0.0
    # Replay options of a trace, applied when it is read (tuner.load.traces): time scaling
    # (2 replays twice as fast), the window [start_s, end_s) of the trace's own time, a cap on
    # its requests, the arrival process (ARRIVALS) and Mooncake's hash-block size.
    speed: float = 1.0
    start_s: float = 0.0
    end_s: float | None = None
    max_requests: int | None = None
    arrival: str = "trace"
    block_tokens: int = 512
    # Where the shapes came from and how their token counts were found (a trace's file,
    # format, tokenizer or approximation): provenance for the fingerprint.
    source: str = ""

    def replace(self, **changes: Any) -> Workload:
        return dataclasses.replace(self, **changes)

    def load_points(self) -> tuple[Workload, ...]:
        """This workload at each point of its ladder, lowest load first; itself when there
        is no ladder. A rate ladder keeps ``concurrency`` as the cap on requests in flight.

        A closed-loop window sends at least four requests per stream: with fewer, most of it
        would be ramp-up and drain, and the point would never hold its concurrency."""
        if self.concurrency_ladder:
            return tuple(
                self.replace(
                    concurrency=c,
                    request_rate=None,
                    requests_per_window=max(self.requests_per_window, 4 * c),
                    concurrency_ladder=(),
                    rate_ladder=(),
                )
                for c in sorted(set(self.concurrency_ladder))
            )
        if self.rate_ladder:
            return tuple(
                self.replace(request_rate=r, concurrency_ladder=(), rate_ladder=())
                for r in sorted(set(self.rate_ladder))
            )
        return (self,)

    @property
    def trace_paced(self) -> bool:
        """Whether a trace's own arrival times set the load (``concurrency`` then only caps
        the requests in flight); False for a closed loop and for Poisson arrivals."""
        return (
            self.trace is not None
            and self.arrival == "trace"
            and any(r.arrival_s > 0 for r in self.trace)
        )

    @property
    def open_loop(self) -> bool:
        """Whether requests are sent at timed arrivals (Poisson at ``request_rate``, a trace's
        own times, or Poisson at its mean rate) rather than kept busy by a closed loop: a
        server that keeps up then serves the rate it is sent, not its capacity."""
        if self.trace is not None and self.arrival != "trace":
            return self.arrival == "poisson"
        return self.trace_paced or self.request_rate is not None

    @property
    def max_request_tokens(self) -> int:
        """Longest prompt+output a request of this workload can need."""
        if self.trace:
            return max(r.prompt_tokens + r.output_tokens for r in self.trace)
        grow = 1.0 + self.length_jitter
        turn = int(self.prompt_tokens * grow) + int(self.output_tokens * grow) + 1
        if self.turns <= 1:
            return turn
        # The last turn carries every earlier turn's new text and answer.
        own = int((self.prompt_tokens - self.shared_prefix_tokens) * grow)
        return self.shared_prefix_tokens + self.turns * (own + int(self.output_tokens * grow)) + 1


@dataclass(frozen=True)
class Slo:
    """Service-level objectives, in milliseconds; None means unconstrained."""

    ttft_p99_ms: float | None = None
    itl_p99_ms: float | None = None
    e2e_p99_ms: float | None = None

    def is_empty(self) -> bool:
        return self == Slo()


SLO_METRICS = tuple(f.name for f in dataclasses.fields(Slo))  # each field names its metric


def parse_slo(text: str) -> Slo:
    """Parse ``ttft_p99=500ms,itl_p99=50ms,e2e_p99=10s`` into an :class:`Slo`.

    Units: ``ms`` or ``s``; a bare number is milliseconds. ``""`` and ``"none"`` (what
    :func:`format_slo` writes for no SLO) give an empty Slo. Raises ValueError with what is allowed.
    """
    allowed = {metric.removesuffix("_ms"): metric for metric in SLO_METRICS}
    values: dict[str, float] = {}
    if text.strip().lower() == "none":
        return Slo()
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = part.partition("=")
        key = key.strip().removesuffix("_ms")
        if not sep or key not in allowed:
            raise ValueError(
                f"bad SLO item {part!r}: expected NAME=VALUE with NAME in {sorted(allowed)}, "
                "e.g. ttft_p99=500ms,e2e_p99=10s"
            )
        if allowed[key] in values:
            raise ValueError(f"SLO {key} is given twice in {text!r}: give each name once")
        values[allowed[key]] = _parse_duration_ms(raw.strip(), part)
    if not values and text.strip():
        raise ValueError(
            f"SLO {text!r} names no objective: give NAME=VALUE items, e.g. ttft_p99=500ms, "
            "or 'none' for no SLO"
        )
    return Slo(**values)


def _parse_duration_ms(raw: str, part: str) -> float:
    scale = 1.0
    if raw.endswith("ms"):
        raw = raw[:-2]
    elif raw.endswith("s"):
        raw, scale = raw[:-1], 1000.0
    try:
        value = float(raw) * scale
    except ValueError:
        raise ValueError(
            f"bad SLO value in {part!r}: use a number with ms or s, e.g. 500ms"
        ) from None
    if not value > 0 or math.isinf(value):
        raise ValueError(f"bad SLO value in {part!r}: must be a positive duration")
    return value


def format_slo(slo: Slo) -> str:
    items = [(metric.removesuffix("_ms"), getattr(slo, metric)) for metric in SLO_METRICS]
    return ",".join(f"{n}={v:g}ms" for n, v in items if v is not None) or "none"


def overridden_name(name: str, overrides: Mapping[str, Any]) -> str:
    """``chat[requests_per_window=24]``: a workload's name with the fields set on it, in the
    fields' order whatever order they were given in (the name keys noise profiles and launch
    logs: one workload, one name)."""
    if not overrides:
        return name
    return f"{name}[{','.join(f'{k}={v}' for k, v in sorted(overrides.items()))}]"
