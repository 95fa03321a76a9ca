"""``tuner load URL``: tuner's load generator against any running OpenAI-compatible server,
with ``vllm bench serve``'s metrics and result format.

The command's part: its options checked into a :class:`tuner.load.bench.LoadOptions`, what a
failed run means in terms of those options, and everything it prints (the summary line, the
progress, the table, the warnings, ``--json``'s lines). :mod:`tuner.load.bench` measures.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from tuner.cli.common import err, interruptible, out, say
from tuner.domain import FailureClass, Workload
from tuner.errors import LoadFailure, TunerError, UsageError

if TYPE_CHECKING:
    from tuner.load import LoadOptions, PhaseCallback, PointResult


ServerUrl = Annotated[
    str, typer.Argument(help="The server's base URL, e.g. http://127.0.0.1:8000 (or .../v1).")
]
ServedModel = Annotated[
    str | None, typer.Option(help="Served model name (default: the first one the server lists).")
]
VocabSize = Annotated[
    int, typer.Option(help="Prompts are token ids from 100 up to this (any tokenizer takes them).")
]


def parse_list(
    text: str, option: str, kind: type[int] | type[float], example: str
) -> tuple[Any, ...]:
    """``"16,64,256"`` as positive numbers of ``kind``, in the order given; ``example`` is a
    good value of ``option`` for the hint."""
    values: list[Any] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            value = kind(part)
        except ValueError:
            from tuner.vllm import argv

            whole = kind is int and argv.is_number(part)  # 2.5 where a count was wanted
            raise UsageError(
                f"{option} {text!r}: {part!r} is not a {'whole ' if whole else ''}number",
                hint=f"give {'whole ' if kind is int else ''}numbers separated by commas, "
                f"e.g. {option} {example}",
            ) from None
        if not (math.isfinite(value) and value > 0):
            raise UsageError(
                f"{option} {text!r}: every value must be > 0 and finite, got {part!r}",
                hint=f"e.g. {option} {example}",
            )
        values.append(value)
    return tuple(values)


def server_root(url: str) -> str:
    """``http://host:port`` from what the user typed (``host:port``, ``.../v1`` accepted)."""
    from tuner.load import api_root

    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:  # a port that is not a number, an unclosed [IPv6 address
        parts = urlsplit("http://")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"{url!r} is not a server address",
            hint="give the server's base URL, e.g. http://127.0.0.1:8000 (a /v1 suffix is fine)",
        )
    path = parts.path.rstrip("/")
    for endpoint in _ENDPOINTS:
        if path.endswith(endpoint):
            base = f"{parts.scheme}://{parts.netloc}{path[: -len(endpoint)]}"
            raise UsageError(
                f"{url!r} is one of the server's endpoints ({endpoint}), not its address",
                hint=f"give the server's base URL: {base}",
            )
    return api_root(f"{parts.scheme}://{parts.netloc}{parts.path}")


# Paths of an OpenAI-compatible server (and vLLM's own) that a user may paste with its address.
_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics")


