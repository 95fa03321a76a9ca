"""``tuner load``'s option checks, its one workload, and the warnings it prints per point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tuner.cli import load as command
from tuner.domain import ClientHealth, FailureClass, LatencyStats, WindowMetrics
from tuner.errors import LoadFailure, TunerError, UsageError
from tuner.load import bench

DEFAULTS: dict[str, Any] = {
    "url": "http://127.0.0.1:8000",
    "model": "m",
    "concurrency": None,
    "request_rate": None,
    "max_concurrency": None,
    "prompt_tokens": 512,
    "output_tokens": 256,
    "requests": None,
    "warmup": 32,
    "vocab_size": 1024,
    "text_prompts": False,
    "timeout_s": 600.0,
    "slo": None,
    "percentiles": "50,90,99",
}


def _opts(**changes: Any) -> bench.LoadOptions:
    return command.options(**{**DEFAULTS, **changes})


def test_closed_loop_ladder_in_one_workload_with_one_warmup() -> None:
    opts = _opts(concurrency="64,16,256")
    shape = bench.workload(opts)
    assert shape.windows == 1 and shape.warmup_requests == 32 and shape.length_jitter == 0.0
    points = shape.load_points()
    assert [p.concurrency for p in points] == [16, 64, 256]
    assert [p.requests_per_window for p in points] == [64, 256, 1024]  # 4 x concurrency
    assert [p.request_rate for p in points] == [None] * 3
    one = bench.workload(_opts()).load_points()
    assert [(p.concurrency, p.requests_per_window) for p in one] == [(16, 64)]
    small = bench.workload(_opts(concurrency="2")).load_points()
    assert small[0].requests_per_window == 32  # at least 32


def test_a_workloads_own_closed_loop_point_keeps_the_floor_the_help_promises() -> None:
    """--requests 8 at the chat preset's 16 streams sent 8 requests, which never held 16 in
    flight; a closed-loop point is raised to 4 x its streams, as a ladder's points are."""
    opts = bench.with_workload(_opts(workload="chat", requests=8, prompt_tokens=None,
                                     output_tokens=None), "m")  # fmt: skip
    (point,) = bench.workload(opts).load_points()
    assert point.concurrency == 16 and point.requests_per_window == 64
    more = bench.with_workload(_opts(workload="chat", requests=200, prompt_tokens=None,
                                     output_tokens=None), "m")  # fmt: skip
    assert bench.workload(more).load_points()[0].requests_per_window == 200


def test_a_trace_replayed_at_its_own_times_caps_nothing_unless_told(tmp_path: Path) -> None:
    """A replay caps nothing in flight (every request of its window may be), yet --requests 50
    of a 10-row trace (five cycles of it) capped 10 in flight, the rows the trace read with;
    --concurrency is the cap."""
    trace = tmp_path / "timed.jsonl"
    rows = [{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": i} for i in range(10)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for given, cap in ((None, 50), ("8", 8)):
        opts = _opts(workload=f"tuner:{trace}", requests=50, concurrency=given,
                     prompt_tokens=None, output_tokens=None)  # fmt: skip
        (point,) = bench.workload(bench.with_workload(opts, "m")).load_points()
        assert (point.trace_paced, point.requests_per_window, point.concurrency) == (True, 50, cap)


def test_rate_ladder_caps_nothing_in_flight_unless_told() -> None:
    """A rate point capped 256 requests in flight by default, where `vllm bench serve
    --request-rate` without --max-concurrency caps none: above that many, tuner's arrivals
    waited and the rate it sent was not the rate it said."""
    points = bench.workload(_opts(request_rate="8,2")).load_points()
    assert [p.request_rate for p in points] == [2.0, 8.0]
    assert {p.requests_per_window for p in points} == {80}  # 10 s at 8 req/s
    assert {p.concurrency for p in points} == {80}  # every request of the window may be
    many = bench.workload(_opts(request_rate="100", requests=2000)).load_points()
    assert many[0].concurrency == 2000
    assert "no cap in flight" in command.summary_line(_opts(request_rate="2"), "m")
    capped = bench.workload(_opts(request_rate="1", max_concurrency=4, requests=10))
    assert capped.load_points()[0].concurrency == 4
    assert capped.load_points()[0].requests_per_window == 10


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"concurrency": "4", "request_rate": "2"}, "both set the load"),
        ({"max_concurrency": 8}, "--max-concurrency caps a --request-rate run"),
        ({"concurrency": "4,0"}, "must be > 0"),
        ({"request_rate": "fast"}, "'fast' is not a number"),
        ({"prompt_tokens": 0}, "--prompt-tokens must be >= 1"),
        ({"timeout_s": 0.0}, "--timeout must be > 0"),
        ({"slo": "p99=1s"}, "--slo: bad SLO item"),
        ({"percentiles": "50,101"}, "(0, 100]"),
        ({"url": "ftp://host"}, "is not a server address"),
        ({"url": "http://host:port"}, "is not a server address"),
    ],
)
def test_bad_options_are_usage_errors(changes: dict[str, Any], words: str) -> None:
    with pytest.raises(UsageError) as info:
        _opts(**changes)
    assert words in info.value.message


