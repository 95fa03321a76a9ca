"""The claims file format (every shipped claim parses; errors name the line), planning per
model and GPU (not applicable, with the reason) and the verdict of a claimed figure (ratio,
range, direction, difference in a unit) on synthetic intervals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tuner.abtest.claims import METRICS, load_claims, plan
from tuner.abtest.claims.figures import (
    CONSISTENT,
    DIFFERENCE,
    INCONCLUSIVE,
    LARGER,
    NO_EFFECT,
    OPPOSITE,
    RATIO,
    SMALLER,
    difference_interval,
    explain,
    judge,
    parse_claimed,
)
from tuner.catalog.gpus import get_gpu
from tuner.catalog.models import resolve_model
from tuner.errors import SpecError
from tuner.load.workloads import WORKLOADS
from tuner.spec.configs import with_overrides

SEED = Path(__file__).parents[2] / "studies" / "claims" / "seed-claims.toml"
FA_IDS = {
    "fa2-memory",
    "fa2-memory-freed",
    "fa2-throughput",
    "fa2-latency",
    "fa2-ttft",
    "fa2-streaming",
}
CONTEXT_IDS = {"fa2-context-2k", "fa2-context-8k", "fa2-context-16k", "flash-attn-ttft"}
FACT_IDS = {
    "enable-flash-attn-flag",
    "enable-flash-attn-removed",
    "custom-all-reduce-required",
    "flash-attn-default",
    "attention-intermediate-memory",
}


def test_every_shipped_claim_parses() -> None:
    claims = load_claims(SEED)
    ids = [c.id for c in claims]
    assert len(ids) == len(set(ids)) == 18
    assert set(ids) >= FA_IDS | CONTEXT_IDS | FACT_IDS
    assert {"max-model-len-memory", "utilization-p99", "prefix-caching-throughput"} <= set(ids)
    for c in claims:
        assert c.statement and c.article is not None and c.figure
        if c.kind == "effect":
            assert c.metric in METRICS and c.a != c.b and c.claimed is not None
    by_id = {c.id: c for c in claims}
    ttft = by_id["fa2-ttft"].claimed
    assert ttft is not None and ttft.scale == DIFFERENCE and ttft.unit == "ms"
    assert (ttft.low, ttft.high) == (float("-inf"), -500.0)
    mml = by_id["max-model-len-memory"].claimed
    assert mml is not None and mml.scale == DIFFERENCE
    assert mml.low == mml.high == pytest.approx(-120e6 / 2**30)
    memory = by_id["fa2-memory"].claimed
    assert memory is not None and memory.low == memory.high == 0.72
    assert by_id["fa2-memory"].a == {}
    # The second article's figure per length, as ranges.
    ranges = {
        cid: (r.low, r.high)
        for cid in ("fa2-context-2k", "fa2-context-8k", "fa2-context-16k")
        if (r := by_id[cid].claimed) is not None
    }
    assert ranges == {
        "fa2-context-2k": (1.10, 1.20),
        "fa2-context-8k": (1.30, 1.50),
        "fa2-context-16k": (1.50, float("inf")),
    }
    assert by_id["enable-flash-attn-flag"].flag == "--enable-flash-attn"
    assert by_id["custom-all-reduce-required"].kind == "starts"
    assert by_id["prefix-caching-throughput"].workload == WORKLOADS["chat"]
    assert by_id["fa2-throughput"].workload == WORKLOADS["seed-bench"]
    lengths = {c.id: c.workload.prompt_tokens for c in claims if c.id in CONTEXT_IDS}
    assert lengths == {
        "fa2-context-2k": 2048,
        "fa2-context-8k": 8192,
        "fa2-context-16k": 16384,
        "flash-attn-ttft": 2048,
    }
    for cid in CONTEXT_IDS:
        c = by_id[cid]
        assert c.a["max_model_len"] == c.b["max_model_len"] >= c.workload.max_request_tokens
        assert c.workload.name.startswith("seed-bench-")


def test_on_cpu_gpu_claims_are_not_applicable_with_the_space_reason() -> None:
    planned = {
        p.claim.id: p for p in plan(load_claims(SEED), resolve_model("tiny-ernie"), get_gpu("cpu"))
    }
    for cid in FA_IDS | CONTEXT_IDS:
        assert "FLASH_ATTN is not available on CPU" in planned[cid].reason, planned[cid].reason
    # Flags, starts and what cannot be measured are answered on CPU too; the default backend
    # is a GPU question.
    for cid in FACT_IDS - {"flash-attn-default"}:
        assert planned[cid].reason == "", (cid, planned[cid].reason)
    assert planned["flash-attn-default"].reason.startswith("needs a CUDA GPU")
    starts = planned["custom-all-reduce-required"]
    assert starts.a is not None and starts.a == starts.b and starts.workload.name == "smoke"
    same = planned["max-model-len-memory"].reason
    assert "same configuration" in same and "max_model_len default and 4096 both mean 4096" in same
    # Measurable on CPU: the space's CPU baseline utilization is applied to the defaults.
    prefix = planned["prefix-caching-throughput"]
    assert prefix.reason == "" and prefix.a is not None and prefix.b is not None
    assert prefix.a.enable_prefix_caching is False and prefix.b.enable_prefix_caching is True
    assert prefix.a.gpu_memory_utilization == 0.1
    # On CPU the flag reserves host RAM: the claim is about GPUs.
    assert planned["utilization-p99"].reason.startswith("needs a CUDA GPU")


def test_on_h200_every_claim_is_measurable() -> None:
    planned = plan(load_claims(SEED), resolve_model("ernie-0.3b"), get_gpu("h200"))
    assert [p.claim.id for p in planned if p.reason] == []
    fa = next(p for p in planned if p.claim.id == "fa2-throughput")
    assert fa.b is not None and fa.b.attention_backend == "FLASH_ATTN"
    assert fa.b.flash_attn_version == 2
    util = next(p for p in planned if p.claim.id == "utilization-p99")
    assert util.a is not None and util.a.gpu_memory_utilization == 0.9


def test_requires_and_fixed_make_claims_not_applicable() -> None:
    claims = load_claims(SEED)
    ampere = plan(claims, resolve_model("ernie-0.3b"), get_gpu("a10g"))
    # FA3 is not on Ampere, but FA2 is: the requirement holds and nothing else is wrong.
    assert next(p for p in ampere if p.claim.id == "fa2-ttft").reason == ""
    held = plan(
        claims,
        resolve_model("tiny-ernie"),
        get_gpu("cpu"),
        fixed={"enable_prefix_caching": True, "enforce_eager": True},
    )
    prefix = next(p for p in held if p.claim.id == "prefix-caching-throughput")
    assert prefix.reason == "the claim sets enable_prefix_caching, which --fixed holds at True"
    mml = next(p for p in held if p.claim.id == "max-model-len-memory")
    assert mml.a is not None and mml.a.enforce_eager is True and mml.a.max_model_len is None


@pytest.mark.parametrize("override", ["windows=0", "concurrency=0", "requests_per_window=0"])
def test_a_workload_count_of_zero_is_refused_before_any_server(
    override: str, tmp_path: Path
) -> None:
    """verify-claims launched a server for `--workload-set windows=0` (minutes of a model's
    load on a GPU), and only then said that a window count must be >= 1; so did a claims
    file's `workload = {preset = "smoke", windows = 0}`."""
    from tuner.abtest.claims import setup_claims
    from tuner.errors import UsageError

    with pytest.raises(UsageError, match=r"must be >= 1"):
        setup_claims(file=SEED, model="tiny-ernie", gpu="cpu", confidence=0.95,
                     only=["prefix-caching-throughput"], fixed=None, workload_set=override,
                     vllm_python=None)  # fmt: skip
    key, _, value = override.partition("=")
    path = tmp_path / "claims.toml"
    path.write_text(
        '[[claim]]\nid = "c"\nstatement = "s"\na = "defaults"\nb = { max_num_seqs = 8 }\n'
        f'workload = {{ preset = "smoke", {key} = {value} }}\nmetric = "output_throughput"\n'
        "claimed = 1.1\n"
    )
    with pytest.raises(SpecError, match=r"must be >= 1"):
        load_claims(path)


