"""Trace readers: each format on a small committed fixture, its malformed twin, and the
replay options."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from tuner.errors import UsageError
from tuner.load.fingerprints import prefix_reuse
from tuner.load.traces import approximate_tokens, tokenizer_counter
from tuner.load.workloads import PlannedRequest, get_workload, plan_requests

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


def _words(text: str) -> int:
    return len(text.split())


def test_sharegpt_takes_the_first_exchange_of_each_conversation() -> None:
    w = get_workload(f"sharegpt:{TRACES / 'sharegpt.json'}", count_tokens=_words)
    assert w.trace is not None
    # Conversation c has no answer and is skipped, as vLLM's benchmark skips it.
    assert [(r.prompt_tokens, r.output_tokens) for r in w.trace] == [(6, 6), (11, 16), (6, 7)]
    assert w.arrival == "closed" and "tokenizer" in w.source
    assert all(p.arrival_s is None for p in plan_requests(w, 6, seed=1))


def test_without_a_tokenizer_text_lengths_are_approximated_and_say_so() -> None:
    w = get_workload(f"trace:{TRACES / 'sharegpt.json'}")  # detected: a JSON array
    assert w.trace is not None
    question = "What is the capital of France?"
    assert w.trace[0].prompt_tokens == approximate_tokens(question) == math.ceil(30 / 4)
    assert "approximated as ceil(characters / 4)" in w.source
    assert w.name == "trace:sharegpt.json"


def test_a_model_tokenizer_counts_the_text(tmp_path: Path) -> None:
    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    count = tokenizer_counter(tmp_path)
    assert count is not None and count("hello world hello") == 3
    assert tokenizer_counter(tmp_path / "elsewhere") is None


def test_burstgpt_reads_times_and_counts_and_skips_failed_rows() -> None:
    w = get_workload(f"trace:{TRACES / 'burstgpt.csv'}")
    assert w.trace is not None
    assert [(r.prompt_tokens, r.output_tokens) for r in w.trace] == [
        (472, 18),
        (417, 134),
        (1360, 230),
        (120, 64),
    ]
    # Arrivals start at 0 (the trace's first timestamp is 5 s).
    assert [r.arrival_s for r in w.trace] == [0.0, 42.0, 42.0, 45.0]
    assert "1 row of 0 response tokens skipped" in w.source


def test_custom_jsonl_is_vllms_prompt_and_output_tokens() -> None:
    w = get_workload(f"custom:{TRACES / 'custom.jsonl'}", count_tokens=_words)
    assert w.trace is not None
    assert [(r.prompt_tokens, r.output_tokens) for r in w.trace] == [(8, 64), (4, 16), (13, 48)]
    assert get_workload(f"trace:{TRACES / 'custom.jsonl'}").name == "trace:custom.jsonl"


def test_mooncake_hash_ids_become_shared_prompt_blocks() -> None:
    w = get_workload(f"mooncake:{TRACES / 'mooncake.jsonl'}")
    assert w.trace is not None
    assert [r.arrival_s for r in w.trace] == [0.0, 0.5, 1.5, 3.0]
    first, second = w.trace[0], w.trace[1]
    assert first.segments == (("hash:0", 512), ("hash:1", 512), ("hash:2", 176))
    assert second.segments[:2] == first.segments[:2]
    plan = plan_requests(w, 4, seed=1)
    # Shared: rows 2 and 4 repeat blocks 0-1 (1024 each); row 4 also repeats block 2's 176
    # tokens (and then has 124 own tokens past it).
    assert prefix_reuse(plan) == pytest.approx((1024 + 1024 + 176) / (1200 + 1100 + 600 + 1300))
    small = get_workload(f"mooncake:{TRACES / 'mooncake.jsonl'}", {"block_tokens": 400})
    assert small.trace is not None and small.trace[0].segments[0] == ("hash:0", 400)


def test_tuner_trace_sessions_and_prefixes() -> None:
    w = get_workload(f"trace:{TRACES / 'sessions.jsonl'}")
    plan = plan_requests(w, 4, seed=1)
    assert [p.session for p in plan] == ["u1", "u2", "u1", None]
    assert [p.turn for p in plan] == [1, 1, 2, 0]
    assert plan[0].segments == (("prefix:sys", 200), ("session:u1@w1", 100))
    assert plan[2].segments == (("prefix:sys", 200), ("session:u1@w1", 220))
    # u2 repeats the system prefix (200); u1's second turn repeats its first prompt (300).
    assert prefix_reuse(plan) == pytest.approx((200 + 300) / (300 + 250 + 420 + 100))
    # A second cycle is new conversations: nothing of the first cycle's sessions repeats.
    again = plan_requests(w, 8, seed=1)
    assert again[6].session == "u1#1" and again[6].turn == 2


def test_a_second_cycle_of_a_mooncake_trace_repeats_no_block_of_the_first() -> None:
    """A window of more requests than the trace has rows replays it again from the top: its
    hash blocks kept their names, so every row of the second copy found its whole prompt in the
    prefix cache (TTFT 88 ms in the first, 5 ms in the second, on a fake server). A copy
    shares blocks within itself, as the trace does, and none with the copy before it."""
    w = get_workload(f"mooncake:{TRACES / 'mooncake.jsonl'}")
    plan = plan_requests(w, 8, seed=1)
    first = {k for p in plan[:4] for k, _ in p.segments}
    second = {k for p in plan[4:] for k, _ in p.segments}
    assert first and second and not first & second
    assert prefix_reuse(plan[4:]) == pytest.approx(prefix_reuse(plan[:4]))


@pytest.mark.parametrize("trace", ["trace:sessions.jsonl", "mooncake:mooncake.jsonl"])
def test_no_phase_replays_the_sessions_or_blocks_of_another(trace: str) -> None:
    """The warm-up (seed 0) and each window replay the same rows: were their sessions' and
    hash blocks' prompts the same too, every window would find them in the prefix cache, and a
    first turn would measure as warm as a second. A prefix group (a system prompt) is shared."""
    kind, _, file = trace.partition(":")
    w = get_workload(f"{kind}:{TRACES / file}")
    streams = [
        {k for p in plan_requests(w, 8, seed=seed) for k, _ in p.segments} for seed in (0, 1, 2)
    ]
    own = [{k for k in s if k.startswith(("session:", "hash:"))} for s in streams]
    assert all(own) and own[0].isdisjoint(own[1]) and own[1].isdisjoint(own[2])
    shared = [{k for k in s if k.startswith("prefix:")} for s in streams]
    assert shared[0] == shared[1] == shared[2]


def test_replay_options_scale_cut_and_redraw() -> None:
    name = f"mooncake:{TRACES / 'mooncake.jsonl'}"
    fast = get_workload(name, {"speed": 2.0})
    assert fast.trace is not None and [r.arrival_s for r in fast.trace] == [0.0, 0.25, 0.75, 1.5]
    window = get_workload(name, {"start_s": 0.5, "end_s": 3.0})
    assert window.trace is not None and [r.arrival_s for r in window.trace] == [0.0, 1.0]
    assert window.requests_per_window == 2
    capped = get_workload(name, {"max_requests": 3, "requests_per_window": 9})
    assert capped.trace is not None and len(capped.trace) == 3
    assert capped.requests_per_window == 9
    poisson = get_workload(name, {"arrival": "poisson", "request_rate": 50.0})
    plan = plan_requests(poisson, 400, seed=1)
    times = [p.arrival_s for p in plan if p.arrival_s is not None]
    assert len(times) == 400 and 40 < 399 / times[-1] < 60
    assert {p.prompt_tokens for p in plan} == {1200, 1100, 600, 1300}
    closed = plan_requests(get_workload(name, {"arrival": "closed"}), 10, seed=1)
    assert all(p.arrival_s is None for p in closed)


def test_poisson_arrivals_of_a_trace_state_the_rate_they_are_drawn_at() -> None:
    """Without a request_rate, Poisson arrivals of a trace ran at its mean rate while its load
    point said none (a study's windows recorded 64 streams, tuner load's "64 streams")."""
    from tuner.load.curve import point_label
    from tuner.load.workloads import check_workload

    name = f"mooncake:{TRACES / 'mooncake.jsonl'}"  # 4 rows over 3 s of its clock
    poisson = get_workload(name, {"arrival": "poisson", "speed": 2.0})
    assert poisson.request_rate == pytest.approx(2.0)  # 3 gaps in 1.5 s
    (point,) = poisson.load_points()
    assert point_label(point.concurrency, point.request_rate, point.trace_paced) == "2 req/s"
    times = [p.arrival_s for p in plan_requests(poisson, 2000, seed=1)]
    assert all(t is not None for t in times) and 1.8 < 1999 / (times[-1] or 1) < 2.2
    assert get_workload(name, {"arrival": "poisson", "request_rate": 5.0}).request_rate == 5.0
    assert get_workload(name).request_rate is None  # its own times set the load
    with pytest.raises(UsageError, match="draws its rows at a request rate") as info:
        check_workload(poisson.replace(concurrency_ladder=(4, 16)))
    assert "rate_ladder" in (info.value.hint or "")
    check_workload(poisson.replace(rate_ladder=(1.0, 4.0)))


def test_a_request_rate_for_a_trace_at_its_own_times_or_closed_is_refused() -> None:
    """A trace replayed at its own times (or in a closed loop) ignored a request rate, and its
    load points and a study's windows were labelled with that rate all the same."""
    from tuner.load.workloads import check_workload

    name = f"mooncake:{TRACES / 'mooncake.jsonl'}"
    for arrival, how in (("trace", "replays the trace's own times"), ("closed", "closed loop")):
        load = get_workload(name, {"arrival": arrival})
        for rated in (load.replace(request_rate=5.0), load.replace(rate_ladder=(1.0, 4.0))):
            with pytest.raises(UsageError, match=how) as info:
                check_workload(rated)
            assert "arrival = 'poisson'" in (info.value.hint or "")
        check_workload(load)  # without a rate, as before
    check_workload(get_workload(name, {"arrival": "poisson", "request_rate": 5.0}))


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"speed": 0.0}, "speed must be > 0"),
        ({"arrival": "bursty"}, "arrival must be one of"),
        ({"start_s": 10.0}, "no request of the trace arrives"),
        ({"max_requests": 0}, "max_requests must be >= 1"),
        ({"block_tokens": 0}, "block_tokens must be >= 1"),
        ({"requests_per_window": 0}, "requests_per_window must be >= 1"),  # said: concurrency
    ],
)
def test_bad_replay_options(overrides: dict[str, object], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        get_workload(f"mooncake:{TRACES / 'mooncake.jsonl'}", overrides)


@pytest.mark.parametrize(
    ("name", "where", "needle"),
    [
        ("sharegpt:sharegpt_bad.json", "sharegpt_bad.json: entry 1", "value"),
        ("trace:burstgpt_bad.csv", "burstgpt_bad.csv:3", "Request tokens"),
        ("custom:custom_bad.jsonl", "custom_bad.jsonl:2", "prompt must be non-empty"),
        ("mooncake:mooncake_bad.jsonl", "mooncake_bad.jsonl:2", "hash_ids has 3 blocks"),
        ("trace:sessions_bad.jsonl", "sessions_bad.jsonl:2", "prefix_tokens"),
    ],
)
def test_malformed_traces_name_file_line_and_field(name: str, where: str, needle: str) -> None:
    fmt, file = name.split(":")
    with pytest.raises(UsageError) as info:
        get_workload(f"{fmt}:{TRACES / file}")
    text = str(info.value)
    assert where in text and needle in text
    assert "\n" not in info.value.message


def test_undetectable_and_unknown_traces(tmp_path: Path) -> None:
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"tokens": 5}\n', encoding="utf-8")
    with pytest.raises(UsageError, match="cannot tell the trace format"):
        get_workload(f"trace:{odd}")
    with pytest.raises(UsageError, match="cannot read trace"):
        get_workload(f"burstgpt:{tmp_path / 'none.csv'}")
    with pytest.raises(UsageError, match="sharegpt"):
        get_workload("sharegtp")