def test_a_cap_in_flight_is_one_the_user_gave_not_one_guessed_from_its_size(
    tmp_path: Path,
) -> None:
    """vLLM writes the --max-concurrency it was given. tuner wrote null whenever the cap was
    at least a window's requests: --max-concurrency 1000 over 40 requests, and a workload's
    own cap of 64 printed as "max 64 in flight", both saved as uncapped."""
    trace = tmp_path / "timed.jsonl"
    rows = [{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": i / 10} for i in range(40)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def caps(opts: bench.LoadOptions) -> list[bool]:
        if opts.workload_name is not None:
            opts = bench.with_workload(opts, "m")
        return [bench.capped(opts, p) for p in bench.workload(opts).load_points()]

    assert caps(_opts(request_rate="50", max_concurrency=1000, requests=40)) == [True]
    assert caps(_opts(request_rate="50,100")) == [False, False]
    assert caps(_opts(concurrency="4,16")) == [True, True]
    loaded = {"prompt_tokens": None, "output_tokens": None, "workload": f"tuner:{trace}"}
    assert caps(_opts(**loaded)) == [False]  # a replay at the trace's times
    assert caps(_opts(**loaded, concurrency="100")) == [True]
    assert caps(_opts(**loaded, workload_set="concurrency=100")) == [True]
    assert caps(_opts(**loaded, workload_set="arrival=poisson")) == [True]  # its own 64


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"request_rate": "5", "workload_set": "concurrency=8"}, "--max-concurrency K"),
        ({"concurrency": "5", "workload_set": "concurrency=8"}, "replaces the workload's load"),
        # A ladder there was read, then dropped: one point at the workload's own load.
        ({"workload_set": "concurrency_ladder=4;16;64"}, "--concurrency 4,16,64"),
        ({"workload_set": "rate_ladder=1;2"}, "--request-rate 1,2"),
    ],
)
def test_a_workloads_own_cap_beside_a_load_given_is_refused(
    tmp_path: Path, changes: dict[str, Any], words: str
) -> None:
    """--workload-set concurrency=2 beside --request-rate 200 was dropped without a word: the
    run went uncapped."""
    trace = tmp_path / "timed.jsonl"
    trace.write_text(json.dumps({"prompt_tokens": 8, "output_tokens": 4, "arrival_s": 0}) + "\n")
    with pytest.raises(UsageError) as info:
        _opts(prompt_tokens=None, output_tokens=None, workload=f"tuner:{trace}", **changes)
    assert words in info.value.message + (info.value.hint or "")


def test_max_concurrency_at_a_workloads_own_rate_points_to_its_cap() -> None:
    """The refusal said "give the streams with --concurrency", which turned a Poisson preset
    into a closed loop of that many streams."""
    with pytest.raises(UsageError) as info:
        _opts(prompt_tokens=None, output_tokens=None, workload="chat", max_concurrency=8)
    assert "--workload-set concurrency=K" in (info.value.hint or "")