def test_workload_overrides_apply_to_every_claim_and_rename_it() -> None:
    claims = load_claims(SEED)
    planned = plan(
        claims,
        resolve_model("tiny-ernie"),
        get_gpu("cpu"),
        workload_overrides={"requests_per_window": 8},
    )
    chat = next(p for p in planned if p.claim.id == "prefix-caching-throughput").workload
    assert chat.requests_per_window == 8 and chat.name == "chat[requests_per_window=8]"
    from tuner.domain.workload import overridden_name

    # One workload, one name, whatever order --workload-set gave its fields in.
    given = {"windows": 2, "concurrency": 4}
    assert overridden_name("smoke", given) == overridden_name(
        "smoke", dict(reversed(given.items()))
    )
    assert overridden_name("smoke", given) == "smoke[concurrency=4,windows=2]"
    assert with_overrides(WORKLOADS["chat"], {}) is WORKLOADS["chat"]


# -- verdicts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claimed", "low", "high", "verdict"),
    [
        (1.41, 1.2, 1.6, CONSISTENT),  # the claimed figure inside a significant interval
        (1.41, 1.5, 1.9, LARGER),
        (1.41, 1.05, 1.41, CONSISTENT),  # the claimed ratio on the interval's edge
        (1.41, 1.05, 1.3, SMALLER),  # real, but short of the claim
        (1.41, 0.97, 1.03, NO_EFFECT),  # no effect, tight interval
        (1.41, 0.7, 0.9, OPPOSITE),
        (1.41, 0.8, 1.6, INCONCLUSIVE),  # contains both 1 and the claim
        (1.41, 1.0, 1.5, INCONCLUSIVE),  # touching 1 is not significant
        (0.72, 0.6, 0.8, CONSISTENT),  # a claimed decrease, mirrored
        (0.72, 0.4, 0.6, LARGER),
        (0.72, 0.8, 0.95, SMALLER),
        (0.72, 0.97, 1.02, NO_EFFECT),
        (0.72, 1.1, 1.3, OPPOSITE),
        (0.72, 0.6, 1.1, INCONCLUSIVE),
        # the second article's ranges
        ("1.10 to 1.20", 0.904, 1.341, INCONCLUSIVE),  # the H200's 2k: too wide to tell
        ("1.30 to 1.50", 1.330, 1.548, CONSISTENT),  # 8k
        (">= 1.50", 2.148, 2.306, CONSISTENT),  # 16k: "or more" has no upper end
        ("1.10 to 1.20", 1.25, 1.4, LARGER),
        ("1.10 to 1.20", 1.01, 1.08, SMALLER),
        ("1.10 to 1.20", 0.95, 1.05, NO_EFFECT),
        ("1.10 to 1.20", 1.12, 1.15, CONSISTENT),
        # a direction only: never "no effect"
        ("< 1", 0.6, 0.9, CONSISTENT),
        ("< 1", 0.99, 1.01, INCONCLUSIVE),
        ("< 1", 1.01, 1.2, OPPOSITE),
        # differences in the article's unit (interval in the metric's unit: GiB, ms)
        ("-120 MB", -0.1136, -0.0114, CONSISTENT),
        ("-840 MB", -0.176, -0.074, SMALLER),
        ("<= -500 ms", -13.4, 24.2, NO_EFFECT),
        ("<= -500 ms", -800.0, -600.0, CONSISTENT),
        ("-120 MB", 0.01, 0.05, OPPOSITE),
    ],
)
def test_judge(claimed: float | str, low: float, high: float, verdict: str) -> None:
    metric = "ttft_p50_ms" if "ms" in str(claimed) else "memory_gib"
    assert judge(parse_claimed(claimed, metric), low, high) == verdict


