"""What ``tuner launch`` sends before it says a server is ready, in this order: the canary's
quick shapes as the fresh server's first requests (as every trial sends them), the study
workload's warm-up shapes (as a trial sends them before it measures), then the full canary
(:mod:`tuner.load.canary`). A server that a client's first request would break is reported,
never announced."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tuner.catalog import resolve_model
from tuner.domain import FailureClass
from tuner.errors import LoadFailure, UsageError
from tuner.load import (
    FULL,
    QUICK,
    UNKNOWN_VOCAB_NOTE,
    CanaryReport,
    LoadGenerator,
    PromptFactory,
    get_workload,
    run_canary,
)


def make_ready(
    base_url: str,
    served_model_name: str,
    *,
    model: str,
    workload: str,
    synthetic_tokenizer: bool,
    alive: Callable[[], bool],
    say: Callable[[str], None],
    overrides: Mapping[str, Any] | None = None,
) -> CanaryReport:
    """The quick canary, a warm-up with ``workload``'s shapes (with the study's ``overrides``
    of them), then the full canary's report.

    Raises ServerFailure (CANARY_FAILED, naming the shape) when the canary breaks the server,
    and LoadFailure when the warm-up's requests fail: the caller stops the server.
    """
    spec = resolve_model(model)
    if "vocab_size" not in spec.facts:
        say(UNKNOWN_VOCAB_NOTE)
    prompts = PromptFactory(spec.facts.get("vocab_size"), synthetic=synthetic_tokenizer)
    say(f"canary: {len(QUICK)} request shapes first")
    first = run_canary(base_url, served_model_name, shapes=QUICK, prompts=prompts, alive=alive)
    first.raise_if_failed()
    try:
        shape = get_workload(workload, overrides or {})
    except UsageError as exc:  # e.g. trace:FILE measured on another machine
        say(f"no warm-up: workload {workload!r} is not available here ({exc.message})")
    else:
        if shape.warmup_requests:
            changed = " as its study changed it" if overrides else ""
            say(f"warming up: {shape.warmup_requests} requests of workload {workload}{changed}")
            generator = LoadGenerator(base_url, served_model_name, prompts)
            generator.warm_up(shape, should_abort=lambda: not alive())
    if not alive():
        raise LoadFailure(FailureClass.CRASHED, "the server exited during the warm-up")
    say(f"canary: {len(FULL)} request shapes")
    report = run_canary(base_url, served_model_name, shapes=FULL, prompts=prompts, alive=alive)
    report.raise_if_failed()
    return report
