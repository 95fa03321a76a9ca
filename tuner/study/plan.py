"""The lever plan: where a study looks, decided from what limits the server.

A study whose spec names no space of its own (no ``params``, ``choices`` or ``search``, and
``[space] plan`` not ``"off"``) measures vLLM's defaults first (second, after the recipe of a
regime :func:`predict` names before launch: :mod:`tuner.study.planning`). Their trial is
diagnosed (:mod:`tuner.scoring.regime`); the regime and the objective pick the knobs that move
that bottleneck (:data:`tuner.catalog.levers.MOVES`, at most :data:`MAX_KNOBS`), each checked
here: searchable on this GPU and vLLM, valid for this model and workload, not fixed by the
spec, not against the objective. The plan is printed and stored with the study before the
search goes on.

Then it is **screened** from the regime's recipe down, not up from the defaults: the first
trial sets every planned knob at its likeliest value at once (levers that only pay together,
such as async scheduling with a stream interval, pay there), then one trial drops each knob
from that recipe again. A knob's effect is the recipe's score over the score without it (a
trial that misses the study's SLO scores 0); it is kept when that beats one launch
difference's noise (``sqrt(2)`` x the SD of one launch's score: from the noise profile of this
GPU, model and workload where ``tuner calibrate`` or earlier decisions measured one, the
metrics the objective scores, else :data:`DEFAULT_LAUNCH_SD`, the H200's throughput). The
sampler then searches the kept knobs (the ones above 1 when none beats the noise, the best two
when none helps: the plan says so). With one planned knob the defaults are its "without".
Every trial of the plan counts in the study's budget; when the regime cannot be named, the
study searches the card's knobs as before.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuner.catalog import MEMORY_BANDWIDTH_GBS, VLLM_DEFAULT_GPU_MEMORY_UTILIZATION, levers
from tuner.domain import GpuProfile, ModelSpec, Objective, Regime, ServingConfig, Workload
from tuner.errors import UsageError
from tuner.load import fingerprint
from tuner.scoring import Diagnosis
from tuner.scoring.regime import LIGHT_STREAMS
from tuner.space import DEFAULT, SearchSpace

MAX_KNOBS = 4
# The SD of one launch's output tok/s (log scale) on the H200, placement off: docs/results/
# noise-h200.md (ernie-0.3b, throughput-256, 4 warm launches, 3 df).
DEFAULT_LAUNCH_SD = 0.068
REUSE_MATERIAL = 0.1  # prefix caching is only worth searching above this prefix reuse
# An fp8 KV cache is only worth screening against a decode bottleneck where the KV cache is
# this share of the bytes a step reads: below it, halving it gains under x1.05, inside one
# launch difference's noise (qwen2.5-7b at 16 streams, 4 %: x0.97 measured, plan-h200.md §7).
KV_READ_MATERIAL = 0.1
SCREEN = "screen"  # the Optuna user attribute of a screening trial: RECIPE or the knob dropped
RECIPE = "recipe"


@dataclass(frozen=True)
class Planned:
    knob: str
    screen: Any  # the value measured against the defaults
    why: str


@dataclass(frozen=True)
class Plan:
    """The diagnosis, the knobs planned, those left out (with why), and the screening."""

    diagnosis: Diagnosis
    knobs: tuple[Planned, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    # After screening: each knob's score against the defaults, the margin, the knobs kept.
    effects: Mapping[str, float] = field(default_factory=dict)
    margin: float | None = None
    margin_source: str = ""
    kept: tuple[str, ...] | None = None
    recipe: float | None = None  # the recipe's score against the defaults
    # The bottleneck moved: the best trial's own diagnosis (its number, the regime) and the
    # knobs of its plan added to the search, unscreened.
    moved: tuple[tuple[int, str], ...] = ()
    added: tuple[str, ...] = ()

    @property
    def searched(self) -> tuple[str, ...]:
        """The knobs the sampler works on now: the kept ones once screened, else the plan."""
        if self.kept is None:
            return tuple(k.knob for k in self.knobs)
        return (*self.kept, *(k for k in self.added if k not in self.kept))

    def lines(self) -> list[str]:
        out = [f"diagnosis: {self.diagnosis.summary()}"]
        planned = ", ".join(f"{k.knob} ({k.why})" for k in self.knobs)
        out.append(
            f"plan: screening {planned}: all at once, then each left out"
            if self.knobs
            else "plan: nothing to screen"
        )
        if self.skipped:
            out.append("not searching: " + "; ".join(f"{k}: {why}" for k, why in self.skipped))
        if self.kept is not None and self.margin is not None:
            seen = ", ".join(f"{k} x{v:.2f}" for k, v in self.effects.items())
            beat = any(e > 0 and math.log(e) > self.margin for e in self.effects.values())
            fallback = ""
            if not beat and any(e > 1.0 for e in self.effects.values()):
                fallback = " (none beat the noise: those above x1.00)"
            elif not beat:
                fallback = " (none helped: the two likeliest)"
            out.append(
                f"screened (the recipe x{self.recipe or 0:.2f} the defaults; each knob's share: "
                f"{seen}; kept above x{math.exp(self.margin):.2f}, "
                f"{self.margin_source}): searching {', '.join(self.kept) or 'nothing'}{fallback}"
            )
        for number, regime in self.moved:
            out.append(
                f"moved: the best trial (#{number}) is {regime}: searching "
                f"{', '.join(self.searched)}"
            )
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "diagnosis": self.diagnosis.as_dict(),
            "knobs": [{"knob": k.knob, "screen": k.screen, "why": k.why} for k in self.knobs],
            "skipped": [list(s) for s in self.skipped],
            "effects": dict(self.effects),
            "margin": self.margin,
            "margin_source": self.margin_source,
            "kept": None if self.kept is None else list(self.kept),
            "recipe": self.recipe,
            "moved": [list(m) for m in self.moved],
            "added": list(self.added),
            "text": self.lines(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        kept = data.get("kept")
        return cls(
            diagnosis=Diagnosis.from_dict(data["diagnosis"]),
            knobs=tuple(Planned(k["knob"], k["screen"], k["why"]) for k in data["knobs"]),
            skipped=tuple((s[0], s[1]) for s in data.get("skipped") or ()),
            effects={k: float(v) for k, v in (data.get("effects") or {}).items()},
            margin=data.get("margin"),
            margin_source=data.get("margin_source", ""),
            kept=None if kept is None else tuple(kept),
            recipe=data.get("recipe"),
            moved=tuple((int(n), str(r)) for n, r in data.get("moved") or ()),
            added=tuple(data.get("added") or ()),
        )


# What one API-server process streams, one token a chunk, before its Python event loop is
# saturated: 16,017 output tok/s with it at 1.04 cores on the H200 host (docs/results/
# plan-h200.md, 2026-12-03). A host-dependent figure: predict() asks for wide margins around it.
FRONTEND_TOK_S = 16_000.0
# A prediction is made only this far from the line between the two sides: the GPU's roofline
# (which no real step reaches) this many times the frontend's rate for "frontend-bound", the
# frontend's rate this many times the roofline for "decode-bound".
FRONTEND_MARGIN = 8.0
DECODE_MARGIN = 2.0
KV_ROOM = 0.5  # of the KV memory: a workload that would fill more may be KV-cache-bound
PREDICTED = "predicted"  # the Optuna user attribute of a predicted regime's recipe trial
PREDICTED_KNOBS = "predicted_knobs"  # and its knobs: the space that trial is drawn from
ENQUEUED = "enqueued"  # the Optuna user attribute of a spec's [[enqueue]] entry: the card's space


def predict(model: ModelSpec, gpu: GpuProfile, workload: Workload) -> Diagnosis | None:
    """The regime arithmetic expects before anything is launched, or None where it cannot
    say with a wide margin.

    A decode step reads the weights and every stream's KV cache once, so a GPU of the
    catalog's memory bandwidth (:data:`tuner.catalog.MEMORY_BANDWIDTH_GBS`) serves at most
    ``streams / (bytes read / bandwidth)`` output tokens a second (the roofline; real steps are
    slower). One API-server process streams about
    :data:`FRONTEND_TOK_S`. Far above it the frontend is the limit; far below it the GPU's
    decoding is. Only closed-loop synthetic load of more than a few streams, with room in the
    KV cache, is predicted: open-loop rates, traces, light load and a cache that may fill are
    left to the defaults' measured diagnosis."""
    bandwidth_gbs = MEMORY_BANDWIDTH_GBS.get(gpu.name)
    if bandwidth_gbs is None or gpu.is_cpu or workload.request_rate is not None:
        return None
    if workload.trace is not None or workload.concurrency_ladder or workload.rate_ladder:
        return None
    # Closed loop: at most this many requests run at once (vLLM's own cap permitting).
    cap = levers.vllm_default("max_num_seqs", gpu)
    streams = min(workload.concurrency, int(cap)) if cap is not None else workload.concurrency
    if streams <= LIGHT_STREAMS:
        return None
    weights, kv, _ = step_bytes(model, workload, streams)
    room = gpu.memory_gib * 1024**3 * VLLM_DEFAULT_GPU_MEMORY_UTILIZATION - weights
    if kv > KV_ROOM * room:
        return None
    roofline = streams / ((weights + kv) / (bandwidth_gbs * 1e9))
    figures = {
        "roofline_tok_s": roofline,
        "frontend_tok_s": FRONTEND_TOK_S,
        "requests_running_peak": float(streams),  # as the defaults' telemetry would say
    }
    if roofline >= FRONTEND_MARGIN * FRONTEND_TOK_S:
        regime, why = Regime.FRONTEND, "above"
    elif DECODE_MARGIN * roofline <= FRONTEND_TOK_S:
        regime, why = Regime.DECODE, "below"
    else:
        return None
    evidence = (
        f"predicted before launch: the GPU's roofline of {roofline:,.0f} out tok/s at "
        f"{streams} streams is far {why} one API server's {FRONTEND_TOK_S:,.0f}",
    )
    return Diagnosis(regime, evidence, figures, streams)


