"""One measured window as ``vllm bench serve --save-result`` writes it: the same keys, the same
definitions (vLLM 0.32's ``calculate_metrics`` and ``benchmark``), so its files and tuner's can be
read by the same scripts.

Per request, as vLLM counts them:

- a failed request counts in ``failed``, with output length 0, TTFT and latency 0.0 and no
  ITL gaps in the per-request arrays (vLLM's ``RequestFuncOutput`` defaults), and its message
  in ``errors`` (``""`` for a request that succeeded);
- TTFT and E2EL are taken per successful request; TPOT is ``(E2EL - TTFT) / (output - 1)``
  per successful request with more than one output token; ITL is pooled over every chunk gap
  of every successful request;
- ``mean``/``median``/``std``/``pNN`` are ``np.mean``, ``np.median``, ``np.std`` (population)
  and ``np.percentile`` (linear), in milliseconds;
- ``request_goodput`` counts the successful requests whose TTFT, TPOT (0 for one output
  token) and E2EL are each within the given bound (milliseconds; a bound not given is not
  checked), per second; None without bounds.

Where they differ: vLLM writes 0 for a statistic with no samples (``np.mean(x or 0)``), which
reads like a measurement; here it is ``null``, and so is any other non-finite float, so that
``json.dumps(..., allow_nan=False)`` always works. ``start_times`` are seconds from the window's
start (vLLM writes ``perf_counter`` values, whose origin means nothing outside the process).
vLLM's ``generated_texts`` and ``queue_times`` are left out: tuner keeps no text, and its
``start_time`` is taken once the request holds its concurrency slot, so the client queue is not
measured; a request that streamed no token before ``[DONE]`` is a failed one, as vLLM fails it
(:func:`tuner.load.stream.stream_completion`). Tuner's own additions are under ``tuner_*`` keys
only.

Pure functions; no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from tuner import __version__
from tuner.domain import ClientHealth, RequestRecord, Slo, WindowEnergy, jsonable, to_jsonable

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
LATENCY_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
GOODPUT_KEYS: tuple[str, ...] = ("ttft", "tpot", "e2el")
BACKEND = "openai"  # vLLM's name for the /v1/completions endpoint tuner drives
# The per-request arrays (one entry per request); ``vllm bench serve`` without
# --save-detailed drops all but "latencies", a summary line drops them all.
PER_REQUEST_FIELDS: tuple[str, ...] = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "errors",
)


def percentile_key(p: float, metric: str) -> str:
    """vLLM's key for one percentile: ``p99_ttft_ms``, ``p99.9_itl_ms``."""
    word = str(int(p)) if int(p) == p else str(p)
    return f"p{word}_{metric}_ms"


def goodput_bounds(slo: Slo | None) -> dict[str, float]:
    """tuner's SLO as vLLM's ``--goodput`` bounds (ms): TTFT to ``ttft``, the ITL bound to
    ``tpot`` (a request's mean gap, as tuner's own goodput applies it), E2E to ``e2el``."""
    if slo is None:
        return {}
    pairs = (("ttft", slo.ttft_p99_ms), ("tpot", slo.itl_p99_ms), ("e2el", slo.e2e_p99_ms))
    return {key: value for key, value in pairs if value is not None}


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float (also inside lists and dicts) as None."""
    return jsonable.finite(value)[0]


def _tpot_s(record: RequestRecord) -> float:
    """vLLM's per-request TPOT in seconds, 0.0 for one output token (as goodput takes it)."""
    if record.output_tokens > 1:
        return ((record.e2e_s or 0.0) - (record.ttft_s or 0.0)) / (record.output_tokens - 1)
    return 0.0


def metric_stats(
    metric: str, values_s: Sequence[float], percentiles: Sequence[float]
) -> dict[str, Any]:
    """``mean_/median_/std_/pNN_{metric}_ms`` of ``values_s`` (seconds); None when empty."""
    keys = [f"{stat}_{metric}_ms" for stat in ("mean", "median", "std")]
    keys += [percentile_key(p, metric) for p in percentiles]
    if len(values_s) == 0:
        return dict.fromkeys(keys)
    a = np.asarray(values_s, dtype=float) * 1000.0
    numbers = [float(np.mean(a)), float(np.median(a)), float(np.std(a))]
    numbers += [float(v) for v in np.percentile(a, list(percentiles))]
    return dict(zip(keys, numbers, strict=True))


def _peaks(ok: Sequence[RequestRecord]) -> tuple[float, int]:
    """vLLM's ``max_output_tokens_per_s`` and ``max_concurrent_requests``: tokens (first
    token, then one per ITL gap) and running requests in one-second buckets from the first
    successful start."""
    timed = [r for r in ok if r.e2e_s is not None]
    if not timed:
        return 0.0, 0
    first = min(r.start_s for r in timed)
    last = max(r.start_s + (r.e2e_s or 0.0) for r in timed)
    seconds = int(np.ceil(last - first)) + 1
    tokens = np.zeros(seconds)
    running = np.zeros(seconds)
    for r in timed:
        for when in itertools.accumulate(r.itl_s, initial=r.start_s + (r.ttft_s or 0.0)):
            bucket = int(when - first)
            if 0 <= bucket < seconds:
                tokens[bucket] += 1
        begin = int(r.start_s - first)
        end = int(r.start_s + (r.e2e_s or 0.0) - first)
        running[begin : end + 1] += 1
    return float(tokens.max()), int(running.max())