def test_explain_quotes_the_measured_and_the_claimed_figures() -> None:
    two_k = parse_claimed("1.10 to 1.20", "output_throughput")
    text = explain(INCONCLUSIVE, two_k, 1.101, 0.904, 1.341)
    assert text == (
        "the interval is too wide to tell: ×1.101 [0.904, 1.341] holds both no change and the "
        "claimed ×1.10 to 1.20"
    )
    assert "overlaps the claimed ×1.30 to 1.50" in explain(
        CONSISTENT, parse_claimed("1.30 to 1.50", "x"), 1.435, 1.33, 1.548
    )
    assert "lies within the claimed ≥ ×1.50" in explain(
        CONSISTENT, parse_claimed(">= 1.5", "x"), 2.2, 2.1, 2.3
    )
    mb = parse_claimed("-120 MB", "memory_gib")
    assert explain(CONSISTENT, mb, -0.0625, -0.1136, -0.0114) == (
        "a real effect, -67 MB [-122, -12]; the claimed -120 MB lies within the interval"
    )
    assert "short of the claimed ×1.41" in explain(SMALLER, parse_claimed(1.41, "x"), 1.2, 1.1, 1.3)
    assert "opposite" in explain(OPPOSITE, parse_claimed(0.72, "x"), 1.2, 1.1, 1.3)
    assert "rules out the claimed ≤ -500 ms" in explain(
        NO_EFFECT, parse_claimed("<= -500 ms", "ttft_p50_ms"), 5.4, -13.4, 24.2
    )
    assert "claimed direction (< ×1)" in explain(
        CONSISTENT, parse_claimed("< 1", "x"), 0.74, 0.61, 0.9
    )


