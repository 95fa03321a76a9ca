"""The bottleneck diagnosis (tuner.scoring.regime) and the lever plan (tuner.study.plan) on
hand-made telemetry: each regime's evidence, the order of the rules, and what a plan keeps,
skips and screens on a GPU and on a CPU."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tuner.catalog import levers
from tuner.catalog.gpus import get_gpu
from tuner.catalog.models import resolve_model
from tuner.domain import Objective, Regime, ServingConfig, TrialResult, TrialStatus
from tuner.load.workloads import get_workload
from tuner.scoring.noise import Components, NoiseKey, NoiseProfile
from tuner.scoring.regime import Diagnosis, diagnose
from tuner.space import SearchSpace
from tuner.study.plan import (
    DEFAULT_LAUNCH_SD,
    MAX_KNOBS,
    Plan,
    Planned,
    make_plan,
    screen_configs,
    screened,
)
from tuner.study.planning import score_sd
from tuner.vllm.flags import shipped


def _trial(**metrics: float) -> TrialResult:
    return TrialResult(config=ServingConfig(), status=TrialStatus.COMPLETE, server_metrics=metrics)


@pytest.mark.parametrize(
    ("metrics", "regime"),
    [
        ({"preemptions": 3, "kv_cache_usage_peak": 1.0}, Regime.KV_CACHE),
        ({"kv_cache_usage_peak": 0.97, "requests_waiting_peak": 5}, Regime.KV_CACHE),
        ({"server_cpu_peak_process": 0.98, "gpu_utilization_mean": 0.4}, Regime.FRONTEND),
        # One API server's share of the total: two processes at 0.9 cores together.
        ({"api_server_cpu": 1.8, "api_server_processes": 2}, Regime.FRONTEND),
        ({"engine_core_cpu": 0.95, "gpu_utilization_mean": 0.5}, Regime.SCHEDULER),
        ({"requests_running_peak": 2, "gpu_utilization_mean": 0.3}, Regime.LIGHT_LOAD),
        ({"prefill_time_s": 30, "decode_time_s": 10, "inference_time_s": 40}, Regime.PREFILL),
        ({"prefill_time_s": 5, "decode_time_s": 35, "inference_time_s": 40}, Regime.DECODE),
        ({"gpu_utilization_mean": 0.97, "requests_running_peak": 200}, Regime.DECODE),
        ({}, Regime.UNKNOWN),
    ],
)
def test_each_regime_from_its_evidence(metrics: dict[str, float], regime: Regime) -> None:
    assert diagnose(_trial(**metrics)).regime is regime


def test_a_busy_gpu_is_not_frontend_bound_and_the_cpu_build_is_never_scheduler_bound() -> None:
    busy = _trial(server_cpu_peak_process=0.95, gpu_utilization_mean=0.9, requests_running_peak=99)
    assert diagnose(busy).regime is Regime.DECODE
    # On a CPU there is no GPU telemetry: a saturated engine core is the compute, not a gap.
    cpu = _trial(engine_core_cpu=1.9, decode_time_s=9, prefill_time_s=1, inference_time_s=10)
    assert diagnose(cpu).regime is Regime.DECODE


def test_a_gpu_idle_most_of_the_time_is_not_decode_bound_whatever_the_decode_share() -> None:
    """With vLLM's phase times, a prefill share under half named the server decode-bound
    whatever the GPU did: an API server at 0.55 cores, the engine core at 0.6 and the GPU busy
    22 % of the time read "decode-bound ... GPU busy 22 % of the time"."""
    phases = {"prefill_time_s": 2.0, "decode_time_s": 38.0, "inference_time_s": 40.0}
    idle = _trial(server_cpu_peak_process=0.55, engine_core_cpu=0.6, gpu_utilization_mean=0.22,
                  requests_running_peak=64, **phases)  # fmt: skip
    d = diagnose(idle)
    assert d.regime is Regime.UNKNOWN
    assert d.evidence == ("decode 95 % of the engine time", "GPU busy 22 % of the time")
    busy = _trial(gpu_utilization_mean=0.9, requests_running_peak=64, **phases)
    assert diagnose(busy).regime is Regime.DECODE


def test_preemptions_win_over_a_saturated_frontend_and_the_record_round_trips() -> None:
    d = diagnose(_trial(preemptions=7, server_cpu_peak_process=1.0, kv_cache_usage_peak=1.0))
    assert d.regime is Regime.KV_CACHE
    assert "7 preemptions" in d.summary() and "KV cache 100 % full" in d.summary()
    assert Diagnosis.from_dict(d.as_dict()) == d


def _card(gpu: str, workload: str = "throughput-256", **fixed: object) -> SearchSpace:
    flags = shipped("0.26.0" if gpu != "cpu" else "0.32.0")
    model = resolve_model("ernie-0.3b" if gpu != "cpu" else "tiny-ernie")
    return SearchSpace(model, get_gpu(gpu), get_workload(workload), fixed=fixed, flags=flags)


def _streams(card: SearchSpace, concurrency: int) -> SearchSpace:
    """``card`` with its closed loop at ``concurrency`` streams."""
    workload = card.workload.replace(concurrency=concurrency)
    return SearchSpace(card.model, card.gpu, workload, fixed=card.given_fixed, flags=card.flags)


def test_a_frontend_plan_on_the_h200_searches_the_levers_not_the_card() -> None:
    d = Diagnosis(Regime.FRONTEND, ("API server at 1.00 of a core",), {}, 256)
    plan = make_plan(d, _card("h200"), Objective.THROUGHPUT)
    assert plan is not None
    assert [k.knob for k in plan.knobs] == ["stream_interval", "api_server_count"]
    assert [k.screen for k in plan.knobs] == [8, 4]
    skipped = dict(plan.skipped)
    # vLLM 0.26.0 declares async scheduling None, and turns it on by itself on a GPU.
    assert skipped["async_scheduling"] == "True is already vLLM's default on h200"
    # Larger batches: 256 streams never reach vLLM's 1,024 on the H200 (nor the card's 512).
    assert skipped["max_num_seqs"] == (
        "the workload has at most 256 requests in flight, within vLLM's cap of 1024 on h200: "
        "a cap of 512 binds nothing"
    )
    assert skipped["enforce_eager"] == "no CUDA graphs is never faster under load"
    assert any("attention_backend" in k for k in skipped)
    text = "\n".join(plan.lines())
    assert text.startswith("diagnosis: frontend-bound at 256 streams: API server at 1.00")
    configs = screen_configs(plan, _card("h200"))
    # The recipe first (every planned knob at once), then the recipe without each in turn.
    assert [label for label, _ in configs] == ["recipe", *(k.knob for k in plan.knobs)]
    recipe = configs[0][1]
    assert recipe.max_num_seqs is None
    assert recipe.extra == {"stream_interval": 8, "api_server_count": 4}
    without = dict(configs)["stream_interval"]
    assert "stream_interval" not in without.extra and without.extra["api_server_count"] == 4
    assert Plan.from_dict(plan.as_dict()) == plan


def test_the_objective_and_the_spec_shape_the_plan() -> None:
    d = Diagnosis(Regime.FRONTEND, (), {}, 256)
    latency = make_plan(d, _card("h200"), Objective.LATENCY)
    assert latency is not None and "stream_interval" not in [k.knob for k in latency.knobs]
    assert "burstier" in dict(latency.skipped)["stream_interval"]
    held = make_plan(d, _card("h200", max_num_seqs=256), Objective.THROUGHPUT)
    assert held is not None and dict(held.skipped)["max_num_seqs"] == "fixed by the study"


def test_a_kv_plan_differs_and_on_a_cpu_takes_the_nearest_candidates() -> None:
    d = Diagnosis(Regime.KV_CACHE, (), {}, 24)
    gpu = make_plan(d, _card("h200"), Objective.THROUGHPUT)
    cpu = make_plan(d, _card("cpu", "smoke"), Objective.THROUGHPUT)
    assert gpu is not None and cpu is not None
    assert [k.knob for k in gpu.knobs][:2] == ["gpu_memory_utilization", "kv_cache_dtype"]
    screens = {k.knob: k.screen for k in cpu.knobs}
    assert screens["gpu_memory_utilization"] == 0.3  # nearest to 0.95 among 0.1-0.3
    assert "kv_cache_dtype" not in screens  # one KV dtype on the CPU build
    assert make_plan(Diagnosis(Regime.UNKNOWN, ()), _card("h200"), Objective.THROUGHPUT) is None


def test_screening_keeps_what_the_recipe_loses_without_beyond_the_noise() -> None:
    d = Diagnosis(Regime.FRONTEND, (), {}, 256)
    plan = make_plan(d, _card("h200"), Objective.THROUGHPUT)
    assert plan is not None
    margin = math.sqrt(2) * DEFAULT_LAUNCH_SD  # x1.10
    # The recipe pays x1.40; without stream_interval x1.10 (it carries x1.27), without more API
    # servers x1.20 (x1.17: the pair pays together); a score of a knob not planned is ignored.
    scores = {"recipe": 1.40, "stream_interval": 1.10, "api_server_count": 1.20}
    judged = screened(plan, {**scores, "max_num_seqs": 1.38}, None, "")
    assert judged.kept == ("stream_interval", "api_server_count")
    assert judged.effects["stream_interval"] == pytest.approx(1.40 / 1.10)
    assert judged.margin == pytest.approx(margin) and judged.recipe == 1.40
    assert "no noise profile" in judged.margin_source
    assert "the recipe x1.40 the defaults" in judged.lines()[-1]
    # A tighter profile keeps a 1.4 % one too; nothing above the noise keeps what helped.
    close = {**scores, "api_server_count": 1.38}
    assert screened(plan, close, None, "").kept == ("stream_interval",)
    assert screened(plan, close, 0.005, "").kept == ("stream_interval", "api_server_count")
    flat = {"recipe": 1.02, "stream_interval": 1.0, "api_server_count": 1.03}
    assert screened(plan, {**flat, "max_num_seqs": 1.05}, None, "").kept == ("stream_interval",)
    # A failed recipe: no effect is known; the two likeliest are searched.
    failed = screened(plan, {"recipe": 0.0}, None, "")
    assert failed.kept == ("stream_interval", "api_server_count")
    assert judged.searched == judged.kept and plan.searched == tuple(k.knob for k in plan.knobs)


def test_the_screening_line_says_when_the_fallback_chose() -> None:
    """Knobs searched below the printed margin are the documented fallback, and the plan's line
    says so instead of reading as a contradiction."""
    plan = make_plan(Diagnosis(Regime.FRONTEND, (), {}, 256), _card("h200"), Objective.THROUGHPUT)
    assert plan is not None
    beat = screened(plan, {"recipe": 1.40, "stream_interval": 1.10}, None, "").lines()[-1]
    assert "none beat" not in beat and "none helped" not in beat
    flat = {"recipe": 1.02, "stream_interval": 1.0, "api_server_count": 1.03}
    above_one = screened(plan, {**flat, "max_num_seqs": 1.05}, None, "")
    assert above_one.lines()[-1].endswith(
        "searching stream_interval (none beat the noise: those above x1.00)"
    )
    failed = screened(plan, {"recipe": 0.0}, None, "").lines()[-1]
    assert failed.endswith("(none helped: the two likeliest)")


def test_when_the_recipe_scores_nothing_a_knob_whose_absence_scored_is_searched_last() -> None:
    """A recipe that missed the SLO scores 0, and so does every knob's effect. The fallback
    then took the first two knobs of the plan: the stream interval whose chunk gaps broke a
    P99 ITL bound (the recipe without it met the SLO, the others did not) came first."""
    plan = Plan(
        Diagnosis(Regime.FRONTEND, (), {}, 256),
        (Planned("stream_interval", 8, ""), Planned("api_server_count", 4, ""),
         Planned("async_scheduling", True, "")),
    )  # fmt: skip
    judged = screened(plan, {"recipe": 0.0, "stream_interval": 0.93}, None, "")
    assert judged.effects == dict.fromkeys(["stream_interval", "api_server_count",
                                            "async_scheduling"], 0.0)  # fmt: skip
    assert judged.kept == ("api_server_count", "async_scheduling")
    assert judged.lines()[-1].endswith("(none helped: the two likeliest)")


def _profile(**sds: float) -> NoiseProfile:
    """A noise profile whose metrics have these SDs of a launch's value (log scale)."""
    key = NoiseKey("GPU-x", "NVIDIA H200", "0.26.0", "ernie-0.3b", "throughput-256", 3)
    parts = {n: Components(sd**2, None, sd**2, 4, 0, 3, 5, 1) for n, sd in sds.items()}
    return NoiseProfile(key, parts, 5)