def options(
    *,
    url: str,
    model: str | None,
    concurrency: str | None,
    request_rate: str | None,
    max_concurrency: int | None,
    prompt_tokens: int | None,
    output_tokens: int | None,
    requests: int | None,
    warmup: int,
    vocab_size: int,
    text_prompts: bool,
    timeout_s: float,
    slo: str | None,
    percentiles: str,
    stall_s: float | None = 60.0,
    workload: str | None = None,
    tokenizer: Path | None = None,
    workload_set: str | None = None,
    seed: int | None = None,
) -> LoadOptions:
    """The command's options checked and parsed; UsageError naming the option otherwise.
    ``--workload`` is read later (:func:`tuner.load.bench.with_workload`), once the server
    names its model."""
    from tuner.domain import SEED_MAX
    from tuner.domain.workload import parse_slo
    from tuner.load import DEFAULT_CONCURRENCY, LoadOptions, tokenizer_file
    from tuner.load.bench import untokenized
    from tuner.load.traces import TEXT_FORMATS, split_name

    if workload is not None:
        for name, value in (("--prompt-tokens", prompt_tokens), ("--output-tokens", output_tokens)):
            if value is not None:
                raise UsageError(
                    f"{name} sets the shape of tuner load's own requests; --workload "
                    f"{workload} brings its own",
                    hint=f"leave {name} out, or drop --workload for fixed shapes",
                )
    if workload_set is not None and workload is None:
        raise UsageError(
            "--workload-set changes the fields of a workload given with --workload",
            hint="e.g. --workload mooncake:FILE --workload-set block_tokens=16,speed=2",
        )
    from tuner.spec.configs import parse_workload_overrides

    overrides = parse_workload_overrides(workload_set)
    if tokenizer is not None:
        tokenizer = tokenizer.expanduser()  # the shell expands no ~ after --tokenizer=
        split = split_name(workload) if workload is not None else None
        if workload is None or split is None:
            raise UsageError(
                "--tokenizer counts the text of a trace given with --workload",
                hint="e.g. --workload sharegpt:FILE --tokenizer MODEL_DIR",
            )
        if split[0] not in ("trace", *TEXT_FORMATS):  # trace: is told once read (with_workload)
            raise untokenized(workload, split[0])
        if tokenizer_file(tokenizer) is None:
            raise UsageError(
                f"--tokenizer {tokenizer}: no tokenizer.json there",
                hint="give the model's directory (holding tokenizer.json) or the file itself",
            )
    prompt_tokens = 512 if prompt_tokens is None else prompt_tokens
    output_tokens = 256 if output_tokens is None else output_tokens

    if concurrency is not None and request_rate is not None:
        raise UsageError(
            "--concurrency and --request-rate both set the load",
            hint="closed loop: --concurrency 16,64; Poisson arrivals: --request-rate 2,4,8 "
            "(with --max-concurrency as the cap on requests in flight)",
        )
    if max_concurrency is not None and request_rate is None:
        raise UsageError(
            "--max-concurrency caps a --request-rate run",
            hint="for a closed loop give the streams with --concurrency"
            if workload is None
            else "at the workload's own load its cap is --workload-set concurrency=K; "
            "--concurrency K would make it a closed loop of K streams",
        )
    for name, option in (
        ("concurrency_ladder", "--concurrency"),
        ("rate_ladder", "--request-rate"),
    ):
        if name in overrides:
            rungs = ",".join(f"{r:g}" for r in overrides[name])
            raise UsageError(
                f"--workload-set {name}: tuner load's load points are its own options",
                hint=f"give them as {option} {rungs}",
            )
    for name, instead in (
        ("warmup_requests", "--warmup N: one warm-up for all the load points"),
        ("windows", "tuner load measures one window a load point: run it again for another"),
    ):
        if name in overrides:
            raise UsageError(f"--workload-set {name}: tuner load does not read it", hint=instead)
    if request_rate is not None:
        for name in ("speed", "arrival", "request_rate"):
            if name in overrides:
                raise UsageError(
                    f"--workload-set {name}=...: --request-rate draws the rows at its rates "
                    f"(Poisson arrivals), so {name} would change nothing",
                    hint="leave it out, or drop --request-rate to send the workload at its own "
                    "load (a trace at its own times, scaled by speed)",
                )
    if seed is not None and "seed" in overrides:
        raise UsageError("--seed and --workload-set seed=... both set the seed", hint="give one")
    seed = overrides.get("seed", seed)
    if seed is not None and not 0 <= seed <= SEED_MAX:
        raise UsageError(f"--seed must be 0 to {SEED_MAX}, got {seed}", hint="e.g. --seed 0")
    if "concurrency" in overrides and (concurrency is not None or request_rate is not None):
        given = "--concurrency" if concurrency is not None else "--request-rate"
        raise UsageError(
            f"--workload-set concurrency=... is the workload's own cap, and {given} replaces "
            "the workload's load",
            hint="cap a --request-rate run with --max-concurrency K; with --concurrency K, K is "
            "the cap (of a replay at the trace's times) or the streams",
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
    points = parse_list(percentiles, "--metric-percentiles", float, "50,90,99")
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
        rates = parse_list(request_rate, "--request-rate", float, "2,4,8")
    elif concurrency is not None:
        streams = parse_list(concurrency, "--concurrency", int, "16,64,256")
    check_size(rates, streams, requests)
    return LoadOptions(
        url=server_root(url),
        model=model,
        concurrency=streams,
        request_rates=rates,
        max_concurrency=max_concurrency,
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
        workload_name=workload,
        workload_set=overrides,
        tokenizer=tokenizer,
        ladder_given=concurrency is not None or request_rate is not None,
        # A fresh seed a run unless given: a run repeated on one server would otherwise send
        # the same prompts, and find them in its prefix cache.
        seed=secrets.randbelow(SEED_MAX + 1) if seed is None else seed,
    )


def check_size(rates: tuple[float, ...], streams: tuple[int, ...], requests: int | None) -> None:
    """UsageError for a load point of fixed shapes no one means to wait for, before the server
    is asked (:func:`refuse_point`'s bounds on the count the point would send)."""
    from tuner.load.bench import MIN_CLOSED_REQUESTS, MIN_RATE_REQUESTS, RATE_WINDOW_S

    if rates:
        n = float(requests or max(MIN_RATE_REQUESTS, RATE_WINDOW_S * max(rates)))
        refuse_point(
            n,
            min(rates),
            "--requests" if requests else f"--request-rate {max(rates):g}",
            f"--request-rate {min(rates):g}",
            "lower --request-rate, or set --requests",
        )
    else:
        n = float(max(requests or MIN_CLOSED_REQUESTS, 4 * max(streams)))
        by = "--requests" if requests and requests >= 4 * max(streams) else None
        given = by or f"--concurrency {max(streams)} (4 requests a stream)"
        refuse_point(n, None, given, given, "fewer streams, or fewer --requests")


def check_points(points: Sequence[Workload]) -> None:
    """:func:`refuse_point`'s bounds for a workload's load points (``--workload``, with any
    ``--workload-set``); a trace's own arrivals have the window's bound of their own, checked
    here too: before the warm-up, not when the window's plan is drawn after it."""
    from tuner.load import check_replay

    for p in points:
        if p.trace_paced:
            check_replay(p, p.requests_per_window)
        rate = None if p.trace_paced else p.request_rate
        at = f"workload {p.name!r}"
        hint = "set fewer --requests (or requests_per_window with --workload-set)"
        paced = f"{at} at {rate:g} req/s" if rate else at
        refuse_point(p.requests_per_window, rate, at, paced, hint)


def refuse_point(n: float, rate: float | None, given: str, paced: str, hint: str) -> None:
    """UsageError for a load point of ``n`` requests no one means to wait for: more than
    :data:`MAX_POINT_REQUESTS` (said of ``given``), or Poisson arrivals at ``rate`` that take
    more than a day (said of ``paced``: the bound a trace's window has,
    :data:`tuner.load.workloads.MAX_WINDOW_S`)."""
    from tuner.load.workloads import MAX_POINT_REQUESTS, MAX_WINDOW_S

    if n > MAX_POINT_REQUESTS:
        raise UsageError(
            f"{given}: a load point would send {n:,.0f} requests, more than {MAX_POINT_REQUESTS:,}",
            hint=hint,
        )
    if rate and n / rate > MAX_WINDOW_S:
        raise UsageError(
            f"{paced}: {n:,.0f} requests would arrive over about {n / rate / 3600:,.1f} hours "
            f"(more than {MAX_WINDOW_S / 3600:.0f})",
            hint="raise the rate (--request-rate), or send fewer --requests",
        )


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
        lengths = (
            f"the lengths --workload {opts.workload_name} gives"
            if opts.workload_name
            else "--prompt-tokens + --output-tokens"
        )
        hint = (
            f"the server refused the request shape: check {lengths} against its max model "
            "length, and --vocab-size (token ids must exist in the model's vocabulary; "
            "--text-prompts sends tuner's synthetic words instead)"
        )
    elif "HTTP 401" in text or "HTTP 403" in text:
        hint = "the server wants an API key; tuner load sends none: serve without --api-key"
    else:
        hint = "see the server's log; lower the load if it is overloaded"
    return TunerError(f"load on {opts.url} failed: {text}", hint=hint)


def _ms(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


TABLE_METRICS = ("TTFT", "TPOT", "ITL", "E2EL")  # vLLM's result keys are these in lower case


def top_percentile(opts: LoadOptions) -> tuple[float, str]:
    """The highest of the run's percentiles (--metric-percentiles), which the output shows
    beside the median, and its label ("P99", "P99.9")."""
    top = max(opts.percentiles)
    return top, f"P{int(top) if int(top) == top else top}"


def results_table(results: Sequence[PointResult], opts: LoadOptions) -> Table:
    """One row per point: throughputs, then median / top percentile in ms."""
    from tuner.load import percentile_key

    top, label = top_percentile(opts)
    goodput = ["good\nreq/s"] if opts.slo is not None else []
    head = ["load", "req/s", "out\ntok/s", *goodput]
    head += [f"{name} ms\nP50/{label}" for name in TABLE_METRICS]
    table = Table(*head, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for column in table.columns:  # fold rather than cut a number at a narrow width
        column.overflow = "fold"
        column.justify = "right"
    table.columns[0].justify = "left"
    table.columns[0].no_wrap = True
    for point in results:
        r = point.result
        row = [point.label, f"{r['request_throughput']:.2f}", f"{r['output_throughput']:.1f}"]
        if goodput:
            row.append(f"{r['request_goodput']:.2f}")
        for metric in (name.lower() for name in TABLE_METRICS):
            median = r[f"median_{metric}_ms"]
            row.append(f"{_ms(median)}/{_ms(r[percentile_key(top, metric)])}")
        table.add_row(*row)
    return table


def warnings(point: PointResult) -> list[str]:
    """One line per reason not to take the point's numbers as the server's."""
    from tuner.load import LAG_BOUND_MS

    lines = []
    client = point.window.client
    notes = "; ".join(client.notes) if client is not None else ""
    # Its open files held the requests in flight: neither a cap nor the server did.
    files = client is not None and client.files_room is not None
    if files:
        lines.append(
            f"{point.label}: client-bound ({notes}): raise the hard limit on open files "
            "(ulimit -Hn), or cap the requests in flight below it"
        )
    elif client is not None and client.client_bound:
        lines.append(
            f"{point.label}: client-bound ({notes}): the load generator was the limit, not "
            "the server; measure this point from a less loaded or faster client machine"
        )
    if client is not None and not files and client.held_p99_ms >= LAG_BOUND_MS:
        lines.append(
            f"{point.label}: arrivals waited for one of the {point.window.concurrency} "
            f"requests in flight, {client.held_p99_ms:.0f} ms at P99: the server did not keep "
            "up with them at that cap, and TTFT (timed from the send, as vllm bench serve "
            f"times it) leaves the wait out; {_raise_cap(point)} to see the server's own queue"
        )
    if client is not None and client.disturbed:
        lines.append(
            f"{point.label}: disturbed ({notes}): its timings are not the server's alone; "
            "measure it again on a quiet host with cores to spare"
        )
    failed = point.result["failed"]
    if failed:
        first = next((e for e in point.result["errors"] if e), "?")
        lines.append(f"{point.label}: {failed} of {point.result['num_prompts']} failed: {first}")
    return lines


def _raise_cap(point: PointResult) -> str:
    """How the cap of ``point`` is raised: the option that set it."""
    if point.result.get("tuner_arrival") == "trace":
        return "raise the cap (--concurrency N) or leave it out (a replay caps nothing unless told)"
    return (
        "raise the cap (--max-concurrency N with --request-rate; --workload-set concurrency=N "
        "at a workload's own rate)"
    )


def summary_line(opts: LoadOptions, model: str) -> str:
    from tuner.load.bench import replays, workload_label

    shape = opts.workload
    streams = ",".join(map(str, opts.concurrency))
    replayed = shape is not None and replays(opts, shape)  # as the load points are labelled
    if opts.closed_loop and replayed and shape is not None and not shape.trace_paced:
        # rows of one arrival time: all at once, unless capped (--workload-set concurrency)
        what = (
            f"the trace's rows, which share one arrival time, at most {streams} in flight"
            if "concurrency" in opts.workload_set
            else f"every request at once (the trace's rows share one arrival time), "
            f"concurrency {streams}"
        )
    elif opts.closed_loop and replayed:
        what = f"the trace's arrivals, at most {streams} in flight"
    elif opts.closed_loop:
        what = f"concurrency {streams}"
    else:
        what = f"request rate {','.join(f'{r:g}' for r in opts.request_rates)} req/s" + (
            " (no cap in flight)"
            if opts.max_concurrency is None
            else f" (max {opts.max_concurrency} in flight)"
        )
        if shape is not None and any(r.session is not None for r in shape.trace or ()):
            what += " of rows drawn at random (its sessions are not replayed as conversations)"
    if shape is None:
        lengths = f"{opts.prompt_tokens} prompt + {opts.output_tokens} output tokens"
    else:
        lengths = f"workload {workload_label(opts)}"
        if shape.source:
            lengths += f" ({shape.source})"
    return (
        f"{opts.url} model {model}: {what}, {lengths}, warm-up {_requests(opts.warmup)}, "
        f"seed {opts.seed}"
    )


def turn_lines(results: Sequence[PointResult], opts: LoadOptions) -> list[str]:
    """TTFT per turn of a run with sessions, one line per load point and turn, median and top
    percentile as the table shows them:
    ``TTFT by turn at 4 streams: turn 2: P50 3.1 ms, P99 5.0 ms (32 requests)``."""
    from tuner.load import percentile_key

    top, label = top_percentile(opts)
    return [
        f"TTFT by turn at {point.label}: turn {turn}: P50 {_ms(s['median_ttft_ms'])} ms, "
        f"{label} {_ms(s[percentile_key(top, 'ttft')])} ms "
        f"({s['count']} request{'' if s['count'] == 1 else 's'})"
        for point in results
        for turn, s in sorted(point.turns.items())
    ]


def _requests(n: int) -> str:
    return f"{n} request{'' if n == 1 else 's'}"


def _hours_or_minutes(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def progress(say: Callable[[str], None], opts: LoadOptions) -> PhaseCallback:
    """An ``on_phase`` callback that says when the warm-up and each load point start."""
    from tuner.load import point_label, workload
    from tuner.load.bench import replays

    points = workload(opts).load_points()
    labels = [point_label(p.concurrency, p.request_rate, replays(opts, p)) for p in points]
    counts = [p.requests_per_window for p in points]
    # Poisson arrivals take their time whatever the server does: a long point says how long.
    spans = [
        f", arriving over about {_hours_or_minutes(n / p.request_rate)}"
        if p.request_rate and n / p.request_rate >= 60
        else ""
        for p, n in zip(points, counts, strict=True)
    ]

    def on_phase(phase: str, done: int, total: int) -> None:
        if phase == "warmup" and done == 0:
            say(f"warm-up: {_requests(total)}")
        elif phase == "measure" and done < len(labels):
            say(
                f"measuring {labels[done]} ({done + 1}/{total}): {_requests(counts[done])}"
                + spans[done]
            )

    return on_phase


def load(
    url: ServerUrl,
    model: ServedModel = None,
    concurrency: Annotated[
        str | None,
        typer.Option(help="Closed loop: streams per load point, e.g. 16,64,256 (default 16)."),
    ] = None,
    request_rate: Annotated[
        str | None,
        typer.Option(help="Poisson arrivals instead: requests/s per load point, e.g. 2,4,8."),
    ] = None,
    max_concurrency: Annotated[
        int | None,
        typer.Option(
            help="With --request-rate: the cap on requests in flight (default: none, as "
            "vllm bench serve)."
        ),
    ] = None,
    prompt_tokens: Annotated[
        int | None, typer.Option(help="Tokens per prompt (default 512).", show_default=False)
    ] = None,
    output_tokens: Annotated[
        int | None,
        typer.Option(
            help="Tokens generated per request, EOS ignored (default 256).", show_default=False
        ),
    ] = None,
    workload: Annotated[
        str | None,
        typer.Option(
            help="Send a workload's requests instead of fixed shapes: a preset (multi-turn, "
            "chat, ...) or a trace as FORMAT:FILE (sharegpt:, burstgpt:, mooncake:, custom:, "
            "tuner:, trace:). Without --concurrency/--request-rate, at its own load. "
            "A workload with sessions reports TTFT per turn."
        ),
    ] = None,
    workload_set: Annotated[
        str | None,
        typer.Option(
            help="Change fields of the --workload, e.g. speed=2,max_requests=500 or a Mooncake "
            "trace's block_tokens=16 (the replay options of docs/workloads.md)."
        ),
    ] = None,
    tokenizer: Annotated[
        Path | None,
        typer.Option(
            help="Count a text trace's tokens with this tokenizer.json (or the model directory "
            "holding it). Default: the served model's, when its name is a local directory; "
            "else ceil(characters / 4)."
        ),
    ] = None,
    requests: Annotated[
        int | None,
        typer.Option(
            help="Requests per load point. Default: 4 x concurrency (at least 32) in a closed "
            "loop, where a smaller number is raised to 4 x concurrency; with --request-rate "
            "about 10 s of arrivals at the highest rate (at least 64); with --workload, its own "
            "count at every load point (a trace: all its rows)."
        ),
    ] = None,
    warmup: Annotated[
        int, typer.Option(help="Warm-up requests (untimed, once for all points; 0: none).")
    ] = 32,
    vocab_size: VocabSize = 1024,
    text_prompts: Annotated[
        bool,
        typer.Option(
            "--text-prompts", help="Send text of tuner's synthetic words t0..tN-1 instead of ids."
        ),
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds one request may take.")] = 600.0,
    stall_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds without a byte from the server (before the first token or between "
            "two) after which a request fails as stalled."
        ),
    ] = 60.0,
    slo: Annotated[
        str | None,
        typer.Option(
            help="Goodput bounds per request, e.g. ttft_p99=500ms,itl_p99=50ms,e2e_p99=10s "
            "(vLLM's --goodput ttft, tpot, e2el)."
        ),
    ] = None,
    metric_percentiles: Annotated[
        str, typer.Option(help="Percentiles reported per latency, as vLLM's option.")
    ] = "50,90,99",
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One JSON object per load point per line, in vLLM's --save-result format "
            "without the per-request arrays.",
        ),
    ] = False,
    save_result: Annotated[
        Path | None,
        typer.Option(help="Write one full vLLM-format result file per load point here."),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Seed of the prompts (and of a workload's draws). Default: a fresh one each "
            "run, so that a run repeated on one server does not find its prompts in the "
            "prefix cache (vllm bench serve's default is 0). The results carry it as "
            "tuner_seed.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Measure a running OpenAI-compatible server at one or more load points.

    Like `vllm bench serve` (same metrics and result format), with one warm-up for all of them.
    """
    from tuner.load import bench

    opts = options(
        url=url,
        model=model,
        concurrency=concurrency,
        request_rate=request_rate,
        max_concurrency=max_concurrency,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        requests=requests,
        warmup=warmup,
        vocab_size=vocab_size,
        text_prompts=text_prompts,
        timeout_s=timeout,
        stall_s=stall_timeout,
        slo=slo,
        percentiles=metric_percentiles,
        workload=workload,
        tokenizer=tokenizer,
        workload_set=workload_set,
        seed=seed,
    )
    bench.check_named_workload(opts)  # a typo is said as one, not as "cannot reach"
    if save_result is not None:  # before the load, not after it: the run is not lost
        save_result = save_result.expanduser()  # the shell expands no ~ after --save-result=
        bench.writable_dir(save_result, make=False)  # made once there are results
    served = bench.check_server(opts.url, opts.model, min(opts.timeout_s, bench.PROBE_TIMEOUT_S))
    opts = bench.with_workload(opts, served)
    if opts.workload is not None:  # its own load points, as checked above for fixed shapes
        from tuner.load import check_shapes, check_workload

        shape = bench.workload(opts)
        check_workload(shape)  # before the summary line, not when the first plan is drawn
        check_shapes(shape)
        check_points(shape.load_points())
    note = err if as_json else out  # with --json, stdout holds only the results
    note.print(escape(summary_line(opts, served)), soft_wrap=True)
    try:
        with interruptible(lambda: "interrupted: nothing was reported or written"):
            results, failure = bench.run(
                opts, served, on_phase=progress(lambda text: err.print(escape(text)), opts)
            )
    except LoadFailure as exc:
        raise explain_failure(exc, opts, served) from None
    if as_json:  # one JSON object per point, without the per-request arrays
        from tuner.load import summary

        for point in results:
            print(json.dumps(summary(point.result), allow_nan=False), flush=True)
    else:
        out.print(results_table(results, opts))
        for line in turn_lines(results, opts):
            say(line)
    for point in results:
        for warning in warnings(point):
            note.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    if save_result is not None:
        for path in bench.save(results, save_result):
            note.print(f"wrote {escape(str(path))}", soft_wrap=True)
    if failure is not None:  # after the points measured before it, reported as any run's
        raise explain_failure(failure, opts, served)