@pytest.mark.parametrize(
    ("name", "overrides", "needle"),
    [
        ("trace:sessions.jsonl", {"turns": 3}, "override of turns would change nothing"),
        ("trace:sessions.jsonl", {"output_tokens": 64}, "of output_tokens would change nothing"),
        ("chat", {"speed": 3.0}, "of speed would change nothing"),
        ("chat", {"max_requests": 5, "start_s": 1.0}, "of max_requests, start_s would change"),
    ],
)
def test_fields_the_workload_does_not_read_are_refused(
    name: str, overrides: dict[str, object], needle: str
) -> None:
    """A trace's rows set the shapes a preset draws; a preset has no replay. Either kind of
    field given to the other was dropped without a word."""
    fmt, _, file = name.partition(":")
    with pytest.raises(UsageError, match=needle):
        get_workload(f"{fmt}:{TRACES / file}" if file else name, overrides)


def test_a_negative_shared_prefix_on_a_trace_is_refused_before_any_prompt() -> None:
    w = get_workload(f"trace:{TRACES / 'custom.jsonl'}", {"shared_prefix_tokens": -5})
    with pytest.raises(UsageError, match=r"shared_prefix_tokens \(-5\) must be >= 0"):
        plan_requests(w, 4, seed=1)


def test_a_bom_a_tilde_and_a_broken_tokenizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spreadsheets save CSV with a byte-order mark; the shell expands no ~ after "trace:";
    a tokenizer.json that is not one is an error that names it, not a traceback."""
    text = (TRACES / "burstgpt.csv").read_text(encoding="utf-8")
    bom = tmp_path / "bom.csv"
    bom.write_text("\ufeff" + text, encoding="utf-8")
    assert (
        get_workload(f"burstgpt:{bom}").trace
        == get_workload(f"burstgpt:{TRACES / 'burstgpt.csv'}").trace
    )
    monkeypatch.setenv("HOME", str(tmp_path))
    assert get_workload("burstgpt:~/bom.csv").trace is not None
    broken = tmp_path / "model"
    broken.mkdir()
    (broken / "tokenizer.json").write_text('{"not": "a tokenizer"}', encoding="utf-8")
    with pytest.raises(UsageError, match=r"cannot read the tokenizer .*tokenizer\.json"):
        get_workload(f"sharegpt:{TRACES / 'sharegpt.json'}", tokenizer=broken)


def test_tuner_run_names_every_preset_in_its_workload_help() -> None:
    import typer.main

    from tuner.cli.app import app
    from tuner.load.workloads import WORKLOADS

    run = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    (option,) = [p for p in run.params if p.name == "workload"]
    assert all(name in option.help for name in WORKLOADS), option.help


def test_a_row_past_any_context_or_a_window_of_days_is_refused(tmp_path: Path) -> None:
    """A token count of 1e12 allocated 7 TiB for its prompt; arrival times of 1e300 s (or
    milliseconds read as seconds) waited silently."""
    huge = tmp_path / "huge.csv"
    huge.write_text("Timestamp,Request tokens,Response tokens\n0,1000000000000,10\n")
    with pytest.raises(UsageError, match="longer than any model's context"):
        get_workload(f"burstgpt:{huge}")
    slow = tmp_path / "slow.jsonl"
    slow.write_text(
        '{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": 0}\n'
        '{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": 172800}\n'
    )
    w = get_workload(f"tuner:{slow}")  # read: a window of its first row alone replays 0 s
    assert len(plan_requests(w, 1, seed=1)) == 1
    with pytest.raises(UsageError, match=r"would replay 48\.0 hours") as info:
        plan_requests(w, 2, seed=1)
    assert "time unit" in info.value.hint
    fast = get_workload(f"tuner:{slow}", {"speed": 4.0})  # 12 hours: taken
    assert plan_requests(fast, 2, seed=1)[-1].arrival_s == 43200.0
    # Rows drawn at a rate (Poisson) replay no span of the trace's clock: taken.
    assert len(plan_requests(w.replace(arrival="poisson", request_rate=4.0), 50, seed=1)) == 50


def test_a_pretty_printed_json_lines_trace_is_told_to_go_one_object_a_line(
    tmp_path: Path,
) -> None:
    """It was refused as ":1: not valid JSON", which reads as a broken file."""
    import json

    pretty = tmp_path / "pretty.jsonl"
    rows = [{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": t} for t in (0, 1)]
    pretty.write_text("".join(json.dumps(r, indent=2) + "\n" for r in rows))
    for name in (f"trace:{pretty}", f"tuner:{pretty}"):
        with pytest.raises(UsageError, match="spans 5 lines; a trace of JSON Lines") as info:
            get_workload(name)
        assert "jq -c ." in info.value.hint
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt_tokens": 8,\n')
    with pytest.raises(UsageError, match="not valid JSON"):
        get_workload(f"tuner:{broken}")


def test_a_trace_paced_by_its_own_times_is_labelled_so() -> None:
    """`tuner load` labelled such a point "64 streams", a closed loop it was not."""
    from tuner.load import point_label
    from tuner.load.bench import each_row_once

    timed = get_workload(f"trace:{TRACES / 'sessions.jsonl'}")
    assert timed.trace_paced
    assert not get_workload(f"custom:{TRACES / 'custom.jsonl'}", count_tokens=_words).trace_paced
    assert not each_row_once(timed.replace(arrival="closed")).trace_paced  # all at 0
    assert not timed.replace(arrival="poisson").trace_paced
    assert point_label(64, None, timed.trace_paced) == (
        "the trace's arrival times, at most 64 in flight"
    )
    assert point_label(64, None) == "64 streams"


def test_sharegpt_entries_with_an_empty_message_are_skipped_and_counted(tmp_path: Path) -> None:
    """The public ShareGPT files hold empty messages: they are skipped (vLLM's benchmark drops
    them by length), counted in the source, and the rest of the file is read."""
    entries = [
        {"conversations": [{"from": "human", "value": ""}, {"from": "gpt", "value": "an answer"}]},
        {"conversations": [{"from": "human", "value": "a question"}, {"from": "gpt", "value": ""}]},
        {"conversations": [{"from": "human", "value": "two words"}, {"from": "gpt", "value": " "}]},
        {"conversations": [{"value": "one two three four"}, {"value": "five six seven eight"}]},
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(entries))
    w = get_workload(f"sharegpt:{path}", count_tokens=_words)
    assert w.trace is not None
    assert [(r.prompt_tokens, r.output_tokens) for r in w.trace] == [(4, 4)]
    assert "3 entries with an empty message skipped" in w.source
    path.write_text(json.dumps(entries[:3]))
    with pytest.raises(UsageError, match=r"has no requests \(3 entries with an empty message"):
        get_workload(f"sharegpt:{path}", count_tokens=_words)
    path.write_text(json.dumps([*entries[:1], {"conversations": [{"value": 7}, {"value": "x"}]}]))
    with pytest.raises(UsageError, match=r"entry 1: conversations\[0\] needs a field value"):
        get_workload(f"sharegpt:{path}", count_tokens=_words)


def test_a_warm_up_is_not_held_to_the_window_clock(tmp_path: Path) -> None:
    """The warm-up (arrival times dropped) was checked as a timed window: 32 warm-up
    requests of a two-row trace an hour apart "would replay 31 hours" and refused the run."""
    path = tmp_path / "hour.csv"
    path.write_text("Timestamp,Request tokens,Response tokens\n0,100,10\n3600,100,10\n")
    w = get_workload(f"burstgpt:{path}")
    assert len(plan_requests(w, 32, seed=0, timed=False)) == 32
    with pytest.raises(UsageError, match=r"would replay 31\.0 hours"):
        plan_requests(w, 32, seed=0)


def test_sharegpt_entries_without_an_answer_are_counted_as_skipped(tmp_path: Path) -> None:
    """An entry of fewer than two messages was skipped without a word: the source's "N
    entries skipped" left it out, and a file of only such entries said no more than "has no
    requests"."""
    w = get_workload(f"sharegpt:{TRACES / 'sharegpt.json'}", count_tokens=_words)
    assert w.source.endswith("; 1 entry without an answer skipped)")  # entry c
    entries = [
        {"conversations": [{"from": "human", "value": "a question"}]},
        {"conversations": []},
        {"conversations": [{"from": "human", "value": ""}, {"from": "gpt", "value": "x"}]},
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(entries))
    with pytest.raises(UsageError) as info:
        get_workload(f"sharegpt:{path}", count_tokens=_words)
    assert info.value.message == (
        f"trace {path} has no requests (1 entry with an empty message skipped; 2 entries "
        "without an answer skipped)"
    )


