"""The recommendation of a finished study: the best measured configuration, its flags spelled
for the vLLM version it was measured with, its numbers against the baseline, and provenance."""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tuner.abtest import COMPARED
from tuner.catalog import GPUS, MODELS, levers, tokenizer_dir
from tuner.db import Repository, StudyRow
from tuner.domain import Estimate, ServingConfig
from tuner.load import capacity_text
from tuner.results import costs, energy
from tuner.scoring import WindowFlags, window_flags
from tuner.study import Confirmed, choose, study_objective
from tuner.study.standings import baseline, pick
from tuner.vllm import argv

# The metrics of an A/B comparison but P50 TTFT; memory has a line of its own.
_SHOWN = tuple(m for m in COMPARED if m[0] not in ("ttft_p50_ms", "memory_gib"))


@dataclass(frozen=True)
class Recommendation:
    study: str
    trial_number: int
    is_baseline: bool
    score: float | None  # against vLLM's defaults; None where this study did not measure them
    flags: tuple[str, ...]
    env: Mapping[str, str]
    serve_command: str
    metrics: Mapping[str, Estimate]
    baseline_metrics: Mapping[str, Estimate] | None
    memory_gib: float
    baseline_memory_gib: float | None
    provenance: Mapping[str, object]
    feasible: bool
    confirmed: Confirmed | None = None
    # An emulated study: the memory of the GPU emulated (GiB), to hold the peak against.
    emulated_memory_gib: float | None = None
    # A curve's capacity (what a capacity study ranks by) and where, the defaults' beside it.
    capacity: str | None = None
    baseline_capacity: str | None = None
    # Each capacity only a lower bound: read at an open-loop load the server kept up with
    # (costs.capacity_at_least); its text then says "at least".
    capacity_is_lower_bound: bool = False
    baseline_capacity_is_lower_bound: bool = False
    # Client-bound / disturbed windows of the trial shown, and of the defaults' trial.
    windows: WindowFlags = field(default_factory=WindowFlags)
    baseline_windows: WindowFlags = field(default_factory=WindowFlags)
    # What the configuration costs beside what it wins (a burstier stream), in words.
    tradeoffs: tuple[str, ...] = ()
    # Its knobs that change the model's outputs (quantization=fp8): not a free speed-up.
    output_changes: tuple[str, ...] = ()
    # Why the trial shown has no measured energy ("energy: not measured on CPU"); None if it has.
    energy_note: str | None = None
    # $ per 1M output tokens at the SLO throughput, the defaults', and the price assumed (or
    # why there is no price).
    cost: Estimate | None = None
    baseline_cost: Estimate | None = None
    price: str = ""
    # Each cost only an upper bound: read at an open-loop load the server kept up with.
    cost_is_upper_bound: bool = False
    baseline_cost_is_upper_bound: bool = False
    # Why its capacity or cost ranking rests on a lower bound (costs.ranked_on_a_bound); "".
    ranking_caveat: str = ""

    def render(self) -> str:
        lines = [
            f"best of study {self.study}: trial #{self.trial_number}"
            + (" (vLLM's defaults)" if self.is_baseline else "")
            + ("" if self.feasible else "  [no trial met the SLO; closest shown]")
        ]
        lines.append(f"  flags: {shlex.join(self.flags) or '(none: the defaults are best)'}")
        if self.env:
            lines.append(f"  env:   {' '.join(f'{k}={v}' for k, v in self.env.items())}")
        lines.append(f"  serve: {self.serve_command}")
        for key, label, _ in _SHOWN:
            if key not in self.metrics:
                continue
            e = self.metrics[key]
            base = self.baseline_metrics.get(key) if self.baseline_metrics else None
            vs = f"   defaults {base.text()}" if base else ""
            lines.append(f"  {label:>13}: {e.text()}{vs}")
        base_mem = (
            f"   defaults {self.baseline_memory_gib:.2f}"
            if self.baseline_memory_gib is not None
            else ""
        )
        lines.append(f"  {'memory GiB':>13}: {self.memory_gib:.2f}{base_mem}")
        if self.capacity is not None:
            base_cap = f"   defaults {self.baseline_capacity}" if self.baseline_capacity else ""
            lines.append(f"  {'capacity':>13}: {self.capacity}{base_cap}")
            if self._capacity_at_least():
                lines.append(
                    f"  {'':>13}  a lower bound: {costs.OPEN_LOOP}; {costs.MEASURE_CAPACITY}"
                )
            lines.append(
                "  (out tok/s above is at the workload's own load point; capacity is the most "
                "a load point that met the SLO served)"
            )
        lines.extend(self._energy_lines())
        lines.extend(self._cost_lines())
        lines.extend(f"  tradeoff: {t}" for t in self.tradeoffs)
        if self.output_changes:
            lines.append(
                f"  changes outputs: {', '.join(self.output_changes)} changes what the model "
                "generates (not only how fast): check its answers before adopting it"
            )
        if self.score is None:
            why = (
                "vLLM's defaults have no measurement in this study to score against"
                if self.baseline_metrics is None
                else "vLLM's defaults served nothing within the SLO: no ratio to them"
            )
            lines.append(f"  score: none ({why}; medians [range] over the measurement windows "
                         "of one launch)")  # fmt: skip
        else:
            lines.append(
                f"  score {self.score:.3f} (search phase, one launch: 1.0 = vLLM's defaults; "
                "medians [range] over the measurement windows of one launch; an effect is only "
                "what the confirmation below confirms)"
            )
        if self.ranking_caveat:
            lines.append(f"  caution: {self.ranking_caveat}")
        if self.windows.any:
            lines.append(f"  caution: trial #{self.trial_number}: {self.windows.explained()}")
        if self.baseline_windows.any and not self.is_baseline:
            lines.append(f"  caution: vLLM's defaults: {self.baseline_windows.explained()}")
        if self.confirmed is not None:
            c = self.confirmed
            lines.append(f"  confirmation (fresh launches, interleaved): {c.verdict_text()}")
            if not c.chose(self.trial_number, self.is_baseline):
                lines.append(
                    "    caution: its choice misses the SLO: shown instead, the best trial that "
                    "meets it (not the confirmation's choice)"
                )
            if c.details_from:
                lines.append(f"    {c.details_from}, per metric:")
            lines.extend(f"    {d}" for d in c.details)
            lines.extend(f"    caution: {note}" for note in c.caveats)
        prov = ", ".join(f"{k} {v}" for k, v in self.provenance.items() if v not in (None, ""))
        lines.append(f"  measured on: {prov}")
        warning = self.emulation_warning()
        if warning:
            lines.append(f"  warning: {warning}")
        return "\n".join(lines)

    def _cost_lines(self) -> list[str]:
        if self.cost is None:
            return [f"  {self.price}"] if self.price else []
        base = self.baseline_cost
        vs = (
            f"   defaults {_cost(base, self.baseline_cost_is_upper_bound)}"
            if base is not None
            else ""
        )
        lines = [
            f"  {'$/1M out tok':>13}: {_cost(self.cost, self.cost_is_upper_bound)}{vs}",
            f"  {'':>13}  at {self.price}",
        ]
        if self.cost_is_upper_bound or (base is not None and self.baseline_cost_is_upper_bound):
            why = (
                "read at a capacity that is only a lower bound (see capacity)"
                if self._capacity_at_least()
                else f"{costs.OPEN_LOOP}; {costs.MEASURE_CAPACITY}"
            )
            lines.append(f"  {'':>13}  an upper bound: {why}")
        return lines

    def _capacity_at_least(self) -> bool:
        """A capacity shown (the trial's or the defaults') is only a lower bound."""
        return (self.capacity is not None and self.capacity_is_lower_bound) or (
            self.baseline_capacity is not None and self.baseline_capacity_is_lower_bound
        )

    def _energy_lines(self) -> list[str]:
        """The measured GPU energy beside the throughput, or why there is none."""
        if self.energy_note is not None:
            return [f"  {self.energy_note}"]
        out = []
        for key, label, text in (
            (energy.PER_TOKEN, "J/out token", Estimate.figures),
            (energy.POWER, "GPU watts", energy.power),
        ):
            if key not in self.metrics:
                continue
            base = self.baseline_metrics.get(key) if self.baseline_metrics else None
            vs = f"   defaults {text(base)}" if base else ""
            out.append(f"  {label:>13}: {text(self.metrics[key])}{vs}")
        return out

    def emulation_warning(self) -> str | None:
        return emulated_memory_warning(self.memory_gib, self.emulated_memory_gib)


