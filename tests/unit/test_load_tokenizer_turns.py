"""A text trace counted with the model's tokenizer.json (tiny-ernie's materialized synthetic
tokenizer) instead of ceil(characters / 4), named in the workload's source; per-turn TTFT as
``tuner load`` reports it and as trial metrics; ``tuner load``'s --workload and --tokenizer
options."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tuner.catalog.materialize import materialize, tokenizer_dir
from tuner.catalog.models import MODELS
from tuner.cli import load as command
from tuner.domain import RequestRecord, WindowMetrics
from tuner.errors import UsageError
from tuner.load import bench
from tuner.load.curve import trial_metrics
from tuner.load.fingerprints import fingerprint
from tuner.load.stats import ttft_by_turn, turn_metrics, turn_summary, window_metrics
from tuner.load.traces import approximate_tokens
from tuner.load.workloads import WORKLOADS, get_workload

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
SHAREGPT = f"sharegpt:{TRACES / 'sharegpt.json'}"
# What the synthetic tokenizer's Whitespace pre-tokenizer splits text into: each piece is one
# token (an unknown word is one [UNK]).
PIECES = re.compile(r"\w+|[^\w\s]+")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return materialize(MODELS["tiny-ernie"], tmp_path_factory.mktemp("models"))


def _exchanges() -> list[tuple[str, str]]:
    data = json.loads((TRACES / "sharegpt.json").read_text())
    return [
        (c["conversations"][0]["value"], c["conversations"][1]["value"])
        for c in data
        if len(c["conversations"]) >= 2
    ]


def test_sharegpt_counted_with_the_models_tokenizer_json(model_dir: Path) -> None:
    w = get_workload(SHAREGPT, tokenizer=model_dir)
    assert w.trace is not None
    expected = [(len(PIECES.findall(q)), len(PIECES.findall(a))) for q, a in _exchanges()]
    assert [(r.prompt_tokens, r.output_tokens) for r in w.trace] == expected
    approx = get_workload(SHAREGPT)
    assert approx.trace is not None
    assert [(r.prompt_tokens, r.output_tokens) for r in approx.trace] == [
        (approximate_tokens(q), approximate_tokens(a)) for q, a in _exchanges()
    ]
    assert [r.prompt_tokens for r in w.trace] != [r.prompt_tokens for r in approx.trace]
    # The source (printed and stored with the fingerprint) names the tokenizer file.
    assert f"counted with the tokenizer {model_dir / 'tokenizer.json'}" in w.source
    assert fingerprint(w).source == w.source
    assert "approximated as ceil(characters / 4) (no tokenizer)" in approx.source
    # The --tokenizer directory vLLM is served with holds the same file.
    same = get_workload(SHAREGPT, tokenizer=tokenizer_dir(model_dir))
    assert same.trace == w.trace


def test_a_model_directory_without_tokenizer_json_falls_back_and_says_so(tmp_path: Path) -> None:
    w = get_workload(f"custom:{TRACES / 'custom.jsonl'}", tokenizer=tmp_path)
    assert f"approximated as ceil(characters / 4) (no tokenizer.json in {tmp_path})" in w.source
    # Token-count formats never read a tokenizer and say nothing about one.
    burst = get_workload(f"burstgpt:{TRACES / 'burstgpt.csv'}", tokenizer=tmp_path)
    assert "tokenizer" not in burst.source and "approximated" not in burst.source


def _record(ttft_s: float, ok: bool = True) -> RequestRecord:
    return RequestRecord(
        ok=ok,
        start_s=0.0,
        ttft_s=ttft_s if ok else None,
        e2e_s=ttft_s + 0.01 if ok else None,
        prompt_tokens=10,
        output_tokens=2 if ok else 0,
        itl_s=(0.01,) if ok else (),
        error=None if ok else "boom",
    )


def test_turn_summary_and_trial_metrics_carry_ttft_per_turn() -> None:
    records = (
        (_record(0.010), _record(0.002), _record(0.012), _record(0.5, ok=False)),
        (_record(0.020), _record(0.004), _record(0.003), _record(0.030)),
    )
    turns = ((1, 2, 1, 2), (1, 2, 2, 1))
    summary = turn_summary(ttft_by_turn(records, turns))
    assert set(summary) == {"1", "2"}
    assert summary["1"]["count"] == 4 and summary["2"]["count"] == 3  # the failed one left out
    assert summary["2"]["p50_ms"] == pytest.approx(3.0)
    assert summary["1"]["max_ms"] == pytest.approx(30.0)
    per = turn_metrics(records, turns)
    assert sorted(per) == [
        "ttft_turn1_p50_ms", "ttft_turn1_p99_ms", "ttft_turn2_p50_ms", "ttft_turn2_p99_ms",
    ]  # fmt: skip
    # Window 1's turn-1 P50 is 11 ms, window 2's 25 ms: the estimate spans them.
    assert per["ttft_turn1_p50_ms"].values == pytest.approx((11.0, 25.0))
    assert per["ttft_turn1_p50_ms"].median == pytest.approx(18.0)
    windows: list[WindowMetrics] = [window_metrics(r, 1.0, None) for r in records]
    workload = WORKLOADS["multi-turn"]
    with_turns = trial_metrics(workload, windows, None, records=records, turns=turns)
    assert with_turns["ttft_turn2_p50_ms"] == per["ttft_turn2_p50_ms"]
    plain = trial_metrics(workload, windows, None)
    assert not any(k.startswith("ttft_turn") for k in plain)
    # Requests without a session (turn 0) add nothing.
    no_sessions = ((0, 0, 0, 0), (0, 0, 0, 0))
    assert trial_metrics(workload, windows, None, records=records, turns=no_sessions) == plain


DEFAULTS: dict[str, Any] = {
    "url": "http://127.0.0.1:8000",
    "model": None,
    "concurrency": None,
    "request_rate": None,
    "max_concurrency": None,
    "prompt_tokens": None,
    "output_tokens": None,
    "requests": None,
    "warmup": 4,
    "vocab_size": 1024,
    "text_prompts": False,
    "timeout_s": 600.0,
    "slo": None,
    "percentiles": "50,90,99",
}


def _opts(**changes: Any) -> bench.LoadOptions:
    return command.options(**{**DEFAULTS, **changes})


def test_tuner_load_takes_a_workload_at_its_own_load_or_the_ladder_given() -> None:
    own = bench.with_workload(_opts(workload="multi-turn"), "m")
    shape = bench.workload(own)
    preset = WORKLOADS["multi-turn"]
    assert shape.turns == preset.turns and shape.windows == 1 and shape.warmup_requests == 4
    assert [p.concurrency for p in shape.load_points()] == [preset.concurrency]
    assert shape.requests_per_window == preset.requests_per_window
    ladder = bench.workload(
        bench.with_workload(_opts(workload="multi-turn", concurrency="2,8"), "m")
    )
    assert [p.concurrency for p in ladder.load_points()] == [2, 8]
    rate = bench.with_workload(_opts(workload="chat-heavy"), "m")
    assert rate.request_rates == (60.0,) and rate.max_concurrency == 512
    # A closed-loop trace given a request rate replays its rows with Poisson arrivals.
    poisson = bench.workload(bench.with_workload(_opts(workload=SHAREGPT, request_rate="5"), "m"))
    assert poisson.arrival == "poisson" and poisson.load_points()[0].request_rate == 5.0
    assert "workload multi-turn" in command.summary_line(own, "m")
    # A trace of sessions at a rate: its rows are drawn, its conversations not replayed.
    sessions = f"trace:{Path(__file__).parents[1] / 'fixtures' / 'traces' / 'sessions.jsonl'}"
    drawn = bench.with_workload(_opts(workload=sessions, request_rate="5"), "m")
    assert "its sessions are not replayed as conversations" in command.summary_line(drawn, "m")
    assert "not replayed" not in command.summary_line(bench.with_workload(_opts(
        workload=sessions), "m"), "m")  # fmt: skip


def test_a_served_model_directory_is_the_default_tokenizer(model_dir: Path) -> None:
    opts = bench.with_workload(_opts(workload=SHAREGPT), str(model_dir))
    assert opts.workload is not None and "counted with the tokenizer" in opts.workload.source
    assert "counted with the tokenizer" in command.summary_line(opts, str(model_dir))
    named = bench.with_workload(_opts(workload=SHAREGPT, tokenizer=model_dir), "served-name")
    assert named.workload is not None and named.workload.trace == opts.workload.trace


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"workload": "multi-turn", "prompt_tokens": 64}, "--prompt-tokens sets the shape"),
        ({"workload": "multi-turn", "output_tokens": 8}, "--output-tokens sets the shape"),
        ({"tokenizer": Path("/")}, "--tokenizer counts the text of a trace"),
        ({"workload": SHAREGPT, "tokenizer": Path("/nonexistent")}, "no tokenizer.json there"),
    ],
)
def test_workload_and_tokenizer_option_errors(changes: dict[str, Any], words: str) -> None:
    with pytest.raises(UsageError, match=re.escape(words)):
        _opts(**changes)