def step_bytes(model: ModelSpec, workload: Workload, streams: float) -> tuple[int, float, float]:
    """What one decode step of ``streams`` requests reads: the weights' bytes, the bytes of
    their KV caches, each at the workload's mean context (its prompt and half its output), and
    that context in tokens."""
    shape = fingerprint(workload)
    context = shape.prompt_tokens["mean"] + shape.output_tokens["mean"] / 2
    return model.weight_bytes(), streams * context * model.kv_bytes_per_token(), context


def space_of(card: SearchSpace, knobs: Sequence[str]) -> SearchSpace:
    """The space that searches ``knobs`` with the knobs ``card``'s spec fixed held."""
    return SearchSpace(
        card.model,
        card.gpu,
        card.workload,
        params=list(knobs),
        fixed=card.given_fixed,
        flags=card.flags,
    )


def make_plan(diagnosis: Diagnosis, card: SearchSpace, objective: Objective) -> Plan | None:
    """The knobs that move ``diagnosis``'s bottleneck here; None when the regime is unknown
    (the card's space is searched then)."""
    moves = levers.MOVES.get(diagnosis.regime)
    if not moves:
        return None
    planned: list[Planned] = []
    skipped: list[tuple[str, str]] = []
    for move in moves:
        why_not = _why_not(move, card, objective)
        if why_not is not None:
            skipped.append((move.knob, why_not))
            continue
        value = _screen_value(move, card)
        if value is None:
            idle = _changes_nothing(move.knob, move.screen, diagnosis, card)
            skipped.append((move.knob, idle or _no_candidate(move, card)))
            continue
        idle = _changes_nothing(move.knob, value, diagnosis, card)
        if idle is not None:
            skipped.append((move.knob, idle))
            continue
        if len(planned) >= MAX_KNOBS:
            skipped.append((move.knob, f"a lever beyond the plan's {MAX_KNOBS}, which come first "
                                       f"in the {diagnosis.regime} playbook"))  # fmt: skip
            continue
        trial = [*planned, Planned(move.knob, value, move.why)]
        problems = space_of(card, [k.knob for k in trial]).violations(_recipe(card, trial))
        if problems:  # alone, or with the knobs planned before it
            skipped.append((move.knob, f"{move.knob}={value}: {problems[0]}"))
            continue
        planned = trial
    names = {p.knob for p in planned} | {k for k, _ in skipped}
    rest = [k for k in card.searched if k not in names]
    skipped += [(k, levers.NOT_PLANNED[k]) for k in rest if k in levers.NOT_PLANNED]
    others = [k for k in rest if k not in levers.NOT_PLANNED]
    if others:
        skipped.append((", ".join(others), f"do not move a {diagnosis.regime} server"))
    return Plan(diagnosis, tuple(planned), tuple(skipped))


