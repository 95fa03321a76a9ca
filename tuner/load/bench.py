"""``tuner load``: measure any running OpenAI-compatible server as ``vllm bench serve`` does,
with tuner's own load generator, and report every load point in vLLM's result format
(:mod:`tuner.load.benchjson`). The command's options and its table are
:mod:`tuner.cli.load`'s; nothing here prints.

One run is one :class:`tuner.domain.Workload` with a concurrency (or request-rate) ladder and
one window per point, so one warm-up serves the whole ladder. Its shapes are fixed lengths, or
those of a named workload (``--workload``: a preset such as ``multi-turn``, or a trace); a
workload with sessions adds each point's TTFT per turn to its result (``tuner_ttft_by_turn``).

Before any load the server is asked for ``/v1/models``: an address that does not answer and a
model it does not serve are reported at once, with what to do, instead of as a run of failed
requests.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tuner.domain import Slo, WindowMetrics, Workload
from tuner.errors import LoadFailure, TunerError, UsageError
from tuner.load.benchjson import (
    DEFAULT_PERCENTILES,
    bench_result,
    goodput_bounds,
    metric_stats,
    percentile_key,
    result_filename,
)
from tuner.load.canary import served_models
from tuner.load.curve import point_label
from tuner.load.generator import FailedAfterPoints, LoadGenerator, PhaseCallback
from tuner.load.prompts import PromptFactory
from tuner.load.stats import ttft_by_turn, ttft_s_by_turn, turn_summary
from tuner.load.traces import (
    TEXT_FORMATS,
    check_readable,
    split_name,
    tokenizer_file,
    trace_format,
)
from tuner.load.workloads import get_workload

DEFAULT_CONCURRENCY = 16
MIN_CLOSED_REQUESTS = 32  # a closed-loop point sends max(this, 4 x concurrency) by default
MIN_RATE_REQUESTS = 64
RATE_WINDOW_S = 10.0  # default requests of a rate ladder: ~10 s of arrivals at its top rate
PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class LoadOptions:
    """What ``tuner load`` was asked for, checked (by :func:`tuner.cli.load.options`)."""

    url: str  # the server root, http://host:port
    model: str | None  # None: the first model the server lists
    concurrency: tuple[int, ...] = (DEFAULT_CONCURRENCY,)
    request_rates: tuple[float, ...] = ()  # non-empty: Poisson arrivals
    # The cap on requests in flight of a request-rate point; None: none, every request of the
    # window may be (as ``vllm bench serve --request-rate`` without ``--max-concurrency``).
    max_concurrency: int | None = None
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
    # ``--workload``: a preset or FORMAT:FILE whose shapes, sessions and arrivals replace the
    # fixed prompt/output lengths (read by with_workload once the server's model is known);
    # ``tokenizer`` counts a text trace (once read, the one that counted it, else None: the
    # result's tokenizer_id); ``ladder_given``: the ladder above is the user's, not the default
    # one (which then gives way to the workload's own load point).
    workload_name: str | None = None
    tokenizer: Path | None = None
    ladder_given: bool = True
    workload: Workload | None = None  # the workload read
    # ``--workload-set``: fields of the workload changed, a trace's replay options among them
    # (speed, start_s, end_s, max_requests, block_tokens); checked by parse_workload_overrides.
    workload_set: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0  # of the prompts and of the workload's draws (`tuner load` draws a fresh one)

    @property
    def closed_loop(self) -> bool:
        return not self.request_rates


def workload_label(opts: LoadOptions) -> str:
    """The workload's name with what ``--workload-set`` changed (``mooncake:f.jsonl[speed=4]``):
    two replays of one trace that differ in them are told apart in the results."""
    from tuner.domain.workload import overridden_name

    name = opts.workload.name if opts.workload is not None else opts.workload_name
    return overridden_name(name or "tuner-load", opts.workload_set)


@dataclass(frozen=True)
class PointResult:
    """One measured load point: tuner's window and the vLLM-shaped result (full arrays)."""

    label: str
    window: WindowMetrics
    result: dict[str, Any]
    # TTFT per turn of a workload with sessions (1 = a conversation's first), else empty: the
    # result's keys (``median_ttft_ms``, ``p99_ttft_ms``: the run's percentiles) and ``count``.
    turns: dict[int, dict[str, Any]] = field(default_factory=dict)


