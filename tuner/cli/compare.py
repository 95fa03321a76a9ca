"""``tuner compare``: is B better than A, here, beyond the launch-to-launch noise? And the
parts ``tuner verify-claims`` (:mod:`tuner.cli.verify`) shares with it.

Fresh launches run interleaved (A B A B ...) through the real runner that
:func:`tuner.study.compose.prepare` builds; :func:`tuner.abtest.compare.compare` gives B/A per
metric with an
interval and a verdict; the comparison is stored in ``tuner_comparisons`` (``results["kind"]``
"compare"), which the API serves at ``/v1/compare/{id}`` and the dashboard at
``/ui/compare/{id}``. This module imports only typer at the top: ``tuner --help`` stays fast.

A configuration that cannot start here (a *finding*: it does not fit, the backend is not
supported) is not launched again, and neither is one that asks at least as much of the
machine (see :class:`FindingGuard`); its side of the comparison is "not measured".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tuner.errors import UsageError

if TYPE_CHECKING:
    from tuner.abtest.compare import Arm, Comparison
    from tuner.domain import (
        FailureClass,
        ModelSpec,
        Provenance,
        ServingConfig,
        Slo,
        TrialResult,
        Workload,
    )
    from tuner.runner.vllm import PhaseCallback, TrialRunner

NOT_MEASURED = "not measured"
NOT_ENOUGH = "not enough launches"  # tuner.abtest.compare.NOT_ENOUGH, without importing it
INCONCLUSIVE = "inconclusive"  # tuner.scoring.significance.INCONCLUSIVE, without importing it

Say = Callable[[str], None]


# -- parsing -----------------------------------------------------------------------------------


def parse_value(raw: str) -> Any:
    """A command-line value typed: int, float, true/false, else the string itself."""
    text = raw.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_assignments(text: str, option: str) -> dict[str, Any]:
    """``"k=v,k=v"`` -> ``{k: typed v}``; UsageError naming ``option`` when malformed."""
    out: dict[str, Any] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise UsageError(
                f"{option}: cannot read {part.strip()!r} in {text!r}",
                hint=f"write {option} knob=value,knob=value",
            )
        if key in out:
            raise UsageError(f"{option}: {key} is given twice in {text!r}")
        out[key] = parse_value(value)
    return out


def parse_config_spec(text: str, option: str) -> dict[str, Any]:
    """A SPEC of ``tuner compare``: ``defaults`` (-> {}) or ``knob=value,...``, knobs and
    values checked (UsageError, exit 2, listing the knobs)."""
    from tuner.space import KNOBS, normalize_knob

    if text.strip() == "defaults":
        return {}
    values = parse_assignments(text, option)
    unknown = sorted(set(values) - set(KNOBS))
    if unknown:
        raise UsageError(
            f"{option}: unknown knob(s) {', '.join(unknown)}",
            hint=f"knobs: {', '.join(KNOBS)}; or {option} defaults",
        )
    for knob, value in values.items():
        normalize_knob(knob, value, option)
    return values


def parse_workload_overrides(text: str | None) -> dict[str, Any]:
    """``--workload-set key=value,...`` checked against the workload fields."""
    from tuner.spec.study import WORKLOAD_TYPES, typed_value

    if not text:
        return {}
    values = parse_assignments(text, "--workload-set")

    def fail(msg: str, key: str, **_: Any) -> UsageError:
        return UsageError(f"--workload-set: {msg}", hint=f"fields: {sorted(WORKLOAD_TYPES)}")

    for key, value in values.items():
        if key not in WORKLOAD_TYPES:
            raise fail(f"unknown workload field {key!r}", key)
        typed_value(value, WORKLOAD_TYPES[key], key, fail, "workload")
    return values


def _confidence(value: float) -> float:
    if not 0.5 < value < 1.0:
        raise UsageError(f"--confidence {value} is out of range", hint="e.g. 0.95 or 0.99")
    return value


# -- launching ---------------------------------------------------------------------------------


class FindingGuard:
    """A :class:`tuner.runner.vllm.TrialRunner` that skips configurations a finding made hopeless.

    After a launch fails with a finding, a configuration that asks at least as much (see
    :func:`tuner.catalog.rules.dominated_by`: more memory utilization after MEMORY_EXCEEDED,
    the same backend after UNSUPPORTED, ...) comes back PRUNED as DOMINATED, never launched.
    """

    def __init__(self, runner: TrialRunner, model: ModelSpec) -> None:
        self.runner = runner
        self.model = model
        self.failures: list[tuple[ServingConfig, FailureClass]] = []

    def run(
        self,
        config: ServingConfig,
        workload: Workload,
        *,
        slo: Slo | None = None,
        on_phase: PhaseCallback | None = None,
    ) -> TrialResult:
        from tuner.catalog.rules import dominated_by
        from tuner.domain import FailureClass, TrialResult, TrialStatus

        failed = dominated_by(self.model, config, self.failures)
        if failed is not None:
            cls = next(f for c, f in self.failures if c == failed)
            return TrialResult(
                config=config,
                status=TrialStatus.PRUNED,
                failure=FailureClass.DOMINATED,
                failure_detail=f"{failed.label()} could not start here ({cls.value}) and "
                "this asks at least as much",
            )
        result = self.runner.run(config, workload, slo=slo, on_phase=on_phase)
        if result.failure is not None and result.failure.is_finding:
            self.failures.append((config, result.failure))
        return result


class Progress:
    """Plain progress lines: each launch, its phases (once each) and its outcome."""

    def __init__(self, say: Say) -> None:
        self.say = say
        self._last = ""

    def start(self, index: int, total: int, arm: Arm) -> None:
        self._last = ""
        self.say(f"launch {index}/{total}: {arm.label}")

    def phase(self, phase: str, detail: str) -> None:
        if phase != self._last:  # warm-up reports every request: one line is enough
            self._last = phase
            self.say(f"  {phase} {detail}".rstrip())

    def finished(self, index: int, total: int, arm: Arm, result: TrialResult) -> None:
        from tuner.domain import TrialStatus

        if result.metrics:
            m = result.metrics
            mem = (result.memory.headline_bytes or 0) / 1024**3
            self.say(
                f"  measured {m['output_throughput'].median:.1f} out tok/s, P99 E2E "
                f"{m['e2e_p99_ms'].median:.0f} ms, memory {mem:.2f} GiB"
            )
        elif result.status is TrialStatus.PRUNED and result.failure is not None:
            self.say(f"  not launched ({result.failure.value}): {result.failure_detail}")
        elif result.failure is not None:
            again = " (a finding: not launched again)" if result.failure.is_finding else ""
            self.say(
                f"  {result.status.value} ({result.failure.value}){again}: {result.failure_detail}"
            )


def finding_of(results: Sequence[TrialResult]) -> str | None:
    """The finding (a config that cannot start here) among ``results``, as text; else None."""
    for r in results:
        if r.failure is not None and r.failure.is_finding:
            return f"{r.failure.value}: {r.failure_detail}"
    return None


def _provenance(results: list[list[TrialResult]]) -> Provenance | None:
    return next((r.provenance for rs in results for r in rs if r.provenance), None)


# -- tuner compare -----------------------------------------------------------------------------


def run_compare(
    *,
    model: str,
    gpu: str,
    a: str,
    b: str,
    workload: str | None,
    workload_set: str | None,
    repeats: int,
    confidence: float,
    storage_url: str,
    vllm_python: str | None,
    say: Say,
) -> dict[str, Any]:
    """Measure B against A (see the module docstring); returns what ``--json`` prints.

    Everything the user typed is checked before anything starts: SPECs (unknown knobs, bad
    values), and A and B against the space rules of this model, GPU and workload (exit 2).
    """
    from tuner.abtest.claims import with_overrides
    from tuner.abtest.compare import Arm, compare
    from tuner.abtest.launchlog import LaunchLog, run_logged
    from tuner.catalog.gpus import get_gpu
    from tuner.catalog.models import resolve_model
    from tuner.domain import to_jsonable
    from tuner.space import SearchSpace
    from tuner.spec.study import StudySpec
    from tuner.study.compose import prepare, resolve_workload, tuner_home

    a_knobs, b_knobs = parse_config_spec(a, "--a"), parse_config_spec(b, "--b")
    overrides = parse_workload_overrides(workload_set)
    _confidence(confidence)
    profile, spec_model = get_gpu(gpu), resolve_model(model)
    spec = StudySpec(
        model=model,
        gpu=gpu,
        workload=workload or ("smoke" if profile.is_cpu else "chat"),
        vllm_python=vllm_python,
        source="command line",
    )
    load = with_overrides(resolve_workload(spec), overrides)
    space = SearchSpace(spec_model, profile, load)
    configs = {"A": space.config_from(a_knobs), "B": space.config_from(b_knobs)}
    for side, config in configs.items():
        problems = space.violations(config)
        if problems:
            raise UsageError(
                f"{side} ({config.label()}) cannot run here: {'; '.join(problems)}",
                hint=f"change --{side.lower()}; `tuner gpus` lists what each profile offers",
            )
    prepared = prepare(spec, storage_url)
    # Labels as typed; the configs add the platform baseline (e.g. CPU's utilization).
    arms = [Arm(text.strip(), c) for text, c in zip((a, b), configs.values(), strict=True)]
    say(
        f"compare on {spec_model.alias} / {profile.name} ({prepared.runner.hardware.name}), "
        f"vLLM {prepared.ctx.vllm_version}"
    )
    for side, arm in zip("AB", arms, strict=True):
        say(f"  {side} = {arm.label}: launches with {arm.config.label()}")
    say(f"  workload {load.name}, {repeats} fresh launches each, interleaved A B A B ...")
    p = Progress(say)
    runner = FindingGuard(prepared.runner, spec_model)
    llog = LaunchLog.for_arms(
        tuner_home(),
        "compare",
        arms,
        repeats,
        model=spec_model.alias,
        gpu=profile.name,
        hardware=prepared.runner.hardware.name,
        vllm=prepared.ctx.vllm_version,
        workload=load,
    )
    results = run_logged(
        llog,
        arms,
        runner,
        load,
        repeats,
        on_start=p.start,
        on_run=p.finished,
        on_phase=p.phase,
        on_resumed=say,
    )
    c = compare(arms[0], results[0], arms[1], results[1], confidence)
    out, verdicts = {**c.to_results(), "kind": "compare"}, c.to_verdicts()
    findings = {side: finding_of(rs) for side, rs in zip("ab", results, strict=True)}
    if any(findings.values()):
        for m in out["metrics"]:
            m["verdict"] = NOT_MEASURED
        verdicts = dict.fromkeys(verdicts, NOT_MEASURED)
    prov = _provenance(results)
    row = prepared.repo.add_comparison(
        model=spec_model.alias,
        gpu=profile.name,
        workload=load.name,
        a_config=configs["A"],
        b_config=configs["B"],
        repeats=repeats,
        results=out,
        verdicts=verdicts,
        provenance=prov,
    )
    llog.clear()
    _print_comparison(c, findings, prov, say)
    say(f"comparison {row.id} stored: API /v1/compare/{row.id}, dashboard /ui/compare/{row.id}")
    return {
        "id": row.id,
        "model": spec_model.alias,
        "gpu": profile.name,
        "workload": load.name,
        "a": configs["A"].to_dict(),
        "b": configs["B"].to_dict(),
        "results": out,
        "verdicts": verdicts,
        "provenance": to_jsonable(prov),
    }


def _print_comparison(
    c: Comparison, findings: Mapping[str, str | None], prov: Provenance | None, say: Say
) -> None:
    say(f"B/A per metric ({c.confidence * 100:g} % intervals across launches):")
    for m in c.metrics if not any(findings.values()) else ():
        say(f"  {m.describe()}")
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


# -- the commands (registered in tuner.cli.app) ----------------------------------------------------

Storage = Annotated[
    str | None,
    typer.Option("--storage", help="Database URL (default: $TUNER_DB_URL or sqlite:///tuner.db)."),
]
VllmPython = Annotated[
    str | None, typer.Option(help="Interpreter with vLLM (default: $TUNER_VLLM_PYTHON).")
]
Repeats = Annotated[int, typer.Option(min=2, help="Fresh launches of each configuration.")]
Confidence = Annotated[float, typer.Option(help="Level of the intervals, e.g. 0.95.")]
WorkloadSet = Annotated[
    str | None,
    typer.Option(
        help="Override workload fields, e.g. requests_per_window=24,output_tokens=64 (a quicker "
        "look; the shapes then differ from the preset's)."
    ),
]
Json = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]


def consoles(as_json: bool) -> Say:
    """Where human-readable lines go: stdout, or stderr when stdout carries the JSON."""
    from rich.console import Console

    console = Console(stderr=as_json, highlight=False)
    return lambda text: console.print(text, markup=False, soft_wrap=True)


def resolve_storage(url: str | None) -> str:
    from tuner.db.session import default_url

    return url or default_url()


def compare(
    model: Annotated[str, typer.Option(help="Model alias, local dir or hub id.")],
    gpu: Annotated[str, typer.Option(help="GPU profile: a10g, h100, h200, cpu, ...")],
    a: Annotated[str, typer.Option("--a", help="A: 'defaults' or knob=value,knob=value.")],
    b: Annotated[str, typer.Option("--b", help="B: 'defaults' or knob=value,knob=value.")],
    workload: Annotated[
        str | None, typer.Option(help="Preset or trace:FILE (default: smoke on cpu, else chat).")
    ] = None,
    workload_set: WorkloadSet = None,
    repeats: Repeats = 3,
    confidence: Confidence = 0.95,
    storage: Storage = None,
    vllm_python: VllmPython = None,
    as_json: Json = False,
) -> None:
    """Is B better than A here? Interleaved fresh launches, B/A per metric with intervals.

    Exit 1 when no interval could be given (a side not measured, or too few launches), or when
    the output throughput is inconclusive (the launches of a side disagree far beyond their
    noise).
    """
    import json

    data = run_compare(
        model=model,
        gpu=gpu,
        a=a,
        b=b,
        workload=workload,
        workload_set=workload_set,
        repeats=repeats,
        confidence=confidence,
        storage_url=resolve_storage(storage),
        vllm_python=vllm_python,
        say=consoles(as_json),
    )
    if as_json:
        print(json.dumps(data, indent=2), flush=True)
    overall = data["verdicts"]["overall"]
    if overall in (NOT_MEASURED, NOT_ENOUGH) or overall.startswith(INCONCLUSIVE):
        raise typer.Exit(1)