def _why_not(move: levers.Move, card: SearchSpace, objective: Objective) -> str | None:
    lever = levers.get(move.knob)
    if move.knob in card.given_fixed:
        return "fixed by the study"
    if lever is not None and lever.smoothness and objective is Objective.LATENCY:
        return "makes streaming burstier (P99 chunk gap), against a latency objective"
    if lever is not None and (lever.changes_outputs or lever.multi_gpu):
        return "changes the model's outputs" if lever.changes_outputs else "needs several GPUs"
    if move.knob == "enable_prefix_caching":
        reuse = fingerprint(card.workload).prefix_reuse
        if reuse < REUSE_MATERIAL:
            return f"the workload repeats {reuse:.0%} of its prompt tokens"
    if lever is not None and not lever.candidates(card.gpu):
        return f"not searched on {card.gpu.name} (tuner's candidates are for GPUs)"
    try:
        space_of(card, [move.knob])
    except UsageError as exc:
        return exc.message
    return None


def _changes_nothing(knob: str, value: Any, diagnosis: Diagnosis, card: SearchSpace) -> str | None:
    """Why screening ``knob=value`` here would measure the defaults again, from what vLLM
    resolves the knob to on this GPU and from the defaults' own trial; None when it may not."""
    default = levers.vllm_default(knob, card.gpu, card.given_fixed, declared_defaults(card))
    if default is not None and value == default:
        return f"{value} is already vLLM's default on {card.gpu.name}"
    peak = diagnosis.figures.get("requests_running_peak")
    if knob == "kv_cache_dtype" and diagnosis.regime is Regime.DECODE and peak:
        weights, kv, context = step_bytes(card.model, card.workload, peak)
        share = kv / (weights + kv)
        if share < KV_READ_MATERIAL:  # a step's time follows the bytes it reads, at best
            return (
                f"the KV cache is {share:.0%} of what a decode step reads ({peak:.0f} requests "
                f"of {context:,.0f} tokens against {weights / 1e9:.1f} GB of weights): halving "
                f"it gains at most x{1 / (1 - share / 2):.2f}"
            )
    if knob == "max_num_seqs":
        return _cap_binds_nothing(value, default, diagnosis, card)
    return None


