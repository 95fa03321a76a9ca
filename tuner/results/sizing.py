"""How many GPUs serve a target rate: the recommended configuration's measured capacity under the
SLO, turned into a fleet size, its $/hour and its $ per 1M output tokens.

Per study (a model on a GPU profile with a workload), the configuration is the study's
recommendation (:func:`tuner.results.recommend.recommendation`), or, where that misses the SLO
asked for, the study's best measured trial that meets it (its standings under that SLO,
:func:`tuner.study.standings.standings`). Its capacity is read from its stored windows
(:mod:`tuner.load.curve`) under the SLO asked for, or the study's own when none is: the highest
throughput of the load curve whose P99 latencies meet it (never a client-bound point), or, for
a workload of one load point, that point's throughput if it meets the SLO.
Where that load was sent open loop (Poisson arrivals, a trace's own arrival times) and no
higher load was measured that the server, not the client, bounded (a client-bound point says
nothing of the server), the server served what it was sent: the capacity is only a lower
bound, said so, and the counts and costs from it are upper bounds. Where the capacity or cost
ranking that picked the configuration rested on such a bound (every configuration kept up with
the top rate of a rate ladder), a note says its pick is by noise, as ``tuner best`` does.

A capacity is a median with the range over the measurement windows of one launch (smallest to
largest window): a range, not a confidence interval. Where the study's confirmation launched the
configuration afresh (:func:`tuner.study.confirm.confirmation_launches`), the capacity is read
from each of those launches instead, and their windows are pooled: the search's one launch was
picked for being high, and a fleet sized on it may be too small. The count takes the
conservative end::

    GPUs = ceil(rate / capacity.low)

and says what the median and the high end would give. A replica serves at most its capacity,
and replicas add up: tuner measures one server per GPU, and a load balancer in front is assumed
to spread the requests evenly. ``$/hour`` is GPUs x the price per GPU-hour; ``$/1M output
tokens`` is that over the output tokens the fleet serves at the target rate (a fleet that is
not full pays for its idle share). A rate in requests/s is turned into tokens with the
measured output tokens per request at the capacity point.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from tuner.catalog import GpuPrice, check_one_model, model_key
from tuner.db import Repository, StudyRow, TrialRow
from tuner.domain import Estimate, Objective, Slo
from tuner.errors import UsageError
from tuner.load import capacity, estimate, load_points, unsaturated
from tuner.results import costs
from tuner.results.recommend import (
    Recommendation,
    emulated_memory_warning,
    gpu_memory_gib,
    recommendation,
)
from tuner.results.report.curves import chosen_point
from tuner.scoring import usd_per_million
from tuner.scoring.objectives import Headline
from tuner.study.confirm import confirmation_launches
from tuner.study.standings import standings, study_objective
from tuner.vllm import argv

REQ = "req/s"
TOK = "tok/s"
CLIENT_BOUND_FIX = (
    "measure it again from a less loaded or faster client machine (`tuner trials` flags the "
    "client-bound windows)"
)
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
    launches: tuple[int, ...] = ()  # the confirmation's launches the capacity pools, by number
    price: GpuPrice | None = None
    usd_per_hour: float | None = None
    usd_per_million: float | None = None  # the fleet at the target rate
    notes: tuple[str, ...] = field(default_factory=tuple)
    # No capacity because the load generator was the limit at every load point read (the
    # server's capacity was not measured), not because the server missed the SLO.
    client_bound: bool = False

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
        n = len(self.launches)
        of = f"the confirmation's {n} launch{'' if n == 1 else 'es'}" if n else "one launch"
        lines.append(
            f"  capacity per GPU: {at_least}{_figure(c.median)} {unit} "
            f"[{_figure(c.low)}, {_figure(c.high)}] "
            f"({self.basis}; range over {self.windows} window{'' if self.windows == 1 else 's'}"
            f" of {of}, not a confidence interval)"
        )
        if self.gpus is None and self.client_bound:
            lines.append(
                f"  GPUs for {self.rate}: not sized: the load generator, not the server, was the "
                f"limit at every load point; {CLIENT_BOUND_FIX}"
            )
        elif self.gpus is None:
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
                f", {at_most}${_figure(self.usd_per_million, 3)} per 1M output tokens at "
                f"{self.rate}"
                if self.usd_per_million is not None
                else ""
            )
            lines.append(f"  cost: {at_most}${self.usd_per_hour:,.2f}/hour{per_m}")
            lines.append(f"    at {self.price.label()}")
        lines.extend(f"  note: {n}" for n in self.notes)
        lines.append(f"  measured with vLLM {self.vllm_version}")
        return "\n".join(lines)


def _pooled(
    launches: Sequence[TrialRow], slo: Slo, unit: str, arrivals: str | None
) -> tuple[tuple[Estimate, str, float | None, bool], tuple[int, ...]] | None:
    """:func:`_capacity` of the confirmation's ``launches`` with their windows pooled, each
    launch's own (its median) named in the basis: the median tokens per request, a lower bound
    where one launch's is, and the numbers of the launches pooled; None without launches. A
    launch without a capacity under the SLO
    (it missed it, or its client was the bound) is named and left out of the pool while
    another has one: its zeros would make the low end 0, and the configuration unsizeable."""
    found = [(t.number, r) for t in launches if (r := _capacity(t, slo, unit, arrivals))]
    read = [(n, r) for n, r in found if r[0].median > 0] or found
    if not read:
        return None
    caps, bases, per, floors = zip(*(r for _, r in read), strict=True)
    each = ", ".join(f"#{n} {r[0].median:.4g}" for n, r in read)
    each += "".join(f"; #{n} left out: {r[1]}" for n, r in found if (n, r) not in read)
    tokens = [p for p in per if p is not None]
    pooled = (
        estimate([v for cap in caps for v in cap.values]),
        f"{'; '.join(dict.fromkeys(bases))}; each launch's median: {each}",
        statistics.median(tokens) if tokens else None,
        any(floors),
    )
    return pooled, tuple(n for n, _ in read)


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
        if chosen is None:  # no point met the SLO with its client keeping up
            none = [0.0] * max(len(p.metrics[key].values) for p in points)
            why = (
                "every load point of the curve client-bound"
                if all(p.client_bound for p in points)
                else "no load point of the curve met the SLO"
            )
            return estimate(none), why, None, False
        basis = f"the load curve's capacity at {chosen.label}"
    else:
        chosen = points[0]
        label = costs.load_label(chosen, arrivals)
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
    picked: str = "",
    launches: Sequence[TrialRow] = (),
) -> FleetSize | None:
    """The fleet for ``rate`` of ``trial`` (the study's recommendation); ``slo`` None: the
    study's own; ``ranking_caveat``: why the ranking that picked it rests on a lower bound
    (:func:`tuner.results.costs.ranked_on_a_bound`), a note; ``picked``: why this trial where it
    is not the recommendation, a note; ``launches``: the confirmation's of its configuration
    (:func:`tuner.study.confirm.confirmation_launches`), whose windows, where they have any,
    the capacity is read from instead of the trial's. None when neither has stored windows."""
    own = Slo(**dict(study.slo))
    given = slo is not None and slo != own
    used = own if slo is None else slo
    arrivals = costs.arrivals(study.spec)
    fresh = [t for t in launches if load_points(t.windows)]
    confirmed = _pooled(fresh, used, rate.unit, arrivals)
    read, numbers = confirmed or (_capacity(trial, used, rate.unit, arrivals), ())
    if read is None:
        return None
    cap, basis, per_request, floor = read
    gpus = gpus_for(rate.value, cap.low)
    points = [p for t in (fresh if confirmed else [trial]) for p in load_points(t.windows)]
    bound = gpus is None and all(p.client_bound for p in points)
    price, no_cost = costs.price_or_why(
        study.gpu, study.spec, gpu_price, emulated=study.emulated, option="--gpu-price"
    )
    usd_h = gpus * price.usd_per_hour if gpus is not None and price is not None else None
    tokens_s = (
        rate.value if rate.unit == TOK else (rate.value * per_request if per_request else None)
    )
    usd_m = usd_per_million(tokens_s, usd_h) if usd_h is not None and tokens_s else None
    notes = [picked] if picked else []
    if no_cost:
        notes.append(no_cost)
    if numbers and len(numbers) < len(fresh):
        notes.append(
            f"{len(fresh) - len(numbers)} of the confirmation's {len(fresh)} launches had no "
            "capacity under the SLO (named in the basis): sized from the others, the fleet may "
            "miss the SLO"
        )
    if given and not picked:
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
        peak = trial.objective_values[1] if trial.objective_values else None
        if (warning := emulated_memory_warning(peak, gpu_memory_gib(study.gpu))) is not None:
            notes.append(warning)
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
        launches=numbers,
        price=price,
        usd_per_hour=usd_h,
        usd_per_million=usd_m,
        notes=tuple(notes),
        client_bound=bound,
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
    GPUs, then cheapest) first. Emulated studies only with ``emulated``. ``gpu_price`` prices
    one GPU profile: UsageError where the studies sized are of several."""
    of_model = [s for s in repo.list_studies() if model in (s.model, s.model_source)]
    check_one_model(model, (model_key(s.model, s.model_source) for s in of_model))
    studies = [s for s in sized_studies(of_model, model, gpus, workload) if s.emulated == emulated]
    out = []
    for study in studies:
        rec = recommendation(repo, study.name, gpu_price=gpu_price)
        if rec is None:
            continue
        sized = _size_study(repo, study, rec, rate, slo, gpu_price)
        if sized is not None:
            out.append(sized)
    # Of the studies sized: one queued or with nothing measured on another profile prices none.
    _check_one_profile_priced([s for s in studies if s.name in {f.study for f in out}], gpu_price)
    return sorted(out, key=_fewest_then_cheapest)


def _fewest_then_cheapest(f: FleetSize) -> tuple[float, float]:
    """Fewest GPUs, then cheapest; unsized or unpriced last (a free fleet, $0, is cheapest)."""
    return (
        math.inf if f.gpus is None else f.gpus,
        math.inf if f.usd_per_hour is None else f.usd_per_hour,
    )


def _check_one_profile_priced(studies: Sequence[StudyRow], gpu_price: float | None) -> None:
    """UsageError where one price per GPU-hour was given for studies on several GPU profiles:
    it would price them alike, and compare them by nothing but their GPU counts."""
    profiles = sorted({s.gpu for s in studies})
    if gpu_price is None or len(profiles) < 2:
        return
    raise UsageError(
        f"one price per GPU-hour (${gpu_price:g}) would price {', '.join(profiles)} alike",
        hint="size one GPU profile at a time with its price (--gpu PROFILE --gpu-price USD; "
        "gpu=PROFILE&gpu_price=USD on GET /v1/sizing), or give none: each study is priced at "
        "its own price, else the catalog's",
    )


def _size_study(
    repo: Repository,
    study: StudyRow,
    rec: Recommendation,
    rate: Rate,
    slo: Slo | None,
    gpu_price: float | None,
) -> FleetSize | None:
    """The fleet of the study's recommendation ``rec``; where it misses the SLO (the one given,
    often stricter than the study's) at every load point, the fleet of the study's best
    measured trial that meets it, by its standings under that SLO. Where none does, the
    recommendation's (no GPU count), with a note saying so of the study's measured trials."""
    trial = repo.get_trial(study.name, rec.trial_number)
    if trial is None:
        return None
    every = repo.list_trials(study.name, limit=None)
    again = confirmation_launches(every, trial.config, rec.is_baseline)
    sized = fleet_size(study, trial, rec.flags, rate, slo=slo, is_baseline=rec.is_baseline,
                       gpu_price=gpu_price, ranking_caveat=rec.ranking_caveat,
                       launches=again)  # fmt: skip
    if sized is None or sized.gpus is not None:
        return sized
    used = Slo(**dict(study.slo)) if slo is None else slo
    objective = study_objective(study)
    rows = _under(every, used, objective)
    table = standings(rows, objective, used)
    why = (
        f"the study's recommendation, trial #{trial.number}, has no capacity under the SLO (it "
        "missed it, or was client-bound, at every load point); this is the study's best "
        f"measured trial that meets it (its {objective.value} standings under that SLO)"
    )
    for ranked in (r for r in table if r.feasible and r.number != trial.number):
        version = ranked.row.vllm_version or study.vllm_version or "0"
        flags = tuple(argv.render_flags(ranked.config, version).args)
        caveat = costs.ranked_on_a_bound(objective, ranked.row, rows, study.spec)
        again = confirmation_launches(every, ranked.config, ranked.is_baseline)
        other = fleet_size(study, ranked.row, flags, rate, slo=slo, is_baseline=ranked.is_baseline,
                           gpu_price=gpu_price, ranking_caveat=caveat, picked=why,
                           launches=again)  # fmt: skip
        if other is not None and other.gpus is not None:
            return other
    trials = f"{len(table)} measured trial{'' if len(table) == 1 else 's'}"
    note = (
        f"no other of the study's {trials} has a capacity under the SLO either"
        if sized.client_bound
        else f"none of the study's {trials} meets the SLO"
    )
    return dataclasses.replace(sized, notes=(*sized.notes, note))


def _under(rows: Sequence[TrialRow], slo: Slo, objective: Objective) -> list[TrialRow]:
    """``rows`` as if their study had been run under ``slo``: each curve's capacity re-read
    from its windows (:func:`tuner.load.capacity`), and with it the throughput the capacity and
    cost presets rank by, so that their standings judge and order the trials by it."""
    out = []
    for row in rows:
        cap = capacity(load_points(row.windows), slo)
        if cap is None:
            out.append(row)
            continue
        metrics = {**row.metrics, **cap}
        values = row.objective_values
        if values is not None and objective in (Objective.CAPACITY, Objective.COST):
            values = (Headline.of_metrics(metrics, objective).throughput, *values[1:])
        out.append(dataclasses.replace(row, metrics=metrics, objective_values=values))
    return out


def _figure(x: float, digits: int = 4) -> str:
    """A capacity or a price in a line: digits grouped from 1,000 up ('13,503', not
    '1.35e+04'), else ``digits`` significant figures ('10', '2.5')."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.{digits}g}"
