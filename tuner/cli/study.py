"""``tuner run``, ``studies``, ``trials``, ``best`` and ``worker``: a study's life on the
command line. The heavy modules are imported inside each command, once its options are known
to be good, so that a typo is reported at once."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from tuner.cli.common import (
    JsonOpt,
    PriceOpt,
    StorageOpt,
    VllmPythonOpt,
    checked_price,
    choice,
    err,
    interrupted,
    interruptible,
    open_repo,
    open_study,
    out,
    print_json,
    say,
    storage_url,
)
from tuner.doctor.checks import missing_sqlite_file
from tuner.errors import UsageError

if TYPE_CHECKING:
    from tuner.cli.progress import ConsoleReporter
    from tuner.db import Repository, StudyRow
    from tuner.domain import Estimate
    from tuner.spec import StudySpec


def run(
    spec_file: Annotated[
        Path | None, typer.Argument(help="A study spec (studies/*.toml); default: embedded demo.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model alias, local dir or hub id.")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU profile: a10g, h100, h200, cpu, ...")] = None,
    workload: Annotated[
        str | None,
        typer.Option(
            help="A preset (chat, chat-heavy, rag, code, multi-turn, throughput-256, seed-bench, "
            "smoke) or a trace as FORMAT:FILE (sharegpt:, burstgpt:, mooncake:, custom:, "
            "tuner:, trace:). See docs/workloads.md."
        ),
    ] = None,
    trials: Annotated[int | None, typer.Option(min=1, help="Trials in the study.")] = None,
    objective: Annotated[
        str | None,
        typer.Option(
            help="balanced, throughput, latency, memory, capacity (needs a ladder) or cost "
            "(lowest $/1M output tokens within the SLO)."
        ),
    ] = None,
    slo: Annotated[str | None, typer.Option(help="e.g. ttft_p99=500ms,e2e_p99=10s")] = None,
    gpu_price: Annotated[
        float | None,
        typer.Option(
            callback=checked_price,
            help="US dollars per GPU-hour for the $/1M-token figures (default: the catalog's "
            "list-price assumption for --gpu, where it has one).",
        ),
    ] = None,
    study: Annotated[str | None, typer.Option(help="Study name (default from the spec).")] = None,
    storage: StorageOpt = None,
    vllm_python: Annotated[
        str | None,
        typer.Option(help="Interpreter with vLLM installed (default: $TUNER_VLLM_PYTHON)."),
    ] = None,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted study.")] = False,
    seed: Annotated[int | None, typer.Option(help="Sampler seed (0 to 2^32 - 1).")] = None,
    confirm_launches: Annotated[
        int | None,
        typer.Option(
            min=0, help="Fresh launches per candidate in the confirmation: 0 (off) or 2 or more."
        ),
    ] = None,
    confirm_max_launches: Annotated[
        int | None,
        typer.Option(
            min=2,
            help="Launch budget per candidate in the confirmation: after --confirm-launches, "
            "pairs are added until each candidate is decided (default: no more).",
        ),
    ] = None,
    confirm_top: Annotated[
        int | None, typer.Option(min=1, help="Candidates re-measured against the defaults.")
    ] = None,
    emulate: Annotated[
        bool,
        typer.Option(help="Emulate --gpu's memory on a larger GPU here (results labelled)."),
    ] = False,
    search: Annotated[
        list[str] | None,
        typer.Option(
            metavar="FLAG=V1,V2",
            help="Also search a `vllm serve` flag: FLAG=V1,V2,... (repeatable; the flag as vLLM "
            "spells it or with underscores; FLAG alone takes tuner's built-in candidates).",
        ),
    ] = None,
    early_stop: Annotated[
        bool | None,
        typer.Option(
            "--early-stop/--no-early-stop",
            help="Stop a trial after its first load point when it is clearly worse than the "
            "best so far (beyond the measured noise); recorded as stopped_early. Not under "
            "the memory objective (its score is known only at a trial's end).",
        ),
    ] = None,
    parallel: Annotated[
        int,
        typer.Option(
            min=1,
            help="Worker processes for this study: one per GPU of the study's kind here "
            "(each pinned by UUID). Needs PostgreSQL; more hosts join with `tuner worker --study`.",
        ),
    ] = 1,
) -> None:
    """Run a study: launch vLLM per trial, drive the workload, record and rank."""
    from tuner.scoring import MAX_LAUNCHES
    from tuner.spec import DEFAULT_SPEC_PATH, StudySpec, load_spec, parse_search
    from tuner.spec.study import ONE_LAUNCH, ONE_LAUNCH_HINT

    if study is not None and not resume:  # a new study's name; a resumed one exists already
        from tuner.db import check_study_name

        check_study_name(study, where="--study")
    options: dict[str, Any] = {
        "model": model,
        "gpu": gpu,
        "workload": workload,
        "trials": trials,
        "objective": objective,
        "slo": slo,
        "name": study,
        "vllm_python": vllm_python,
        "seed": seed,
        "confirm_launches": confirm_launches,
        "confirm_max_launches": confirm_max_launches,
        "confirm_top": confirm_top,
        "emulate": emulate or None,
        "search": parse_search(search) if search else None,
        "early_stop": early_stop,
        "gpu_price": gpu_price,
    }
    if spec_file is not None:
        spec = load_spec(spec_file, resume=resume)
    elif model is not None:
        # A model given on the command line starts from a plain spec, not the CPU demo.
        spec = StudySpec(trials=16, workload="chat", source="command line")
    else:
        spec = load_spec(DEFAULT_SPEC_PATH)
    spec = spec.with_overrides(resume=resume, **options)
    if confirm_launches == 1:
        option = "--confirm-launches"
        raise UsageError(ONE_LAUNCH.format(f"{option} 1"), hint=ONE_LAUNCH_HINT.format(option))
    if confirm_launches is not None and confirm_launches > MAX_LAUNCHES:
        raise UsageError(
            f"--confirm-launches {confirm_launches}: at most {MAX_LAUNCHES} launches a candidate",
            hint="a difference that needs more is below what launches resolve: lower it",
        )
    budget = spec.confirm_max_launches
    if budget is not None and budget > MAX_LAUNCHES:
        raise UsageError(
            f"--confirm-max-launches {budget}: at most {MAX_LAUNCHES} launches a candidate",
            hint="a difference that needs more is below what launches resolve: lower it",
        )
    if budget is not None and budget < spec.confirm_launches:
        cap = (  # the option given, or the spec file's line it came from
            f"--confirm-max-launches {budget}"
            if confirm_max_launches is not None
            else f"[confirm] max_launches = {budget} in {spec.source}"
        )
        raise UsageError(
            f"{cap} is below the confirmation's first look of {spec.confirm_launches} launches",
            hint="raise --confirm-max-launches, or lower --confirm-launches",
        )
    url = storage_url(storage)
    if resume:
        spec = _resumed(spec, url, options, from_file=spec_file is not None)
    from tuner.compose import prepare
    from tuner.study import refuse_taken, run_study

    if parallel > 1:
        from tuner.runner import sigterm_as_interrupt

        with sigterm_as_interrupt():  # `kill PID` or a closed terminal: the workers stop too
            _run_parallel(spec, url, parallel, resume=resume, storage=storage)
        return
    prepared = prepare(spec, url, new_study=not resume)
    ctx = prepared.ctx
    if not resume:  # a name taken is said before the study's header, not after it
        refuse_taken(ctx.name, prepared.repo.get_study(ctx.name))
    out.print(
        f"study [bold]{ctx.name}[/]: {ctx.model.alias} on {prepared.runner.hardware.name}, "
        f"vLLM {ctx.vllm_version}, workload {ctx.workload.name}, objective "
        f"{spec.objective.value}, {spec.trials} trials"
    )
    from tuner.load import UNKNOWN_VOCAB_NOTE, fingerprint

    for line in fingerprint(ctx.workload).lines():
        out.print(escape(line))
    if "vocab_size" not in ctx.model.facts:
        out.print(f"  note: {escape(UNKNOWN_VOCAB_NOTE)}")
    from tuner.study.early import MEMORY_NOTE, judged_early

    if spec.early_stop and not judged_early(spec.objective):
        out.print(f"  note: {MEMORY_NOTE}")
    with _reporting(ctx.name, storage=storage) as reporter:
        ranked = run_study(ctx, prepared.runner, prepared.repo, resume=resume, reporter=reporter)
    print_best(prepared.repo, ctx.name, storage=storage)
    if not ranked:
        raise typer.Exit(1)


def _resumed(spec: StudySpec, url: str, options: dict[str, Any], *, from_file: bool) -> StudySpec:
    """The spec ``--resume`` continues: the one stored with the study (found by ``spec``'s
    name), with what the command line gives checked against it (:mod:`tuner.spec.resume`).
    A study that is not there is refused here, before anything is prepared or printed."""
    from tuner.db import Repository, check_leftovers, current_revision, ensure_ready, make_engine
    from tuner.db.session import safe_url
    from tuner.spec import FINGERPRINT, kept_cap, resumed_spec, stored_spec

    row = None
    missing = missing_sqlite_file(url)
    # No file yet, or no tuner tables (another application's database): no study, and nothing
    # created there to say so. Tuner's tables without a revision record are said as such.
    revision = current_revision(url) if missing is None else None
    if missing is None and revision is None:
        check_leftovers(url)
    if revision is not None:
        ensure_ready(url, auto_upgrade=True)
        engine = make_engine(url)
        try:
            repo = Repository(engine)
            row = repo.get_study(spec.study_name())
            if row is None and spec.name is None:
                # A name made before GPU names were the profile's (tiny-ernie-H100-...): the
                # one study of this name in another case, where there is one.
                wanted = spec.study_name().lower()
                alike = [s for s in repo.list_studies() if s.name.lower() == wanted]
                row = alike[0] if len(alike) == 1 else None
        finally:
            engine.dispose()
    if row is None:
        where = f"database {missing} does not exist" if missing else f"not in {safe_url(url)}"
        raise UsageError(
            f"no study named {spec.study_name()!r} to resume: {where}",
            hint="run `tuner studies` (with --storage URL, or $TUNER_DB_URL, for the database "
            "that holds it)",
        )
    if not row.spec:
        return dataclasses.replace(spec, name=row.name)
    stored = stored_spec(row.spec, row.name, row.model_source)
    if from_file:  # the file and the options on top of it: all of it must describe the study
        return resumed_spec(stored, kept_cap(spec, row.spec.get(FINGERPRINT)))
    given = {k: v for k, v in options.items() if v is not None}
    return resumed_spec(stored, stored.with_overrides(resume=True, **given), changed=set(given))


@contextmanager
def _reporting(
    name: str, again: str | None = None, storage: str | None = None
) -> Iterator[ConsoleReporter]:
    """The console reporter of study ``name``'s run, closed at the end, with ``kill PID``
    (SIGTERM) and a closed terminal (SIGHUP) taken as Ctrl-C: the running trial's server is
    ended, the trial recorded, and the command exits 130 saying how to continue (``again``:
    the command that does, when it is not ``tuner run --study NAME --resume``)."""
    from tuner.cli.progress import ConsoleReporter
    from tuner.db import with_storage

    how = (
        f"{again} continues it"
        if again
        else f"--resume continues ({with_storage(f'tuner run --study {name} --resume', storage)})"
    )
    reporter = ConsoleReporter(out)
    try:
        with interruptible(
            lambda: _interrupted("the running trial is recorded as interrupted", how)
        ):
            yield reporter
    finally:
        reporter.close()


def _interrupted(what: str, how: str) -> str:
    """What a Ctrl-C (or SIGTERM) left recorded and which command continues."""
    return f"interrupted: {escape(what)}; {escape(how)}"


def _run_parallel(spec: Any, url: str, n: int, *, resume: bool, storage: str | None) -> None:
    """``--parallel N``: set the study up here, then N workers join it (one per GPU)."""
    from tuner.compose import prepare, writable_home
    from tuner.db import with_storage
    from tuner.runner import matching_gpus, reap_orphans
    from tuner.study import parallel, set_up_study
    from tuner.telemetry import detect_gpus

    parallel.refuse_sqlite(url, f"--parallel {n}", spec.study_name())
    prepared = prepare(spec, url, new_study=not resume)
    ctx = prepared.ctx
    uuids = None
    if not ctx.gpu.is_cpu:
        found = matching_gpus(
            ctx.gpu, detect_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"), emulate=spec.emulate
        )
        uuids = [g.uuid for g in found]
    places = parallel.seats(n, uuids)
    set_up_study(ctx, prepared.repo, resume=resume)
    out.print(
        f"study [bold]{ctx.name}[/]: {ctx.model.alias}, vLLM {ctx.vllm_version}, workload "
        f"{ctx.workload.name}, {spec.trials} trials over {n} workers"
        + ("" if uuids else " (on CPU: they share its cores, so each measures less)")
    )
    command = parallel.worker_command(ctx.name, spec.vllm_python)
    again = with_storage(f"tuner run --study {ctx.name} --resume --parallel {n}", storage)
    again += " continues it"

    def say(line: str) -> None:
        out.print(line, markup=False, highlight=False)

    try:
        codes = parallel.run_workers(command, places, say, url, storage)
    except KeyboardInterrupt:  # each worker stopped on its SIGTERM and recorded its trial
        parallel.settle(prepared.repo, ctx.name)  # one killed before it could record the study
        interrupted(_interrupted("the workers' running trials are recorded as interrupted", again))
    finally:  # the servers of a worker that died, or was killed after its SIGTERM, end now
        reap_orphans(writable_home() / "leases")
    for seat, code in zip(places, codes, strict=True):
        if code != 0:
            out.print(f"[red]{escape(seat.label)} exited with code {code}[/]")
    if parallel.settle(prepared.repo, ctx.name):  # every worker gone, the study not done
        out.print(f"the study is recorded interrupted: {escape(again)}")
    shown = print_best(prepared.repo, ctx.name, storage=storage)
    if not shown or any(codes):
        raise typer.Exit(1)


def studies(storage: StorageOpt = None, as_json: JsonOpt = False) -> None:
    """List the studies in the database."""
    from tuner.study import runner_gone

    rows = open_repo(storage).list_studies()
    if as_json:
        from tuner.domain import to_jsonable

        totals = ("n_trials", "n_budget_trials", "n_confirmation_launches")  # properties
        print_json(
            [
                {
                    **to_jsonable(s),
                    **{k: getattr(s, k) for k in totals},
                    "runner_gone": runner_gone(s),
                    "failure": s.failure,
                }
                for s in rows
            ]
        )
        return
    table = Table("study", "model", "gpu", "workload", "objective", "status", "trials")
    gone = [s.name for s in rows if runner_gone(s)]
    for s in rows:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(s.trial_counts.items()) if n) or "0"
        of = f" of {s.n_trials_requested}" if s.n_trials_requested else ""
        free = f" + {s.free_label}" if s.free_label else ""
        counts = f"{s.n_budget_trials}{of} search trials{free} ({counts})"
        if s.n_confirmation_launches:
            counts += f"; {s.n_confirmation_launches} confirmation launches"
        status = f"{s.status} (tuner gone)" if s.name in gone else str(s.status)
        cells = (s.name, s.model, s.gpu, s.workload_label, s.objective, status, counts)
        table.add_row(*map(escape, cells))  # text: "smoke[concurrency=2]" is no markup
    if not rows:  # said beside the output (stderr), as `tuner export` says an empty dataset
        err.print("no studies in this database: `tuner run` (or a worker) stores them")
        return
    out.print(table)
    from tuner.db import with_storage

    for name in gone:
        err.print(
            f"study {name!r}: the tuner that ran it on this host has exited; "
            f"`{with_storage(f'tuner run --study {name} --resume', storage)}` continues it"
        )
    for s in rows:
        _say_failure(s)


def _say_failure(study: StudyRow) -> None:
    """Why ``study`` failed to run, as its worker printed it (nothing when it did not fail
    or no reason was recorded)."""
    if study.failure is not None:
        err.print(escape(f"study {study.name!r} failed to run: {study.failure['message']}"))
        if study.failure["hint"]:
            err.print(escape(f"  hint: {study.failure['hint']}"))


def trials(
    study: Annotated[str, typer.Argument(help="Study name.")],
    state: Annotated[str | None, typer.Option(help="complete, failed, pruned, running")] = None,
    as_json: JsonOpt = False,
    storage: StorageOpt = None,
) -> None:
    """List a study's trials with their metrics or failure class.

    "flags": the trial's client-bound windows (tuner's load generator was saturated: its
    numbers are the client's floor) and disturbed ones (it was short of CPU, or another process
    used the GPU).
    """
    from tuner.domain import TrialStatus, to_jsonable
    from tuner.scoring import window_flags

    status = choice(TrialStatus, state, "state")
    repo = open_study(storage, study)
    rows = repo.list_trials(study, status=status, limit=100_000)
    stored = repo.get_study(study)
    from tuner.results.costs import capacity_at_least

    spec = stored.spec if stored is not None else None
    if as_json:
        from tuner.domain import Objective
        from tuner.study import score_reference, study_objective, trial_score

        objective = study_objective(stored) if stored else Objective.BALANCED
        # The score every surface shows, against the study's defaults (None without them).
        reference = score_reference(
            repo.list_trials(study, status=TrialStatus.COMPLETE, limit=None)
        )
        print_json(
            [
                {
                    **to_jsonable(r),
                    "objective_values": r.measured_values,  # as `tuner export` gives them
                    "score": trial_score(r, reference, objective),
                    "flags": window_flags(r.windows).to_dict(),
                    # Its metrics' capacity_* only a lower bound (an open-loop load kept up with).
                    "capacity_is_lower_bound": capacity_at_least(r.metrics, r.windows, spec),
                }
                for r in rows
            ]
        )
        return
    from tuner.results import energy
    from tuner.study import runner_gone

    gone = stored is not None and runner_gone(stored)  # its running trial runs no more
    from tuner.load import capacity_text

    floors = {r.number for r in rows if capacity_at_least(r.metrics, r.windows, spec)}
    capacities = {r.number: capacity_text(r.metrics, r.windows, r.number in floors) for r in rows}
    curve = any(c is not None for c in capacities.values())  # a capacity study's ranking figure
    table = Table(
        "#", "status", "config", "out tok/s", *(["capacity"] if curve else []), "J/out tok",
        "P99 E2E ms", "memory GiB", "backend", "failure", "flags",
    )  # fmt: skip
    unmeasured: set[str] = set()
    for r in rows:
        m = r.metrics
        ok = r.status is TrialStatus.COMPLETE and m
        values: list[float] = list(r.objective_values or [])
        why = energy.absent(m, on_gpu=r.gpu_uuid is not None) if ok else None
        unmeasured.update([why] if why else [])
        cells = (
            str(r.number) + (" (baseline)" if r.is_baseline else ""),
            r.status.value + (" (tuner gone)" if gone and r.status is TrialStatus.RUNNING else ""),
            r.config.label(),
            _ci(m["output_throughput"]) if ok else "",
            *([capacities[r.number] or ""] if curve else []),
            m[energy.PER_TOKEN].figures() if ok and not why else "",
            _ci(m["e2e_p99_ms"]) if ok else "",
            f"{values[1]:.2f}" if ok and len(values) == 3 else "",
            r.effective_backend or "",
            (r.failure.value + ": " + r.failure_detail[:60]) if r.failure else "",
            window_flags(r.windows).short(),
        )
        # Text, not markup: a log line's "[rank0]:" or a path in brackets, a "[nan, nan]" range.
        table.add_row(*map(escape, cells))
    out.print(table)
    if stored is not None:
        _say_failure(stored)
    if curve:
        out.print(
            "out tok/s: at the workload's own load point; capacity: the most a load point that "
            "met the SLO served (what a capacity study ranks by)"
        )
    if floors:
        from tuner.results.costs import capacity_bound_note

        out.print(escape(f"at least: {capacity_bound_note(sorted(floors))}"))
    for why in sorted(unmeasured):
        out.print(escape(why))


def _ci(e: Estimate) -> str:
    return f"{e.median:.1f} [{e.low:.1f}, {e.high:.1f}]"


def best(
    study: Annotated[str, typer.Argument(help="Study name.")],
    gpu_price: PriceOpt = None,
    storage: StorageOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the best configuration's flags and a ready `vllm serve` line."""
    repo = open_study(storage, study)
    if as_json:
        from tuner.results import recommendation
        from tuner.study import stored_plan

        rec = recommendation(repo, study, gpu_price=gpu_price)
        print_json({"study": study, "recommendation": rec, "plan": stored_plan(repo, study)})
        if rec is None:
            raise typer.Exit(1)
        return
    if not print_best(repo, study, gpu_price=gpu_price, storage=storage):
        raise typer.Exit(1)