def benchmark_metrics(
    records: Sequence[RequestRecord],
    duration_s: float,
    *,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    goodput: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The metrics part of vLLM's result (the module docstring has the definitions), with its
    per-request arrays, in vLLM's key order. ``goodput``: bounds in ms keyed ``ttft``,
    ``tpot``, ``e2el``."""
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    bounds = dict(goodput or {})
    unknown = sorted(set(bounds) - set(GOODPUT_KEYS))
    if unknown:
        raise ValueError(f"unknown goodput metric(s) {unknown}; allowed: {list(GOODPUT_KEYS)}")
    ok = [r for r in records if r.ok]
    lens = [r.output_tokens if r.ok else 0 for r in records]
    total_input = sum(r.prompt_tokens for r in ok)
    total_output = sum(lens)
    good = 0
    for r in ok:
        values = {"ttft": r.ttft_s or 0.0, "tpot": _tpot_s(r), "e2el": r.e2e_s or 0.0}
        if all(values[k] <= bound / 1000.0 for k, bound in bounds.items()):
            good += 1
    max_tokens_per_s, max_running = _peaks(ok)
    result: dict[str, Any] = {
        "duration": duration_s,
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(ok) / duration_s,
        "request_goodput": good / duration_s if bounds else None,
        "output_throughput": total_output / duration_s,
        "total_token_throughput": (total_input + total_output) / duration_s,
        "input_lens": [r.prompt_tokens for r in records],
        "output_lens": lens,
        "ttfts": [(r.ttft_s or 0.0) if r.ok else 0.0 for r in records],
        "itls": [list(r.itl_s) if r.ok else [] for r in records],
        "latencies": [(r.e2e_s or 0.0) if r.ok else 0.0 for r in records],
        "start_times": [r.start_s for r in records],
        "errors": ["" if r.ok else (r.error or "failed") for r in records],
        "max_output_tokens_per_s": max_tokens_per_s,
        "max_concurrent_requests": max_running,
        "rtfx": 0.0,  # audio seconds per second: no audio here
    }
    samples: dict[str, list[float]] = {
        "ttft": [r.ttft_s for r in ok if r.ttft_s is not None],
        "tpot": [_tpot_s(r) for r in ok if r.output_tokens > 1],
        "itl": [gap for r in ok for gap in r.itl_s],
        "e2el": [r.e2e_s for r in ok if r.e2e_s is not None],
    }
    for metric in LATENCY_METRICS:
        result.update(metric_stats(metric, samples[metric], percentiles))
    return result


def bench_result(
    records: Sequence[RequestRecord],
    duration_s: float,
    *,
    model: str,
    concurrency: int | None,
    request_rate: float | None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    goodput: Mapping[str, float] | None = None,
    client: ClientHealth | None = None,
    energy: WindowEnergy | None = None,
    date: datetime | None = None,
    tuner_version: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One load point's window as a ``vllm bench serve --save-result`` JSON object.

    ``concurrency`` is the cap on requests in flight (vLLM's ``max_concurrency``: the streams
    of a closed-loop point), ``request_rate`` the Poisson rate or None for a closed loop
    (written ``"inf"``, as vLLM does). ``extra`` adds keys that must start with ``tuner_``.
    ``energy`` is the measured GPU's over the window: ``tuner_energy`` holds it (joules, seconds,
    watts, joules_per_output_token, method, note) and ``tuner_joules_per_output_token`` /
    ``tuner_gpu_watts`` repeat its two headline numbers; none of the three is there when it
    was not measured (a CPU server, or ``tuner load`` against a URL, whose GPU tuner does not
    know).
    All floats are finite or None.
    """
    when = date or datetime.now()
    result: dict[str, Any] = {
        "date": when.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": BACKEND,
        "backend": BACKEND,
        "label": None,
        "model_id": model,
        "tokenizer_id": None,  # tuner counts tokens from the server's usage, not a tokenizer
        "num_prompts": len(records),
        "request_rate": "inf" if request_rate is None else request_rate,
        "burstiness": 1.0,
        "max_concurrency": concurrency,
    }
    result.update(benchmark_metrics(records, duration_s, percentiles=percentiles, goodput=goodput))
    result["tuner_version"] = __version__ if tuner_version is None else tuner_version
    result["tuner_goodput"] = dict(goodput) if goodput else None
    result["tuner_client"] = None if client is None else to_jsonable(client)
    if energy is not None:
        result["tuner_energy"] = to_jsonable(energy)
        result["tuner_joules_per_output_token"] = energy.joules_per_output_token
        result["tuner_gpu_watts"] = energy.watts
    for key, value in (extra or {}).items():
        if not key.startswith("tuner_"):
            raise ValueError(f"extra key {key!r}: tuner's own keys start with 'tuner_'")
        result[key] = value
    return finite(result)  # type: ignore[no-any-return]


def summary(result: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k not in PER_REQUEST_FIELDS}


def result_filename(result: Mapping[str, Any]) -> str:
    """The file name ``vllm bench serve --save-result`` gives ``result``:
    ``openai-{rate}qps-concurrency{N}-{model}-{date}.json``, ``rate`` ``inf`` for a closed
    loop (vLLM writes the float, e.g. ``4.0qps``)."""
    rate = result["request_rate"]
    rate_word = rate if isinstance(rate, str) else str(float(rate))
    cap = result.get("max_concurrency")
    cap_word = f"-concurrency{cap}" if cap is not None else ""
    model = str(result["model_id"]).rstrip("/").split("/")[-1] or "model"
    model = "".join(c if c.isalnum() or c in "._-" else "_" for c in model)
    return f"{BACKEND}-{rate_word}qps{cap_word}-{model}-{result['date']}.json"
