"""``tuner load URL``: tuner's load generator against any running OpenAI-compatible server,
with ``vllm bench serve``'s metrics and result format."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from tuner.cli.common import INTERRUPTED, err, out


def load(
    url: Annotated[
        str, typer.Argument(help="The server's base URL, e.g. http://127.0.0.1:8000 (or .../v1).")
    ],
    model: Annotated[
        str | None,
        typer.Option(help="Served model name (default: the first one the server lists)."),
    ] = None,
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
        typer.Option(help="With --request-rate: the cap on requests in flight (default 256)."),
    ] = None,
    prompt_tokens: Annotated[int, typer.Option(help="Tokens per prompt.")] = 512,
    output_tokens: Annotated[
        int, typer.Option(help="Tokens generated per request (EOS ignored).")
    ] = 256,
    requests: Annotated[
        int | None,
        typer.Option(
            help="Requests per load point. Default: 4 x concurrency (at least 32) in a closed "
            "loop, where a smaller number is raised to 4 x concurrency; with --request-rate "
            "about 10 s of arrivals at the highest rate (at least 64)."
        ),
    ] = None,
    warmup: Annotated[
        int, typer.Option(help="Warm-up requests (untimed, once for all points; 0: none).")
    ] = 32,
    vocab_size: Annotated[
        int,
        typer.Option(help="Prompts are token ids from 100 up to this (any tokenizer takes them)."),
    ] = 1024,
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
) -> None:
    """Measure a running OpenAI-compatible server at one or more load points.

    Like `vllm bench serve` (same metrics and result format), with one warm-up for all of them.
    """
    from tuner.load import bench

    opts = bench.options(
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
    )
    served = bench.check_server(opts.url, opts.model, min(opts.timeout_s, bench.PROBE_TIMEOUT_S))
    note = err if as_json else out  # with --json, stdout holds only the results
    note.print(escape(bench.summary_line(opts, served)), soft_wrap=True)
    try:
        results = bench.run(
            opts,
            served,
            on_phase=bench.progress(lambda text: err.print(escape(text)), opts),
        )
    except KeyboardInterrupt:
        err.print("interrupted: nothing was reported or written")
        raise SystemExit(INTERRUPTED) from None
    if as_json:
        for line in bench.result_lines(results):
            print(line, flush=True)
    else:
        table = Table(
            *bench.table_header(opts), box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
        )
        for column in table.columns:  # fold rather than cut a number at a narrow width
            column.overflow = "fold"
            column.justify = "right"
        table.columns[0].justify = "left"
        table.columns[0].no_wrap = True
        for point in results:
            table.add_row(*bench.table_row(point, opts))
        out.print(table)
    for point in results:
        for warning in bench.warnings(point):
            note.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    if save_result is not None:
        for path in bench.save(results, save_result):
            note.print(f"wrote {escape(str(path))}", soft_wrap=True)