def test_a_burstgpt_response_past_any_context_is_refused_at_its_line(tmp_path: Path) -> None:
    """Response tokens were not held to the row limit that Request tokens and every other
    format's counts are: 99,999,999,999 output tokens were asked of the server."""
    path = tmp_path / "b1.csv"
    path.write_text("Timestamp,Request tokens,Response tokens\n0,30,8\n0.2,20,99999999999\n")
    with pytest.raises(UsageError) as info:
        get_workload(f"trace:{path}")
    assert info.value.message == (
        f"{path}:3: Response tokens of 99,999,999,999 is longer than any model's context "
        "(at most 16,777,216 tokens a row)"
    )


def test_a_timestamp_past_any_clock_is_refused_as_a_window_of_days(tmp_path: Path) -> None:
    """An arrival of 1e308 s made the window's end nan (0 x inf), which passed the one-day
    check, and every request was sent at once."""
    path = tmp_path / "far.jsonl"
    path.write_text(
        '{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": 0}\n'
        '{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": 1e308}\n'
    )
    w = get_workload(f"tuner:{path}")
    with pytest.raises(UsageError, match=r"would replay 2\.78e\+304 hours of the trace") as info:
        plan_requests(w, 2, seed=1)
    assert "time unit" in info.value.hint
    with pytest.raises(UsageError, match=r"would replay inf hours"):
        plan_requests(w, 3, seed=1)  # a second cycle starts past any float
    assert [p.arrival_s for p in plan_requests(w, 1, seed=1)] == [0.0]  # its first row alone
    assert len(plan_requests(w, 4, seed=1, timed=False)) == 4  # a warm-up sends them at once


