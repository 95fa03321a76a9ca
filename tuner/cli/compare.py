"""``tuner compare``: is B better than A, here, beyond the launch-to-launch noise? Options,
progress lines and the printed comparison; the command's core is :mod:`tuner.abtest.pair`.

The options and printing that ``tuner verify-claims`` (:mod:`tuner.cli.verify`) shares live here
too. This module imports only typer and :mod:`tuner.cli.common` at the top: ``tuner --help``
stays fast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.cli.common import (
    GpuOpt,
    ModelOpt,
    StorageOpt,
    VllmPythonOpt,
    err,
    interruptible,
    out,
    phase_line,
    storage_url,
)

if TYPE_CHECKING:
    from tuner.abtest import Arm, Design, Look, PairOutcome, Watch
    from tuner.domain import TrialResult

Say = Callable[[str], None]


class Progress:
    """Plain progress lines: each launch, its phases (once each) and its outcome."""

    def __init__(self, say: Say) -> None:
        self.say = say
        self._last = ""
        self.finished_here = 0  # launches this process finished (each kept in the launch log)

    def stopping(self) -> contextlib.AbstractContextManager[None]:
        """Ctrl-C, ``kill PID`` or a closed terminal: say what was kept and how to go on, then
        exit 130 (the launch log keeps every finished launch for the same command to reuse)."""

        def said() -> str:
            n = self.finished_here
            return (
                f"interrupted: {n} launch{'' if n == 1 else 'es'} finished in this run "
                f"{'is' if n == 1 else 'are'} kept; the same command again goes on from "
                "the launches kept"
            )

        return interruptible(said)

    def watch(self) -> Watch:
        """These lines as the callbacks of an A/B run (resumed launches said as they are)."""
        from tuner.abtest import Watch

        return Watch(self.start, self.finished, self.phase, self.say)

    def start(self, index: int, total: int, arm: Arm) -> None:
        self._last = ""
        self.say(f"launch {index}/{total}: {arm.label}")

    def phase(self, phase: str, detail: str) -> None:
        if phase_line(phase, self._last):
            self.say(f"  {phase} {detail}".rstrip())
        self._last = phase

    def finished(self, index: int, total: int, arm: Arm, result: TrialResult) -> None:
        from tuner.domain import TrialStatus

        self.finished_here += 1

        if result.metrics:
            m = result.metrics
            mem = (result.memory.headline_bytes or 0) / 1024**3
            thr = m["output_throughput"]
            self.say(
                f"  measured {thr.median:.1f} out tok/s (median of {len(thr.values)} windows), "
                f"P99 E2E {m['e2e_p99_ms'].median:.0f} ms, memory {mem:.2f} GiB"
            )
        elif result.status is TrialStatus.PRUNED and result.failure is not None:
            self.say(f"  not launched ({result.failure.value}): {result.failure_detail}")
        elif result.failure is not None:
            again = " (a finding: not launched again)" if result.failure.is_finding else ""
            self.say(
                f"  {result.status.value} ({result.failure.value}){again}: {result.failure_detail}"
            )


def decision_lines(look: Look) -> list[str]:
    """How a decision ended, its interval's method and its cost, for people."""
    from tuner.abtest import UNMEASURED_STOP, profile_lines
    from tuner.scoring import BUDGET, MIN_EFFECT, NO_DIFFERENCE, PRECISE, SIGNIFICANT

    step, found = look.step, look.step.interval
    why = {
        SIGNIFICANT: "the interval excludes 1",
        PRECISE: "the interval's half-width is at most "
        f"{(look.design.plan.min_effect or 0) * 100:g} %",
        BUDGET: "the launch budget is spent" if not look.design.fixed else "the fixed design",
        UNMEASURED_STOP: "a side could not be measured: see its failures",
    }.get(step.reason, step.reason)
    head = look.comparison.metric(look.metric)
    if found is not None and step.verdict == NO_DIFFERENCE and (found.low > 1 or found.high < 1):
        # an interval that excludes 1, inside the smallest effect worth acting on: its
        # half-width said nothing of why it was no difference
        effect = look.design.plan.min_effect or MIN_EFFECT
        why = f"the whole interval lies within ±{effect * 100:g} %, the smallest effect that counts"
    lines = [
        f"decision: {step.verdict} after {step.n_a} + {step.n_b} launches ({why}); "
        f"{look.gpu_minutes:.1f} GPU-minutes"
    ]
    if found is not None and step.reason in (PRECISE, BUDGET):
        # a factor either way (the interval is one on the log scale): "±122.9 %" beside
        # [-71.2, +42.9] read as a contradiction
        lines.append(f"  interval half-width x/÷ {1 + found.half_width:.3f} ({found.percent()})")
    c = look.profile.get(look.metric) if look.profile is not None else None
    min_effect = look.design.plan.min_effect
    if step.reason == BUDGET and c is not None and min_effect:
        need = c.launches_for(min_effect, look.design.plan.confidence)
        lines.append(
            f"  ±{min_effect * 100:g} % would take about {need} launches a side at the "
            "profile's noise"
        )
    if head.method:
        lines.append(f"  interval: {head.method}" + (f", {head.df:.0f} df" if head.df else ""))
    failed = {"A": len(look.comparison.a_failures), "B": len(look.comparison.b_failures)}
    if failed["A"] != failed["B"]:
        lines.append(
            f"  caution: failed launches A {failed['A']}, B {failed['B']}; the interval weighs "
            "only the launches that ran, not how often a side failed"
        )
    lines += [f"  {line}" for line in profile_lines(look.profile)]
    return lines