def test_the_margin_rests_on_the_noise_of_the_metrics_the_objective_scores() -> None:
    """The margin was always output throughput's SD, whatever the objective scored: a latency
    objective's P99 ratio, twice as noisy on the H200, let null knobs through."""
    profile = _profile(output_throughput=0.068, e2e_p99_ms=0.133, memory_gib=0.01)
    assert score_sd(profile, Objective.THROUGHPUT) == (
        0.068, "SD of a launch's output tok/s 0.068 from 5 stored launches"
    )  # fmt: skip
    assert score_sd(profile, Objective.LATENCY)[0] == 0.133
    sd, source = score_sd(profile, Objective.BALANCED)  # at most the weighted sum
    assert sd == pytest.approx(0.5 * 0.068 + 0.3 * 0.133 + 0.2 * 0.01)
    assert source == (
        "SD of a launch's 0.5 x output tok/s + 0.3 x P99 E2E ms + 0.2 x memory GiB, at most "
        f"{sd:.3f}, from 5 stored launches"
    )
    bare = _profile(output_throughput=0.068)
    assert score_sd(bare, Objective.LATENCY) == (
        0.068, "SD of a launch's output tok/s 0.068 from 5 stored launches (the noise profile "
        "has no P99 E2E ms: output tok/s's instead)"
    )  # fmt: skip
    assert score_sd(_profile(e2e_p99_ms=0.1), Objective.THROUGHPUT) == (None, "")
    # The memory score is guarded by throughput: its noise counts (memory's alone, 0.01, let
    # a knob through on a 2 % throughput wobble).
    assert score_sd(profile, Objective.MEMORY)[0] == pytest.approx(0.01 + 0.068)
    # A capacity study scores the capacity where the profile has it; throughput's otherwise.
    curved = _profile(output_throughput=0.068, capacity_output_throughput=0.09)
    assert score_sd(curved, Objective.CAPACITY) == (
        0.09, "SD of a launch's capacity out tok/s 0.090 from 5 stored launches"
    )  # fmt: skip
    assert score_sd(profile, Objective.COST)[0] == 0.068
    judged = screened(_frontend_plan(), {"recipe": 1.2}, None, "")
    assert judged.margin_source == (
        "no noise profile here: the H200's SD of a launch's output tok/s, 0.068"
    )


