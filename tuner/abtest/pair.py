"""``tuner compare``'s core: is B better than A, here, beyond the launch-to-launch noise?

:func:`setup_pair` checks everything the user typed before anything starts; :func:`run_pair`
runs the :mod:`tuner.abtest.pipeline` on the two arms, with :func:`judge_pair` as its judge
step: :func:`tuner.abtest.compare.compare` gives B/A per metric with an interval and a verdict,
and the comparison is stored with ``results["kind"] == "compare"`` (the API serves it at
``/v1/compare/{id}``, the dashboard at ``/ui/compare/{id}``).

When a side cannot start here (a finding; see :mod:`tuner.abtest.guard`), every verdict of the
comparison is "not measured".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.abtest.compare import NO_VALUES, NOT_ENOUGH, Arm, Comparison
from tuner.abtest.decide import Design, Look, judge_look
from tuner.abtest.guard import finding_of
from tuner.abtest.pipeline import Bench, Group, Judgement, Watch, first_provenance
from tuner.catalog import get_gpu, resolve_model
from tuner.compose import beyond_typed, installed_flags, resolve_workload
from tuner.domain import GpuProfile, ModelSpec, Provenance, TrialResult, Workload, to_jsonable
from tuner.domain.workload import overridden_name
from tuner.load import fingerprint
from tuner.scoring import NoiseProfile, is_inconclusive
from tuner.space import SearchSpace
from tuner.spec import (
    StudySpec,
    check_confidence,
    configs_in,
    parse_config_spec,
    parse_workload_overrides,
)

NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class PairSetup:
    """A and B as typed, made concrete for this model, GPU and workload."""

    spec: StudySpec
    model: ModelSpec
    gpu: GpuProfile
    workload: Workload
    arms: tuple[Arm, Arm]  # labels as typed; configs with the platform's baseline applied


def setup_pair(
    *,
    model: str,
    gpu: str,
    a: str,
    b: str,
    workload: str | None,
    workload_set: str | None,
    confidence: float,
    vllm_python: str | None,
    options: tuple[str, str] = ("--a", "--b"),
) -> PairSetup:
    """Check the SPECs (unknown knobs, bad values), the workload changes and the confidence,
    then A and B against the space rules of this model, GPU and workload: UsageError (exit 2)
    naming the option that gave the side (``options``) before anything starts."""
    a_knobs, b_knobs = parse_config_spec(a, options[0]), parse_config_spec(b, options[1])
    overrides = parse_workload_overrides(workload_set)
    check_confidence(confidence)
    profile, spec_model = get_gpu(gpu), resolve_model(model)
    spec = StudySpec(
        model=model,
        gpu=gpu,
        workload=workload or ("smoke" if profile.is_cpu else "chat"),
        workload_overrides=dict(overrides),
        vllm_python=vllm_python,
        source="--workload-set",
    )
    # As a study reads its [workload]: a trace's replay options (speed, start_s, ...) applied
    # when it is read, fields the workload does not read refused.
    load = resolve_workload(spec)
    load = load.replace(name=overridden_name(load.name, overrides))
    # A flag beyond the typed knobs is typed (or refused, naming the closest) by the flag list
    # of the vLLM that will run: asked of its interpreter, and cached per version.
    flags = installed_flags(spec) if beyond_typed([*a_knobs, *b_knobs]) else None
    space = SearchSpace(spec_model, profile, load, flags=flags)
    configs = configs_in(space, list(zip(options, (a_knobs, b_knobs), strict=True)))
    # Labels as typed; the configs add the platform baseline (e.g. CPU's utilization).
    arm_a, arm_b = (Arm(t.strip(), c) for t, c in zip((a, b), configs, strict=True))
    return PairSetup(spec, spec_model, profile, load, (arm_a, arm_b))


@dataclass(frozen=True)
class PairOutcome:
    """B against A as measured: the comparison, and what is stored and printed of it."""

    setup: PairSetup
    comparison: Comparison
    findings: Mapping[str, str | None]  # "a", "b": why that side cannot start here, or None
    results: dict[str, Any]
    verdicts: dict[str, str]
    provenance: Provenance | None
    comparison_id: int | None = None  # once stored
    look: Look | None = None  # the decision: its design, how it stopped, what it cost

    def stored(self) -> Judgement:
        a, b = self.setup.arms
        repeats = None if self.look is None else max(self.look.step.n_a, self.look.step.n_b)
        return Judgement(
            self.setup.workload,
            a.config,
            b.config,
            self.results,
            self.verdicts,
            self.provenance,
            repeats,
        )

    @property
    def look_done(self) -> bool:
        """Whether the design stops here (decided, precise enough, a side not measurable)."""
        return any(self.findings.values()) or self.look is None or self.look.done

    @property
    def conclusive(self) -> bool:
        """False when no interval could be given (a side not measured, too few launches) or
        the output throughput is inconclusive (a side's launches disagree beyond their noise)."""
        overall = self.verdicts["overall"]
        return overall not in (NOT_MEASURED, NOT_ENOUGH, NO_VALUES) and not is_inconclusive(overall)

    def to_json(self) -> dict[str, Any]:
        """What ``tuner compare --json`` prints."""
        a, b = self.setup.arms
        return {
            "id": self.comparison_id,
            "model": self.setup.model.alias,
            "gpu": self.setup.gpu.name,
            "workload": self.setup.workload.name,
            "workload_fingerprint": fingerprint(self.setup.workload).as_dict(),
            "a": a.config.to_dict(),
            "b": b.config.to_dict(),
            "results": self.results,
            "verdicts": self.verdicts,
            "provenance": to_jsonable(self.provenance),
        }


def judge_pair(
    setup: PairSetup,
    results: Sequence[Sequence[TrialResult]],
    design: Design,
    profile: NoiseProfile | None = None,
) -> PairOutcome:
    """B/A per metric from the launches of A and B (in that order) by the decision design
    (:mod:`tuner.abtest.decide`); every verdict is "not measured" when a side cannot start
    here."""
    (a, b), (a_runs, b_runs) = setup.arms, results
    look = judge_look(a, a_runs, b, b_runs, design, profile)
    c = look.comparison
    out, verdicts = {**look.to_results(), "kind": "compare"}, c.to_verdicts()
    findings = {side: finding_of(rs) for side, rs in zip("ab", results, strict=True)}
    if any(findings.values()):
        for m in out["metrics"]:
            m["verdict"] = NOT_MEASURED
        verdicts = dict.fromkeys(verdicts, NOT_MEASURED)
    return PairOutcome(setup, c, findings, out, verdicts, first_provenance(*results), look=look)


def run_pair(bench: Bench, setup: PairSetup, watch: Watch) -> PairOutcome:
    """Measure B against A on ``bench`` by its design (interleaved, resumable, a look after
    every pair when sequential), judge and store."""
    design = bench.design or Design.fixed_launches(bench.launches)

    def judge(group: Group, results: list[list[TrialResult]]) -> list[PairOutcome]:
        return [judge_pair(setup, results, design, bench.profile(group, results))]

    def decided(group: Group, results: list[list[TrialResult]]) -> bool:
        return judge(group, results)[0].look_done

    ((outcome, comparison_id),) = bench.run(
        [Group(setup.workload, setup.arms)], judge, watch=watch, decided=decided
    )
    return dataclasses.replace(outcome, comparison_id=comparison_id)