def requests_per_point(opts: LoadOptions) -> int:
    """What a window asks for before the ladder's own floor: a closed-loop point then sends
    at least 4 x its concurrency (:meth:`tuner.domain.Workload.load_points`)."""
    if opts.requests is not None:
        return opts.requests
    if opts.workload is not None:
        return opts.workload.requests_per_window
    if opts.closed_loop:
        return MIN_CLOSED_REQUESTS
    return max(MIN_RATE_REQUESTS, math.ceil(RATE_WINDOW_S * max(opts.request_rates)))


def workload(opts: LoadOptions) -> Workload:
    """The one workload of the run: fixed shapes (or the named workload's), one window per
    load point. A trace given a request rate is replayed with Poisson arrivals of its rows; one
    without arrival times in a closed loop sends its rows in order (:func:`each_row_once`)."""
    fixed = Workload(
        name="tuner-load",
        prompt_tokens=opts.prompt_tokens,
        output_tokens=opts.output_tokens,
        length_jitter=0.0,
    )
    shape = (opts.workload if opts.workload is not None else fixed).replace(
        requests_per_window=requests_per_point(opts),
        windows=1,
        warmup_requests=opts.warmup,
        concurrency_ladder=(),
        rate_ladder=(),
        seed=opts.seed,
    )
    if opts.workload is not None and not opts.ladder_given:
        # The workload's own load point; a preset's closed loop takes the ladder's floor too
        # (a trace's is each row once, as `vllm bench serve` sends a dataset).
        own = shape
        if own.request_rate is None and own.trace is None:
            own = own.replace(requests_per_window=max(own.requests_per_window, 4 * own.concurrency))
        return each_row_once(own) if opts.closed_loop else own
    if opts.closed_loop and shape.trace_paced:
        # The trace's arrival times set the load; the streams only cap requests in flight.
        if len(opts.concurrency) > 1:
            raise UsageError(
                f"workload {shape.name}: its own arrival times set the load, so --concurrency "
                "takes one value (the most requests in flight)",
                hint="for a load curve give --request-rate 2,4,8 (Poisson arrivals of its rows)",
            )
        return shape.replace(concurrency=opts.concurrency[0], request_rate=None)
    if opts.closed_loop:
        return each_row_once(shape).replace(
            concurrency=max(opts.concurrency),
            request_rate=None,
            concurrency_ladder=tuple(opts.concurrency),
        )
    if shape.trace is not None:
        shape = shape.replace(arrival="poisson")
    cap = shape.requests_per_window if opts.max_concurrency is None else opts.max_concurrency
    return shape.replace(concurrency=cap, rate_ladder=tuple(opts.request_rates))


def capped(opts: LoadOptions, point: Workload) -> bool:
    """Whether a cap on requests in flight was set for ``point``, which ``vllm bench serve``
    writes as ``max_concurrency`` (null without one): a closed loop's streams; a rate point's
    ``--max-concurrency`` (or the cap of a workload at its own rate); a replay at the trace's
    times, its ``--concurrency`` or ``--workload-set concurrency``. A cap is not guessed from
    its size: one given at or above a window's requests is still the cap given."""
    if replays(opts, point):
        return opts.ladder_given or "concurrency" in opts.workload_set
    if point.request_rate is not None:
        return opts.max_concurrency is not None
    return True


def replays(opts: LoadOptions, point: Workload) -> bool:
    """Whether ``point`` replays the trace at its own times, as its label and result say:
    :attr:`Workload.trace_paced`, or, at the workload's own load, a trace whose rows all arrive
    at one time (one row, equal timestamps, an ``end_s`` leaving one), all sent at once, which
    trace_paced cannot tell from the closed loop :func:`each_row_once` makes of rows without
    times (with a ladder of streams given, such a trace is a closed loop too)."""
    shape = opts.workload
    return point.trace_paced or (
        not opts.ladder_given
        and shape is not None
        and shape.trace is not None
        and shape.arrival == "trace"
    )