def _cap_binds_nothing(
    value: Any, default: Any, diagnosis: Diagnosis, card: SearchSpace
) -> str | None:
    """Why a ``max_num_seqs`` cap of ``value`` would hold back no request more or less than
    vLLM's ``default`` cap did; None when it may. From the defaults' trial: a cap above what
    ran binds nothing where fewer ran than the default allows. From the workload: the client
    never has more requests in flight than its concurrency (whatever the arrival process), so
    caps at or above it are alike. From the defaults' trial again: a cap reached that no
    request waited behind did not bind either."""
    peak = diagnosis.figures.get("requests_running_peak")
    most = max(p.concurrency for p in card.workload.load_points())
    cap, idle = f"vLLM's cap of {default} on {card.gpu.name}", f"a cap of {value} binds nothing"
    reached = isinstance(default, int) and peak is not None and peak >= default
    if peak is not None and value > peak and not reached:
        return f"at most {peak:.0f} requests ran at once, under {cap}: {idle}"
    if isinstance(default, int) and min(value, default) >= most:
        return f"the workload has at most {most} requests in flight, within {cap}: {idle}"
    if reached and value > peak and diagnosis.figures.get("requests_waiting_peak") == 0:
        return f"{peak:.0f} requests ran at once at {cap} and none waited: {idle}"
    return None


def declared_defaults(card: SearchSpace) -> dict[str, Any]:
    """The defaults the card's vLLM declares for its flags, by dest ({} without its flags)."""
    return {f.dest: f.default for f in card.flags.flags.values()} if card.flags else {}


def _beyond_default(move: levers.Move, card: SearchSpace) -> Any:
    """vLLM's own default for ``move``'s knob here when the move pays on one side of it."""
    default = levers.vllm_default(move.knob, card.gpu, card.given_fixed, declared_defaults(card))
    return default if move.way and isinstance(default, int | float) else None


def _no_candidate(move: levers.Move, card: SearchSpace) -> str:
    default = _beyond_default(move, card)
    if default is None:
        return "no candidate value besides vLLM's default here"
    side = "above" if move.way > 0 else "below"
    return f"no candidate {side} vLLM's default of {default} on {card.gpu.name}: {move.why}"