def _cost(usd: Estimate, upper_bound: bool) -> str:
    """$ per 1M output tokens with its range, "at most" where it is an ``upper_bound``; an
    infinite one (nothing served within the SLO, at any price) says so instead of
    'inf [inf, inf]'."""
    if not math.isfinite(usd.median):
        return "none (no load point met the SLO)"
    return f"{'at most ' if upper_bound else ''}{usd.figures()}"


def emulated_memory_warning(memory_gib: float | None, capacity_gib: float | None) -> str | None:
    """Set when an emulated result's peak GPU memory is above the emulated GPU's memory.

    Emulation scales --gpu-memory-utilization, but vLLM's processes use memory beyond that
    budget (on the H200, 2.2-2.8 GiB more at every utilization tried): a configuration that
    served in emulation may not start on the real, smaller GPU.
    """
    if capacity_gib is None or memory_gib is None or memory_gib <= capacity_gib:
        return None
    return (
        f"the peak GPU memory ({memory_gib:.2f} GiB) is above the emulated GPU's "
        f"{capacity_gib:.1f} GiB: vLLM used more than --gpu-memory-utilization budgets, so on "
        "the real GPU this configuration may not start; lower --gpu-memory-utilization there, "
        "or measure on the real GPU"
    )


def serve_flags(study: StudyRow, flags: argv.RenderedFlags) -> argv.RenderedFlags:
    """The flags a ready ``vllm serve`` line needs for ``study``'s model: the study's own extra
    arguments (``extra_args``), then the configuration's ``flags``, as every launch of the study
    had them (:func:`tuner.vllm.argv.base_args`); a test architecture without published
    weights (tiny-ernie) keeps random weights and the synthetic tokenizer."""
    extra = study.extra_args
    model = MODELS.get(study.model)
    if model is None or model.weights_available or not study.model_source:
        return argv.RenderedFlags(args=(*extra, *flags.args), env=flags.env)
    tokenizer = str(tokenizer_dir(Path(study.model_source)))
    return argv.RenderedFlags(
        args=("--load-format", "dummy", "--tokenizer", tokenizer, *extra, *flags.args),
        env=flags.env,
    )