def _frontend_plan() -> Plan:
    plan = make_plan(Diagnosis(Regime.FRONTEND, (), {}, 256), _card("h200"), Objective.THROUGHPUT)
    assert plan is not None
    return plan


def test_with_one_planned_knob_the_defaults_are_its_without() -> None:
    card = _card("cpu", "smoke")
    plan = make_plan(Diagnosis(Regime.FRONTEND, (), {}, 64), card, Objective.THROUGHPUT)
    assert plan is not None
    one = dataclasses.replace(plan, knobs=plan.knobs[:1])
    assert [label for label, _ in screen_configs(one, card)] == ["recipe"]
    assert screened(one, {"recipe": 3.0}, None, "").effects == {"stream_interval": 3.0}


def test_when_the_best_trial_has_another_bottleneck_its_levers_join_the_search() -> None:
    from tuner.study.plan import moved

    card = _card("h200")
    plan = make_plan(Diagnosis(Regime.FRONTEND, (), {}, 256), card, Objective.THROUGHPUT)
    assert plan is not None
    assert moved(plan, 3, Diagnosis(Regime.DECODE, ()), card, Objective.THROUGHPUT) is None
    judged = screened(plan, {"recipe": 1.4}, None, "")
    same = Diagnosis(Regime.FRONTEND, ())
    assert moved(judged, 3, same, card, Objective.THROUGHPUT) is None  # not moved
    grown = moved(judged, 3, Diagnosis(Regime.DECODE, ()), card, Objective.THROUGHPUT)
    assert grown is not None and grown.moved == ((3, "decode-bound"),)
    assert grown.searched[0] == "stream_interval"
    # The decode levers join, less CUDA graphs FULL_AND_PIECEWISE: vLLM's default on the H200.
    assert {"kv_cache_dtype", "attention_backend"} <= set(grown.searched)
    assert "compilation_config.cudagraph_mode" not in grown.searched
    assert "moved: the best trial (#3) is decode-bound" in grown.lines()[-1]
    assert moved(grown, 5, Diagnosis(Regime.DECODE, ()), card, Objective.THROUGHPUT) is None
    assert Plan.from_dict(grown.as_dict()) == grown


