"""``tuner verify-claims``: options, progress lines and the table of verdicts; measuring and
judging the claims of a claims file is :func:`tuner.abtest.claims.verdicts.verify`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.cli.common import GpuOpt, ModelOpt, StorageOpt, VllmPythonOpt, storage_url
from tuner.cli.compare import (
    Confidence,
    FirstLook,
    Json,
    MaxLaunches,
    MinEffect,
    Progress,
    Say,
    Trend,
    WorkloadSet,
    consoles,
    decision_lines,
    design_of,
)

if TYPE_CHECKING:
    from tuner.abtest import Arm, Claim, Outcome
    from tuner.domain import Workload


def _print_claims(outcomes: list[Outcome], say: Say) -> None:
    rows = [("claim", "metric", "measured [interval]", "claimed", "verdict")]
    for o in outcomes:
        measured = str((o.measured_record or {}).get("text") or "-")
        claimed = o.claim.claimed.shown() if o.claim.claimed else o.claim.claimed_text
        rows.append((o.claim.id, o.claim.metric or o.claim.kind, measured, claimed, o.verdict))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        say("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    say("")
    for o in outcomes:
        stored = f" (comparison {o.comparison_id})" if o.comparison_id is not None else ""
        setting = f" ({o.setting})" if o.setting else ""
        say(f"{o.claim.id}: {o.verdict}{stored}: {o.reason}{setting}")
        if o.look is not None:  # how its metric's decision ended, and its GPU-minutes
            for line in decision_lines(o.look):
                say(f"  {line}")


def verify_claims(
    file: Annotated[
        Path, typer.Argument(help="A claims file, e.g. studies/claims/seed-claims.toml.")
    ],
    model: ModelOpt,
    gpu: GpuOpt,
    repeats: FirstLook = None,
    max_launches: MaxLaunches = None,
    min_effect: MinEffect = None,
    trend: Trend = True,
    confidence: Confidence = 0.95,
    only: Annotated[list[str] | None, typer.Option(help="Only this claim id (repeatable).")] = None,
    fixed: Annotated[
        str | None,
        typer.Option(help="Knobs held in every configuration, e.g. enforce_eager=true."),
    ] = None,
    workload_set: WorkloadSet = None,
    storage: StorageOpt = None,
    vllm_python: VllmPythonOpt = None,
    as_json: Json = False,
) -> None:
    """Test published claims here against the articles' figures (see studies/claims/).

    Each claim is measured by the decision design of `tuner compare`: pairs of launches (from
    3 a side) until the claim's metric is decided, its interval is within --min-effect, or
    --max-launches (6) a side are spent; claims on one workload share their launches.
    --repeats alone: that many launches a side, one look.
    """
    import json

    from tuner.abtest import (
        Where,
        claim_record,
        machine_flags,
        open_bench,
        runner_passing,
        setup_claims,
        verify,
    )

    design = design_of(repeats, max_launches, min_effect, confidence, trend)
    url, say = storage_url(storage), consoles(as_json)
    setup = setup_claims(
        file=file,
        model=model,
        gpu=gpu,
        confidence=confidence,
        only=only,
        fixed=fixed,
        workload_set=workload_set,
        vllm_python=vllm_python,
    )
    bench = None
    if setup.applicable:  # vLLM, hardware and database only when there is something to measure
        bench = open_bench(
            "verify-claims", setup.spec, url, setup.model, setup.gpu, design.first, design
        )
        say(
            f"verifying {len(setup.claims)} claim(s) of {file} on {setup.model.alias} / "
            f"{setup.gpu.name} ({bench.hardware}), vLLM {bench.vllm_version}: {design.text()}"
        )

    def group(load: Workload, arms: list[Arm], members: list[Claim]) -> None:
        say(
            f"workload {load.name}: {len(arms)} configurations for "
            f"{', '.join(c.id for c in members)}"
        )

    where = Where(
        setup.model.alias,
        setup.gpu.name,
        setup.gpu.display_name,
        bench.vllm_version if bench else "",
    )
    progress = Progress(say)
    with progress.stopping():
        outcomes = verify(
            setup.planned,
            bench,
            design.first,
            confidence,
            watch=progress.watch(),
            on_group=group,
            where=where,
            flags=(lambda: machine_flags(setup.spec, where.vllm)) if bench else None,
            runner_with=(lambda flag: runner_passing(flag, setup.spec, url, setup.model, setup.gpu))
            if bench
            else None,
        )
    records = [claim_record(o) for o in outcomes]
    _print_claims(outcomes, say)
    if as_json:
        print(json.dumps(records, indent=2), flush=True)
