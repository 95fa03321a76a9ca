"""``tuner canary URL``: the canary's request shapes (:mod:`tuner.load.canary`) against any
running OpenAI-compatible server, as ``tuner launch`` sends them before it announces one."""

from __future__ import annotations

import math
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from tuner.cli.common import JsonOpt, err, out, print_json, say
from tuner.cli.load import ServedModel, ServerUrl, VocabSize, server_root
from tuner.errors import UsageError


def canary(
    url: ServerUrl,
    model: ServedModel = None,
    shapes: Annotated[
        str,
        typer.Option(
            help="full (every shape), quick (the first three, as each trial sends them) or a "
            "comma-separated list of shape names."
        ),
    ] = "full",
    vocab_size: VocabSize = 1024,
    max_model_len: Annotated[
        int | None,
        typer.Option(help="The context to fill (default: what /v1/models reports)."),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds one request may take.")] = 120.0,
    as_json: JsonOpt = False,
) -> None:
    """Send the canary's request shapes to a running server (exit 1 when one breaks it)."""
    from tuner.load import FULL, QUICK, SHAPES, PromptFactory, bench, run_canary
    from tuner.load.canary import GENERATED

    chosen = {"full": FULL, "quick": QUICK}.get(shapes)
    if chosen is None:
        chosen = tuple(s.strip() for s in shapes.split(",") if s.strip())
        unknown = [s for s in chosen if s not in SHAPES]
        if unknown or not chosen:
            raise UsageError(
                f"unknown canary shapes {unknown or shapes!r}",
                hint=f"--shapes full, quick or some of: {', '.join(SHAPES)}",
            )
    if vocab_size < 2:
        raise UsageError("--vocab-size must be at least 2")
    if max_model_len is not None and max_model_len <= GENERATED:
        raise UsageError(
            f"--max-model-len must be above {GENERATED} (the tokens each canary request asks "
            f"for), got {max_model_len}",
            hint="leave it out to take what the server reports in /v1/models",
        )
    if not (math.isfinite(timeout) and timeout > 0):
        raise UsageError(f"--timeout must be > 0 seconds, got {timeout}", hint="e.g. --timeout 120")
    root = server_root(url)
    served = bench.check_server(root, model, min(timeout, bench.PROBE_TIMEOUT_S))
    note = err if as_json else out
    note.print(escape(f"{root} model {served}: {len(chosen)} canary shapes"), soft_wrap=True)
    report = run_canary(
        root,
        served,
        shapes=chosen,
        prompts=PromptFactory(vocab_size, synthetic=False),
        max_model_len=max_model_len,
        timeout_s=timeout,
    )
    if as_json:
        print_json({"url": root, "model": served, **report.to_dict()})
    else:
        table = Table("shape", "result", "seconds", "server after")
        for o in report.outcomes:
            table.add_row(
                o.shape,
                "ok" if o.ok else f"[red]failed[/]: {escape(o.detail)}",
                f"{o.seconds:.2f}",
                "serving" if o.server_alive else f"[red]{escape(o.after)}[/]",
            )
        for name in report.skipped:
            table.add_row(name, "not sent", "", "")
        out.print(table)
        if report.liveness != "/health":
            say(
                f"GET /health was not found (404) before the first shape: whether the server "
                f"still served was read from GET {report.liveness}"
            )
        say(report.summary())
    if not report.passed:
        raise typer.Exit(1)
