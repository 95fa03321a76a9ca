"""The ``tuner`` command line. Commands build objects through :mod:`tuner.study.compose` and print;
every TunerError becomes a message with a hint and its exit code (2 for bad input)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuner.errors import TunerError, UsageError

app = typer.Typer(
    help="Measure vLLM serving configurations on real servers and recommend the best.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="tuner's own database tables (migrations).", no_args_is_help=True)
app.add_typer(db_app, name="db")

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

StorageOpt = Annotated[
    str | None,
    typer.Option("--storage", help="Database URL (default: $TUNER_DB_URL or sqlite:///tuner.db)."),
]


def _storage(url: str | None) -> str:
    from tuner.db.session import default_url

    return url or default_url()


def _repo(url: str | None, study: str | None = None) -> Any:
    """The repository of an existing database, for the commands that only read.

    A SQLite file that does not exist holds no studies: say so (exit 2, naming ``study`` if
    given) rather than create an empty file as a side effect of a typo in the path.
    """
    storage = _storage(url)
    missing = _missing_sqlite_file(storage)
    if missing is not None:
        what = f"no study named {study!r}" if study else "no studies"
        raise UsageError(
            f"{what}: database {missing} does not exist",
            hint="`tuner run` creates it; or point --storage / $TUNER_DB_URL at another database",
        )
    from tuner.db.migrate import ensure_ready
    from tuner.db.repository import Repository
    from tuner.db.session import make_engine

    ensure_ready(storage, auto_upgrade=False)
    return Repository(make_engine(storage))


def _missing_sqlite_file(url: str) -> Path | None:
    """The path of a SQLite database file that does not exist; None for anything else."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None  # make_engine reports a malformed URL
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    if database.startswith("file:"):
        return None
    path = Path(database).expanduser()
    return None if path.exists() else path


