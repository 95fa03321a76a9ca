"""``tuner load --workload`` against the fake vLLM server, whose prefill skips the prompt
tokens its prefix cache holds: a trace of conversations prints TTFT per turn (and --json
carries it), the later turns' far below the first's with the cache on and above it with the
cache off; a ShareGPT trace counted with --tokenizer sends the tokenizer's counts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.studykit import uvicorn_in_thread
from tuner.catalog.materialize import materialize
from tuner.catalog.models import MODELS
from tuner.cli.app import app
from tuner.testing.fake_server import create_app

MODEL = "tuner-load-turns"
TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
TURN_LINE = re.compile(
    r"TTFT by turn at (.+?): turn (\d+): P50 ([\d.]+) ms, P99 ([\d.]+) ms \((\d+) requests\)"
)


def _conversations(path: Path, sessions: int = 6, turns: int = 3) -> Path:
    """A tuner trace: each conversation opens with 2000 prompt tokens, and each later turn
    carries the earlier ones (its session's stream) plus 100 new tokens. Conversations start
    1.6 s apart, three times what one takes uncached (3 turns of about 170 ms), so each turn's
    TTFT is its own prefill alone, never a wait behind another conversation's (at 0.8 s apart
    a loaded CI machine once had turn 1 wait: P50 929 ms against 278 for turn 2, uncached).
    (The server runs in this process, whose garbage collector uvicorn_in_thread keeps quiet:
    a full pass over a busy pytest worker's heap once read as a 260 ms cached turn.)"""
    rows = [
        {"prompt_tokens": 2000 + 100 * (t - 1), "output_tokens": 4, "arrival_s": 1.6 * s,
         "session": f"s{s}"}
        for s in range(sessions)
        for t in range(1, turns + 1)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(app, ["load", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def _turns(prefix_caching: bool, trace: Path, *extra: str) -> str:
    server = create_app(
        MODEL, max_num_seqs=8, max_model_len=8192, step_s=0.001,
        enable_prefix_caching=prefix_caching, prefill_s_per_token=80e-6,
    )  # fmt: skip  # 80 us a token: 2000 tokens take 160 ms, beyond a busy machine's jitter
    with uvicorn_in_thread(server) as url:
        return _invoke(url, "--model", MODEL, "--workload", f"tuner:{trace}",
                       "--warmup", "0", *extra)  # fmt: skip


def test_per_turn_ttft_shows_the_prefix_cache(tmp_path: Path) -> None:
    trace = _conversations(tmp_path / "conversations.jsonl")
    printed = {}
    for cache in (True, False):
        stdout = _turns(cache, trace)
        lines = TURN_LINE.findall(stdout)
        assert [int(t) for _, t, *_ in lines] == [1, 2, 3], stdout
        assert all(int(n) == 6 for *_, n in lines)
        printed[cache] = {int(t): float(p50) for _, t, p50, _, _ in lines}
    on, off = printed[True], printed[False]
    for turn in (2, 3):
        # Cached, a later turn prefills only its 100 new tokens; uncached, all 2100+.
        assert on[turn] < 0.5 * on[1]
        assert on[turn] < 0.5 * off[turn]
        assert off[turn] > 0.8 * off[1]


def test_json_carries_ttft_by_turn_and_the_workload(tmp_path: Path) -> None:
    trace = _conversations(tmp_path / "conversations.jsonl", sessions=4, turns=2)
    stdout = _turns(True, trace, "--json", "--metric-percentiles", "50,90,99,99.9")
    (line,) = [json.loads(x) for x in stdout.splitlines() if x.strip()]
    assert line["num_prompts"] == line["completed"] == 8
    assert line["tuner_workload"] == "tuner:conversations.jsonl"
    by_turn = line["tuner_ttft_by_turn"]
    assert sorted(by_turn) == ["1", "2"]
    for stats in by_turn.values():
        assert stats["count"] == 4
        assert 0 < stats["p50_ms"] <= stats["p99_ms"] <= stats["max_ms"]
    assert by_turn["2"]["p50_ms"] < by_turn["1"]["p50_ms"]
    # the top percentile the table printed (it was only in the table)
    assert all(s["p99_ms"] <= s["p99.9_ms"] <= s["max_ms"] for s in by_turn.values())
    assert isinstance(line["tuner_seed"], int)


def test_sharegpt_counted_with_the_tokenizer(tmp_path: Path) -> None:
    model_dir = materialize(MODELS["tiny-ernie"], tmp_path / "models")
    trace = f"sharegpt:{TRACES / 'sharegpt.json'}"
    with uvicorn_in_thread(create_app(MODEL, max_num_seqs=8, step_s=0.001)) as url:
        common = (url, "--model", MODEL, "--workload", trace, "--warmup", "0",
                  "--concurrency", "2", "--requests", "8")  # fmt: skip
        _invoke(*common, "--tokenizer", str(model_dir), "--save-result", str(tmp_path / "tok"))
        _invoke(*common, "--save-result", str(tmp_path / "approx"))
    ((counted_file,), (approx_file,)) = (list((tmp_path / d).iterdir()) for d in ("tok", "approx"))
    counted, approx = (json.loads(f.read_text()) for f in (counted_file, approx_file))
    pieces = re.compile(r"\w+|[^\w\s]+")
    data = json.loads((TRACES / "sharegpt.json").read_text())
    prompts = [c["conversations"][0]["value"] for c in data if len(c["conversations"]) >= 2]
    by_tokenizer = {len(pieces.findall(p)) for p in prompts}
    by_chars = {max(1, -(-len(p) // 4)) for p in prompts}
    assert by_tokenizer != by_chars
    # A closed loop sends the trace's rows once each in file order: the same rows in both runs.
    assert counted["num_prompts"] == approx["num_prompts"] == 8
    assert set(counted["input_lens"]) <= by_tokenizer
    assert set(approx["input_lens"]) <= by_chars
    assert counted["input_lens"] != approx["input_lens"]
    assert counted["total_input_tokens"] == sum(counted["input_lens"])
    assert "counted with the tokenizer" in counted["tuner_workload_source"]
    assert "ceil(characters / 4)" in approx["tuner_workload_source"]


def test_each_point_of_a_load_curve_has_conversations_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The windows of every point reuse the same seeds (the same shapes at each load), but a
    point reusing another's conversation streams would find them in the prefix cache: its
    first turns measured warm. Every window at every point plans under a name of its own."""
    from tuner.load import generator, workloads

    seen: list[tuple[int, set[str]]] = []

    def recording(workload, count, seed, phase=None, **kw):  # type: ignore[no-untyped-def]
        plan = workloads.plan_requests(workload, count, seed, phase, **kw)
        seen.append((seed, {k for p in plan for k, _ in p.segments if k}))
        return plan

    monkeypatch.setattr(generator, "plan_requests", recording)
    server = create_app(MODEL, max_num_seqs=8, max_model_len=8192, step_s=0.0005)
    with uvicorn_in_thread(server) as url:
        _invoke(url, "--model", MODEL, "--workload", "multi-turn", "--concurrency", "2,4",
                "--requests", "16", "--warmup", "4")  # fmt: skip
    windows = [names for seed, names in seen if seed > 0]
    assert len(windows) == 2 and all(windows)  # one window at each of the two points
    assert windows[0].isdisjoint(windows[1])
    warmup = [names for seed, names in seen if seed == 0]
    assert warmup and all(warmup[0].isdisjoint(w) for w in windows)


def test_per_turn_ttft_shows_the_percentiles_asked_for(tmp_path: Path) -> None:
    """--metric-percentiles sets the table's top percentile; the per-turn lines showed P99
    whatever was asked. They show the median and the same top percentile as the table."""
    trace = _conversations(tmp_path / "conversations.jsonl", sessions=4, turns=2)
    stdout = _turns(True, trace, "--metric-percentiles", "50,90,99.9")
    assert "P50/P99.9" in stdout  # the table's header
    line = re.compile(
        r"TTFT by turn at (.+?): turn (\d+): P50 ([\d.]+) ms, P99\.9 ([\d.]+) ms \((\d+) requests\)"
    )
    found = line.findall(stdout)
    assert [int(t) for _, t, *_ in found] == [1, 2], stdout
    assert all(int(n) == 4 and float(p50) <= float(top) for _, _, p50, top, n in found)
    assert not TURN_LINE.findall(stdout)  # no P99 it was not asked for