def test_a_knob_already_at_vllms_resolved_default_or_a_cap_that_never_bound_is_not_screened() -> (
    None
):
    """What the H200 run of 2026-12-03 showed (docs/results/plan-h200.md): the decode plan of a
    7B model at 16 streams screened CUDA graphs FULL_AND_PIECEWISE, which vLLM 0.26 already
    resolves to there, and max_num_seqs=512 where at most 16 requests ever ran under a cap of
    1,024 (the frontend plan at 256 streams likewise)."""
    from tuner.catalog.levers import vllm_default

    card = _card("h200")
    decode = Diagnosis(Regime.DECODE, (), {"requests_running_peak": 16.0}, 16)
    plan = make_plan(decode, card, Objective.THROUGHPUT)
    assert plan is not None
    knobs = [k.knob for k in plan.knobs]
    assert knobs == ["kv_cache_dtype", "attention_backend"]
    why = dict(plan.skipped)
    assert why["async_scheduling"] == "True is already vLLM's default on h200"
    assert why["compilation_config.cudagraph_mode"] == (
        "FULL_AND_PIECEWISE is already vLLM's default on h200"
    )
    assert why["max_num_seqs"] == (
        "at most 16 requests ran at once, under vLLM's cap of 1024 on h200: a cap of 512 binds "
        "nothing"
    )
    frontend = Diagnosis(Regime.FRONTEND, (), {"requests_running_peak": 256.0}, 256)
    plan = make_plan(frontend, card, Objective.THROUGHPUT)
    assert plan is not None and "max_num_seqs" not in [k.knob for k in plan.knobs]
    # Where the cap did bind (a smaller GPU's 256 reached at 512 streams), the larger cap is
    # screened; and a KV-bound plan's smaller cap (64, under the peak) still is.
    full = Diagnosis(Regime.FRONTEND, (), {"requests_running_peak": 256.0}, 512)
    plan = make_plan(full, _streams(_card("a10g"), 512), Objective.THROUGHPUT)
    assert plan is not None and "max_num_seqs" in [k.knob for k in plan.knobs]
    kv = Diagnosis(Regime.KV_CACHE, (), {"requests_running_peak": 200.0}, 256)
    plan = make_plan(kv, card, Objective.THROUGHPUT)
    assert plan is not None and ("max_num_seqs", 64) in [(k.knob, k.screen) for k in plan.knobs]
    # Without the figure (an older trial), nothing is assumed of the peak; a smaller GPU whose
    # default is 256 screens the larger cap at 512 streams, the H200 has no candidate above its
    # 1,024.
    older = Diagnosis(Regime.FRONTEND, (), {}, 512)
    plan = make_plan(older, _streams(_card("a10g"), 512), Objective.THROUGHPUT)
    assert plan is not None and ("max_num_seqs", 512) in [(k.knob, k.screen) for k in plan.knobs]
    plan = make_plan(older, _streams(card, 2048), Objective.THROUGHPUT)
    assert plan is not None and dict(plan.skipped)["max_num_seqs"].startswith(
        "no candidate above vLLM's default of 1024"
    )
    # vLLM's graph default holds at -O2: a study fixed at -O1 still screens full graphs.
    o1 = make_plan(decode, _card("h200", optimization_level=1), Objective.THROUGHPUT)
    assert o1 is not None
    assert "compilation_config.cudagraph_mode" in [k.knob for k in o1.knobs]
    assert vllm_default("max_num_seqs", _card("a100-80g").gpu) == 256
    assert vllm_default("max_num_batched_tokens", card.gpu) == 8192
    assert vllm_default("max_num_seqs", _card("cpu", "smoke").gpu) == 128


