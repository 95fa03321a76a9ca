"""How many GPUs serve a target rate: the recommended configuration's measured capacity under the
SLO, turned into a fleet size, its $/hour and its $ per 1M output tokens.

Per study (a model on a GPU profile with a workload), the configuration is the study's
recommendation (:func:`tuner.results.recommend.recommendation`). Its capacity is read from its
stored windows (:mod:`tuner.load.curve`) under the SLO asked for, or the study's own when none
is: the highest throughput of the load curve whose P99 latencies meet it (never a client-bound
point), or, for a workload of one load point, that point's throughput if it meets the SLO.
Where that load was sent open loop (Poisson arrivals, a trace's own arrival times) and no
higher load was measured, the server served what it was sent: the capacity is only a lower
bound, said so, and the counts and costs from it are upper bounds. Where the capacity or cost
ranking that picked the configuration rested on such a bound (every configuration kept up with
the top rate of a rate ladder), a note says its pick is by noise, as ``tuner best`` does.

A capacity is a median with the range over the measurement windows of one launch (smallest to
largest window): a range, not a confidence interval. The count takes the conservative end::

    GPUs = ceil(rate / capacity.low)

and says what the median and the high end would give. A replica serves at most its capacity,
and replicas add up: tuner measures one server per GPU, and a load balancer in front is assumed
to spread the requests evenly. ``$/hour`` is GPUs x the price per GPU-hour; ``$/1M output
tokens`` is that over the output tokens the fleet serves at the target rate (a fleet that is
not full pays for its idle share). A rate in requests/s is turned into tokens with the
measured output tokens per request at the capacity point.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from tuner.catalog import GpuPrice, check_one_model, model_key
from tuner.db import Repository, StudyRow, TrialRow
from tuner.domain import Estimate, Slo
from tuner.errors import UsageError
from tuner.load import estimate, load_points, point_label, unsaturated
from tuner.results import costs
from tuner.results.recommend import recommendation
from tuner.results.report.curves import chosen_point
from tuner.scoring import usd_per_million

REQ = "req/s"
TOK = "tok/s"
_RATE = re.compile(
    r"^\s*((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?)\s*(req/s|tok/s)?\s*$", re.IGNORECASE
)
# A ratio this close above an integer is that integer (10 / 2.5 must not be 4.000000001 -> 5).
_EPS = 1e-9


@dataclass(frozen=True)
class Rate:
    value: float
    unit: str  # REQ or TOK

    def __str__(self) -> str:
        return f"{self.value:g} {self.unit}"


MAX_RATE = 1e9  # requests or tokens per second: beyond any deployment, and finite


def parse_rate(text: str) -> Rate:
    """``20``, ``20req/s`` or ``5000tok/s`` (a bare number is requests/s)."""
    m = _RATE.match(text)
    if m is None or not 0 < float(m.group(1)) <= MAX_RATE:
        raise UsageError(
            f"--rate {text!r} is not a positive rate of at most {MAX_RATE:.0e}",
            hint="give requests/s or output tokens/s, e.g. --rate 20 or --rate 20req/s "
            "or --rate 5000tok/s",
        )
    return Rate(float(m.group(1)), (m.group(2) or REQ).lower())


def gpus_for(rate: float, per_gpu: float) -> int | None:
    """Replicas of ``per_gpu`` capacity that serve ``rate``; None when one serves nothing."""
    if not per_gpu > 0:  # NaN too
        return None
    return max(1, math.ceil(rate / per_gpu - _EPS))


@dataclass(frozen=True)
class FleetSize:
    """The answer for one study; ``gpus`` None when no load point met the SLO."""

    study: str
    model: str
    gpu: str
    workload: str
    trial_number: int
    is_baseline: bool
    flags: tuple[str, ...]
    rate: Rate
    slo: Mapping[str, float]
    slo_source: str  # "the study's" or "given"
    basis: str  # where the capacity was read, in words
    capacity: Estimate  # per GPU, in the rate's unit: median [low, high] over windows
    # Only a lower bound (an open-loop load the server kept up with): gpus, usd_* at most.
    capacity_is_lower_bound: bool
    tokens_per_request: float | None
    gpus: int | None  # from capacity.low: the conservative end
    gpus_at_median: int | None
    gpus_at_high: int | None
    windows: int
    vllm_version: str
    price: GpuPrice | None = None
    usd_per_hour: float | None = None
    usd_per_million: float | None = None  # the fleet at the target rate
    notes: tuple[str, ...] = field(default_factory=tuple)

    def render(self) -> str:
        unit = self.rate.unit
        c = self.capacity
        head = (
            f"{self.model} on {self.gpu} ({self.workload}, study {self.study}): "
            f"trial #{self.trial_number}" + (" (vLLM's defaults)" if self.is_baseline else "")
        )
        lines = [head, f"  flags: {shlex.join(self.flags) or '(none: the defaults)'}"]
        slo = ", ".join(f"{k} <= {v:g} ms" for k, v in self.slo.items()) or "none"
        lines.append(f"  SLO ({self.slo_source}): {slo}")
        at_least, at_most = ("at least ", "at most ") if self.capacity_is_lower_bound else ("", "")
        lines.append(
            f"  capacity per GPU: {at_least}{c.median:.4g} {unit} [{c.low:.4g}, {c.high:.4g}] "
            f"({self.basis}; range over {self.windows} window{'' if self.windows == 1 else 's'}"
            " of one launch, not a confidence interval)"
        )
        if self.gpus is None:
            lines.append(f"  GPUs for {self.rate}: none can serve it (no load point met the SLO)")
        else:
            lines.append(
                f"  GPUs for {self.rate}: {at_most}{self.gpus} (rate / the low end of the capacity "
                f"range; {self.gpus_at_median} at the median, {self.gpus_at_high} at the high end)"
            )
        if self.price is None:
            lines.append(f"  {costs.no_price(self.gpu)}")
        elif self.usd_per_hour is not None:
            per_m = (
                f", {at_most}${self.usd_per_million:.3g} per 1M output tokens at {self.rate}"
                if self.usd_per_million is not None
                else ""
            )
            lines.append(f"  cost: {at_most}${self.usd_per_hour:,.2f}/hour{per_m}")
            lines.append(f"    at {self.price.label()}")
        lines.extend(f"  note: {n}" for n in self.notes)
        lines.append(f"  measured with vLLM {self.vllm_version}")
        return "\n".join(lines)


def _capacity(
    trial: TrialRow, slo: Slo, unit: str, arrivals: str | None = None
) -> tuple[Estimate, str, float | None, bool] | None:
    """The trial's capacity per GPU in ``unit`` under ``slo``, where it was read, output
    tokens per request there, and whether it is only a lower bound (an open-loop load the
    server kept up with, :func:`tuner.load.curve.unsaturated`; ``arrivals``: how the study's
    arrivals were timed, :func:`tuner.results.costs.arrivals`); None for a trial without
    windows."""
    points = load_points(trial.windows)
    if not points:
        return None
    key = "request_throughput" if unit == REQ else "output_throughput"
    if len(points) >= 2:
        chosen = chosen_point(points, slo)
        if chosen is None:  # no point met the SLO
            none = [0.0] * max(len(p.metrics[key].values) for p in points)
            return estimate(none), "no load point of the curve met the SLO", None, False
        basis = f"the load curve's capacity at {chosen.label}"
    else:
        chosen = points[0]
        label = point_label(
            chosen.concurrency,
            chosen.request_rate,
            arrivals == "trace",
            trace_poisson=arrivals == "poisson",
        )
        if not chosen.meets(slo) or chosen.client_bound:
            why = "client-bound" if chosen.client_bound else "missed the SLO"
            none = [0.0] * len(chosen.metrics[key].values)  # as many windows as were measured
            return estimate(none), f"its one load point ({label}) {why}", None, False
        basis = f"its one load point, {label}"
    req = chosen.metrics["request_throughput"].median
    per_request = chosen.metrics["output_throughput"].median / req if req > 0 else None
    floor = unsaturated(chosen, points, arrivals is not None)
    return chosen.metrics[key], basis, per_request, floor


def fleet_size(
    study: StudyRow,
    trial: TrialRow,
    flags: Sequence[str],
    rate: Rate,
    *,
    slo: Slo | None = None,
    is_baseline: bool = False,
    gpu_price: float | None = None,
    ranking_caveat: str = "",
) -> FleetSize | None:
    """The fleet for ``rate`` of ``trial`` (the study's recommendation); ``slo`` None: the
    study's own; ``ranking_caveat``: why the ranking that picked it rests on a lower bound
    (:func:`tuner.results.costs.ranked_on_a_bound`), a note. None when the trial has no stored
    windows."""
    own = Slo(**dict(study.slo))
    given = slo is not None and slo != own
    used = own if slo is None else slo
    read = _capacity(trial, used, rate.unit, costs.arrivals(study.spec))
    if read is None:
        return None
    cap, basis, per_request, floor = read
    gpus = gpus_for(rate.value, cap.low)
    price = costs.study_price(study.gpu, study.spec, gpu_price)
    usd_h = gpus * price.usd_per_hour if gpus is not None and price is not None else None
    tokens_s = (
        rate.value if rate.unit == TOK else (rate.value * per_request if per_request else None)
    )
    usd_m = usd_per_million(tokens_s, usd_h) if usd_h is not None and tokens_s else None
    notes = []
    if given:
        notes.append(
            "the configuration is the one recommended under the study's SLO; its capacity is "
            "re-read from its windows under the SLO given"
        )
    if floor:
        notes.append(
            f"the capacity is a lower bound: {costs.OPEN_LOOP}; so the GPU counts and costs "
            f"are upper bounds; {costs.MEASURE_CAPACITY}"
        )
    if ranking_caveat:
        notes.append(ranking_caveat)
    if study.emulated:
        notes.append("emulated: the memory is the profile's, the compute a larger GPU's")
    return FleetSize(
        study=study.name,
        model=study.model,
        gpu=study.gpu,
        workload=study.workload_label,
        trial_number=trial.number,
        is_baseline=is_baseline,
        flags=tuple(flags),
        rate=rate,
        slo={k: float(v) for k, v in asdict(used).items() if v is not None},
        slo_source="given" if given else "the study's",
        basis=basis,
        capacity=cap,
        capacity_is_lower_bound=floor,
        tokens_per_request=per_request,
        gpus=gpus,
        gpus_at_median=gpus_for(rate.value, cap.median),
        gpus_at_high=gpus_for(rate.value, cap.high),
        windows=len(cap.values),
        vllm_version=trial.vllm_version or study.vllm_version or "?",
        price=price,
        usd_per_hour=usd_h,
        usd_per_million=usd_m,
        notes=tuple(notes),
    )


def sized_studies(
    studies: Iterable[StudyRow], model: str, gpus: Sequence[str], workload: str | None
) -> list[StudyRow]:
    """The studies of ``studies`` that :func:`size` reads for ``model`` on ``gpus`` (every
    profile when empty) of ``workload`` (any when None), emulated or not."""
    wanted = {g.strip().lower() for g in gpus}
    return [
        s
        for s in studies
        if model in (s.model, s.model_source)
        and (not wanted or s.gpu.lower() in wanted)
        and (workload is None or s.workload_label == workload)
    ]


def size(
    repo: Repository,
    *,
    model: str,
    rate: Rate,
    gpus: Sequence[str] = (),
    workload: str | None = None,
    slo: Slo | None = None,
    emulated: bool = False,
    gpu_price: float | None = None,
) -> list[FleetSize]:
    """One :class:`FleetSize` per study of ``model`` (on ``gpus``, every profile measured when
    empty; of ``workload`` when given) whose recommendation has stored windows, best (fewest
    GPUs, then cheapest) first. Emulated studies only with ``emulated``."""
    of_model = [s for s in repo.list_studies() if model in (s.model, s.model_source)]
    check_one_model(model, (model_key(s.model, s.model_source) for s in of_model))
    out = []
    for study in sized_studies(of_model, model, gpus, workload):
        if study.emulated != emulated:
            continue
        rec = recommendation(repo, study.name, gpu_price=gpu_price)
        if rec is None:
            continue
        trial = repo.get_trial(study.name, rec.trial_number)
        if trial is None:
            continue
        sized = fleet_size(
            study,
            trial,
            rec.flags,
            rate,
            slo=slo,
            is_baseline=rec.is_baseline,
            gpu_price=gpu_price,
            ranking_caveat=rec.ranking_caveat,
        )
        if sized is not None:
            out.append(sized)
    return sorted(out, key=lambda f: (f.gpus or math.inf, f.usd_per_hour or math.inf))