def _whole_prompt_repeats(plan: list[PlannedRequest]) -> list[PlannedRequest]:
    """The requests that repeat an earlier prompt whole: every token a prefix-cache hit."""
    longest: dict[object, int] = {}
    repeats = []
    for p in plan:
        hit = sum(n for _, n in p.segments) == p.prompt_tokens
        for m, (stream, n) in enumerate(p.segments):
            key = (p.segments[:m], stream)
            hit = hit and longest.get(key, 0) >= n
            longest[key] = max(longest.get(key, 0), n)
        if hit:
            repeats.append(p)
    return repeats


@pytest.mark.parametrize("arrival", ["poisson", "closed"])
def test_rows_drawn_at_random_are_fresh_prompts_of_their_length(
    tmp_path: Path, arrival: str
) -> None:
    """Rows drawn at random kept their session's stream: a row drawn twice, or an earlier turn
    drawn after a later one, was an entire prefix-cache hit (239 of 400 draws of 100 sessions
    of 4 turns). A prefix group and hash blocks that several rows name stay shared; a hash
    block of one row alone is the draw's own."""
    path = tmp_path / "turns.jsonl"
    rows = [
        {"prompt_tokens": 100 * t, "output_tokens": 8, "arrival_s": s + t / 10, "session": s}
        for s in range(100)
        for t in range(1, 5)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rate = {"request_rate": 10.0} if arrival == "poisson" else {}
    plan = plan_requests(get_workload(f"tuner:{path}", {"arrival": arrival, **rate}), 400, seed=1)
    assert _whole_prompt_repeats(plan) == [] and prefix_reuse(plan) == 0.0
    assert all(p.session is None for p in plan)  # drawn rows are no turns to wait for
    sessions = get_workload(f"trace:{TRACES / 'sessions.jsonl'}", {"arrival": arrival})
    prefixes = {k for p in plan_requests(sessions, 50, seed=1) for k, _ in p.segments}
    assert {k for k in prefixes if k.startswith("prefix:")} == {"prefix:sys"}
    mooncake = get_workload(f"mooncake:{TRACES / 'mooncake.jsonl'}", {"arrival": arrival})
    drawn = plan_requests(mooncake, 50, seed=1)
    streams = {k for p in drawn for k, _ in p.segments}
    assert {"hash:0@w1", "hash:1@w1", "hash:2@w1"} <= streams  # named by several rows
    assert not {"hash:3@w1", "hash:4@w1", "hash:5@w1"} & streams  # each one row's own
    # Only the first and last rows repeat whole: they name the same three blocks, as in the
    # trace; the second (block 3 its own) and the third (blocks 4-5) do not.
    assert {p.prompt_tokens for p in _whole_prompt_repeats(drawn)} == {1200, 1300}


def test_poisson_draws_of_a_trace_without_times_need_a_rate_given() -> None:
    """A trace without arrival times (ShareGPT, custom: every row at 0) drawn with Poisson
    arrivals and no request_rate ran at as many requests a second as it has rows, labelled as
    the trace's mean rate (a 500-row file: 500 req/s)."""
    from tuner.load.workloads import check_workload

    for trace in (f"sharegpt:{TRACES / 'sharegpt.json'}", f"custom:{TRACES / 'custom.jsonl'}"):
        drawn = get_workload(trace, {"arrival": "poisson"})
        assert drawn.request_rate is None
        with pytest.raises(UsageError, match="no arrival times") as info:
            check_workload(drawn)
        assert "request_rate" in info.value.hint and "--request-rate" in info.value.hint
        check_workload(get_workload(trace, {"arrival": "poisson", "request_rate": 4.0}))
        check_workload(get_workload(trace, {"arrival": "poisson", "rate_ladder": (1.0, 4.0)}))


def test_vllms_own_custom_file_asks_256_output_tokens_of_rows_that_give_none(
    tmp_path: Path,
) -> None:
    """vLLM's custom format is {"prompt": ...} alone (its benchmark asks --custom-output-len,
    256 unless set, of every row); tuner refused such a file for a missing output_tokens."""
    path = tmp_path / "vllm.jsonl"
    path.write_text('{"prompt": "one two three"}\n{"prompt": "four", "output_tokens": 9}\n')
    w = get_workload(f"custom:{path}", count_tokens=_words)
    assert w.trace is not None
    assert [(r.prompt_tokens, r.output_tokens) for r in w.trace] == [(3, 256), (1, 9)]
    assert "; output tokens 256 where a row gives none (1 row)" in w.source
    assert get_workload(f"trace:{path}").name == f"trace:{path.name}"  # detected by "prompt"
    for bad in ("0", "2.5", '"64"', "true"):
        path.write_text(f'{{"prompt": "one", "output_tokens": {bad}}}\n')
        with pytest.raises(UsageError, match=r"vllm\.jsonl:1: output_tokens must be an integer"):
            get_workload(f"custom:{path}", count_tokens=_words)


def test_sharegpt_entries_vllms_sampling_drops_are_skipped_and_counted(tmp_path: Path) -> None:
    """vLLM's ShareGPT sampling drops an entry whose prompt or answer is under 4 tokens, whose
    prompt is over 1,024 or whose two are over 2,048; tuner kept them, so `max_request_tokens`
    (10,100 for one public file) marked configs of a shorter context as unable to run it."""

    def entry(prompt: int, answer: int) -> dict[str, object]:
        return {"conversations": [{"value": "w " * prompt}, {"value": "w " * answer}]}

    kept = [(4, 4), (1024, 1024), (1000, 1048)]
    dropped = [(3, 100), (100, 3), (1025, 4), (1000, 1049)]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([entry(*lengths) for lengths in dropped[:2] + kept + dropped[2:]]))
    w = get_workload(f"sharegpt:{path}", count_tokens=_words)
    assert w.trace is not None
    assert [(r.prompt_tokens, r.output_tokens) for r in w.trace] == kept
    assert w.max_request_tokens == 2048
    assert w.source.endswith(
        "; 4 entries outside vLLM's lengths (prompt and answer 4 tokens or more, prompt at most "
        "1,024, both at most 2,048) skipped)"
    )