def test_a_larger_cap_is_not_screened_where_no_request_ever_waited_behind_vllms() -> None:
    """A closed loop of 256 streams on a GPU whose cap is 256 runs 256 requests at once with
    none waiting: the peak reached the cap, which counted as bound, and max_num_seqs=512 was
    screened, though at most 256 requests are ever in flight. Likewise an open loop whose
    peak reached the cap while no request waited."""
    a10g = _card("a10g")
    reached = {"requests_running_peak": 256.0, "requests_waiting_peak": 0.0}
    plan = make_plan(Diagnosis(Regime.FRONTEND, (), reached, 256), a10g, Objective.THROUGHPUT)
    assert plan is not None and "max_num_seqs" not in [k.knob for k in plan.knobs]
    assert dict(plan.skipped)["max_num_seqs"] == (
        "the workload has at most 256 requests in flight, within vLLM's cap of 256 on a10g: "
        "a cap of 512 binds nothing"
    )
    rate = SearchSpace(a10g.model, a10g.gpu, a10g.workload.replace(request_rate=50.0,
                       concurrency=1024), flags=a10g.flags)  # fmt: skip
    plan = make_plan(Diagnosis(Regime.FRONTEND, (), reached), rate, Objective.THROUGHPUT)
    assert plan is not None and dict(plan.skipped)["max_num_seqs"] == (
        "256 requests ran at once at vLLM's cap of 256 on a10g and none waited: a cap of 512 "
        "binds nothing"
    )
    # Requests waited (or no figure says they did not): the cap may have bound.
    waited = {**reached, "requests_waiting_peak": 30.0}
    for figures in (waited, {"requests_running_peak": 256.0}):
        plan = make_plan(Diagnosis(Regime.FRONTEND, (), figures), rate, Objective.THROUGHPUT)
        assert plan is not None and "max_num_seqs" in [k.knob for k in plan.knobs]


