"""The claims file format (every shipped claim parses; errors name the line), planning per
model and GPU (not applicable, with the reason) and the verdict on synthetic intervals."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.abtest.claims import METRICS, load_claims, plan
from tuner.abtest.verdicts import CONFIRMED, INCONCLUSIVE, REFUTED, explain, judge
from tuner.catalog.gpus import get_gpu
from tuner.catalog.models import resolve_model
from tuner.errors import SpecError
from tuner.load.workloads import WORKLOADS
from tuner.spec.configs import with_overrides

SEED = Path(__file__).parents[2] / "studies" / "claims" / "seed-claims.toml"
FA_IDS = {"fa2-memory", "fa2-throughput", "fa2-latency", "fa2-ttft"}
CONTEXT_IDS = {"fa2-context-2k", "fa2-context-8k", "fa2-context-16k"}


def test_every_shipped_claim_parses() -> None:
    claims = load_claims(SEED)
    ids = [c.id for c in claims]
    assert len(ids) == len(set(ids)) == 10
    assert set(ids) >= FA_IDS | CONTEXT_IDS
    assert {"max-model-len-memory", "utilization-p99", "prefix-caching-throughput"} <= set(ids)
    for c in claims:
        assert c.metric in METRICS and c.statement and c.a != c.b and c.claimed != 1.0
    by_id = {c.id: c for c in claims}
    assert by_id["fa2-ttft"].claimed == pytest.approx(0.7 / 1.2)
    assert by_id["fa2-ttft"].claimed_text == "0.7/1.2"
    assert by_id["fa2-memory"].claimed == 0.72 and by_id["fa2-memory"].a == {}
    assert by_id["prefix-caching-throughput"].workload == WORKLOADS["chat"]
    assert by_id["fa2-throughput"].workload == WORKLOADS["seed-bench"]
    lengths = {c.id: c.workload.prompt_tokens for c in claims if c.id in CONTEXT_IDS}
    assert lengths == {"fa2-context-2k": 2048, "fa2-context-8k": 8192, "fa2-context-16k": 16384}
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
    assert with_overrides(WORKLOADS["chat"], {}) is WORKLOADS["chat"]


# -- verdicts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claimed", "low", "high", "verdict"),
    [
        (1.41, 1.2, 1.6, CONFIRMED),  # the claimed size inside a significant interval
        (1.41, 1.5, 1.9, CONFIRMED),  # even larger than claimed
        (1.41, 1.05, 1.41, CONFIRMED),  # the claimed ratio on the interval's edge
        (1.41, 1.05, 1.3, REFUTED),  # real, but significantly smaller than claimed
        (1.41, 0.97, 1.03, REFUTED),  # no effect, tight interval
        (1.41, 0.7, 0.9, REFUTED),  # the opposite direction
        (1.41, 0.8, 1.6, INCONCLUSIVE),  # contains both 1 and the claim
        (1.41, 1.0, 1.5, INCONCLUSIVE),  # touching 1 is not significant
        (0.72, 0.6, 0.8, CONFIRMED),  # a claimed decrease, mirrored
        (0.72, 0.4, 0.6, CONFIRMED),
        (0.72, 0.8, 0.95, REFUTED),
        (0.72, 0.97, 1.02, REFUTED),
        (0.72, 1.1, 1.3, REFUTED),
        (0.72, 0.6, 1.1, INCONCLUSIVE),
    ],
)
def test_judge(claimed: float, low: float, high: float, verdict: str) -> None:
    assert judge(claimed, low, high) == verdict


def test_explain_says_which_kind_of_verdict() -> None:
    assert "even larger" in explain(CONFIRMED, 1.41, 1.5, 1.9)
    assert "within the interval" in explain(CONFIRMED, 0.72, 0.6, 0.8)
    assert "opposite" in explain(REFUTED, 1.41, 0.7, 0.9)
    assert "opposite" in explain(REFUTED, 0.72, 1.1, 1.3)
    assert "no significant effect" in explain(REFUTED, 1.41, 0.97, 1.03)
    assert "smaller than claimed" in explain(REFUTED, 0.72, 0.8, 0.95)
    assert "more launches" in explain(INCONCLUSIVE, 1.41, 0.8, 1.6)


@pytest.mark.parametrize(
    ("claimed", "low", "high"), [(1.0, 0.9, 1.1), (0.0, 0.9, 1.1), (1.2, 1.1, 1.0)]
)
def test_judge_rejects_nonsense(claimed: float, low: float, high: float) -> None:
    with pytest.raises(ValueError):
        judge(claimed, low, high)


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
        (("claimed = 1.2", "claimed = 1"), 9, "not 1"),
        (("claimed = 1.2", 'claimed = "fast"'), 9, "ratio B/A"),
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
