"""SPEC parsing of `tuner compare`, the finding guard, and measuring claims in-process (the
fake runner): shared launches, verdicts, and a side that cannot start."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tuner.abtest.claims import Claim, load_claims, plan
from tuner.abtest.claims.facts import Where
from tuner.abtest.claims.figures import parse_claimed
from tuner.abtest.claims.verdicts import NOT_APPLICABLE, claim_record, evaluate
from tuner.abtest.guard import FindingGuard, finding_of
from tuner.catalog.gpus import get_gpu
from tuner.catalog.models import resolve_model
from tuner.domain import FailureClass, ServingConfig, TrialStatus
from tuner.errors import UsageError
from tuner.load.workloads import WORKLOADS
from tuner.spec.configs import parse_config_spec, parse_value, parse_workload_overrides
from tuner.testing.fake_runner import FakeRunner

SMALL = WORKLOADS["smoke"].replace(requests_per_window=8, warmup_requests=0, windows=2)


@pytest.mark.parametrize(
    ("raw", "value"),
    [("2", 2), ("0.95", 0.95), ("true", True), ("False", False), ("FLASH_ATTN", "FLASH_ATTN")],
)
def test_values_are_typed(raw: str, value: Any) -> None:
    parsed = parse_value(raw)
    assert parsed == value and type(parsed) is type(value)


def test_config_specs() -> None:
    assert parse_config_spec("defaults", "--a") == {}
    assert parse_config_spec("attention_backend=FLASH_ATTN, flash_attn_version=2", "--b") == {
        "attention_backend": "FLASH_ATTN",
        "flash_attn_version": 2,
    }
    assert parse_config_spec("enable_prefix_caching=false", "--a") == {
        "enable_prefix_caching": False
    }


def test_a_json_valued_knob_keeps_its_commas() -> None:
    """`--b 'speculative_config={"method":"ngram","num_speculative_tokens":3,...}'` was split
    at every comma: "cannot read '"num_speculative_tokens":3'"; --search kept them."""
    ngram = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'
    assert parse_config_spec(f"speculative_config={ngram}, max_num_seqs=8", "--b") == {
        "speculative_config": ngram,
        "max_num_seqs": 8,
    }


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("warp speed=4", "unknown knob(s) warp speed"),  # max_num_seq=4 is vLLM's flag list's
        ("max_num_seqs=four", "'four' is not a valid value for max_num_seqs"),
        ("flash_attn_version=4", "not a valid value for flash_attn_version"),
        ("max_num_seqs", "cannot read 'max_num_seqs'"),
        ("max_num_seqs=4,max_num_seqs=8", "given twice"),
        ("max_num_seqs=", "cannot read"),
    ],
)
def test_bad_specs_are_usage_errors(text: str, words: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_config_spec(text, "--b")
    assert info.value.exit_code == 2
    assert words in info.value.message and info.value.message.startswith("--b")
    if "unknown knob" in words:
        assert "max_num_seqs" in info.value.hint  # the knobs are listed


def test_workload_overrides() -> None:
    assert parse_workload_overrides(None) == {}
    assert parse_workload_overrides("concurrency=16,length_jitter=0") == {
        "concurrency": 16,
        "length_jitter": 0,
    }
    with pytest.raises(UsageError, match="unknown workload field 'sped'"):
        parse_workload_overrides("sped=3")
    with pytest.raises(UsageError, match="concurrency must be an integer"):
        parse_workload_overrides("concurrency=1.5")


def test_the_guard_does_not_launch_what_a_finding_rules_out() -> None:
    fake = FakeRunner(max_utilization=0.9)
    guard = FindingGuard(fake, resolve_model("tiny-ernie"))
    too_much = guard.run(ServingConfig(gpu_memory_utilization=0.93), SMALL)
    assert too_much.failure is FailureClass.MEMORY_EXCEEDED
    more = guard.run(ServingConfig(gpu_memory_utilization=0.95), SMALL)
    assert more.status is TrialStatus.PRUNED and more.failure is FailureClass.DOMINATED
    assert (
        "gpu_memory_utilization=0.93 could not start here (memory_exceeded)" in more.failure_detail
    )
    less = guard.run(ServingConfig(gpu_memory_utilization=0.5), SMALL)
    assert less.status is TrialStatus.COMPLETE
    assert len(fake.calls) == 2  # the dominated one never reached the runner
    assert finding_of([less, more]) is not None and finding_of([less]) is None


def test_a_configuration_that_came_up_here_is_never_pruned_by_a_later_finding() -> None:
    """Defaults measured, then B (max_num_seqs=5) did not fit: the defaults "ask at least as
    much" by the rule of thumb, and A's second launch was pruned, the comparison reported as
    "A cannot start here". What came up here can start here."""
    fake = FakeRunner(max_utilization=0.9)
    guard = FindingGuard(fake, resolve_model("tiny-ernie"))
    fits = ServingConfig(gpu_memory_utilization=0.89)
    assert guard.run(fits, SMALL).status is TrialStatus.COMPLETE
    guard.failures.append((ServingConfig(gpu_memory_utilization=0.8), FailureClass.MEMORY_EXCEEDED))
    again = guard.run(fits, SMALL)  # the rule says dominated; the first launch says it fits
    assert again.status is TrialStatus.COMPLETE and len(fake.calls) == 2
    assert guard.run(ServingConfig(gpu_memory_utilization=0.85), SMALL).failure is (
        FailureClass.DOMINATED  # never came up here: the rule holds
    )


def _claim(
    cid: str, a: dict[str, Any], b: dict[str, Any], metric: str, claimed: float | str
) -> Claim:
    parsed = parse_claimed(claimed, metric)
    return Claim(cid, "s", a, b, SMALL, metric, parsed, parsed.text)


def test_claims_with_a_common_config_share_its_launches() -> None:
    claims = [
        _claim("faster", {}, {"max_num_seqs": 1}, "output_throughput", 1.5),  # the opposite
        _claim("slower", {}, {"max_num_seqs": 1}, "e2e_p99_ms", 1.5),  # really much slower
        _claim("memory", {}, {"gpu_memory_utilization": 0.5}, "memory_gib", 0.4),
        _claim("no-start", {}, {"gpu_memory_utilization": 0.95}, "memory_gib", 1.05),
    ]
    planned = plan(claims, resolve_model("tiny-ernie"), get_gpu("h100"))
    assert [p.reason for p in planned] == ["", "", "", ""]
    fake = FakeRunner(max_utilization=0.9, launch_spread=0.02)
    guard = FindingGuard(fake, resolve_model("tiny-ernie"))
    started: list[str] = []
    outcomes = evaluate(
        planned, guard, 3, 0.95, on_start=lambda i, n, arm: started.append(arm.label)
    )
    # Four distinct configs (defaults shared by all four claims), three rounds; the one that
    # cannot start is launched once only.
    assert len(fake.calls) == 3 * 3 + 1
    assert started.count("defaults") == 3
    verdicts = {o.claim.id: o.verdict for o in outcomes}
    assert verdicts == {
        "faster": "opposite",
        "slower": "larger",  # one sequence at a time is far more than 1.5 times slower
        "memory": "smaller",  # 0.5/0.9 = 0.56: real, but less than the claimed 0.4
        "no-start": NOT_APPLICABLE,
    }
    no_start = outcomes[3]
    assert no_start.reason.startswith("B (gpu_memory_utilization=0.95) cannot start here: memory")
    record = claim_record(outcomes[1])
    assert record["verdict"] == "larger" and record["measured"]["low"] > 1.5
    assert record["measured"]["text"].startswith("×") and record["claimed"]["scale"] == "ratio"
    assert claim_record(no_start)["measured"] is None


def test_without_applicable_claims_no_runner_is_needed() -> None:
    claim = _claim("fa", {}, {"attention_backend": "FLASH_ATTN"}, "output_throughput", 1.4)
    planned = plan([claim], resolve_model("tiny-ernie"), get_gpu("cpu"))
    (outcome,) = evaluate(planned, None, 3, 0.95)
    assert outcome.verdict == NOT_APPLICABLE and "not available on CPU" in outcome.reason


def test_a_difference_claim_is_judged_in_its_unit() -> None:
    claim = _claim("less", {}, {"gpu_memory_utilization": 0.5}, "memory_gib", "<= -5 GiB")
    planned = plan([claim], resolve_model("tiny-ernie"), get_gpu("h100"))
    (outcome,) = evaluate(planned, FakeRunner(launch_spread=0.02), 3, 0.95)
    assert outcome.verdict == "consistent", outcome.reason
    measured = claim_record(outcome)["measured"]
    assert measured["difference"] < -5 and measured["text"].startswith("-9.6 GiB [")


SEED = Path(__file__).parents[2] / "studies" / "claims" / "seed-claims.toml"
FACT_IDS = ("custom-all-reduce-required", "flash-attn-default", "enable-flash-attn-flag")


class _Catalog:
    """A flag list with one flag (tests need no tuner.vllm.flags snapshot)."""

    def get(self, name: str) -> object | None:
        return object() if name == "--disable-custom-all-reduce" else None


class _Passing:
    """A runner that passes ``flag`` (its server's argv says so)."""

    def __init__(self, inner: FakeRunner, flag: str) -> None:
        self.inner, self.flag = inner, flag

    def run(self, config: ServingConfig, workload: Any, **kw: Any) -> Any:
        result = self.inner.run(config, workload, **kw)
        assert result.server is not None
        server = dataclasses.replace(result.server, argv=(*result.server.argv, self.flag))
        return dataclasses.replace(result, server=server)


def test_fact_claims_on_their_own_launch_once_and_once_with_the_flag() -> None:
    claims = [c for c in load_claims(SEED) if c.id in FACT_IDS]
    planned = plan(claims, resolve_model("tiny-ernie"), get_gpu("h100"))
    fake = FakeRunner(backend="FLASH_ATTN")
    outcomes = {
        o.claim.id: o
        for o in evaluate(
            planned,
            fake,
            3,
            0.95,
            where=Where("tiny-ernie", "h100", "NVIDIA H100", "0.26.0"),
            flags=lambda: (_Catalog(), ""),
            runner_with=lambda flag: _Passing(fake, flag),
        )
    }
    assert len(fake.calls) == 2  # the defaults once without the flag, once with it
    starts = outcomes["custom-all-reduce-required"]
    assert starts.verdict == "refuted"
    assert starts.reason == (
        "1 of 1 launches of 1 configuration(s) started without --disable-custom-all-reduce; "
        "with it, 1 of 1 launch(es) started"
    )
    assert "the article's setting was ERNIE-4.5-0.3B-PT / A10G" in starts.setting
    backend = outcomes["flash-attn-default"]
    assert backend.verdict == "confirmed" and "FLASH_ATTN in 1 of 1" in backend.reason
    flag = outcomes["enable-flash-attn-flag"]
    assert flag.verdict == "refuted" and flag.reason.startswith("vLLM 0.26.0 has no")
    assert flag.setting == "answered for vLLM 0.26.0; the article used vLLM 0.6.3"
    assert claim_record(flag)["measured"] == {"text": "vLLM 0.26.0 has no --enable-flash-attn"}


def test_fact_claims_use_the_launches_of_the_effect_claims() -> None:
    claims = [
        *(c for c in load_claims(SEED) if c.id in FACT_IDS),
        _claim("slower", {}, {"max_num_seqs": 1}, "e2e_p99_ms", 1.5),
    ]
    planned = plan(claims, resolve_model("tiny-ernie"), get_gpu("h100"))
    fake = FakeRunner()
    outcomes = {o.claim.id: o for o in evaluate(planned, fake, 2, 0.95, flags=None)}
    assert len(fake.calls) == 4  # only the effect claim's launches
    assert outcomes["custom-all-reduce-required"].reason.startswith("4 of 4 launches of 2")
    # The fake runner's own choice of backend is FAKE_ATTN, not FlashAttention.
    assert outcomes["flash-attn-default"].verdict == "refuted"
    flag = outcomes["enable-flash-attn-flag"]
    assert flag.verdict == "not measured yet" and "flag list" in flag.reason
    assert outcomes["slower"].stored() is not None
    assert outcomes["flash-attn-default"].stored() is None