def test_an_fp8_kv_cache_is_not_screened_where_the_kv_cache_is_a_sliver_of_a_decode_step() -> None:
    """The H200 run of 2026-12-05 (docs/results/plan-h200.md §7): qwen2.5-7b at 16 streams
    reads 15.2 GB of weights and about 0.6 GB of KV cache a step, so halving the KV cache gains
    x1.02 at best; the recipe measured x0.97 against the recipe without it. At 256 streams the
    KV cache is a third of the step, and a KV-bound server wants it for its room, not its
    reads."""
    model = resolve_model("qwen2.5-7b")

    def knobs(regime: Regime, peak: float) -> tuple[list[str], dict[str, str]]:
        card = SearchSpace(model, get_gpu("h200"), get_workload("chat"), flags=shipped("0.26.0"))
        d = Diagnosis(regime, (), {"requests_running_peak": peak}, int(peak))
        plan = make_plan(d, card, Objective.BALANCED)
        assert plan is not None
        return [k.knob for k in plan.knobs], dict(plan.skipped)

    planned, why = knobs(Regime.DECODE, 16.0)
    assert planned == ["attention_backend"]
    assert why["kv_cache_dtype"] == (
        "the KV cache is 4% of what a decode step reads (16 requests of 641 tokens against "
        "15.2 GB of weights): halving it gains at most x1.02"
    )
    assert "kv_cache_dtype" in knobs(Regime.DECODE, 256.0)[0]
    assert "kv_cache_dtype" in knobs(Regime.KV_CACHE, 16.0)[0]


def _predict(model: str, gpu: str, workload: str, **over: object) -> Diagnosis | None:
    from tuner.study.plan import predict

    w = get_workload(workload).replace(**over) if over else get_workload(workload)
    return predict(resolve_model(model), get_gpu(gpu), w)


def test_the_regime_predicted_before_launch_where_the_margin_is_wide() -> None:
    # Both H200 studies of docs/results/plan-h200.md, predicted as they were diagnosed.
    heavy = _predict("ernie-0.3b", "h200", "throughput-256")
    assert heavy is not None and heavy.regime is Regime.FRONTEND and heavy.streams == 256
    assert heavy.figures["roofline_tok_s"] > 20 * heavy.figures["frontend_tok_s"]
    chat = _predict("qwen2.5-7b", "h200", "chat")
    assert chat is not None and chat.regime is Regime.DECODE
    # Near the line, or where the arithmetic does not hold, it abstains.
    assert _predict("ernie-0.3b", "h200", "chat") is None  # roofline x6 the API server's
    assert _predict("tiny-ernie", "cpu", "smoke") is None  # no bandwidth figure, no GPU
    assert _predict("ernie-0.3b", "h200", "throughput-256", request_rate=50.0) is None
    assert _predict("ernie-0.3b", "h200", "throughput-256", concurrency=4) is None  # light
    # A KV cache the workload would half fill may be the limit instead: no prediction.
    assert _predict("qwen2.5-7b", "h200", "chat", concurrency=2048, prompt_tokens=8000) is None