def each_row_once(shape: Workload) -> Workload:
    """A closed-loop trace without arrival times (ShareGPT, custom) sent as ``vllm bench
    serve`` sends a dataset: every row once, in the file's order (vLLM's with
    ``--disable-shuffle``; without it vLLM shuffles them first), then again from the first
    when more requests are asked for than it has (where vLLM draws the extra ones at random).
    A window of as many requests as the trace has rows then carries the file's own token
    totals, where random draws of rows (what a trial's closed loop does) repeat some and leave
    others out. The rows all arrive at 0, so the streams alone pace them: still a closed loop.
    Any other shape is returned as it is."""
    if shape.trace is None or shape.arrival != "closed":
        return shape
    rows = tuple(dataclasses.replace(r, arrival_s=0.0) for r in shape.trace)
    return shape.replace(trace=rows, arrival="trace")


def with_workload(opts: LoadOptions, model: str) -> LoadOptions:
    """``opts`` with its ``--workload`` read. A text trace is counted with ``--tokenizer``, else
    with the served model's own ``tokenizer.json`` when ``model`` (the served name) is a local
    model directory, as ``vllm serve DIR`` names it; else approximated (the source says which).
    Without a ladder of the user's, the run measures the workload's own load point."""
    if opts.workload_name is None:
        return opts
    tokenizer = opts.tokenizer
    if tokenizer is None and tokenizer_file(Path(model)) is not None:
        tokenizer = Path(model)
    sets = dict(opts.workload_set)
    if opts.requests is not None:  # a window's requests: a replay's default cap in flight too
        sets["requests_per_window"] = opts.requests
    shape = get_workload(opts.workload_name, sets, tokenizer=tokenizer)
    fmt = trace_format(shape)
    if opts.tokenizer is not None and fmt not in TEXT_FORMATS:  # a trace: told from its file
        raise untokenized(opts.workload_name, fmt or "?")
    counted = fmt in TEXT_FORMATS and tokenizer is not None  # written as vLLM's tokenizer_id
    changes: dict[str, Any] = {"workload": shape, "tokenizer": tokenizer if counted else None}
    if not opts.ladder_given:
        if shape.request_rate is not None and (shape.trace is None or shape.arrival == "poisson"):
            changes.update(concurrency=(), request_rates=(shape.request_rate,))
            changes["max_concurrency"] = shape.concurrency
        else:
            changes["concurrency"] = (shape.concurrency,)
    return dataclasses.replace(opts, **changes)


def untokenized(name: str, fmt: str) -> UsageError:
    """The refusal of ``--tokenizer`` for the trace ``name`` of ``fmt``, which gives token
    counts, not text."""
    return UsageError(
        f"--tokenizer counts the text of a sharegpt: or custom: trace; --workload {name} is a "
        f"{fmt}: trace, which gives its token counts",
        hint="leave --tokenizer out",
    )


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
        entries = served_models(response.json())
    except ValueError:
        return None
    return None if entries is None else [str(m["id"]) for m in entries]