def test_sharegpts_filter_counts_the_bos_vllms_sampler_counts(tmp_path: Path) -> None:
    """vLLM's sampler counts both lengths with the tokenizer's special tokens; tuner counted
    them without, so with a tokenizer that adds a BOS it kept a prompt of 1,024 words (1,025 to
    vLLM) and a pair of 2,047 (2,049), and dropped an answer or a prompt of 3 (4)."""
    from tokenizers.processors import TemplateProcessing

    tokenizer = Tokenizer(WordLevel({"[UNK]": 0, "<s>": 1, "w": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    plain = tmp_path / "plain"
    plain.mkdir()
    tokenizer.save(str(plain / "tokenizer.json"))
    tokenizer.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    bos = tmp_path / "bos"
    bos.mkdir()
    tokenizer.save(str(bos / "tokenizer.json"))

    def entry(prompt: int, answer: int) -> dict[str, object]:
        return {"conversations": [{"value": "w " * prompt}, {"value": "w " * answer}]}

    lengths = [(1024, 8), (8, 3), (1000, 1047), (1000, 1046), (3, 8)]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([entry(*pair) for pair in lengths]))

    def kept(tokenizer: Path) -> list[tuple[int, int]]:
        trace = get_workload(f"sharegpt:{path}", tokenizer=tokenizer).trace or ()
        return [(r.prompt_tokens, r.output_tokens) for r in trace]

    # The lengths are vLLM's too: its text prompt gains the BOS on the server (tuner sends
    # token ids, which do not), and its max_tokens counts the BOS.
    assert kept(bos) == [(9, 4), (1001, 1047), (4, 9)]
    assert kept(plain) == [(1024, 8), (1000, 1047), (1000, 1046)]  # no BOS: as before


def test_a_replay_through_a_concurrency_ladder_keeps_its_headline_rung(tmp_path: Path) -> None:
    """A replay at the trace's own times caps nothing by default, but stepped through a
    concurrency ladder the workload's concurrency names the rung its objectives are read at
    (64, as before the cap was lifted): lifted to the window's 100 requests, a new study read
    its trials at 256 where a study of the day before read them at 64, and a resume pinned the
    fingerprint's first rung, 16."""
    from tuner.spec import kept_cap
    from tuner.spec.study import StudySpec

    trace = tmp_path / "timed.jsonl"
    rows = [{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": i / 10} for i in range(100)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ladder = {"concurrency_ladder": [16, 64, 256]}
    assert get_workload(f"tuner:{trace}", ladder).concurrency == 64
    assert get_workload(f"tuner:{trace}").concurrency == 100  # no ladder: uncapped
    spec = StudySpec(model="tiny-ernie", gpu="cpu", workload=f"tuner:{trace}",
                     workload_overrides=ladder)  # fmt: skip
    stored = {"arrival": "trace", "concurrency": 16}  # the first rung's, as fingerprinted
    assert kept_cap(spec, stored) == spec


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"request_rate": 1e-6}, "a window of 32 requests at 1e-06 req/s takes 8,888.9 hours"),
        ({"rate_ladder": (1.0, 1e-4)}, "at 0.0001 req/s takes 88.9 hours of arrivals"),
        ({"turns": 2, "think_time_s": 1e6}, "a conversation of 2 turns thinks 277.8 hours"),
    ],
)
def test_a_window_that_would_take_days_is_refused_where_the_workload_is_read(
    fields: dict[str, Any], words: str
) -> None:
    """The API queued a study at 1e-6 req/s (or a think time of 1e6 s) and its trial waited
    for days; a window's arrivals now take at most a day on average, as a trace's replay."""
    from tuner.load.workloads import check_shapes, get_workload

    workload = get_workload("chat").replace(requests_per_window=32, **fields)
    with pytest.raises(UsageError) as refused:
        check_shapes(workload)
    assert words in refused.value.message and "at most 24" in refused.value.message
    check_shapes(get_workload("chat").replace(requests_per_window=32, request_rate=0.001))