def recommendation(
    repo: Repository, study: str, *, gpu_price: float | None = None
) -> Recommendation | None:
    """The study's best configuration, priced at ``gpu_price`` $/GPU-hour where given (else
    the study's own price, :func:`tuner.results.costs.study_price`); None when nothing
    completed."""
    row = repo.get_study(study)
    if row is None:
        return None
    rows = repo.list_trials(study, limit=None)
    confirmed = choose(repo.list_comparisons(study), study_objective(row))
    top = pick(row, rows, confirmed)
    if top is None:
        return None
    trial = top.row
    # The defaults' numbers shown are those of the trial every score is a ratio to.
    base_trial = baseline(rows, trial.gpu_uuid)
    version = trial.vllm_version or row.vllm_version or "0"
    flags = argv.render_flags(top.config, version)
    base_metrics = base_trial.metrics if base_trial else None
    emulated = bool(row.emulated or trial.emulated)
    price, no_cost = costs.price_or_why(
        row.gpu, row.spec, gpu_price, emulated=emulated, option="--gpu-price"
    )
    floor = costs.capacity_at_least(trial.metrics, trial.windows, row.spec)
    base_floor = base_trial is not None and costs.capacity_at_least(
        base_trial.metrics, base_trial.windows, row.spec
    )
    return Recommendation(
        study=study,
        trial_number=top.number,
        is_baseline=top.is_baseline,
        score=top.score if top.relative else None,  # a raw composite is no ratio to print
        flags=tuple(flags.args),
        env=dict(flags.env),
        serve_command=argv.serve_command(row.model_source or row.model, serve_flags(row, flags)),
        metrics=trial.metrics,
        baseline_metrics=base_metrics,
        memory_gib=top.values[1],
        baseline_memory_gib=base_trial.objective_values[1]
        if base_trial and base_trial.objective_values
        else None,
        provenance={
            "gpu": trial.gpu_name,
            "vllm": version,
            "model": trial.model,
            "workload": row.workload_label,  # with the values the study changed, if any
            "emulated": emulated,
            "windows": len(trial.metrics["output_throughput"].values),
        },
        feasible=top.feasible,
        confirmed=confirmed,
        emulated_memory_gib=gpu_memory_gib(row.gpu) if emulated else None,
        capacity=capacity_text(trial.metrics, trial.windows, floor),
        baseline_capacity=(
            capacity_text(base_trial.metrics, base_trial.windows, base_floor)
            if base_trial
            else None
        ),
        capacity_is_lower_bound=floor,
        baseline_capacity_is_lower_bound=base_floor,
        windows=window_flags(trial.windows),
        baseline_windows=window_flags(base_trial.windows) if base_trial else WindowFlags(),
        tradeoffs=()
        if top.is_baseline
        else tuple(tradeoffs(top.config, trial.metrics, base_metrics, row.slo)),
        output_changes=tuple(levers.output_changing(top.config)),
        energy_note=energy.absent(trial.metrics, on_gpu=trial.gpu_uuid is not None),
        cost=costs.usd(trial.metrics, price),
        baseline_cost=costs.usd(base_metrics, price) if base_metrics else None,
        price=price.label() if price is not None else no_cost or costs.no_price(row.gpu),
        cost_is_upper_bound=costs.usd_at_most(trial.metrics, trial.windows, row.spec),
        baseline_cost_is_upper_bound=base_trial is not None
        and costs.usd_at_most(base_trial.metrics, base_trial.windows, row.spec),
        ranking_caveat=costs.ranked_on_a_bound(study_objective(row), trial, rows, row.spec),
    )


