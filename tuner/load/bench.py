"""``tuner load``: measure any running OpenAI-compatible server as ``vllm bench serve`` does,
with tuner's own load generator, and report every load point in vLLM's result format
(:mod:`tuner.load.benchjson`).

One run is one :class:`tuner.domain.Workload` with a concurrency (or request-rate) ladder and
one window per point, so one warm-up serves the whole ladder. Before any load the server is
asked for ``/v1/models``: an address that does not answer and a model it does not serve are
reported at once, with what to do, instead of as a run of failed requests.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tuner.domain import FailureClass, Slo, WindowMetrics, Workload
from tuner.errors import LoadFailure, TunerError, UsageError
from tuner.load.benchjson import DEFAULT_PERCENTILES, bench_result, goodput_bounds, result_filename
from tuner.load.curve import point_label
from tuner.load.generator import LoadGenerator, PhaseCallback, api_root
from tuner.load.prompts import PromptFactory

DEFAULT_CONCURRENCY = 16
DEFAULT_MAX_CONCURRENCY = 256  # the cap on requests in flight of a request-rate point
MIN_CLOSED_REQUESTS = 32  # a closed-loop point sends max(this, 4 x concurrency) by default
MIN_RATE_REQUESTS = 64
RATE_WINDOW_S = 10.0  # default requests of a rate ladder: ~10 s of arrivals at its top rate
PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class LoadOptions:
    """What ``tuner load`` was asked for, checked (see :func:`options`)."""

    url: str  # the server root, http://host:port
    model: str | None  # None: the first model the server lists
    concurrency: tuple[int, ...] = (DEFAULT_CONCURRENCY,)
    request_rates: tuple[float, ...] = ()  # non-empty: Poisson arrivals, capped in flight
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    prompt_tokens: int = 512
    output_tokens: int = 256
    requests: int | None = None  # per load point; None: the defaults above
    warmup: int = 32
    vocab_size: int = 1024
    text_prompts: bool = False
    timeout_s: float = 600.0
    stall_s: float | None = 60.0  # no byte from the server for this long fails a request
    slo: Slo | None = None
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES

    @property
    def closed_loop(self) -> bool:
        return not self.request_rates


@dataclass(frozen=True)
class PointResult:
    """One measured load point: tuner's window and the vLLM-shaped result (full arrays)."""

    label: str
    window: WindowMetrics
    result: dict[str, Any]


def parse_list(text: str, option: str, kind: type[int] | type[float]) -> tuple[Any, ...]:
    """``"16,64,256"`` as positive numbers of ``kind``, in the order given."""
    values: list[Any] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            value = kind(part)
        except ValueError:
            what = "whole numbers" if kind is int else "numbers"
            raise UsageError(
                f"{option} {text!r}: {part!r} is not a number",
                hint=f"give {what} separated by commas, e.g. {option} "
                + ("16,64,256" if kind is int else "2,4,8"),
            ) from None
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"{option} {text!r}: every value must be > 0, got {part!r}")
        values.append(value)
    return tuple(values)