@app.command()
def run(
    spec_file: Annotated[
        Path | None, typer.Argument(help="A study spec (studies/*.toml); default: embedded demo.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model alias, local dir or hub id.")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU profile: a10g, h100, h200, cpu, ...")] = None,
    workload: Annotated[
        str | None, typer.Option(help="chat, rag, code, seed-bench, smoke or trace:FILE.")
    ] = None,
    trials: Annotated[int | None, typer.Option(min=1, help="Trials in the study.")] = None,
    objective: Annotated[
        str | None,
        typer.Option(help="balanced, throughput, latency, memory or capacity (needs a ladder)."),
    ] = None,
    slo: Annotated[str | None, typer.Option(help="e.g. ttft_p99=500ms,e2e_p99=10s")] = None,
    study: Annotated[str | None, typer.Option(help="Study name (default from the spec).")] = None,
    storage: StorageOpt = None,
    vllm_python: Annotated[
        str | None,
        typer.Option(help="Interpreter with vLLM installed (default: $TUNER_VLLM_PYTHON)."),
    ] = None,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted study.")] = False,
    seed: Annotated[int | None, typer.Option(help="Sampler seed.")] = None,
    confirm_launches: Annotated[
        int | None,
        typer.Option(min=0, help="Fresh launches per candidate in the confirmation (0: off)."),
    ] = None,
    confirm_top: Annotated[
        int | None, typer.Option(min=1, help="Candidates re-measured against the defaults.")
    ] = None,
    emulate: Annotated[
        bool,
        typer.Option(help="Emulate --gpu's memory on a larger GPU here (results labelled)."),
    ] = False,
) -> None:
    """Run a study: launch vLLM per trial, drive the workload, record and rank."""
    # The heavy modules are imported only once the spec and options are known to be good, so
    # that a typo is reported at once.
    from tuner.spec.study import DEFAULT_SPEC_PATH, load_spec

    if spec_file is not None:
        spec = load_spec(spec_file)
    else:
        spec = load_spec(DEFAULT_SPEC_PATH)
        if model is not None:
            # A model given on the command line starts from a plain spec, not the CPU demo.
            from tuner.spec.study import StudySpec

            spec = StudySpec(trials=16, workload="chat", source="command line")
    spec = spec.with_overrides(
        model=model,
        gpu=gpu,
        workload=workload,
        trials=trials,
        objective=objective,
        slo=slo,
        name=study,
        vllm_python=vllm_python,
        seed=seed,
        confirm_launches=confirm_launches,
        confirm_top=confirm_top,
        emulate=emulate or None,
    )
    from tuner.study.compose import prepare

    prepared = prepare(spec, _storage(storage))
    from tuner.cli.progress import ConsoleReporter
    from tuner.study.loop import run_study

    ctx = prepared.ctx
    out.print(
        f"study [bold]{ctx.name}[/]: {ctx.model.alias} on {prepared.runner.hardware.name}, "
        f"vLLM {ctx.vllm_version}, workload {ctx.workload.name}, objective "
        f"{spec.objective.value}, {spec.trials} trials"
    )
    from tuner.vllm.interrupts import sigterm_as_interrupt

    reporter = ConsoleReporter(out)
    try:
        with sigterm_as_interrupt():  # `kill PID` ends the server and records the trial
            ranked = run_study(
                ctx, prepared.runner, prepared.repo, resume=resume, reporter=reporter
            )
    finally:
        reporter.close()
    _print_best(prepared.repo, ctx.name)
    if not ranked:
        raise typer.Exit(1)


@app.command()
def studies(storage: StorageOpt = None) -> None:
    """List the studies in the database."""
    repo = _repo(storage)
    table = Table("study", "model", "gpu", "workload", "objective", "status", "trials")
    for s in repo.list_studies():
        counts = ", ".join(f"{n} {k}" for k, n in sorted(s.trial_counts.items()) if n) or "0"
        if s.n_confirmation_launches:
            counts += f"; {s.n_confirmation_launches} confirmation launches"
        table.add_row(s.name, s.model, s.gpu, s.workload, s.objective, s.status, counts)
    out.print(table)


@app.command()
def trials(
    study: Annotated[str, typer.Argument(help="Study name.")],
    state: Annotated[str | None, typer.Option(help="complete, failed, pruned, running")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    storage: StorageOpt = None,
) -> None:
    """List a study's trials with their metrics or failure class.

    "flags": the trial's client-bound windows (tuner's load generator was saturated: its
    numbers are the client's floor) and disturbed ones (other processes took CPU or the GPU).
    """
    from tuner.domain import TrialStatus, to_jsonable
    from tuner.scoring.caveats import window_flags

    status = _status(state)
    repo = _repo(storage, study)
    if repo.get_study(study) is None:
        raise UsageError(f"no study named {study!r}", hint="run `tuner studies`")
    rows = repo.list_trials(study, status=status, limit=100_000)
    if as_json:
        records = [{**to_jsonable(r), "flags": window_flags(r.windows).to_dict()} for r in rows]
        out.print_json(json.dumps(records))
        return
    table = Table(
        "#", "status", "config", "out tok/s", "P99 E2E ms", "memory GiB", "backend", "failure",
        "flags",
    )  # fmt: skip
    for r in rows:
        m = r.metrics
        ok = r.status is TrialStatus.COMPLETE and m
        values = r.objective_values or []
        table.add_row(
            str(r.number) + (" (baseline)" if r.is_baseline else ""),
            r.status.value,
            r.config.label(),
            _ci(m["output_throughput"]) if ok else "",
            _ci(m["e2e_p99_ms"]) if ok else "",
            f"{values[1]:.2f}" if ok and len(values) == 3 else "",
            r.effective_backend or "",
            (r.failure.value + ": " + r.failure_detail[:60]) if r.failure else "",
            window_flags(r.windows).short(),
        )
    out.print(table)


def _status(state: str | None) -> Any:
    from tuner.domain import TrialStatus

    if state is None:
        return None
    try:
        return TrialStatus(state)
    except ValueError:
        allowed = [s.value for s in TrialStatus]
        raise UsageError(f"unknown state {state!r}", hint=f"use one of {allowed}") from None


def _ci(e: Any) -> str:
    return f"{e.median:.1f} [{e.low:.1f}, {e.high:.1f}]"


@app.command()
def best(
    study: Annotated[str, typer.Argument(help="Study name.")],
    storage: StorageOpt = None,
) -> None:
    """Print the best configuration's flags and a ready `vllm serve` line."""
    repo = _repo(storage, study)
    if repo.get_study(study) is None:
        raise UsageError(f"no study named {study!r}", hint="run `tuner studies`")
    _print_best(repo, study)


def _print_best(repo: Any, name: str) -> None:
    from tuner.results.recommend import recommendation

    rec = recommendation(repo, name)
    if rec is None:
        out.print(
            f"[red]no trial of {name} completed[/]: nothing to recommend; see `tuner trials {name}`"
        )
        return
    out.print(rec.render())


@db_app.command("upgrade")
def db_upgrade(storage: StorageOpt = None) -> None:
    """Create or migrate tuner's tables to the current revision."""
    from tuner.db.migrate import current_revision, upgrade

    url = _storage(storage)
    upgrade(url)
    out.print(f"{url}: tuner schema at revision {current_revision(url)}")


@db_app.command("current")
def db_current(storage: StorageOpt = None) -> None:
    """Print the schema revision of tuner's tables."""
    from tuner.db.migrate import current_revision, head_revision

    url = _storage(storage)
    out.print(f"{url}: at {current_revision(url) or 'nothing (empty)'}, head {head_revision()}")


@db_app.command("merge")
def db_merge(
    source: Annotated[str, typer.Argument(help="Database to merge in: a SQLite file or a URL.")],
    storage: StorageOpt = None,
    rename_suffix: Annotated[
        str | None,
        typer.Option(help="Merge a study whose name the target uses for another as NAME-SUFFIX."),
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="Say what would be merged; write nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object for scripts.")] = False,
) -> None:
    """Copy another database's studies, trials, comparisons and Optuna studies into this one."""
    from tuner.cli.db import run_merge

    say = (
        (lambda t: print(t, flush=True))
        if as_json
        else (lambda t: out.print(escape(t), soft_wrap=True))  # URLs and paths unbroken
    )
    run_merge(
        source,
        _storage(storage),
        rename_suffix=rename_suffix,
        dry_run=dry_run,
        as_json=as_json,
        say=say,
    )


@app.command()
def models() -> None:
    """List the catalogued models."""
    from tuner.catalog.models import MODELS

    table = Table("alias", "hub id", "architecture", "layers", "params", "max len")
    for alias, m in MODELS.items():
        table.add_row(
            alias,
            m.hub_id,
            m.architecture,
            str(m.num_layers),
            f"{m.parameter_count() / 1e9:.2f} B",
            str(m.max_position_embeddings),
        )
    out.print(table)


@app.command()
def gpus() -> None:
    """List the GPU profiles."""
    from tuner.catalog.gpus import GPUS

    table = Table("name", "GPU", "memory", "sm", "attention backends", "kv dtypes")
    for name, g in GPUS.items():
        sm = f"{g.compute_capability[0]}.{g.compute_capability[1]}" if g.compute_capability else "-"
        table.add_row(
            name,
            g.display_name,
            f"{g.memory_gib:g} GiB",
            sm,
            ", ".join(g.attention_backends),
            ", ".join(g.kv_cache_dtypes),
        )
    out.print(table)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0 picks a free one).")] = 8080,
    storage: StorageOpt = None,
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the key that writes need.")
    ] = "TUNER_API_KEY",
    cors_origin: Annotated[
        list[str] | None, typer.Option(help="Allow this browser origin (repeatable).")
    ] = None,
) -> None:
    """Serve the recommendations API and dashboards (docs at /docs) until Ctrl-C."""
    from tuner.cli.serve import serve as serve_api

    serve_api(
        storage_url=_storage(storage),
        host=host,
        port=port,
        api_key_env=api_key_env,
        cors_origins=cors_origin or (),
        say=lambda text: out.print(escape(text), soft_wrap=True),  # URLs and paths unbroken
    )


