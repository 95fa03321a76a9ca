"""``tuner size``: how many GPUs of the recommended configuration serve a target rate within the
SLO, with the $/hour and $ per 1M output tokens (:mod:`tuner.results.sizing`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from tuner.cli.common import JsonOpt, PriceOpt, StorageOpt, err, open_repo, out, print_json
from tuner.errors import UsageError

if TYPE_CHECKING:
    from tuner.db import StudyRow


def size(
    model: Annotated[str, typer.Option(help="Model alias as the studies name it.")],
    rate: Annotated[
        str,
        typer.Option(
            help="Target rate: requests/s (20 or 20req/s) or output tokens/s (5000tok/s)."
        ),
    ],
    gpu: Annotated[
        list[str] | None,
        typer.Option(help="GPU profile (repeatable, to compare; default: every one measured)."),
    ] = None,
    slo: Annotated[
        str | None,
        typer.Option(help="e.g. ttft_p99=500ms,e2e_p99=10s (default: each study's own SLO)."),
    ] = None,
    workload: Annotated[str | None, typer.Option(help="Only studies of this workload.")] = None,
    emulated: Annotated[
        bool, typer.Option(help="Size from emulated studies instead of real ones.")
    ] = False,
    gpu_price: PriceOpt = None,
    storage: StorageOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """GPUs (and dollars) to serve --rate with the recommended configuration of each study."""
    from tuner.catalog import get_gpu
    from tuner.domain import to_jsonable
    from tuner.domain.workload import parse_slo
    from tuner.results import parse_rate
    from tuner.results.sizing import FleetSize
    from tuner.results.sizing import size as fleet

    for profile in gpu or ():
        get_gpu(profile)  # an unknown profile is a typo, not "nothing measured"
    target = parse_rate(rate)
    try:
        wanted_slo = parse_slo(slo) if slo is not None else None
    except ValueError as exc:
        raise UsageError(str(exc), hint="e.g. --slo ttft_p99=500ms,e2e_p99=10s") from None
    repo = open_repo(storage)

    def sized(emulated: bool) -> list[FleetSize]:
        return fleet(repo, model=model, rate=target, gpus=tuple(gpu or ()), workload=workload,
                     slo=wanted_slo, emulated=emulated, gpu_price=gpu_price)  # fmt: skip

    answers = sized(emulated)
    if not answers:
        _refuse_what_no_study_names(repo.list_studies(), model, gpu or (), workload)
    if as_json:
        print_json({"model": model, "rate": to_jsonable(target), "sizes": to_jsonable(answers)})
    else:
        for answer in answers:
            out.print(escape(answer.render()))
    if not answers:
        if not as_json:
            where = (f" on {', '.join(gpu)}" if gpu else "") + (
                f" with workload {workload}" if workload else ""
            )
            kind = "emulated" if emulated else "measured"
            hint = "see `tuner studies`"
            if not emulated and sized(True):
                hint = "emulated ones can be sized: add --emulated"
            err.print(
                escape(f"no {kind} study of {model}{where} to size from (none has a "
                       f"recommendation with stored windows); {hint}")
            )  # fmt: skip
        raise typer.Exit(1)
    if all(a.gpus is None for a in answers):
        # Something was sized, and no measured trial of it meets the SLO (sizing falls back
        # to the best one that does): a script asking "how many GPUs?" must not read that as
        # an answer.
        if all(a.client_bound for a in answers):
            from tuner.results.sizing import CLIENT_BOUND_FIX

            text = (
                f"no study sized has a capacity to size {target} from: the load generator, not "
                f"the server, was the limit; {CLIENT_BOUND_FIX}"
            )
        else:
            text = (
                f"no measured trial of the studies sized serves {target} within the SLO; try a "
                "looser --slo, or measure a configuration that meets it"
            )
        err.print(escape(text))
        raise typer.Exit(1)


def _refuse_what_no_study_names(
    studies: list[StudyRow], model: str, gpus: Sequence[str], workload: str | None
) -> None:
    """UsageError (exit 2) where no study at all, emulated or not, is of ``model`` on ``gpus``
    with ``workload``: a typo, not "nothing measured" (exit 1); the error lists what is."""
    from tuner.results.sizing import sized_studies

    if sized_studies(studies, model, gpus, workload):
        return
    seen = sorted({f"{s.model}/{s.gpu}/{s.workload_label}" for s in studies})
    what = (
        model
        + (f" on {', '.join(gpus)}" if gpus else "")
        + (f" with workload {workload}" if workload else "")
    )
    raise UsageError(
        f"no study of {what}" + (f" (there are: {', '.join(seen)})" if seen else " (none yet)"),
        hint="check --model, --gpu and --workload against `tuner studies`, or pass the "
        "--storage that holds the study",
    )
