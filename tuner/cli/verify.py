"""``tuner verify-claims``: measure the claims of a claims file (:mod:`tuner.abtest.claims`) here
and judge each one: confirmed, refuted, inconclusive, or not applicable with the reason.

Claims with the same workload are measured together: one interleaved run over the distinct
configurations they name, so a configuration shared by several claims (the defaults of the
FlashAttention ones) is launched once per round, not once per claim. Each measured claim is
stored as a comparison (``results["kind"] == "claim"``, ``results["claim"]`` its record).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tuner.cli.compare import (
    Confidence,
    FindingGuard,
    Json,
    Progress,
    Repeats,
    Say,
    Storage,
    VllmPython,
    WorkloadSet,
    consoles,
    finding_of,
    parse_config_spec,
    parse_workload_overrides,
    resolve_storage,
)
from tuner.errors import UsageError
from tuner.scoring.significance import ratio_text

if TYPE_CHECKING:
    from tuner.abtest.claims import Claim, Planned
    from tuner.abtest.compare import Arm, Comparison, MetricComparison
    from tuner.abtest.launchlog import LaunchLog
    from tuner.domain import Provenance, ServingConfig, TrialResult, Workload
    from tuner.runner.vllm import PhaseCallback, TrialRunner


@dataclass(frozen=True)
class Outcome:
    """The verdict on one claim, with the comparison it rests on (None when not measured)."""

    claim: Claim
    workload: Workload
    verdict: str
    reason: str
    a: ServingConfig | None = None
    b: ServingConfig | None = None
    comparison: Comparison | None = field(default=None, compare=False)
    provenance: Provenance | None = None

    @property
    def measured(self) -> MetricComparison | None:
        return None if self.comparison is None else self.comparison.metric(self.claim.metric)


def evaluate(
    planned: Sequence[Planned],
    runner: TrialRunner | None,
    launches: int,
    confidence: float,
    *,
    on_group: Callable[[Workload, list[Arm], list[Claim]], None] | None = None,
    on_start: Callable[[int, int, Arm], None] | None = None,
    on_run: Callable[[int, int, Arm, TrialResult], None] | None = None,
    on_phase: PhaseCallback | None = None,
    launch_log: Callable[[Workload, list[Arm]], LaunchLog] | None = None,
    on_resumed: Callable[[str], None] | None = None,
) -> list[Outcome]:
    """Measure the applicable claims (``launches`` fresh launches of each configuration) and
    judge each; outcomes in the order of ``planned``. ``runner`` may be None only when no
    claim is applicable. ``launch_log`` gives each workload group's :class:`LaunchLog`: its
    earlier launches are reused and each new one is recorded as it finishes."""
    from tuner.abtest.claims import NOT_APPLICABLE
    from tuner.abtest.compare import Arm
    from tuner.abtest.launchlog import run_logged

    outcomes: dict[str, Outcome] = {}
    groups: dict[Workload, list[Planned]] = {}
    for p in planned:
        if p.reason or p.a is None or p.b is None:
            outcomes[p.claim.id] = Outcome(p.claim, p.workload, NOT_APPLICABLE, p.reason)
        else:
            groups.setdefault(p.workload, []).append(p)
    for workload, members in groups.items():
        if runner is None:
            raise ValueError("evaluate needs a runner to measure applicable claims")
        configs = list(dict.fromkeys(c for p in members for c in (p.a, p.b) if c is not None))
        arms = [Arm(c.label(), c) for c in configs]
        if on_group:
            on_group(workload, arms, [p.claim for p in members])
        results = run_logged(
            launch_log(workload, arms) if launch_log else None,
            arms,
            runner,
            workload,
            launches,
            on_start=on_start,
            on_run=on_run,
            on_phase=on_phase,
            on_resumed=on_resumed,
        )
        by_config = dict(zip(configs, results, strict=True))
        for p in members:
            assert p.a is not None and p.b is not None
            outcomes[p.claim.id] = _outcome(p, by_config[p.a], by_config[p.b], confidence)
    return [outcomes[p.claim.id] for p in planned]


def _outcome(
    p: Planned, a_runs: Sequence[TrialResult], b_runs: Sequence[TrialResult], confidence: float
) -> Outcome:
    from tuner.abtest.claims import INCONCLUSIVE, NOT_APPLICABLE, explain, judge
    from tuner.abtest.compare import Arm, compare

    assert p.a is not None and p.b is not None
    for side, config, runs in (("A", p.a, a_runs), ("B", p.b, b_runs)):
        finding = finding_of(runs)
        if finding:
            reason = f"{side} ({config.label()}) cannot start here: {finding}"
            return Outcome(p.claim, p.workload, NOT_APPLICABLE, reason, p.a, p.b)
    comparison = compare(Arm(p.a.label(), p.a), a_runs, Arm(p.b.label(), p.b), b_runs, confidence)
    prov = next((r.provenance for r in (*a_runs, *b_runs) if r.provenance), None)
    m = comparison.metric(p.claim.metric)
    if m.ratio is None or m.low is None or m.high is None:
        failed = [*comparison.a_failures, *comparison.b_failures]
        reason = (
            f"not enough complete launches to compare (A {len(m.a_values)}, B "
            f"{len(m.b_values)})" + (f"; failures: {'; '.join(failed)}" if failed else "")
        )
        verdict = INCONCLUSIVE
    elif m.inconclusive:
        # The launches of a side disagree far beyond their noise: the interval says nothing.
        verdict = INCONCLUSIVE
        reason = m.verdict.removeprefix(f"{INCONCLUSIVE}: ")
    else:
        verdict = judge(p.claim.claimed, m.low, m.high)
        reason = explain(verdict, p.claim.claimed, m.low, m.high)
    if comparison.window_note:
        reason += f" (caution: {comparison.window_note})"
    return Outcome(p.claim, p.workload, verdict, reason, p.a, p.b, comparison, prov)


def claim_record(outcome: Outcome) -> dict[str, Any]:
    """The claim and its verdict as stored with the comparison and printed by ``--json``."""
    m = outcome.measured
    c = outcome.claim
    measured = None
    if m is not None and m.ratio is not None:
        measured = {"ratio": m.ratio, "low": m.low, "high": m.high}
    return {
        "id": c.id,
        "statement": c.statement,
        "metric": c.metric,
        "claimed": c.claimed,
        "claimed_text": c.claimed_text,
        "workload": outcome.workload.name,
        "verdict": outcome.verdict,
        "reason": outcome.reason,
        "measured": measured,
    }


def run_verify_claims(
    *,
    file: Path,
    model: str,
    gpu: str,
    repeats: int,
    confidence: float,
    only: Sequence[str] | None,
    fixed: str | None,
    workload_set: str | None,
    storage_url: str,
    vllm_python: str | None,
    say: Say,
) -> list[dict[str, Any]]:
    """Judge each claim of ``file`` (or those in ``only``) here and store the measured ones;
    returns one record per claim (:func:`claim_record` plus ``comparison_id`` when stored).

    Input is checked before anything starts (exit 2); the vLLM environment, hardware and
    database are set up only when at least one claim is applicable here.
    """
    from tuner.abtest.claims import NOT_APPLICABLE, load_claims, plan
    from tuner.abtest.launchlog import LaunchLog
    from tuner.catalog.gpus import get_gpu
    from tuner.catalog.models import resolve_model
    from tuner.spec.study import StudySpec
    from tuner.study.compose import prepare, tuner_home

    if not 0.5 < confidence < 1.0:
        raise UsageError(f"--confidence {confidence} is out of range", hint="e.g. 0.95 or 0.99")
    claims = load_claims(file)
    if only:
        ids = [c.id for c in claims]
        unknown = [i for i in only if i not in ids]
        if unknown:
            raise UsageError(f"--only: no claim {unknown} in {file}", hint=f"ids: {', '.join(ids)}")
        claims = tuple(c for c in claims if c.id in only)
    held = parse_config_spec(fixed, "--fixed") if fixed else {}
    overrides = parse_workload_overrides(workload_set)
    profile, spec_model = get_gpu(gpu), resolve_model(model)
    planned = plan(claims, spec_model, profile, fixed=held, workload_overrides=overrides)
    runner, repo, vllm_version, hardware = None, None, "", ""
    if any(not p.reason for p in planned):
        spec = StudySpec(
            model=model, gpu=gpu, fixed=held, vllm_python=vllm_python, source="command line"
        )
        prepared = prepare(spec, storage_url)
        runner, repo = FindingGuard(prepared.runner, spec_model), prepared.repo
        vllm_version, hardware = prepared.ctx.vllm_version, prepared.runner.hardware.name
        say(
            f"verifying {len(claims)} claim(s) of {file} on {spec_model.alias} / {profile.name} "
            f"({prepared.runner.hardware.name}), vLLM {prepared.ctx.vllm_version}, "
            f"{repeats} launches per configuration"
        )
    p = Progress(say)
    logs: list[LaunchLog] = []

    def launch_log(load: Workload, arms: list[Arm]) -> LaunchLog:
        logs.append(
            LaunchLog.for_arms(
                tuner_home(),
                "verify-claims",
                arms,
                repeats,
                model=spec_model.alias,
                gpu=profile.name,
                hardware=hardware,
                vllm=vllm_version,
                workload=load,
            )
        )
        return logs[-1]

    def group(load: Workload, arms: list[Arm], members: list[Claim]) -> None:
        say(
            f"workload {load.name}: {len(arms)} configurations for "
            f"{', '.join(c.id for c in members)}"
        )

    outcomes = evaluate(
        planned,
        runner,
        repeats,
        confidence,
        on_group=group,
        on_start=p.start,
        on_run=p.finished,
        on_phase=p.phase,
        launch_log=launch_log,
        on_resumed=say,
    )
    records = []
    for o in outcomes:
        record = claim_record(o)
        if o.verdict != NOT_APPLICABLE and o.comparison is not None and repo is not None:
            assert o.a is not None and o.b is not None
            row = repo.add_comparison(
                model=spec_model.alias,
                gpu=profile.name,
                workload=o.workload.name,
                a_config=o.a,
                b_config=o.b,
                repeats=repeats,
                results={**o.comparison.to_results(), "kind": "claim", "claim": record},
                verdicts=o.comparison.to_verdicts(),
                provenance=o.provenance,
            )
            record["comparison_id"] = row.id
        records.append(record)
    for llog in logs:  # stored: a later run of the same command measures afresh
        llog.clear()
    _print_claims(outcomes, records, say)
    return records


def _print_claims(outcomes: list[Outcome], records: list[dict[str, Any]], say: Say) -> None:
    rows = [("claim", "metric", "measured B/A [interval]", "claimed B/A", "verdict")]
    for o in outcomes:
        m = o.measured
        measured = (ratio_text(m.ratio, m.low, m.high) if m is not None else None) or "-"
        rows.append((o.claim.id, o.claim.metric, measured, o.claim.claimed_text, o.verdict))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        say("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    say("")
    for o, record in zip(outcomes, records, strict=True):
        stored = f" (comparison {record['comparison_id']})" if "comparison_id" in record else ""
        say(f"{o.claim.id}: {o.verdict}{stored}: {o.reason}")


def verify_claims(
    file: Annotated[
        Path, typer.Argument(help="A claims file, e.g. studies/claims/seed-claims.toml.")
    ],
    model: Annotated[str, typer.Option(help="Model alias, local dir or hub id.")],
    gpu: Annotated[str, typer.Option(help="GPU profile: a10g, h100, h200, cpu, ...")],
    repeats: Repeats = 3,
    confidence: Confidence = 0.95,
    only: Annotated[list[str] | None, typer.Option(help="Only this claim id (repeatable).")] = None,
    fixed: Annotated[
        str | None,
        typer.Option(help="Knobs held in every configuration, e.g. enforce_eager=true."),
    ] = None,
    workload_set: WorkloadSet = None,
    storage: Storage = None,
    vllm_python: VllmPython = None,
    as_json: Json = False,
) -> None:
    """Test published claims here: confirmed, refuted, inconclusive or not applicable (why)."""
    import json

    records = run_verify_claims(
        file=file,
        model=model,
        gpu=gpu,
        repeats=repeats,
        confidence=confidence,
        only=only,
        fixed=fixed,
        workload_set=workload_set,
        storage_url=resolve_storage(storage),
        vllm_python=vllm_python,
        say=consoles(as_json),
    )
    if as_json:
        print(json.dumps(records, indent=2), flush=True)