def test_a_wrong_prediction_needs_a_far_wrong_constant(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one measured constant, one API server's tok/s, moves the heavy study's prediction
    to abstaining (the order before predictions) at x2.6, and to a wrong regime never
    before x40."""
    import tuner.study.plan as plan_module

    base = plan_module.FRONTEND_TOK_S
    for factor, regime in ((0.1, Regime.FRONTEND), (2.0, Regime.FRONTEND), (3.0, None),
                           (40.0, None), (45.0, Regime.DECODE)):  # fmt: skip
        monkeypatch.setattr(plan_module, "FRONTEND_TOK_S", base * factor)
        got = _predict("ernie-0.3b", "h200", "throughput-256")
        assert (got.regime if got else None) is regime, factor


def test_a_right_prediction_plans_the_recipe_the_defaults_trial_would() -> None:
    """Off the H200 too (an A10G, whose vLLM cap is 256 sequences): the predicted plan and the
    plan from a measured decode-bound trial at the same load screen the same recipe, so the
    study does not launch it twice."""
    from tuner.study.plan import RECIPE

    for gpu, model in (("a10g", "llama-3.1-8b"), ("h200", "qwen2.5-7b")):
        card = SearchSpace(resolve_model(model), get_gpu(gpu), get_workload("chat"),
                           flags=shipped("0.26.0"))  # fmt: skip
        predicted = _predict(model, gpu, "chat")
        assert predicted is not None and predicted.regime is Regime.DECODE, gpu
        measured = diagnose(_trial(gpu_utilization_mean=0.97, requests_running_peak=16.0))
        assert measured.regime is Regime.DECODE
        plans = [make_plan(d, card, Objective.BALANCED) for d in (predicted, measured)]
        recipes = [dict(screen_configs(p, card))[RECIPE] for p in plans if p is not None]
        assert len(recipes) == 2 and recipes[0] == recipes[1], gpu


def test_async_scheduling_is_vllms_own_default_where_its_flag_declares_none() -> None:
    """vLLM 0.26.0 declares --async-scheduling None and decides: every server it started on the
    H200 without the flag logged "Asynchronous scheduling is enabled", and the plan's
    async_scheduling=True measured the defaults again (docs/results/plan-h200.md §9). A vLLM
    that declares False keeps it off; the CPU build turns it off whatever the flag says."""
    from tuner.catalog.levers import vllm_default

    h200 = get_gpu("h200")
    assert vllm_default("async_scheduling", h200, None, {"async_scheduling": None}) is True
    assert vllm_default("async_scheduling", h200, None, {"async_scheduling": False}) is False
    assert vllm_default("async_scheduling", h200) is None  # no flag list: not known
    assert (
        vllm_default("async_scheduling", get_gpu("cpu"), None, {"async_scheduling": None}) is None
    )
    spec = {"speculative_config": '{"method": "ngram"}'}
    assert vllm_default("async_scheduling", h200, spec, {"async_scheduling": None}) is None
    # With vLLM 0.32.0's flag list (it declares None too) a decode plan leaves it out as well.
    card = SearchSpace(
        resolve_model("qwen2.5-7b"), h200, get_workload("chat"), flags=shipped("0.32.0")
    )
    plan = make_plan(Diagnosis(Regime.DECODE, (), {}, 16), card, Objective.THROUGHPUT)
    assert plan is not None and "async_scheduling" not in [k.knob for k in plan.knobs]


def test_every_lever_of_the_playbook_is_planned_or_said_why_not() -> None:
    """A prefill-bound plan on the H100 with the chat workload screened four levers and said
    nothing of enable_chunked_prefill, the fifth: the stored plan lists every lever it looked
    at, and a user read it as never considered. Past the four it is named, with why."""
    plan = make_plan(Diagnosis(Regime.PREFILL, (), {}, 32), _card("h100", "chat"),
                     Objective.THROUGHPUT)  # fmt: skip
    assert plan is not None and len(plan.knobs) == MAX_KNOBS
    said = {p.knob for p in plan.knobs} | {
        k for knobs, _ in plan.skipped for k in knobs.split(", ")
    }
    missing = [m.knob for m in levers.MOVES[Regime.PREFILL] if m.knob not in said]
    assert missing == []
    why = dict(plan.skipped)["enable_chunked_prefill"]
    assert why.startswith(f"a lever beyond the plan's {MAX_KNOBS}, which come first in the")