@pytest.mark.parametrize(
    ("text", "metric", "scale", "low", "high", "shown"),
    [
        (1.411, "output_throughput", RATIO, 1.411, 1.411, "×1.411"),
        ("0.7/1.2", "ttft_p50_ms", RATIO, 0.7 / 1.2, 0.7 / 1.2, "×0.583"),
        ("1.10-1.20", "output_throughput", RATIO, 1.1, 1.2, "×1.10 to 1.20"),
        ("<= 0.92", "e2e_p99_ms", RATIO, 0.0, 0.92, "≤ ×0.92"),
        ("> 1", "output_throughput", RATIO, 1.0, float("inf"), "> ×1"),
        ("1.2 s", "e2e_p99_ms", DIFFERENCE, 1200.0, 1200.0, "+1.2 s"),
        ("-2 GiB", "memory_gib", DIFFERENCE, -2.0, -2.0, "-2.0 GiB"),
        ("+100 tok/s", "output_throughput", DIFFERENCE, 100.0, 100.0, "+100 tok/s"),
    ],
)
def test_claimed_figures_parse(
    text: float | str, metric: str, scale: str, low: float, high: float, shown: str
) -> None:
    c = parse_claimed(text, metric)
    assert (c.scale, c.shown()) == (scale, shown)
    assert (c.low, c.high) == (pytest.approx(low), pytest.approx(high))