def _print_comparison(outcome: PairOutcome, say: Say) -> None:
    from tuner.abtest import LAUNCH_VALUES, NOT_MEASURED

    c, findings, prov = outcome.comparison, outcome.findings, outcome.provenance
    level = outcome.look.design.confidence if outcome.look is not None else c.confidence
    say(f"B/A per metric ({level * 100:g} % intervals across launches):")
    say(f"  (a launch's value: {LAUNCH_VALUES[c.launch_value]})")
    for m in c.metrics if not any(findings.values()) else ():
        say(f"  {m.describe()}")
    decides = c.metric(outcome.look.metric if outcome.look is not None else "output_throughput")
    if decides.drift is not None and not any(findings.values()):
        say(f"  {decides.drift.text(decides.label)}")
    thr, p99 = c.metric("output_throughput"), c.metric("e2e_p99_ms")
    for side, arm, tv, pv, failures, flags in (
        ("A", c.a, thr.a_values, p99.a_values, c.a_failures, c.a_windows),
        ("B", c.b, thr.b_values, p99.b_values, c.b_failures, c.b_windows),
    ):
        finding = findings[side.lower()]
        if finding:
            say(f"{side} ({arm.label}) cannot start here, so it was {NOT_MEASURED}: {finding}")
            continue
        say(
            f"{side} ({arm.label}): out tok/s per launch "
            f"{', '.join(f'{v:.1f}' for v in tv) or '-'}; P99 E2E ms "
            f"{', '.join(f'{v:.0f}' for v in pv) or '-'}"
        )
        for failure in failures:
            say(f"  failed: {failure}")
        if flags.any:
            say(f"  caution: {flags.explained()}")
    if prov is not None:
        say(
            f"provenance: {prov.gpu_name}, vLLM {prov.vllm_version}, model {prov.model}, "
            f"workload {prov.workload}, measured launches A {len(thr.a_values)} + B "
            f"{len(thr.b_values)}"
        )
    if outcome.look is not None and not any(findings.values()):
        for line in decision_lines(outcome.look):
            say(line)


# -- options shared with tuner verify-claims, and the command (registered in tuner.cli.app) ---

Workload = Annotated[
    str | None, typer.Option(help="Preset or trace:FILE (default: smoke on cpu, else chat).")
]
Confidence = Annotated[float, typer.Option(help="Level of the intervals, e.g. 0.95.")]
WorkloadSet = Annotated[
    str | None,
    typer.Option(
        help="Override workload fields, e.g. requests_per_window=24,output_tokens=64 (a quicker "
        "look; the shapes then differ from the preset's)."
    ),
]
Json = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]
FirstLook = Annotated[
    int | None,
    typer.Option(
        "--repeats",
        min=2,
        help="Fresh launches of each configuration: alone, a fixed design of that many; with "
        "--max-launches, the first look (default: sequential from 3 to 6 a side).",
    ),
]
MaxLaunches = Annotated[
    int | None,
    typer.Option(
        min=2,
        help="Launch budget a side of the sequential design: pairs are added until B/A is "
        "decided, precise to --min-effect, or this many launches a side (at most 40).",
    ),
]
MinEffect = Annotated[
    float | None,
    typer.Option(
        help="Smallest difference worth acting on: the sequential design stops with 'no "
        "significant difference' once the interval's half-width is at most this, and peak "
        "memory within it either way is no difference (default 0.05: 5 %). A fixed design "
        "takes it as --repeats N --max-launches N.",
    ),
]


Trend = Annotated[
    bool,
    typer.Option(
        "--trend/--no-trend",
        help="Take a common straight-line trend over the launches' times out of every interval "
        "(the default: a machine that drifts while the comparison runs does not widen it); "
        "--no-trend takes each side's launches as they are.",
    ),
]