def test_a_trace_drawn_at_a_rate_is_held_to_the_same_day(tmp_path: Path) -> None:
    """A trace's rows drawn as Poisson arrivals at 1e-6 req/s were not checked: only a trace
    replayed on its own clock was."""
    from tuner.load.workloads import check_shapes

    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(json.dumps({"prompt": "a b c", "output_tokens": 4}) + "\n" for _ in range(3))
    )
    drawn = get_workload(f"trace:{trace}").replace(
        arrival="poisson", request_rate=1e-6, requests_per_window=64
    )
    with pytest.raises(UsageError, match=r"takes 17,777\.8 hours of arrivals"):
        check_shapes(drawn)


def test_an_integer_timestamp_past_any_float_is_refused_at_its_line(tmp_path: Path) -> None:
    """A timestamp of 401 digits ended `tuner load` in an OverflowError traceback."""
    path = tmp_path / "huge.jsonl"
    huge = "1" + "0" * 400
    path.write_text(
        '{"timestamp": 0, "input_length": 8, "output_length": 4, "hash_ids": [1]}\n'
        f'{{"timestamp": {huge}, "input_length": 8, "output_length": 4, "hash_ids": [2]}}\n'
    )
    with pytest.raises(UsageError) as info:
        get_workload(f"mooncake:{path}")
    assert (
        f"{path}:2" in info.value.message
        and "timestamp must be a number >= 0" in info.value.message
    )
    assert len(info.value.message) < len(str(path)) + 120  # the number is not printed whole