def _screen_value(move: levers.Move, card: SearchSpace) -> Any:
    choices = [c for c in space_of(card, [move.knob]).choices[move.knob] if c != DEFAULT]
    numbers = [c for c in choices if isinstance(c, int | float) and not isinstance(c, bool)]
    default = _beyond_default(move, card)
    if default is not None:  # only the side of vLLM's default that the move is about
        choices = numbers = [c for c in numbers if (c - default) * move.way > 0]
    if move.screen in choices or not choices:
        return move.screen if choices else None
    target = move.screen
    if isinstance(target, int | float) and not isinstance(target, bool) and target > 0 and numbers:
        # Not offered here (a CPU's smaller range): the candidate nearest to it, by ratio.
        return min(numbers, key=lambda c: abs(math.log(c / target)) if c > 0 else math.inf)
    return choices[0]


def _recipe(card: SearchSpace, knobs: Sequence[Planned]) -> ServingConfig:
    """The defaults with every one of ``knobs`` at its screen value."""
    space = space_of(card, [k.knob for k in knobs])
    return space.config_from({k.knob: k.screen for k in knobs}, where="the plan")


def screen_configs(plan: Plan, card: SearchSpace) -> list[tuple[str, ServingConfig]]:
    """The screening trials: the recipe (every planned knob set), then the recipe without each
    knob in turn (none with a single knob: its "without" is the defaults' trial)."""
    out = [(RECIPE, _recipe(card, plan.knobs))]
    if len(plan.knobs) > 1:
        for k in plan.knobs:
            out.append((k.knob, _recipe(card, [o for o in plan.knobs if o is not k])))
    return out


def screened(plan: Plan, scores: Mapping[str, float], launch_sd: float | None, source: str) -> Plan:
    """``plan`` with its screening judged. ``scores``: the screening trials' scores against the
    defaults (1.0 = the defaults), keyed by :data:`RECIPE` and by the knob each one dropped (a
    trial that failed or missed the study's SLO: 0). ``launch_sd``: the SD of one launch's
    score from a noise profile (None: :data:`DEFAULT_LAUNCH_SD`, output throughput's)."""
    sd = DEFAULT_LAUNCH_SD if launch_sd is None else launch_sd
    if launch_sd is None:
        source = f"no noise profile here: the H200's SD of a launch's output tok/s, {sd}"
    margin = math.sqrt(2) * sd
    recipe = scores.get(RECIPE, 0.0)
    without = {k.knob: scores.get(k.knob, 0.0) for k in plan.knobs}
    if len(plan.knobs) == 1:
        without = {plan.knobs[0].knob: 1.0}  # the defaults
    effects = {
        k: (recipe / w if w > 0 else math.inf) if recipe > 0 else 0.0 for k, w in without.items()
    }
    kept = [k for k, e in effects.items() if e > 0 and math.log(e) > margin]
    if not kept:  # nothing beat the noise: what helped at all, else the two likeliest
        kept = [k for k, e in effects.items() if e > 1.0] or _likeliest(effects, without)[:2]
    order = [k.knob for k in plan.knobs]
    return dataclasses.replace(
        plan,
        effects=effects,
        margin=margin,
        margin_source=source,
        kept=tuple(sorted(kept, key=order.index)),
        recipe=recipe,
    )


def _likeliest(effects: Mapping[str, float], without: Mapping[str, float]) -> list[str]:
    """The knobs by effect, ties (a recipe that failed or missed the SLO: every effect 0) in
    the plan's order after those whose trial without them scored lowest: a knob whose absence
    alone brought the score back (a stream interval whose chunk gaps broke a P99 ITL bound)
    is the least likely to help."""
    return sorted(effects, key=lambda k: (-effects[k], without[k]))


def moved(plan: Plan, number: int, diagnosis: Diagnosis, card: SearchSpace,
          objective: Objective) -> Plan | None:  # fmt: skip
    """``plan`` grown by the levers of the best trial's regime when that is not the regime
    planned for (nor one it already moved to); None when the bottleneck has not moved."""
    seen = {plan.diagnosis.regime.value, *(r for _, r in plan.moved)}
    if diagnosis.regime.value in seen or plan.kept is None:
        return None
    extra = make_plan(diagnosis, card, objective)
    knobs = [k.knob for k in extra.knobs] if extra is not None else []
    added = (*plan.added, *(k for k in knobs if k not in plan.searched))
    return dataclasses.replace(
        plan, moved=(*plan.moved, (number, diagnosis.regime.value)), added=added
    )