def design_of(
    repeats: int | None,
    max_launches: int | None,
    min_effect: float | None,
    confidence: float,
    trend: bool = True,
) -> Design:
    """The decision design of ``--repeats`` / ``--max-launches`` / ``--min-effect`` /
    ``--confidence`` / ``--trend`` (shared by compare and verify-claims): UsageError for a
    confidence or a min effect that is no fraction, or a first look above the budget."""
    from tuner.abtest import Design
    from tuner.errors import UsageError
    from tuner.scoring import MAX_LAUNCHES, MIN_EFFECT
    from tuner.spec import check_confidence

    check_confidence(confidence)
    if repeats is not None and repeats > MAX_LAUNCHES:
        raise UsageError(
            f"--repeats {repeats}: at most {MAX_LAUNCHES} launches a side",
            hint="a difference that needs more is below what launches resolve: raise "
            "--min-effect, or borrow this card's noise profile (`tuner calibrate`)",
        )
    if min_effect is not None and repeats is not None and max_launches is None:
        raise UsageError(
            "--min-effect stops a sequential design, and --repeats alone is a fixed one, whose "
            f"peak memory within {MIN_EFFECT * 100:g} % is no difference",
            hint=f"add --max-launches {repeats} for {repeats} launches a side with --min-effect as "
            "that floor, "
            + (
                f"add --max-launches {min(max(2 * repeats, 6), MAX_LAUNCHES)} for a sequential "
                "design that stops at it too, "
                if repeats < MAX_LAUNCHES
                else ""
            )
            + "or drop --min-effect",
        )
    if min_effect is not None and not 0.0 < min_effect < 1.0:
        raise UsageError(
            f"--min-effect {min_effect} is not a fraction", hint="e.g. --min-effect 0.05 for ±5 %"
        )
    if max_launches is not None and max_launches > MAX_LAUNCHES:
        raise UsageError(
            f"--max-launches {max_launches}: at most {MAX_LAUNCHES} launches a side",
            hint="a difference that needs more is below what launches resolve here: raise "
            "--min-effect, or borrow this card's noise profile (`tuner calibrate`)",
        )
    if repeats is not None and max_launches is not None and repeats > max_launches:
        raise UsageError(
            f"--repeats {repeats} (the first look) is above --max-launches {max_launches}",
            hint="lower --repeats or raise --max-launches",
        )
    return Design.of_options(repeats, max_launches, confidence, min_effect, trend=trend)


def consoles(as_json: bool) -> Say:
    """Where human-readable lines go: stdout, or stderr when stdout carries the JSON."""
    console = err if as_json else out
    return lambda text: console.print(text, markup=False, soft_wrap=True)


def compare(
    model: ModelOpt,
    gpu: GpuOpt,
    a: Annotated[str, typer.Option("--a", help="A: 'defaults' or knob=value,knob=value.")],
    b: Annotated[str, typer.Option("--b", help="B: 'defaults' or knob=value,knob=value.")],
    workload: Workload = None,
    workload_set: WorkloadSet = None,
    repeats: FirstLook = None,
    max_launches: MaxLaunches = None,
    min_effect: MinEffect = None,
    trend: Trend = True,
    confidence: Confidence = 0.95,
    storage: StorageOpt = None,
    vllm_python: VllmPythonOpt = None,
    as_json: Json = False,
) -> None:
    """Is B better than A here? Interleaved fresh launches, B/A per metric with intervals.

    By default pairs of launches are added (from 3 a side) until B/A is decided, its interval's
    half-width is at most --min-effect, or --max-launches (6) a side are spent; intervals
    borrow the noise profile of `tuner calibrate` and earlier launches when one exists.

    Exit 1 when no interval could be given (a side not measured, or too few launches), or when
    the output throughput is inconclusive (the launches of a side disagree far beyond their
    noise).
    """
    import json

    from tuner.abtest import open_bench, run_pair, setup_pair
    from tuner.load import fingerprint

    design = design_of(repeats, max_launches, min_effect, confidence, trend)
    url, say = storage_url(storage), consoles(as_json)
    setup = setup_pair(
        model=model,
        gpu=gpu,
        a=a,
        b=b,
        workload=workload,
        workload_set=workload_set,
        confidence=confidence,
        vllm_python=vllm_python,
    )
    bench = open_bench("compare", setup.spec, url, setup.model, setup.gpu, design.first, design)
    say(
        f"compare on {setup.model.alias} / {setup.gpu.name} ({bench.hardware}), "
        f"vLLM {bench.vllm_version}"
    )
    for side, arm in zip("AB", setup.arms, strict=True):
        say(f"  {side} = {arm.label}: launches with {arm.config.label()}")
    say(f"  workload {setup.workload.name}, {design.text()}")
    for line in fingerprint(setup.workload).lines():
        say(f"  {line}")
    progress = Progress(say)
    with progress.stopping():
        outcome = run_pair(bench, setup, progress.watch())
    _print_comparison(outcome, say)
    cid = outcome.comparison_id
    say(f"comparison {cid} stored: API /v1/compare/{cid}, dashboard /ui/compare/{cid}")
    if as_json:
        print(json.dumps(outcome.to_json(), indent=2), flush=True)
    if not outcome.conclusive:
        raise typer.Exit(1)