@app.command()
def doctor(
    gpu: Annotated[str | None, typer.Option(help="Check for studies on this profile.")] = None,
    vllm_python: Annotated[
        str | None, typer.Option(help="Interpreter with vLLM (default: $TUNER_VLLM_PYTHON).")
    ] = None,
    storage: StorageOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object for scripts.")] = False,
) -> None:
    """What this machine can tune, and what would stop a study (exit 1), with the fix."""
    from tuner.cli.doctor import render
    from tuner.doctor.report import examine
    from tuner.study.compose import default_vllm_python

    report = examine(
        gpu=gpu, vllm_python=vllm_python or default_vllm_python(), storage_url=_storage(storage)
    )
    data = report.to_json()
    if as_json:
        print(json.dumps(data, indent=2), flush=True)
    else:
        for line in render(data):
            out.print(line, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def launch(
    model: Annotated[str, typer.Option(help="Model alias (as studied), dir or hub id.")],
    gpu: Annotated[str, typer.Option(help="GPU profile the configuration was measured on.")],
    workload: Annotated[str | None, typer.Option(help="Only studies of this workload.")] = None,
    objective: Annotated[
        str | None, typer.Option(help="Rank by: balanced, throughput, latency, memory or capacity.")
    ] = None,
    storage: StorageOpt = None,
    api: Annotated[
        str | None, typer.Option(help="A tuner API to ask instead of the database.")
    ] = None,
    host: Annotated[str, typer.Option(help="Address to serve on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to serve on.")] = 8000,
    vllm_python: Annotated[
        str | None, typer.Option(help="Interpreter with vLLM (default: $TUNER_VLLM_PYTHON).")
    ] = None,
    print_only: Annotated[
        bool, typer.Option("--print", help="Only print the command, shell-quoted.")
    ] = False,
    startup_timeout: Annotated[float, typer.Option(help="Seconds to wait for vLLM.")] = 900.0,
    dummy_weights: Annotated[
        bool, typer.Option(help="Random weights even for a model whose weights exist.")
    ] = False,
    server_module: Annotated[str, typer.Option(hidden=True)] = "vllm.entrypoints.openai.api_server",
) -> None:
    """Serve a model with the best measured configuration (OpenAI API) until Ctrl-C."""
    from tuner.cli.launch import run_launch

    if storage is not None and api is not None:
        raise UsageError("--storage and --api both name where to look", hint="pass one of them")
    code = run_launch(
        model=model,
        gpu=gpu,
        workload=workload,
        objective=objective,
        open_repo=lambda: _repo(storage),
        api=api,
        source=api or _storage(storage),
        host=host,
        port=port,
        vllm_python=vllm_python,
        print_only=print_only,
        startup_timeout_s=startup_timeout,
        dummy_weights=dummy_weights,
        module=server_module,
        say=lambda text: out.print(escape(text), soft_wrap=True),
        warn=lambda text: err.print(escape(text), soft_wrap=True),
    )
    if code:
        raise typer.Exit(code)


@app.command()
def worker(
    storage: StorageOpt = None,
    once: Annotated[bool, typer.Option(help="Stop when no study is queued.")] = False,
    poll: Annotated[float, typer.Option(min=0.1, help="Seconds between queue checks.")] = 10.0,
    vllm_python: Annotated[
        str | None, typer.Option(help="Interpreter with vLLM (default: $TUNER_VLLM_PYTHON).")
    ] = None,
) -> None:
    """Run studies queued through the API (POST /v1/studies), one after another."""
    from tuner.cli.progress import ConsoleReporter
    from tuner.db.migrate import ensure_ready
    from tuner.db.repository import Repository
    from tuner.db.session import make_engine
    from tuner.study.worker import run_worker
    from tuner.vllm.interrupts import sigterm_as_interrupt

    url = _storage(storage)
    ensure_ready(url, auto_upgrade=True)
    with sigterm_as_interrupt():  # `kill PID` ends the server and records the trial
        taken = run_worker(
            Repository(make_engine(url)),
            url,
            once=once,
            poll_s=poll,
            vllm_python=vllm_python,
            say=out.print,
            reporter_factory=lambda: ConsoleReporter(out),
        )
    out.print(f"worker: {taken} stud{'y' if taken == 1 else 'ies'} taken")


def _export_bench(
    study: str | None, output: Path | None, comparisons: bool, storage: str | None
) -> None:
    import json

    from tuner.results.report.bench_export import bench_files

    if study is None or comparisons or output is None:
        raise UsageError(
            "--format vllm-bench writes one file per window of a study's trials",
            hint="tuner export STUDY --format vllm-bench --out DIR",
        )
    repo = _repo(storage)
    if repo.get_study(study) is None:
        raise UsageError(f"no study named {study!r}", hint="run `tuner studies`")
    files = bench_files(repo, study)
    output.mkdir(parents=True, exist_ok=True)
    for name, result in files.items():
        (output / name).write_text(json.dumps(result, allow_nan=False))
    out.print(f"{len(files)} vllm bench serve results written to {output}/")
    if not files:
        out.print("(no trial of this study kept its per-request records)")


@app.command()
def export(
    study: Annotated[
        str | None, typer.Argument(help="Study name (optional with --comparisons).")
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="jsonl (dataset), md (table), or vllm-bench (one `vllm bench serve "
            "--save-result` JSON per measurement window, into the --out folder).",
        ),
    ] = "jsonl",
    output: Annotated[Path | None, typer.Option("--out", help="File (default: stdout).")] = None,
    comparisons: Annotated[
        bool,
        typer.Option(
            "--comparisons",
            help="Export comparisons (the study's confirmation; without a study every stored "
            "`tuner compare` and verify-claims result) instead of trials.",
        ),
    ] = False,
    storage: StorageOpt = None,
) -> None:
    """Export a study's trials, or comparisons, as a dataset (JSON Lines) or Markdown."""
    from tuner.results.comparisons import comparison_records, comparisons_markdown
    from tuner.results.export import markdown_table, study_records, to_jsonl

    if fmt not in ("jsonl", "md", "vllm-bench"):
        raise UsageError(f"unknown format {fmt!r}", hint="use --format jsonl, md or vllm-bench")
    if fmt == "vllm-bench":
        _export_bench(study, output, comparisons, storage)
        return
    if study is None and not comparisons:
        raise UsageError("name the study to export", hint="tuner export STUDY, or --comparisons")
    repo = _repo(storage)
    if study is not None and repo.get_study(study) is None:
        raise UsageError(f"no study named {study!r}", hint="run `tuner studies`")
    if comparisons:
        records = comparison_records(repo, study)
        text = to_jsonl(records) if fmt == "jsonl" else comparisons_markdown(records)
        what = "comparisons"
    else:
        assert study is not None
        records = study_records(repo, study)
        text = to_jsonl(records) if fmt == "jsonl" else markdown_table(records)
        what = "trials"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
        out.print(f"{len(records)} {what} written to {output}")