@pytest.mark.parametrize(
    ("text", "metric", "words"),
    [
        (1.0, "output_throughput", "one side of 1"),
        ("0.9 to 1.1", "output_throughput", "one side of 1"),
        ("-5 to 5 ms", "ttft_p50_ms", "one side of 0"),
        (0, "output_throughput", "above 0"),
        ("fast", "output_throughput", "not a ratio"),
        ("-120 MB", "ttft_p50_ms", "not a unit of ttft_p50_ms"),
        ("3 parsecs", "ttft_p50_ms", "unknown unit"),
        (True, "output_throughput", "a number or a text"),
    ],
)
def test_nonsense_claims_are_refused(text: object, metric: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_claimed(text, metric)


def test_judge_rejects_a_reversed_interval() -> None:
    with pytest.raises(ValueError):
        judge(parse_claimed(1.2, "x"), 1.1, 1.0)


def test_difference_interval_is_welch_on_the_launch_values() -> None:
    # The H200's max-model-len comparison: memory GiB of three launches a side.
    a = [131.47344970703125, 131.51251220703125, 131.51251220703125]
    b = [131.41094970703125, 131.45001220703125, 131.45001220703125]
    diff = difference_interval(a, b, 0.95)
    assert diff is not None
    assert diff[0] == pytest.approx(-0.0625)
    assert diff[1] == pytest.approx(-0.11363, abs=1e-4) and diff[2] == pytest.approx(
        -0.01137, abs=1e-4
    )
    assert difference_interval([1.0], b, 0.95) is None
    assert difference_interval([2.0, 2.0], [3.0, 3.0], 0.95) == (1.0, 1.0, 1.0)


# -- errors name the line ----------------------------------------------------------------------

GOOD = """\
# a comment
[[claim]]
id = "one"
statement = "B is better"
a = "defaults"
b = { max_num_seqs = 64 }
workload = "chat"
metric = "output_throughput"
claimed = 1.2
"""


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "claims.toml"
    path.write_text(text)
    return load_claims(path)


def test_a_good_file_loads(tmp_path: Path) -> None:
    (claim,) = _load(tmp_path, GOOD)  # type: ignore[misc]
    assert claim.id == "one" and claim.b == {"max_num_seqs": 64} and claim.line == 2


@pytest.mark.parametrize(
    ("change", "line", "words"),
    [
        (
            ("b = { max_num_seqs = 64 }", "b = { max_num_seq = 64 }"),
            6,
            "unknown knob 'max_num_seq'",
        ),
        (("b = { max_num_seqs = 64 }", "b = { max_num_seqs = -1 }"), 6, "not a valid value"),
        (("b = { max_num_seqs = 64 }", 'b = "defaults"'), 6, "same configuration"),
        (('a = "defaults"', 'a = "vanilla"'), 5, 'must be "defaults" or a table'),
        (("claimed = 1.2", "claimed = 1"), 9, "one side of 1"),
        (("claimed = 1.2", 'claimed = "fast"'), 9, "not a ratio"),
        (("claimed = 1.2", 'claimed = "-3 ms"'), 9, "not a unit of output_throughput"),
        (('id = "one"', 'id = "one"\narticle = "nowhere"'), 4, "no [[article]] 'nowhere'"),
        (('id = "one"', 'id = "one"\nkind = "rumour"'), 4, "unknown claim kind"),
        (('id = "one"', 'id = "one"\nflag = "--x"'), 4, "unknown key 'flag'"),
        (('metric = "output_throughput"', 'metric = "speed"'), 8, "unknown metric 'speed'"),
        (('workload = "chat"', 'workload = "chatty"'), 7, "unknown workload preset"),
        (('workload = "chat"', 'workload = { preset = "chat", tokens = 3 }'), 7, "'tokens'"),
        (('workload = "chat"', 'workload = { preset = "chat", concurrency = "x" }'), 7, "integer"),
        (
            ('workload = "chat"', 'workload = { preset = "chat", shared_prefix_tokens = 600 }'),
            7,
            "shared_prefix_tokens",
        ),
        (('id = "one"', 'id = "One!"'), 3, "lower-case"),
        (('id = "one"', 'id = "one"\ncolour = "red"'), 4, "unknown key 'colour'"),
        (('statement = "B is better"\n', ""), 2, "lacks 'statement'"),
        (("claimed = 1.2", 'claimed = 1.2\nrequires = ["tpu"]'), 10, "unknown requirement"),
        (("claimed = 1.2", "claimed = 1.2 +"), 9, "not valid TOML"),
    ],
)
def test_errors_name_the_line(
    tmp_path: Path, change: tuple[str, str], line: int, words: str
) -> None:
    with pytest.raises(SpecError) as info:
        _load(tmp_path, GOOD.replace(*change))
    assert info.value.line == line, info.value
    assert words in str(info.value)


def test_the_line_is_that_of_the_claim_at_fault(tmp_path: Path) -> None:
    second = GOOD.replace('id = "one"', 'id = "two"').replace("# a comment\n", "")
    bad = second.replace("max_num_seqs = 64", "max_num_seqs = 0")
    with pytest.raises(SpecError) as info:
        _load(tmp_path, GOOD + "\n" + bad)
    assert info.value.line == 15
    with pytest.raises(SpecError) as dup:
        _load(tmp_path, GOOD + "\n" + GOOD.replace("# a comment\n", ""))
    assert "duplicate claim id 'one'" in str(dup.value) and dup.value.line == 11


def test_a_file_without_claims_or_with_other_tables_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no \\[\\[claim\\]\\] tables"):
        _load(tmp_path, "# nothing\n")
    with pytest.raises(SpecError, match="unknown top-level"):
        _load(tmp_path, GOOD + "[study]\nmodel = 'x'\n")
    with pytest.raises(SpecError, match="cannot read"):
        load_claims(tmp_path / "missing.toml")


KINDS = """\
[[article]]
id = "post"
title = "A post"
setting = "Qwen 14B / RTX 4090"
model = "qwen2.5-14b"
gpu = "rtx4090"

[[claim]]
id = "flag"
kind = "flag"
article = "post"
figure = "--magic exists"
statement = "vLLM has --magic"
flag = "--magic"
claimed = "exists"

[[claim]]
id = "starts"
kind = "starts"
statement = "vLLM needs --magic to start"
flag = "--magic"
claimed = "required"
config = { enforce_eager = true }

[[claim]]
id = "backend"
kind = "default-backend"
statement = "FlashAttention is the default"
claimed = "FLASH_ATTN"
requires = ["gpu"]

[[claim]]
id = "hidden"
kind = "unmeasurable"
statement = "attention keeps less"
needs = "a profiler"
"""


def test_the_other_kinds_load(tmp_path: Path) -> None:
    flag, starts, backend, hidden = _load(tmp_path, KINDS)  # type: ignore[misc]
    assert flag.kind == "flag" and flag.flag == "--magic" and flag.claimed is None
    assert flag.article.setting == "Qwen 14B / RTX 4090" and flag.figure == "--magic exists"
    assert starts.a == starts.b == {"enforce_eager": True} and starts.workload.name == "smoke"
    assert backend.claimed_text == "FLASH_ATTN" and backend.article is None
    assert hidden.needs == "a profiler" and hidden.claimed_text == ""


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (('claimed = "exists"', 'claimed = "maybe"'), "one of ('exists', 'absent')"),
        (('flag = "--magic"\nclaimed = "exists"', 'flag = "magic"\nclaimed = "exists"'), "spells"),
        (('claimed = "FLASH_ATTN"', 'claimed = "FAST_ATTN"'), "unknown attention backend"),
        (('needs = "a profiler"', ""), "lacks 'needs'"),
        (('gpu = "rtx4090"', 'gpu = "rtx9090"'), "unknown GPU profile"),
        (('setting = "Qwen 14B / RTX 4090"\n', ""), "lacks 'setting'"),
    ],
)
def test_the_other_kinds_check_their_keys(
    tmp_path: Path, change: tuple[str, str], words: str
) -> None:
    with pytest.raises(SpecError, match=re.escape(words)):
        _load(tmp_path, KINDS.replace(*change, 1))


