"""`tuner worker`: runs the studies queued through the API (``POST /v1/studies``).

Workers share the database: each takes the oldest queued study with an atomic status change
(:meth:`Repository.claim_queued_study`), so several workers on several GPU hosts can drain one
queue when the database is PostgreSQL. A study whose set-up fails (its GPU is not on this host,
vLLM missing) is marked failed with the reason in its notes, and the worker goes on.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from tuner.db.repository import Repository
from tuner.errors import TunerError
from tuner.spec.study import StudySpec


def run_worker(
    repo: Repository,
    storage_url: str,
    *,
    once: bool,
    poll_s: float,
    vllm_python: str | None,
    say: Callable[[str], None],
    reporter_factory: Callable[[], object] | None = None,
) -> int:
    """Take and run queued studies; returns how many were taken. ``once``: stop when idle."""
    from tuner.compose import prepare
    from tuner.study.loop import run_study

    taken = 0
    while True:
        row = repo.claim_queued_study()
        if row is None:
            if once:
                return taken
            time.sleep(poll_s)
            continue
        taken += 1
        say(f"worker: took study {row.name} ({row.model} on {row.gpu}, {row.workload})")
        spec = StudySpec.from_dict({**row.spec, "name": row.name}).with_overrides(
            vllm_python=vllm_python
        )
        try:
            prepared = prepare(spec, storage_url)
            reporter = reporter_factory() if reporter_factory else None
            run_study(prepared.ctx, prepared.runner, prepared.repo, claimed=True, reporter=reporter)  # type: ignore[arg-type]
        except TunerError as exc:
            repo.set_study_status(row.name, "failed")
            say(f"worker: study {row.name} failed to run: {exc}")
            continue
        except BaseException:
            # Ctrl-C, or a bug: never leave the claimed study "running", where no worker would
            # take it again; "interrupted" can be resumed (`tuner run --study NAME --resume`).
            with contextlib.suppress(Exception):
                repo.set_study_status(row.name, "interrupted")
            raise
        say(f"worker: study {row.name} finished")