@app.command()
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
    """Measure a running OpenAI-compatible server at one or more load points, like `vllm bench
    serve` (same metrics and result format), with one warm-up for all of them."""
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
        raise SystemExit(_INTERRUPTED) from None
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


# `tuner compare` and `tuner verify-claims`: their modules import only typer at the top.
from tuner.cli.compare import compare as _compare  # noqa: E402
from tuner.cli.verify import verify_claims as _verify_claims  # noqa: E402

app.command("compare")(_compare)
app.command("verify-claims")(_verify_claims)


_INTERRUPTED = 130


def main() -> None:
    """Entry point: run the app, turning errors into a message and an exit code.

    Without standalone mode typer *returns* the code of ``typer.Exit`` (``--help`` gives 0,
    Ctrl-C gives 130) and raises click's usage errors, which subclass ``typer.TyperException``
    (typer vendors click, so ``click.ClickException`` would not catch them).
    """
    try:
        code = app(standalone_mode=False)
    except TunerError as exc:
        # escape: messages quote spec sections like [study], which rich would take for markup
        err.print(f"[red]error:[/] {escape(exc.message)}")
        if exc.hint:
            err.print(f"[yellow]hint:[/] {escape(exc.hint)}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        code = _INTERRUPTED
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        code = 1
    except typer.TyperException as exc:  # unknown option, bad value, missing argument: exit 2
        show = getattr(exc, "show", None)
        if callable(show):
            show()  # the usage line, "Try ... --help" and the error
        else:
            err.print(f"[red]error:[/] {escape(exc.format_message())}")
        sys.exit(exc.exit_code)
    if code == _INTERRUPTED:
        err.print("interrupted: the running trial is recorded as interrupted; --resume continues")
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