def print_best(
    repo: Repository, name: str, *, gpu_price: float | None = None, storage: str | None = None
) -> bool:
    """The study's recommendation on the screen; False when no trial completed. ``storage``:
    the ``--storage`` given, which its hint repeats."""
    from tuner.db import with_storage
    from tuner.results import recommendation

    rec = recommendation(repo, name, gpu_price=gpu_price)
    if rec is None:
        out.print(
            f"[red]no trial of {escape(name)} completed[/]: nothing to recommend; see "
            f"`{escape(with_storage(f'tuner trials {name}', storage))}`"
        )
        return False
    out.print(escape(rec.render()))  # "[range]" and flags are text, not rich markup
    from tuner.study import stored_plan

    plan = stored_plan(repo, name)
    if plan and plan.get("text"):
        out.print("where tuner looked (the lever plan):")
        for line in plan["text"]:
            out.print(f"  {escape(line)}")
    return True


def worker(
    storage: StorageOpt = None,
    study: Annotated[
        str | None,
        typer.Option(
            help="Join this running study (beside `tuner run --parallel` or other hosts' "
            "workers) instead of taking queued ones. Needs PostgreSQL."
        ),
    ] = None,
    once: Annotated[
        bool,
        typer.Option(help="Stop when no study is queued (exit 1 when one taken failed to run)."),
    ] = False,
    poll: Annotated[float, typer.Option(min=0.1, help="Seconds between queue checks.")] = 10.0,
    vllm_python: VllmPythonOpt = None,
) -> None:
    """Run studies queued through the API (POST /v1/studies), one after another."""
    from tuner.cli.progress import ConsoleReporter
    from tuner.db import Repository, ensure_ready, make_engine
    from tuner.study import refuse_sqlite, run_worker

    url = storage_url(storage)
    if study is not None:  # before anything is created: SQLite has no second host to join
        refuse_sqlite(url, "`tuner worker --study`", study)
    if (missing := missing_sqlite_file(url)) is not None:  # `tuner db upgrade` makes it
        if once:  # nothing can be queued in a file that is not there
            say(f"worker: 0 studies taken (database {missing} does not exist)")
            return
        from tuner.db import with_storage

        say(
            f"worker: waiting for database {missing} (`{with_storage('tuner db upgrade', url)}` "
            f"creates it; then `{with_storage('tuner serve', url)}` queues studies in it)"
        )
        while missing_sqlite_file(url) is not None:
            time.sleep(poll)
    ensure_ready(url, auto_upgrade=True)
    if study is not None:
        from tuner.study.parallel import HINT_STORAGE

        # a worker of `tuner run --parallel` names the run's --storage in its hints
        _join(url, study, vllm_python, storage or os.environ.get(HINT_STORAGE))
        return
    failed: list[str] = []
    # `kill PID` ends the server and records the trial; run_worker says which, and how to go on
    with interruptible():
        taken = run_worker(
            Repository(make_engine(url)),
            url,
            once=once,
            poll_s=poll,
            vllm_python=vllm_python,
            say=say,  # as it is: a hint's [[enqueue]] or [space] is no markup
            reporter_factory=lambda: ConsoleReporter(out),
            failed=failed,
        )
    out.print(
        f"worker: {taken} stud{'y' if taken == 1 else 'ies'} taken"
        + (f", {len(failed)} failed to run ({', '.join(failed)})" if failed else "")
    )
    if failed:  # a script running `tuner worker --once` learns it from the exit status
        raise typer.Exit(1)


def _join(url: str, name: str, vllm_python: str | None, storage: str | None) -> None:
    from tuner.db import Repository, make_engine, with_storage
    from tuner.study import join_study

    with _reporting(name, with_storage(f"tuner worker --study {name}", storage)) as reporter:
        repo = Repository(make_engine(url))
        n = join_study(repo, url, name, vllm_python=vllm_python, reporter=reporter)
    out.print(f"worker: study {name} has {n} measured trial(s); this worker is done")