def server_root(url: str) -> str:
    """``http://host:port`` from what the user typed (``host:port``, ``.../v1`` accepted)."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        parts = parts._replace(netloc="")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"{url!r} is not a server address",
            hint="give the server's base URL, e.g. http://127.0.0.1:8000 (a /v1 suffix is fine)",
        )
    return api_root(f"{parts.scheme}://{parts.netloc}{parts.path}")


def options(
    *,
    url: str,
    model: str | None,
    concurrency: str | None,
    request_rate: str | None,
    max_concurrency: int | None,
    prompt_tokens: int,
    output_tokens: int,
    requests: int | None,
    warmup: int,
    vocab_size: int,
    text_prompts: bool,
    timeout_s: float,
    slo: str | None,
    percentiles: str,
    stall_s: float | None = 60.0,
) -> LoadOptions:
    """The command's options checked and parsed; UsageError naming the option otherwise."""
    from tuner.domain.workload import parse_slo

    if concurrency is not None and request_rate is not None:
        raise UsageError(
            "--concurrency and --request-rate both set the load",
            hint="closed loop: --concurrency 16,64; Poisson arrivals: --request-rate 2,4,8 "
            "(with --max-concurrency as the cap on requests in flight)",
        )
    if max_concurrency is not None and request_rate is None:
        raise UsageError(
            "--max-concurrency caps a --request-rate run",
            hint="for a closed loop give the streams with --concurrency",
        )
    for name, value, low in (
        ("--prompt-tokens", prompt_tokens, 1),
        ("--output-tokens", output_tokens, 1),
        ("--warmup", warmup, 0),
        ("--vocab-size", vocab_size, 2),
        ("--max-concurrency", max_concurrency, 1),
        ("--requests", requests, 1),
    ):
        if value is not None and value < low:
            raise UsageError(f"{name} must be >= {low}, got {value}")
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise UsageError(f"--timeout must be > 0 seconds, got {timeout_s}")
    if stall_s is not None and not (math.isfinite(stall_s) and stall_s > 0):
        raise UsageError(
            f"--stall-timeout must be > 0 seconds, got {stall_s}", hint="e.g. --stall-timeout 60"
        )
    points = parse_list(percentiles, "--metric-percentiles", float)
    if any(p > 100 for p in points):
        raise UsageError(f"--metric-percentiles {percentiles!r}: percentiles are in (0, 100]")
    parsed_slo = None
    if slo is not None:
        try:
            parsed_slo = parse_slo(slo)
        except ValueError as exc:
            raise UsageError(f"--slo: {exc}") from None
    rates: tuple[float, ...] = ()
    streams: tuple[int, ...] = (DEFAULT_CONCURRENCY,)
    if request_rate is not None:
        rates = parse_list(request_rate, "--request-rate", float)
    elif concurrency is not None:
        streams = parse_list(concurrency, "--concurrency", int)
    return LoadOptions(
        url=server_root(url),
        model=model,
        concurrency=streams,
        request_rates=rates,
        max_concurrency=max_concurrency or DEFAULT_MAX_CONCURRENCY,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        requests=requests,
        warmup=warmup,
        vocab_size=vocab_size,
        text_prompts=text_prompts,
        timeout_s=timeout_s,
        stall_s=stall_s,
        slo=None if parsed_slo is None or parsed_slo.is_empty() else parsed_slo,
        percentiles=tuple(sorted(set(points))),
    )


def requests_per_point(opts: LoadOptions) -> int:
    """What a window asks for before the ladder's own floor: a closed-loop point then sends
    at least 4 x its concurrency (:meth:`tuner.domain.Workload.load_points`)."""
    if opts.requests is not None:
        return opts.requests
    if opts.closed_loop:
        return MIN_CLOSED_REQUESTS
    return max(MIN_RATE_REQUESTS, math.ceil(RATE_WINDOW_S * max(opts.request_rates)))


def workload(opts: LoadOptions) -> Workload:
    """The one workload of the run: fixed shapes, one window per load point."""
    shape = Workload(
        name="tuner-load",
        prompt_tokens=opts.prompt_tokens,
        output_tokens=opts.output_tokens,
        requests_per_window=requests_per_point(opts),
        windows=1,
        warmup_requests=opts.warmup,
        length_jitter=0.0,
    )
    if opts.closed_loop:
        return shape.replace(
            concurrency=max(opts.concurrency), concurrency_ladder=tuple(opts.concurrency)
        )
    return shape.replace(concurrency=opts.max_concurrency, rate_ladder=tuple(opts.request_rates))


