"""A ShareGPT file sent by ``tuner load`` as ``vllm bench serve`` sends it: each entry once, in
the file's order (not random draws of rows), so a run of as many requests as entries carries
the file's token totals; and the summary of bench/bench_sharegpt_replay.py on canned runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import bench_sharegpt_replay as replay  # noqa: E402

from tuner.catalog.materialize import materialize, tokenizer_dir  # noqa: E402
from tuner.catalog.models import MODELS  # noqa: E402
from tuner.cli import load as command  # noqa: E402
from tuner.domain import TraceRequest, Workload  # noqa: E402
from tuner.load import bench  # noqa: E402
from tuner.load.traces import read_trace, tokenizer_counter  # noqa: E402
from tuner.load.workloads import plan_requests  # noqa: E402

TRACES = ROOT / "tests" / "fixtures" / "traces"
SHAREGPT = f"sharegpt:{TRACES / 'sharegpt.json'}"
DEFAULTS: dict[str, Any] = {
    "url": "http://127.0.0.1:8000",
    "model": "m",
    "concurrency": None,
    "request_rate": None,
    "max_concurrency": None,
    "prompt_tokens": None,
    "output_tokens": None,
    "requests": None,
    "warmup": 2,
    "vocab_size": 1024,
    "text_prompts": False,
    "timeout_s": 600.0,
    "slo": None,
    "percentiles": "50,90,99",
}


def _shape(**changes: Any) -> Workload:
    opts = bench.with_workload(command.options(**{**DEFAULTS, **changes}), "m")
    return bench.workload(opts)


def _sent(shape: Workload) -> list[list[tuple[int, int]]]:
    """The (prompt, output) tokens of each load point's window, in the order they are sent."""
    return [
        [(p.prompt_tokens, p.output_tokens) for p in plan_requests(point, n, seed=1)]
        for point in shape.load_points()
        for n in (point.requests_per_window,)
    ]


def test_a_closed_loop_sends_each_entry_once_in_the_files_order() -> None:
    rows = read_trace(SHAREGPT).trace
    assert rows is not None
    file = [(r.prompt_tokens, r.output_tokens) for r in rows]
    assert len(set(file)) == len(file) == 3  # three distinct entries with an answer
    # More requests than entries: the file again from its first entry.
    assert _sent(_shape(workload=SHAREGPT, concurrency="1", requests=4)) == [(file * 2)[:4]]
    assert _sent(_shape(workload=SHAREGPT, concurrency="2", requests=8)) == [(file * 3)[:8]]
    # Every point of a ladder replays the file from its start (at least 4 per stream).
    ladder = _sent(_shape(workload=SHAREGPT, concurrency="1,2", requests=4))
    assert ladder == [(file * 3)[:4], (file * 3)[:8]]
    # The workload's own point (no --concurrency) too; all at once, paced by the streams.
    own = _shape(workload=SHAREGPT)
    assert _sent(own) == [file]
    assert {p.arrival_s for p in plan_requests(own, 3, seed=1)} == {0.0}
    assert own.concurrency == 16 and own.load_points()[0].request_rate is None


def test_before_the_change_random_draws_missed_the_files_totals() -> None:
    """What a closed loop of random row draws sends (a trial's planner still does): the file's
    size in requests, but other totals; the case that made `tuner load` and vLLM disagree."""
    trace = read_trace(SHAREGPT)
    drawn = plan_requests(trace.replace(requests_per_window=3), 3, seed=1)
    assert trace.arrival == "closed"
    once = _sent(_shape(workload=SHAREGPT))[0]
    assert sorted(once) == sorted((r.prompt_tokens, r.output_tokens) for r in trace.trace or ())
    assert sorted((p.prompt_tokens, p.output_tokens) for p in drawn) != sorted(once)


def test_request_rates_and_timed_traces_are_left_as_they_were() -> None:
    poisson = _shape(workload=SHAREGPT, request_rate="5")
    assert poisson.arrival == "poisson"
    timed = Workload(
        name="t",
        prompt_tokens=8,
        output_tokens=4,
        trace=(TraceRequest(8, 4, 0.0), TraceRequest(9, 5, 1.5)),
        arrival="trace",
    )
    assert bench.each_row_once(timed) is timed
    fixed = Workload(name="f", prompt_tokens=8, output_tokens=4)
    assert bench.each_row_once(fixed) is fixed


def test_vllms_sampling_rule_is_the_benchmarks_is_valid_sequence() -> None:
    assert replay.vllm_reason(4, 4) is None
    assert replay.vllm_reason(1024, 1024) is None
    assert "prompt of 3" in (replay.vllm_reason(3, 100) or "")
    assert "answer of 3" in (replay.vllm_reason(100, 3) or "")
    assert "> 1024" in (replay.vllm_reason(1025, 4) or "")
    assert "> 2048" in (replay.vllm_reason(1000, 1049) or "")
    data = [
        {"conversations": [{"value": "a b c d"}, {"value": "e f g h"}]},
        {"conversations": [{"value": "only a question"}]},
        {"conversations": [{"value": "hi"}, {"value": "a long enough answer"}]},
    ]
    kept, dropped = replay.vllm_selection(data, lambda text: len(text.split()))
    assert kept == data[:1]
    assert [i for i, _ in dropped] == [1, 2] and "tuner skips it too" in dropped[0][1]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return materialize(MODELS["tiny-ernie"], tmp_path_factory.mktemp("models"))


