"""The fingerprint of a workload: what one window of it asks of a server, before any is run.

It is computed from the planned requests of the first measured window (the same plan every
trial sends), so it is a pure function of the workload: request count, prompt and output
length percentiles, arrival burstiness, prefix reuse and the concurrency profile. ``tuner run``
prints it before a study starts and stores it with the study's spec.

Prefix reuse is the share of prompt tokens that repeat the start of an earlier prompt of the
window: what an unbounded prefix cache could skip (tokens at block granularity in a real
server, so its hit rate is a little lower). Burstiness is the coefficient of variation of the
inter-arrival times: 0 for a constant rate, 1 for Poisson arrivals, above 1 for bursts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tuner.domain import Workload
from tuner.load.stats import latency_stats
from tuner.load.workloads import PlannedRequest, plan_requests


@dataclass(frozen=True)
class Fingerprint:
    workload: str
    source: str
    requests: int
    sessions: int  # conversations among them (0: independent requests)
    prompt_tokens: dict[str, float]  # mean, p50, p90, p99, max
    output_tokens: dict[str, float]
    prompt_tokens_total: int
    output_tokens_total: int
    prefix_reuse: float  # share of prompt tokens repeating an earlier prompt's start
    arrival: str  # "closed loop", "poisson", "trace"
    concurrency: int  # streams of a closed loop; the cap on requests in flight otherwise
    mean_rate: float | None  # requests per second (timed arrivals only)
    peak_rate: float | None  # most requests arriving within one second
    burstiness: float | None  # coefficient of variation of inter-arrival times
    duration_s: float | None  # first to last arrival

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The fingerprint as a few lines of text, for the terminal."""

        def lengths(d: dict[str, float]) -> str:
            return (
                f"mean {d['mean']:.0f}, p50 {d['p50']:.0f}, p90 {d['p90']:.0f}, "
                f"p99 {d['p99']:.0f}, max {d['max']:.0f}"
            )

        head = f"workload {self.workload}: {self.requests} requests a window"
        if self.sessions:
            head += f" in {self.sessions} conversations"
        out = [head]
        if self.source:
            out.append(f"  source: {self.source}")
        out.append(f"  prompt tokens: {lengths(self.prompt_tokens)}")
        out.append(f"  output tokens: {lengths(self.output_tokens)}")
        out.append(f"  prefix reuse: {self.prefix_reuse:.0%} of prompt tokens")
        if self.mean_rate is None:
            out.append(f"  arrivals: closed loop at {self.concurrency} streams")
        else:
            out.append(
                f"  arrivals: {self.arrival}, {self.mean_rate:.2f} req/s over "
                f"{self.duration_s:.1f} s, peak {self.peak_rate:.0f} in 1 s, burstiness (CV of "
                f"gaps) {self.burstiness:.2f}; at most {self.concurrency} in flight"
            )
        return out


def _lengths(values: Sequence[int]) -> dict[str, float]:
    s = latency_stats(values)
    return {"mean": s.mean, "p50": s.p50, "p90": s.p90, "p99": s.p99, "max": s.max}


def prefix_reuse(plan: Sequence[PlannedRequest]) -> float:
    """The share of the plan's prompt tokens that repeat the start of an earlier prompt.

    Prompts are compared by their segments (:data:`tuner.domain.workload.Segments`): two
    prompts agree while their segments agree, and within the first differing segment for as
    many tokens as both take of the same stream; a request's own tokens never repeat."""
    longest: dict[tuple[Any, str], int] = {}  # (segments before, stream) -> most tokens seen
    reused = total = 0
    for p in plan:
        total += p.prompt_tokens
        segments = p.prefix_segments()
        matching = True
        for m, (stream, n) in enumerate(segments):
            key = (segments[:m], stream)
            if matching:
                seen = longest.get(key, 0)
                reused += min(seen, n)
                matching = seen >= n
            longest[key] = max(longest.get(key, 0), n)
    return reused / total if total else 0.0


def fingerprint(workload: Workload) -> Fingerprint:
    """The fingerprint of one measured window of ``workload`` (its first load point)."""
    point = workload.load_points()[0]
    plan = plan_requests(point, point.requests_per_window, seed=1)
    prompts = [p.prompt_tokens for p in plan]
    outputs = [p.output_tokens for p in plan]
    times = sorted(p.arrival_s for p in plan if p.arrival_s is not None)
    # Arrival statistics need times that are spread (all at 0 is a burst of one instant).
    timed = len(times) == len(plan) and len(plan) > 1 and times[-1] > times[0]
    mean_rate = peak = cv = duration = None
    if timed:
        duration = times[-1] - times[0]
        gaps = np.diff(times)
        cv = float(gaps.std() / gaps.mean())
        mean_rate = (len(times) - 1) / duration
        starts = np.asarray(times)
        ends = np.searchsorted(starts, starts + 1.0, side="left")
        peak = float((ends - np.arange(len(starts))).max())
    if point.trace is not None:
        arrival = point.arrival if timed else "closed loop"
    else:
        arrival = "poisson" if point.request_rate is not None else "closed loop"
    return Fingerprint(
        workload=workload.name,
        source=workload.source,
        requests=len(plan),
        sessions=len({p.session for p in plan if p.session is not None}),
        prompt_tokens=_lengths(prompts),
        output_tokens=_lengths(outputs),
        prompt_tokens_total=sum(prompts),
        output_tokens_total=sum(outputs),
        prefix_reuse=prefix_reuse(plan),
        arrival=arrival,
        concurrency=point.concurrency,
        mean_rate=mean_rate,
        peak_rate=peak,
        burstiness=cv,
        duration_s=duration,
    )