def test_a_vllm_flag_held_with_fixed_is_typed_by_the_installed_vllm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`tuner compare -b stream_interval=4` ran; `tuner verify-claims --fixed
    stream_interval=4` was refused as an unknown knob (with a hint naming `tuner run`)."""
    from tuner.abtest.claims import setup_claims

    monkeypatch.setenv("TUNER_SERVER_MODULE", "tuner.testing.fake_server")  # vLLM 0.32.0's list
    done = setup_claims(file=SEED, model="tiny-ernie", gpu="cpu", confidence=0.95,
                        only=["prefix-caching-throughput"], fixed="stream_interval=4",
                        workload_set=None, vllm_python=None)  # fmt: skip
    (planned,) = done.planned
    assert planned.a is not None and planned.b is not None, planned.reason
    assert planned.a.extra.get("stream_interval") == planned.b.extra.get("stream_interval") == 4


@pytest.mark.parametrize("held", ["gpu_memory_utilization=0.5", "gpu-memory-utilization=0.5"])
def test_a_knob_held_with_fixed_is_held_in_either_spelling(held: str) -> None:
    """`--fixed gpu-memory-utilization=0.5` aborted with "enqueue sets gpu_memory_utilization=0.9
    but the study fixes it to 0.5" where `gpu_memory_utilization=0.5` said the claim was held."""
    from tuner.abtest.claims import setup_claims

    done = setup_claims(file=SEED, model="ernie-0.3b", gpu="h200", confidence=0.95,
                        only=["utilization-p99"], fixed=held, workload_set=None,
                        vllm_python=None)  # fmt: skip
    (planned,) = done.planned
    assert planned.reason == "the claim sets gpu_memory_utilization, which --fixed holds at 0.5"