# P99 ITL this much above the defaults' is worth a sentence: the stream got burstier.
ITL_RISE = 1.25


def tradeoffs(
    config: ServingConfig,
    metrics: Mapping[str, Estimate],
    baseline: Mapping[str, Estimate] | None,
    slo: Mapping[str, object],
) -> list[str]:
    """What ``config`` costs against vLLM's defaults, in words: today, a P99 ITL (the gap
    between streamed chunks, as tuner measures ITL) well above the defaults', which a
    stream_interval win brings with it, beside the throughput it bought."""
    itl, base_itl = metrics.get("itl_p99_ms"), (baseline or {}).get("itl_p99_ms")
    if itl is None or base_itl is None or not base_itl.median > 0:
        return []
    rise = itl.median / base_itl.median
    if not rise >= ITL_RISE:
        return []
    bursty = levers.smoothness_knobs(config)
    who = " and ".join(bursty) if bursty else "this configuration"
    thr, base_thr = metrics.get("output_throughput"), (baseline or {}).get("output_throughput")
    gain = ""
    if thr is not None and base_thr is not None and base_thr.median > 0:
        gain = f", for x{thr.median / base_thr.median:.2f} the defaults' output tok/s"
    bound = slo.get("itl_p99_ms")
    if isinstance(bound, int | float):
        where = "within" if itl.median <= bound else "above"
        judged = f"{where} the study's ITL SLO of {bound:g} ms"
    else:
        judged = "no ITL SLO judged it: add --slo itl_p99=50ms where users read the stream live"
    what = "streams several tokens per chunk" if bursty else "streams less smoothly"
    return [
        f"{who} {what}: P99 ITL (the gap between streamed chunks) is {itl.median:.0f} ms "
        f"against the defaults' {base_itl.median:.0f} ms (x{rise:.1f}){gain}; chat users see "
        f"text arrive in bursts ({judged})"
    ]


def gpu_memory_gib(profile: str) -> float | None:
    gpu = GPUS.get(profile)
    return gpu.memory_gib if gpu is not None else None
