"""`tuner worker`: runs the studies queued through the API (``POST /v1/studies``), or joins
one running study (``--study NAME``) beside its other workers.

Workers share the database: each takes the oldest queued study with an atomic status change
(:meth:`Repository.claim_queued_study`), so several workers on several GPU hosts can drain one
queue when the database is PostgreSQL. A study whose set-up fails (its GPU is not on this host,
vLLM missing) is marked failed with the reason and its hint stored with it (``StudyRow.failure``:
the API, the study page and `tuner studies` show them), and the worker goes on. While it runs
a study, a worker moves the study's ``updated_at`` every heartbeat (30 s). With nothing queued,
a worker takes over a study whose worker is gone (SIGKILL, a crash, a lost host:
:meth:`Repository.take_over_study`) and resumes it beside the workers that joined it, if any
(their live trials are theirs): gone is a worker process on this host that has exited, or a
study of another host's worker without a write for four heartbeats. One
stopped by Ctrl-C or SIGTERM is ``interrupted``, left for ``tuner run --study NAME --resume``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tuner.db import RUN_OWNER, Repository, StudyRow, StudyStatus, optuna_rdb
from tuner.errors import TunerError, UsageError
from tuner.spec import StudySpec, stored_spec
from tuner.study import sharing

if TYPE_CHECKING:
    from tuner.study.loop import Reporter

_JOIN_WAIT_S = 120.0  # for the worker that took a queued study to create its Optuna study


def run_worker(
    repo: Repository,
    storage_url: str,
    *,
    once: bool,
    poll_s: float,
    vllm_python: str | None,
    say: Callable[[str], None],
    reporter_factory: Callable[[], Reporter] | None = None,
    failed: list[str] | None = None,
) -> int:
    """Take and run queued studies; returns how many were taken. ``once``: stop when idle.
    ``failed`` collects the names of the studies taken that failed to run."""
    from tuner.compose import prepare
    from tuner.study.loop import run_study

    me = sharing.worker_identity()
    taken = 0
    while True:
        row = repo.claim_queued_study(worker=me)
        fresh = row is not None
        if row is None:  # a study whose worker died here (SIGKILL, a crash) is taken over
            row = repo.take_over_study(sharing.owner_gone, me)
        if row is None:
            if once:
                return taken
            time.sleep(poll_s)
            continue
        taken += 1
        what = f"{row.name} ({row.model} on {row.gpu}, {row.workload})"
        if fresh:
            say(f"worker: took study {what}")
        else:
            say(
                f"worker: took over study {what}: the worker that ran it is gone (its process "
                "here has exited, or one on another host stopped its heartbeat)"
            )
        try:
            spec = _spec_of(row, vllm_python)
            with sharing.study_heartbeat(repo, row.name, me):  # from the claim on: prepare
                # may take minutes (flags, a model); a queued study is set up here first
                prepared = prepare(spec, storage_url, new_study=fresh)
                reporter = reporter_factory() if reporter_factory else None
                # A study taken over resumes, unless its worker died before setting it up.
                started = not fresh and _has_optuna_study(storage_url, row.name)
                run_study(
                    prepared.ctx,
                    prepared.runner,
                    prepared.repo,
                    claimed=not started,
                    resume=started,
                    reporter=reporter,
                    owner=me,
                    takeover=started,
                )
        except TunerError as exc:  # its reason is stored: the API and the study page show it
            repo.set_study_failed(row.name, exc.message, exc.hint)
            say(f"worker: study {row.name} failed to run: {exc}")
            if failed is not None:
                failed.append(row.name)
            continue
        except BaseException as exc:
            # Ctrl-C, or a bug: never leave the claimed study "running", where no worker would
            # take it again; "interrupted" can be resumed (`tuner run --study NAME --resume`).
            with contextlib.suppress(Exception):
                repo.set_study_status(row.name, "interrupted")
            if isinstance(exc, KeyboardInterrupt):
                started = True
                with contextlib.suppress(Exception):
                    started = bool(repo.list_trials(row.name, limit=1))
                what = (
                    "its running trial is recorded as interrupted"
                    if started
                    else "stopped while it was set up, before any trial"
                )
                say(
                    f"worker: study {row.name} interrupted ({what}); "
                    f"`tuner run --study {row.name} --resume` continues it"
                )
            raise
        say(f"worker: study {row.name} {_ended(repo, row.name)}")


def _spec_of(row: StudyRow, vllm_python: str | None) -> StudySpec:
    """The spec a worker runs ``row`` with. TunerError, stored as the study's failure, for one
    this tuner cannot read (another version's): else each next worker would take it over and
    stop on it again."""
    try:
        return stored_spec(row.spec, row.name, row.model_source).with_overrides(
            vllm_python=vllm_python
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise TunerError(
            f"its stored spec cannot be read by this tuner ({exc})",
            hint="a tuner of another version queued it: run that version's `tuner worker`, or "
            "queue the study again through this version's API",
        ) from None


def _ended(repo: Repository, name: str) -> str:
    """How study ``name`` stands once its queue worker's run returned: finished, or confirming
    on a worker that joined it and took the confirmation (:func:`tuner.study.loop.run_study`)."""
    row = repo.get_study(name)
    if row is None or row.status == StudyStatus.FINISHED:
        return "finished"
    runner = row.spec.get(RUN_OWNER)
    by = f", {sharing.named(runner)}" if isinstance(runner, dict) else ""
    return f"is not finished: its confirmation was left to the worker that runs it{by}"


def join_study(
    repo: Repository,
    storage_url: str,
    name: str,
    *,
    vllm_python: str | None,
    reporter: Reporter | None = None,
) -> int:
    """Run trials of the existing study ``name`` beside its other workers until its budget
    is spent; returns how many of its trials have results. The spec is the study's own."""
    from tuner.compose import prepare
    from tuner.study.loop import run_study
    from tuner.study.standings import rank

    row = repo.get_study(name)
    if row is None:
        raise UsageError(f"no study named {name!r} to join", hint="run `tuner studies`")
    spec = stored_spec(row.spec, row.name, row.model_source).with_overrides(vllm_python=vllm_python)
    prepared = prepare(spec, storage_url)
    # A study queued through the API: the first worker to join takes it and sets it up
    # (Optuna's study, the baseline); the others wait for that, then join.
    first = row.status == StudyStatus.QUEUED and repo.claim_queued(name)
    if not first and not _has_optuna_study(storage_url, name, wait_s=_JOIN_WAIT_S):
        raise UsageError(
            f"study {name!r} has no Optuna study after {_JOIN_WAIT_S:.0f} s",
            hint="the worker that took it may have failed: see `tuner studies`",
        )
    run_study(
        prepared.ctx,
        prepared.runner,
        prepared.repo,
        claimed=first,
        join=not first,
        reporter=reporter,
    )
    return len(rank(prepared.repo, name, spec.objective))


def _has_optuna_study(storage_url: str, name: str, wait_s: float = 0.0) -> bool:
    """Whether study ``name`` has its Optuna study, waiting up to ``wait_s`` for the worker
    that took it (a queued study) to create it."""
    import optuna

    deadline = time.monotonic() + wait_s
    storage = optuna_rdb(storage_url)
    try:
        while name not in optuna.get_all_study_names(storage):
            if time.monotonic() >= deadline:
                return False
            time.sleep(1.0)
        return True
    finally:
        storage.engine.dispose()