def check_server(root: str, model: str | None, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """The model name to send: ``model`` once the server is known to serve it, or the first
    model it lists. Raises TunerError when the server does not answer, UsageError when it
    does not serve ``model``. A server without ``/v1/models`` is trusted with ``model``."""
    import httpx

    try:
        with httpx.Client(timeout=timeout_s, trust_env=False) as client:
            response = client.get(f"{root}/v1/models")
    except httpx.TimeoutException:
        raise TunerError(
            f"the server at {root} did not answer GET /v1/models within {timeout_s:g} s",
            hint="it may still be starting (vLLM answers once the model is loaded): wait and "
            "try again; or check that the address is the OpenAI API server's",
        ) from None
    except httpx.HTTPError as exc:
        raise TunerError(
            f"cannot reach {root}: {str(exc) or type(exc).__name__}",
            hint="start the server (e.g. `vllm serve MODEL --port 8000`), or check the address",
        ) from None
    served = _served_models(response)
    if served is None:
        if model is None:
            raise UsageError(
                f"the server at {root} did not list its models (GET /v1/models: HTTP "
                f"{response.status_code})",
                hint="name the model with --model",
            )
        return model
    if model is None:
        if not served:
            raise UsageError(f"the server at {root} lists no model", hint="name one with --model")
        return served[0]
    if model not in served:
        raise UsageError(
            f"{root} does not serve model {model!r} (it serves: {', '.join(served)})",
            hint=f"pass --model {served[0]} (vLLM's --served-model-name), or leave --model out",
        )
    return model


def _served_models(response: Any) -> list[str] | None:
    if response.status_code != 200:
        return None
    try:
        return [str(m["id"]) for m in response.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return None


def explain_failure(exc: LoadFailure, opts: LoadOptions, model: str) -> TunerError:
    """A failed run as one line with what to do."""
    text = exc.message
    if exc.failure is FailureClass.LOAD_ERRORS and "HTTP 404" in text:
        return UsageError(
            f"the server rejected the requests for model {model!r}: {text}",
            hint="check --model against the server's --served-model-name (GET /v1/models)",
        )
    if "stalled: " in text:
        hint = (
            f"the server sent nothing for --stall-timeout {opts.stall_s:g} s: check that it "
            "is not hung (its log, GET /health); a long queue before the first token needs a "
            "larger --stall-timeout"
        )
    elif "timed out after" in text:
        hint = f"the server took longer than --timeout {opts.timeout_s:g} s per request: " + (
            "raise --timeout, or lower the load or --output-tokens"
        )
    elif "HTTP 400" in text:
        hint = (
            "the server refused the request shape: check --prompt-tokens + --output-tokens "
            "against its max model length, and --vocab-size (token ids must exist in the "
            "model's vocabulary; --text-prompts sends tuner's synthetic words instead)"
        )
    elif "HTTP 401" in text or "HTTP 403" in text:
        hint = "the server wants an API key; tuner load sends none: serve without --api-key"
    else:
        hint = "see the server's log; lower the load if it is overloaded"
    return TunerError(f"load on {opts.url} failed: {text}", hint=hint)


def run(
    opts: LoadOptions, model: str, *, on_phase: PhaseCallback | None = None
) -> list[PointResult]:
    """Warm up once, then measure every load point with ``model`` (from :func:`check_server`);
    blocks. A run that fails becomes one TunerError with what to do."""
    shape = workload(opts)
    prompts = PromptFactory(opts.vocab_size, synthetic=opts.text_prompts, seed=shape.seed)
    generator = LoadGenerator(
        opts.url, model, prompts, request_timeout_s=opts.timeout_s, stall_timeout_s=opts.stall_s
    )
    try:
        report = generator.run(shape, opts.slo, on_phase=on_phase)
    except LoadFailure as exc:
        raise explain_failure(exc, opts, model) from None
    date = datetime.now()
    bounds = goodput_bounds(opts.slo)
    results = []
    for point, window, records in zip(
        shape.load_points(), report.windows, report.records, strict=True
    ):
        label = point_label(point.concurrency, point.request_rate)
        result = bench_result(
            records,
            window.duration_s,
            model=model,
            concurrency=point.concurrency,
            request_rate=point.request_rate,
            percentiles=opts.percentiles,
            goodput=bounds,
            client=window.client,
            date=date,
            extra={
                "tuner_load_point": label,
                "tuner_prompts": "text" if opts.text_prompts else "token_ids",
                "tuner_warmup_requests": opts.warmup,
                "tuner_warmup_s": report.warmup_s,
            },
        )
        results.append(PointResult(label, window, result))
    return results


def save(results: Sequence[PointResult], directory: Path) -> list[Path]:
    """One full vLLM-shaped JSON file per point in ``directory`` (made if missing)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for point in results:
            path = directory / result_filename(point.result)
            path.write_text(json.dumps(point.result, allow_nan=False))
            paths.append(path)
    except OSError as exc:
        raise UsageError(
            f"cannot write results to {directory}: {exc.strerror or exc}",
            hint="give --save-result a writable directory",
        ) from None
    return paths


def _ms(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


TABLE_METRICS: tuple[tuple[str, str], ...] = (
    ("TTFT", "ttft"),
    ("TPOT", "tpot"),
    ("ITL", "itl"),
    ("E2EL", "e2el"),
)


def table_header(opts: LoadOptions) -> list[str]:
    top = _top_percentile(opts.percentiles)
    head = ["load", "req/s", "out\ntok/s"]
    if opts.slo is not None:
        head.append("good\nreq/s")
    head += [f"{name} ms\nP50/{top[0]}" for name, _ in TABLE_METRICS]
    return head


def _top_percentile(percentiles: Sequence[float]) -> tuple[str, float]:
    p = max(percentiles)
    word = str(int(p)) if int(p) == p else str(p)
    return f"P{word}", p


def table_row(point: PointResult, opts: LoadOptions) -> list[str]:
    """The table's cells for one point: throughputs, then median / top percentile in ms."""
    from tuner.load.benchjson import percentile_key

    r = point.result
    _, top = _top_percentile(opts.percentiles)
    row = [point.label, f"{r['request_throughput']:.2f}", f"{r['output_throughput']:.1f}"]
    if opts.slo is not None:
        row.append(f"{r['request_goodput']:.2f}")
    for _, metric in TABLE_METRICS:
        median = r[f"median_{metric}_ms"]
        row.append(f"{_ms(median)}/{_ms(r[percentile_key(top, metric)])}")
    return row


def warnings(point: PointResult) -> list[str]:
    """One line per reason not to take the point's numbers as the server's."""
    lines = []
    client = point.window.client
    if client is not None and client.client_bound:
        notes = "; ".join(client.notes)
        lines.append(
            f"{point.label}: client-bound ({notes}): the load generator was the limit, not "
            "the server; measure this point from a less loaded or faster client machine"
        )
    if client is not None and client.disturbed:
        notes = "; ".join(client.notes)
        lines.append(f"{point.label}: disturbed ({notes}): other work on this host shared it")
    failed = point.result["failed"]
    if failed:
        first = next((e for e in point.result["errors"] if e), "?")
        lines.append(f"{point.label}: {failed} of {point.result['num_prompts']} failed: {first}")
    return lines


def summary_line(opts: LoadOptions, model: str) -> str:
    what = (
        f"concurrency {','.join(map(str, opts.concurrency))}"
        if opts.closed_loop
        else f"request rate {','.join(f'{r:g}' for r in opts.request_rates)} req/s "
        f"(max {opts.max_concurrency} in flight)"
    )
    return (
        f"{opts.url} model {model}: {what}, {opts.prompt_tokens} prompt + "
        f"{opts.output_tokens} output tokens, warm-up {opts.warmup} requests"
    )


def progress(say: Callable[[str], None], opts: LoadOptions) -> PhaseCallback:
    """An ``on_phase`` callback that says when the warm-up and each load point start."""
    points = workload(opts).load_points()
    labels = [point_label(p.concurrency, p.request_rate) for p in points]
    counts = [p.requests_per_window for p in points]

    def on_phase(phase: str, done: int, total: int) -> None:
        if phase == "warmup" and done == 0:
            say(f"warm-up: {total} requests")
        elif phase == "measure" and done < len(labels):
            say(f"measuring {labels[done]} ({done + 1}/{total}): {counts[done]} requests")

    return on_phase


def result_lines(results: Sequence[PointResult]) -> list[str]:
    """``--json``: one JSON object per point, without the per-request arrays."""
    from tuner.load.benchjson import summary

    return [json.dumps(summary(p.result), allow_nan=False) for p in results]