def test_server_address_forms() -> None:
    assert command.server_root("127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert command.server_root("http://h:1/v1/") == "http://h:1"
    assert command.server_root("https://h") == "https://h"
    assert _opts(slo="ttft_p99=500ms").slo is not None
    assert _opts(slo="none").slo is None


def _point(client: ClientHealth | None, failed: int = 0) -> bench.PointResult:
    stats = LatencyStats(1, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0)
    window = WindowMetrics(1.0, 4, failed, 4, 4, 4.0, 4.0, 8.0, stats, stats, stats, client=client)
    errors = [""] * 4 + ["HTTP 500: boom"] * failed
    return bench.PointResult("16 streams", window, {"failed": failed, "num_prompts": 4 + failed,
                                                    "errors": errors})  # fmt: skip


def test_warnings_for_client_bound_disturbed_and_failed_points() -> None:
    assert command.warnings(_point(None)) == []
    assert command.warnings(_point(ClientHealth(0.1, 1.0, 1.0, 0.5, 2))) == []
    bound = ClientHealth(0.97, 1.0, 1.0, 1.0, 2, client_bound=True, notes=("client used 97%",))
    (line,) = command.warnings(_point(bound))
    assert line.startswith("16 streams: client-bound (client used 97%)")
    noisy = ClientHealth(0.1, 30.0, 40.0, 2.0, 2, disturbed=True, notes=("others used 1.5",))
    lines = command.warnings(_point(noisy, failed=2))
    assert lines == [
        "16 streams: disturbed (others used 1.5): its timings are not the server's alone; "
        "measure it again on a quiet host with cores to spare",
        "16 streams: 2 of 6 failed: HTTP 500: boom",
    ]


@pytest.mark.parametrize(
    ("error", "kind", "words"),
    [
        ("HTTP 404: The model `x` does not exist.", UsageError, "check --model"),
        ("timed out after 5 s", TunerError, "raise --timeout"),
        ("HTTP 400: maximum context length", TunerError, "--vocab-size"),
        ("HTTP 401: unauthorized", TunerError, "API key"),
        ("ClientConnectorError: refused", TunerError, "server's log"),
    ],
)
def test_a_failed_run_says_what_to_do(error: str, kind: type[TunerError], words: str) -> None:
    failure = LoadFailure(
        FailureClass.LOAD_ERRORS, f"4 of 4 requests failed in warm-up; first errors: {error}"
    )
    explained = command.explain_failure(failure, _opts(), "x")
    assert type(explained) is kind
    assert error in explained.message and words in explained.hint


def test_a_refused_shape_names_where_the_lengths_came_from() -> None:
    """The lengths of a --workload (a preset or a trace) are not --prompt-tokens', and the hint
    of a refused request says which to check."""
    failure = LoadFailure(FailureClass.LOAD_ERRORS, "1 of 1 requests failed: HTTP 400: too long")
    fixed = command.explain_failure(failure, _opts(), "x").hint
    assert "check --prompt-tokens + --output-tokens against its max model length" in fixed
    mine = _opts(workload="tuner:huge.jsonl", prompt_tokens=None, output_tokens=None)
    traced = command.explain_failure(failure, mine, "x").hint
    assert "check the lengths --workload tuner:huge.jsonl gives against" in traced
    assert "--prompt-tokens" not in traced


@pytest.mark.parametrize(
    ("changes", "words", "hint"),
    [
        ({"concurrency": "2.5"}, "'2.5' is not a whole number", "--concurrency 16,64,256"),
        ({"concurrency": "4,x"}, "'x' is not a number", "give whole numbers"),
        ({"percentiles": "x"}, "'x' is not a number", "--metric-percentiles 50,90,99"),
        ({"request_rate": "x"}, "'x' is not a number", "--request-rate 2,4,8"),
    ],
)
def test_a_list_option_says_what_it_takes(changes: dict[str, Any], words: str, hint: str) -> None:
    with pytest.raises(UsageError) as info:
        _opts(**changes)
    assert words in info.value.message and hint in info.value.hint


TRACES = Path(__file__).parents[1] / "fixtures" / "traces"
MOONCAKE = f"mooncake:{TRACES / 'mooncake.jsonl'}"


def _w(**changes: Any) -> bench.LoadOptions:
    """Options of a run with --workload (which brings its own shapes)."""
    return _opts(prompt_tokens=None, output_tokens=None, **changes)


def test_each_run_draws_fresh_prompts_unless_a_seed_is_given() -> None:
    """Every run sent the same prompts (seed 0): run again on one server, it found them in
    the prefix cache (TTFT 86 ms, then 10 ms). A run now draws a seed of its own, says it, and
    takes one given, by --seed or --workload-set seed=N."""
    from tuner.load.prompts import PromptFactory

    seeds = {_opts().seed for _ in range(4)}
    assert len(seeds) > 1
    given = _opts(seed=7)
    assert given.seed == 7 and bench.workload(given).seed == 7
    assert "seed 7" in command.summary_line(given, "m")
    a, b = (bench.workload(_opts(seed=s)) for s in (1, 2))
    assert a.seed != b.seed  # what bench.run seeds its prompts with:
    assert PromptFactory(1024, False, a.seed).make(16) != PromptFactory(1024, False, b.seed).make(
        16
    )
    assert _w(workload="chat", workload_set="seed=5").seed == 5
    with pytest.raises(UsageError, match="both set the seed"):
        _w(workload="chat", workload_set="seed=5", seed=5)
    with pytest.raises(UsageError, match="--seed must be 0 to 4294967295"):
        _w(workload="chat", workload_set="seed=-1")


@pytest.mark.parametrize(
    ("changes", "words"),
    [  # each was accepted, and changed nothing
        ({"workload": "chat", "workload_set": "warmup_requests=2"}, "warmup_requests"),
        ({"workload": "chat", "workload_set": "windows=5"}, "windows"),
        ({"workload": MOONCAKE, "workload_set": "speed=4", "request_rate": "2"}, "speed"),
        ({"workload": MOONCAKE, "workload_set": "arrival=closed", "request_rate": "2"}, "arrival"),
        ({"workload": "chat", "tokenizer": TRACES}, "--tokenizer counts the text of a trace"),
    ],
)
def test_workload_fields_tuner_load_would_not_read_are_refused(
    changes: dict[str, Any], words: str
) -> None:
    with pytest.raises(UsageError) as info:
        _w(**changes) if "workload" in changes else _opts(**changes)
    assert words in info.value.message


def test_replay_options_name_the_workload_in_the_results() -> None:
    """Replays of one trace at speed 1 and 4 were both `mooncake:mooncake.jsonl` in the JSON."""
    fast = bench.with_workload(_w(workload=MOONCAKE, workload_set="speed=4"), "m")
    assert bench.workload_label(fast).endswith("mooncake.jsonl[speed=4]")
    assert "mooncake.jsonl[speed=4]" in command.summary_line(fast, "m")


def test_a_timed_trace_whose_rows_all_arrive_at_once_takes_a_ladder(tmp_path: Path) -> None:
    """A `tuner:` trace with every arrival_s 0 has no times to replay; it was refused a
    concurrency ladder as if its times set the load (ShareGPT's, also all at 0, took one)."""
    path = tmp_path / "flat.jsonl"
    path.write_text('{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": 0}\n' * 3)
    opts = bench.with_workload(_w(workload=f"tuner:{path}", concurrency="1,2"), "m")
    assert [p.concurrency for p in bench.workload(opts).load_points()] == [1, 2]


def test_a_replay_of_days_is_refused_before_the_warm_up(tmp_path: Path) -> None:
    """A trace in milliseconds read as seconds warmed the server up, then failed."""
    path = tmp_path / "ms.jsonl"
    path.write_text(
        '{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": 0}\n'
        '{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": 100000000}\n'
    )
    opts = bench.with_workload(_w(workload=f"tuner:{path}"), "m")
    with pytest.raises(UsageError, match=r"would replay 27,777\.8 hours"):
        command.check_points(bench.workload(opts).load_points())


def test_a_tokenizer_for_a_trace_of_token_counts_is_refused(tmp_path: Path) -> None:
    """--tokenizer with a tuner:, mooncake: or burstgpt: trace was taken and never read: their
    rows give token counts. A trace: file is told once read."""
    (tmp_path / "tokenizer.json").write_text("{}")
    for name in (MOONCAKE, f"tuner:{TRACES / 'sessions.jsonl'}", f"burstgpt:{TRACES / 'b.csv'}"):
        with pytest.raises(UsageError) as info:
            _w(workload=name, tokenizer=tmp_path)
        assert info.value.message.startswith(
            "--tokenizer counts the text of a sharegpt: or custom: trace"
        )
        assert f"is a {name.split(':')[0]}: trace" in info.value.message
    detected = _w(workload=f"trace:{TRACES / 'mooncake.jsonl'}", tokenizer=tmp_path)
    with pytest.raises(UsageError, match="is a mooncake: trace, which gives its token counts"):
        bench.with_workload(detected, "m")
    counted = bench.with_workload(_w(workload=f"custom:{TRACES / 'custom.jsonl'}"), "m")
    assert counted.tokenizer is None  # nothing counted with one: no tokenizer_id