def test_the_synthetic_file_reads_the_same_to_tuner_and_to_vllms_rule(
    model_dir: Path, tmp_path: Path
) -> None:
    tok = tokenizer_dir(model_dir)
    words = replay.vocabulary(tok / "tokenizer.json")
    assert words[0] == "t3" and len(words) == 1021  # t0-t2: unk/pad, bos, eos
    data = replay.synthetic_sharegpt(words, 24, seed=0)
    assert data == replay.synthetic_sharegpt(words, 24, seed=0)  # deterministic
    count = tokenizer_counter(tok)
    assert count is not None
    kept, dropped = replay.vllm_selection(data, count)
    assert len(data) == 29 and len(kept) == 24 and len(dropped) == 5
    file = tmp_path / "kept.json"
    file.write_text(json.dumps(kept))
    rows = read_trace(f"sharegpt:{file}", tokenizer=tok).trace or ()
    lengths = [
        (count(e["conversations"][0]["value"]), count(e["conversations"][1]["value"])) for e in kept
    ]
    assert [(r.prompt_tokens, r.output_tokens) for r in rows] == lengths
    # The unfiltered file: tuner drops the five entries vLLM's rule drops, as vLLM does (it
    # replayed the four of them that have an answer), and keeps the same 24.
    everything = tmp_path / "all.json"
    everything.write_text(json.dumps(data))
    assert (read_trace(f"sharegpt:{everything}", tokenizer=tok).trace or ()) == rows


def _run(rnd: int, client: str, tps: float, **changes: Any) -> dict[str, Any]:
    run = {
        "round": rnd,
        "client": client,
        "completed": 3,
        "failed": 0,
        "total_input_tokens": 60,
        "total_output_tokens": 30,
        "output_throughput": tps,
        "input_lens": [10, 20, 30],
        "output_lens": [5, 10, 15],
    }
    return run | changes


def test_the_summary_counts_and_ratios_canned_runs() -> None:
    rows = [
        _run(1, "tuner", 110.0),
        _run(1, "vllm", 100.0),
        _run(2, "vllm", 100.0),
        _run(2, "tuner", 90.0),
        _run(3, "tuner", 100.0, input_lens=[30, 20, 10]),
        _run(3, "vllm", 80.0),
        _run(4, "tuner", 50.0),  # a round cut short: no vLLM run, not summarised
    ]
    s = replay.summarize(rows, {"requests": 3, "input": 60, "output": 30})
    assert [r["round"] for r in s["rounds"]] == [1, 2, 3]
    assert [r["ratio"] for r in s["rounds"]] == pytest.approx([1.1, 0.9, 1.25])
    assert all(r["all_equal"] for r in s["rounds"]) and s["rounds"][0]["notes"] == []
    assert [r["same_order"] for r in s["rounds"]] == [True, True, False]
    o = s["overall"]
    assert (o["rounds"], o["rounds_equal"]) == (3, 3)
    assert o["ratio_median"] == pytest.approx(1.1)
    assert (o["ratio_min"], o["ratio_max"]) == pytest.approx((0.9, 1.25))
    assert o["ratio_spread"] == pytest.approx(1.25 / 0.9 - 1)
    text = "\n".join(replay.summary_lines(s))
    assert "median x1.100, range x0.900-x1.250" in text and "counts equal in 3" in text


def test_the_summary_says_which_counts_differ_and_why() -> None:
    rows = [
        _run(1, "tuner", 100.0, completed=4, total_input_tokens=80, input_lens=[10, 20, 30, 20]),
        _run(1, "vllm", 100.0, total_output_tokens=24, output_lens=[5, 10, 9]),
    ]
    (r,) = replay.summarize(rows, {"requests": 3, "input": 60, "output": 30})["rounds"]
    assert not r["all_equal"]
    assert r["equal"] == {
        "requests": False,
        "failed": True,
        "input": False,
        "output": False,
        "requests_as_expected": False,
        "input_as_expected": False,
        "output_as_expected": False,
    }
    notes = " | ".join(r["notes"])
    assert "tuner 4 done + 0 failed, vLLM 3 + 0" in notes
    assert "1 of tuner's and 0 of vLLM's have no equal" in notes
    assert "output lengths: 30 tokens against 24" in notes
    # A vLLM result saved without --save-detailed has no per-request lengths: no order check.
    bare = [_run(1, "tuner", 100.0), _run(1, "vllm", 100.0, input_lens=[], output_lens=[])]
    (b,) = replay.summarize(bare)["rounds"]
    assert b["same_order"] is None and b["notes"] == [] and b["all_equal"]
    assert replay.summarize(bare)["overall"]["ratio_median"] == pytest.approx(1.0)