def run(
    opts: LoadOptions, model: str, *, on_phase: PhaseCallback | None = None
) -> tuple[list[PointResult], LoadFailure | None]:
    """Warm up once, then measure every load point with ``model`` (from :func:`check_server`);
    blocks. Returns the points measured and None, or, when a later point failed, the points
    measured before it and that failure; a run that fails before any point is measured raises
    LoadFailure (``tuner load`` says what to do about either)."""
    shape = workload(opts)
    prompts = PromptFactory(opts.vocab_size, synthetic=opts.text_prompts, seed=shape.seed)
    generator = LoadGenerator(
        opts.url, model, prompts, request_timeout_s=opts.timeout_s, stall_timeout_s=opts.stall_s
    )
    failure: LoadFailure | None = None
    try:
        report = generator.run(shape, opts.slo, on_phase=on_phase)
    except FailedAfterPoints as exc:
        report, failure = exc.report, exc
    date = datetime.now()
    bounds = goodput_bounds(opts.slo)
    results = []
    turns = report.turns or tuple(() for _ in report.records)
    measured = shape.load_points()[: len(report.windows)]
    for point, window, records, planned in zip(
        measured, report.windows, report.records, turns, strict=True
    ):
        replayed = replays(opts, point)
        label = point_label(point.concurrency, point.request_rate, replayed)
        by_turn = ttft_by_turn([records], [planned]) if planned else {}
        turn_ttfts = ttft_s_by_turn([records], [planned]) if planned else {}
        extra: dict[str, Any] = {
            "tuner_load_point": label,
            # vLLM's file has no word for a trace's own times: its request_rate "inf" (and the
            # file name's "infqps") would read as every request at once.
            "tuner_arrival": "trace"
            if replayed
            else ("closed" if point.request_rate is None else "poisson"),
            "tuner_prompts": "text" if opts.text_prompts else "token_ids",
            "tuner_warmup_requests": opts.warmup,
            "tuner_warmup_s": report.warmup_s,
            "tuner_seed": shape.seed,
        }
        if opts.workload is not None:
            extra["tuner_workload"] = workload_label(opts)
            if shape.source:
                extra["tuner_workload_source"] = shape.source
        per_turn = {
            turn: {"count": len(ttfts), **metric_stats("ttft", ttfts, opts.percentiles)}
            for turn, ttfts in turn_ttfts.items()
        }
        if by_turn:
            summary = turn_summary(by_turn)
            for turn, stats in per_turn.items():  # and each of --metric-percentiles
                for p in opts.percentiles:
                    key = percentile_key(p, "ttft")
                    summary[str(turn)].setdefault(key.replace("_ttft", ""), stats[key])
            extra["tuner_ttft_by_turn"] = summary
        result = bench_result(
            records,
            window.duration_s,
            model=model,
            concurrency=point.concurrency if capped(opts, point) else None,
            request_rate=point.request_rate,
            percentiles=opts.percentiles,
            goodput=bounds,
            client=window.client,
            date=date,
            extra=extra,
        )
        if opts.tokenizer is not None:  # the tokenizer that counted the trace's text
            result["tokenizer_id"] = str(opts.tokenizer)
        results.append(PointResult(label, window, result, per_turn))
    return results, failure


def writable_dir(directory: Path, *, make: bool = True) -> None:
    """Make ``directory`` if missing and check that a file can be written there; UsageError
    saying why not. ``make=False`` (the check before a run, so that its results are not lost
    at the end) creates nothing: a missing directory's nearest existing folder must let it be
    made."""
    try:
        if not make and not directory.exists():
            parent = next(p for p in directory.absolute().parents if p.exists())
            if not parent.is_dir():
                raise NotADirectoryError(20, f"{parent} is not a directory")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise PermissionError(13, f"cannot create folders in {parent}")
            return
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise UsageError(
            f"cannot write results to {directory}: {exc.strerror or exc}",
            hint="give --save-result a writable directory",
        ) from None


def check_named_workload(opts: LoadOptions) -> None:
    """``--workload`` checked before the server is asked anything, so that a typo is said as
    such and not behind "cannot reach": a preset resolved with ``--workload-set``, a trace's
    file opened (its rows are read later, counted with the served model's tokenizer)."""
    name = opts.workload_name
    if name is None:
        return
    if split_name(name) is None:
        get_workload(name, opts.workload_set)
    else:
        check_readable(name)


def save(results: Sequence[PointResult], directory: Path) -> list[Path]:
    """One full vLLM-shaped JSON file per point in ``directory`` (made if missing), named as
    vLLM names it; a name already taken (a run within the same second) gets ``-2``, ``-3``...
    before ``.json``: no earlier result is overwritten."""
    writable_dir(directory)
    try:
        paths = []
        for point in results:
            name = Path(result_filename(point.result))
            text = json.dumps(point.result, allow_nan=False)
            path, n = directory / name, 1
            while True:
                try:
                    with path.open("x") as file:  # never an existing file, even a racing run's
                        file.write(text)
                    break
                except FileExistsError:
                    n += 1
                    path = directory / f"{name.stem}-{n}{name.suffix}"
            paths.append(path)
    except OSError as exc:
        raise UsageError(
            f"cannot write results to {directory}: {exc.strerror or exc}",
            hint="give --save-result a writable directory",
        ) from None
    return paths