def test_a_lone_surrogate_counted_with_a_tokenizer_names_its_entry(tmp_path: Path) -> None:
    """Text holding a lone surrogate (JSON "\\ud83d", half of an emoji's pair) ended `tuner
    load --tokenizer` in `TypeError: TextInputSequence must be str`: no tokenizer can count
    it, and counting a replacement would count a text the file does not hold."""
    tokenizer = Tokenizer(WordLevel({"[UNK]": 0, "hi": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    broken = "hi there \ud83d hi"  # json.dumps writes it "\\ud83d", as such files hold it
    sharegpt = tmp_path / "sg.json"
    entries = [[{"from": "human", "value": text}, {"from": "gpt", "value": "hi hi hi hi hi"}]
               for text in ("hi hi hi hi", broken)]  # fmt: skip
    sharegpt.write_text(json.dumps([{"conversations": turns} for turns in entries]))
    custom = tmp_path / "c.jsonl"
    custom.write_text("".join(json.dumps({"prompt": text}) + "\n" for text in ("hi", broken)))
    for name, where in ((f"sharegpt:{sharegpt}", f"{sharegpt}: entry 1: conversations[0] value"),
                        (f"custom:{custom}", f"{custom}:2: prompt")):  # fmt: skip
        with pytest.raises(UsageError) as info:
            get_workload(name, tokenizer=tmp_path)
        assert info.value.message.startswith(f"{where} holds a lone surrogate '\\ud83d'")
        assert "\\ud83d\\ude00" in (info.value.hint or "")
        assert get_workload(name).trace  # approximated from characters: counted as before


@pytest.mark.parametrize(
    ("fmt", "fields", "words"),
    [
        ("sharegpt:sharegpt.json", {"speed": 4.0}, "of speed would change nothing (a sharegpt:"),
        ("custom:custom.jsonl", {"speed": 2.0, "end_s": 5.0}, "of end_s, speed would change"),
        ("trace:custom.jsonl", {"start_s": 0.0}, "(a custom: trace has no arrival times)"),
        ("burstgpt:burstgpt.csv", {"block_tokens": 16}, "a burstgpt: trace has no hash blocks"),
        ("tuner:sessions.jsonl", {"block_tokens": 16}, "a tuner: trace has no hash blocks"),
    ],
)
def test_replay_options_a_trace_never_reads_are_refused(
    fmt: str, fields: dict[str, Any], words: str
) -> None:
    """speed=4 on a ShareGPT trace (no times) and block_tokens on a trace without hash blocks
    were taken, changed nothing, and went into the workload's label."""
    kind, _, file = fmt.partition(":")
    with pytest.raises(UsageError) as info:
        get_workload(f"{kind}:{TRACES / file}", fields)
    assert words in info.value.message
    assert "(tuner:, burstgpt:, mooncake:)" in (info.value.hint or "") or "(mooncake:)" in (
        info.value.hint or ""
    )
    get_workload(f"mooncake:{TRACES / 'mooncake.jsonl'}", {"speed": 2.0, "block_tokens": 400})


@pytest.mark.parametrize("fmt", ["tuner", "trace", "mooncake", "custom", "sharegpt"])
def test_json_nested_past_the_parsers_depth_is_not_valid_json(tmp_path: Path, fmt: str) -> None:
    """A line of 100,000 "[" ended in a RecursionError traceback."""
    path = tmp_path / "deep.jsonl"
    path.write_text('{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": 0}\n' + "[" * 100_000)
    if fmt == "sharegpt":
        path.write_text("[" * 100_000)
    with pytest.raises(UsageError) as info:
        get_workload(f"{fmt}:{path}")
    assert "not valid JSON (nested too deeply)" in info.value.message
    deep_first = tmp_path / "first.jsonl"
    deep_first.write_text('{"a": ' + "[" * 100_000 + "\n")
    with pytest.raises(UsageError, match="not valid JSON"):
        get_workload(f"trace:{deep_first}")


@pytest.mark.parametrize(
    "rows",
    [
        [{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": 5.0}],
        [{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": 5.0}] * 3,
    ],
)
def test_rows_of_one_arrival_time_are_replayed_at_once_not_64_at_a_time(
    tmp_path: Path, rows: list[dict[str, Any]]
) -> None:
    """A timed trace of one row, or of equal timestamps, kept the timed formats' 64 streams:
    a replay of two timestamps caps nothing unless told, and neither does this one."""
    path = tmp_path / "flat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert get_workload(f"tuner:{path}").concurrency == len(rows)
    assert get_workload(f"tuner:{path}", {"requests_per_window": 10}).concurrency == 10
    assert get_workload(f"tuner:{path}", {"concurrency": 2}).concurrency == 2  # told
    ladder = {"concurrency_ladder": [16, 64]}
    assert get_workload(f"tuner:{path}", ladder).concurrency == 64  # the headline rung
