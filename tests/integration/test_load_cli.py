"""``tuner load`` against the fake vLLM server (uvicorn in a thread of this process): the
vLLM-format JSON lines, the saved result files, the table, and the one-line errors for a
wrong model and an address nothing answers.

The measuring cases run the command in process (typer's CliRunner); the error cases run the
real entry point as a subprocess, where the exit code and the absence of a traceback are what
a user sees."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from typer.testing import CliRunner

from tests.studykit import uvicorn_in_thread
from tuner.cli.app import app
from tuner.cli.load import options, progress
from tuner.load.benchjson import PER_REQUEST_FIELDS
from tuner.runner.ports import free_port
from tuner.testing.fake_server import create_app

MODEL = "tuner-load-cli"
REPO = Path(__file__).resolve().parents[2]
# Small shapes: a few hundred milliseconds a point on the fake's 1 ms steps.
QUICK = ("--prompt-tokens", "32", "--output-tokens", "8", "--warmup", "4")
VLLM_KEYS = (
    "date", "backend", "model_id", "num_prompts", "request_rate", "burstiness",
    "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
    "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
    "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms",
    "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms",
)  # fmt: skip


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with uvicorn_in_thread(create_app(MODEL, max_num_seqs=8, step_s=0.001)) as url:
        yield url


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(app, ["load", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_json_lines_per_load_point_in_vllm_format(base_url: str) -> None:
    stdout = _invoke(base_url, "--model", MODEL, "--concurrency", "2,8", "--json",
                     "--slo", "e2e_p99=60s", *QUICK)  # fmt: skip
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert len(lines) == 2, stdout
    points = [json.loads(line) for line in lines]
    for point, streams in zip(points, (2, 8), strict=True):
        missing = [k for k in VLLM_KEYS if k not in point]
        assert not missing, missing
        assert not set(PER_REQUEST_FIELDS) & set(point)  # no per-request arrays on a line
        requests = max(32, 4 * streams)
        assert point["num_prompts"] == point["completed"] == requests
        assert point["failed"] == 0
        assert point["max_concurrency"] == streams and point["request_rate"] == "inf"
        assert point["model_id"] == MODEL and point["backend"] == "openai"
        assert point["total_input_tokens"] == 32 * requests
        assert point["total_output_tokens"] == 8 * requests
        assert point["output_throughput"] > 0
        assert point["request_goodput"] == pytest.approx(point["request_throughput"])
        for metric in ("ttft", "tpot", "itl", "e2el"):
            assert point[f"p99_{metric}_ms"] >= point[f"median_{metric}_ms"] > 0
            assert point[f"p90_{metric}_ms"] >= point[f"p50_{metric}_ms"]
        assert point["tuner_load_point"] == f"{streams} streams"
        assert set(point["tuner_client"]) >= {"client_bound", "disturbed", "notes"}
    # Not asserted: that 8 streams out-serve 2. The fake runs in this process's thread, so on 2
    # busy cores the client's own work can reverse the order (415 against 908 tok/s in one CI
    # run); bench/bench_load_capacity.py measures throughput where it is the point.


def test_save_result_writes_full_files_per_point(base_url: str, tmp_path: Path) -> None:
    out_dir = tmp_path / "results"
    rates = ("--request-rate", "50,100", "--max-concurrency", "16", "--requests", "20")
    _invoke(base_url, *rates, "--text-prompts", "--save-result", str(out_dir), *QUICK)
    files = sorted(out_dir.iterdir())
    assert [f.name.split("-concurrency16-")[0] for f in files] == [
        "openai-100.0qps",
        "openai-50.0qps",
    ]
    for path in files:
        assert path.name.endswith(".json") and f"-{MODEL}-" in path.name
        data = json.loads(path.read_text())
        assert data["completed"] == data["num_prompts"] == 20
        for field in PER_REQUEST_FIELDS:
            assert len(data[field]) == 20, field
        assert data["output_lens"] == [8] * 20 and data["input_lens"] == [32] * 20
        assert all(len(gaps) == 7 for gaps in data["itls"])  # 8 tokens: 7 gaps each
        assert data["errors"] == [""] * 20
        assert data["request_rate"] in (50.0, 100.0) and data["max_concurrency"] == 16
        assert data["request_goodput"] is None  # no --slo
        assert data["tuner_prompts"] == "text"


def test_a_rate_point_without_a_cap_writes_none_as_vllm_does(base_url: str) -> None:
    """`tuner load --request-rate` capped 256 in flight unless told; now, as `vllm bench
    serve --request-rate` without --max-concurrency, it caps none and writes null."""
    stdout = _invoke(base_url, "--request-rate", "200", "--requests", "12", "--json", *QUICK)
    (point,) = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert point["request_rate"] == 200.0 and point["max_concurrency"] is None
    assert point["completed"] == 12 and point["tuner_arrival"] == "poisson"


def test_save_result_never_overwrites_an_earlier_result(tmp_path: Path) -> None:
    """Runs within the same second wrote the same file name: the last one replaced the others."""
    from tuner.load.bench import PointResult, save

    result = {"request_rate": "inf", "max_concurrency": 2, "model_id": MODEL,
              "date": "20260102-030405"}  # fmt: skip
    name = f"openai-infqps-concurrency2-{MODEL}-20260102-030405"
    written = [
        save([PointResult("2 streams", cast(Any, None), {**result, "run": run})], tmp_path)
        for run in (1, 2, 3)
    ]
    assert [path.name for (path,) in written] == [
        f"{name}.json",
        f"{name}-2.json",
        f"{name}-3.json",
    ]
    assert [json.loads(path.read_text())["run"] for (path,) in written] == [1, 2, 3]
    # Two points of one run with the same name (--concurrency 2,2) keep both as well.
    twice = save([PointResult("2 streams", cast(Any, None), result)] * 2, tmp_path)
    assert [path.name for path in twice] == [f"{name}-4.json", f"{name}-5.json"]


def test_table_names_every_point(base_url: str) -> None:
    stdout = _invoke(base_url, "--concurrency", "1,4", *QUICK)  # --model: the server's own
    assert f"model {MODEL}" in stdout
    for word in ("req/s", "tok/s", "TTFT ms", "TPOT ms", "ITL ms", "E2EL ms", "P50/P99"):
        assert word in stdout, stdout
    table = [line for line in stdout.splitlines() if not line.startswith("warning:")]
    rows = [line.split() for line in table if "streams" in line]
    assert [row[:2] for row in rows] == [["1", "streams"], ["4", "streams"]], stdout
    for row in rows:  # req/s, out tok/s, then median/P99 of TTFT, TPOT, ITL, E2EL
        assert float(row[2]) > 0 and float(row[3]) > 0
        pairs = [tuple(map(float, cell.split("/"))) for cell in row[4:]]
        assert len(pairs) == 4 and all(0 < median <= p99 for median, p99 in pairs), row


def _tuner(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "tuner", "load", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _one_line_error(run: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in run.stderr, run.stderr
    assert run.stdout == "", run.stdout
    lines = run.stderr.splitlines()
    assert lines[0].startswith("error:"), run.stderr
    assert any(line.startswith("hint:") for line in lines), run.stderr
    return " ".join(run.stderr.split())


def _failing_after(completions: int) -> Any:
    """The fake server, answering HTTP 500 to every completion after the first
    ``completions``: a server that gives out at the top of a ladder."""
    fake = create_app(MODEL, max_num_seqs=8, step_s=0.001)
    count = itertools.count()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        completion = scope["type"] == "http" and scope["path"] == "/v1/completions"
        if completion and next(count) >= completions:
            await Response("overloaded", status_code=500)(scope, receive, send)
            return
        await fake(scope, receive, send)

    return app


@pytest.mark.parametrize("as_json", [True, False])
def test_points_measured_before_a_failed_one_are_reported_and_saved(
    tmp_path: Path, as_json: bool
) -> None:
    """A ladder whose top point failed printed and saved nothing of the points before it."""
    ladder = ("--concurrency", "2,4", "--requests", "32", "--warmup", "0")
    shapes = ("--prompt-tokens", "16", "--output-tokens", "4")
    saved = tmp_path / "results"
    with uvicorn_in_thread(_failing_after(32)) as url:
        args = (url, *ladder, *shapes, "--save-result", str(saved))
        run = _tuner(*args, *(("--json",) if as_json else ()))
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    text = " ".join(run.stderr.split())
    assert "error: load on" in text and "failed in window 1 at 4 streams" in text, text
    (path,) = saved.iterdir()
    assert json.loads(path.read_text())["tuner_load_point"] == "2 streams"
    assert f"wrote {path}" in (text if as_json else run.stdout)
    if as_json:
        (line,) = run.stdout.splitlines()
        point = json.loads(line)
        assert point["tuner_load_point"] == "2 streams" and point["completed"] == 32
    else:
        rows = [line.split()[:2] for line in run.stdout.splitlines() if "streams" in line]
        assert rows == [["2", "streams"]], run.stdout


def test_wrong_model_unreachable_and_silent_servers_are_one_line_errors(base_url: str) -> None:
    wrong = _tuner(base_url, "--model", "not-the-model", "--json", *QUICK)
    text = _one_line_error(wrong)
    assert wrong.returncode == 2
    assert "not-the-model" in text and MODEL in text and "--model" in text

    nobody = _tuner(f"http://127.0.0.1:{free_port('127.0.0.1')}", "--model", MODEL, *QUICK)
    text = _one_line_error(nobody)
    assert nobody.returncode == 1
    assert "cannot reach http://127.0.0.1:" in text and "start the server" in text

    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        mute = _tuner(f"127.0.0.1:{port}", "--timeout", "1", *QUICK)
    text = _one_line_error(mute)
    assert mute.returncode == 1
    assert f"127.0.0.1:{port} did not answer GET /v1/models within 1 s" in text

    bad = _tuner(base_url, "--concurrency", "4,x")
    assert bad.returncode == 2 and "'x' is not a number" in _one_line_error(bad)


def _stalling_server() -> Starlette:
    """Lists its model, then never answers a completion: a hung server."""

    async def models(_: Request) -> Response:
        return JSONResponse({"data": [{"id": MODEL, "max_model_len": 4096}]})

    async def hang(_: Request) -> Response:
        await asyncio.sleep(3600)
        return Response(status_code=500)

    return Starlette(
        routes=[Route("/v1/models", models), Route("/v1/completions", hang, methods=["POST"])]
    )


def test_a_stalled_server_fails_the_requests_at_the_stall_timeout_not_after_600_s() -> None:
    with uvicorn_in_thread(_stalling_server()) as url:
        started = time.monotonic()
        stalled = _tuner(url, "--stall-timeout", "1", "--requests", "4", "--json", *QUICK)
        seconds = time.monotonic() - started
    assert "Traceback" not in stalled.stderr and stalled.stdout == ""
    errors = [line for line in stalled.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stalled.stderr
    text = " ".join(stalled.stderr.split())
    assert stalled.returncode != 0 and seconds < 30, (seconds, text)
    assert "stalled: the server sent nothing for 1 s" in text and "--stall-timeout" in text
    assert "stall-timeout" in _tuner("--help").stdout
    zero = _tuner(url, "--stall-timeout", "0")
    assert zero.returncode == 2 and "--stall-timeout must be > 0" in _one_line_error(zero)


def test_ctrl_c_speaks_of_no_trial_and_no_resume() -> None:
    """`tuner load` measures a server; it records no trial and has nothing to resume."""
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        silent.settimeout(120)
        port = silent.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "tuner", "load", f"127.0.0.1:{port}", "--timeout", "120"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            connection, _ = silent.accept()  # it asks GET /v1/models: now it waits
            connection.settimeout(60)
            assert connection.recv(1024).startswith(b"GET ")  # the request is out
            proc.send_signal(signal.SIGINT)
            # 60 s: a CI run beside CPU vLLM on 2 cores once took more than 30 to see it end
            _, stderr = proc.communicate(timeout=60)
            connection.close()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()  # closes the pipes: a later test must not meet them unclosed
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "interrupted", stderr
    assert "trial" not in stderr and "--resume" not in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        # 10 s of arrivals at 1e308/s is infinity: an OverflowError traceback from the count
        (["--request-rate", "1e308"], "--request-rate 1e+308: a load point would send inf"),
        (["--request-rate", "1e309"], "every value must be > 0 and finite, got '1e309'"),
        (["--request-rate", "1e9"], "would send 10,000,000,000 requests, more than 1,000,000"),
        (["--concurrency", "1000000"], "4 requests a stream): a load point would send"),
        (["--requests", "2000000"], "--requests: a load point would send 2,000,000 requests"),
        # 64 requests at 0.001 req/s: 18 hours; 0.0001: 178, refused as a trace's day is
        (["--request-rate", "0.0001"], "would arrive over about 177.8 hours (more than 24)"),
    ],
)
def test_load_points_no_one_waits_for_are_refused_before_any_request(
    args: list[str], words: str
) -> None:
    run = _tuner("http://127.0.0.1:9", *args)
    assert run.returncode == 2 and words in _one_line_error(run)


def test_a_slow_rate_says_how_long_its_arrivals_take() -> None:
    said: list[str] = []
    opts = options(
        url="127.0.0.1:9", model=None, concurrency=None, request_rate="0.01,4",
        max_concurrency=None, prompt_tokens=None, output_tokens=None, requests=None, warmup=0,
        vocab_size=1024, text_prompts=False, timeout_s=60, slo=None, percentiles="50,99",
    )  # fmt: skip
    on_phase = progress(said.append, opts)
    on_phase("measure", 0, 2)
    on_phase("measure", 1, 2)
    assert said == [
        "measuring 0.01 req/s (1/2): 64 requests, arriving over about 1.8 h",
        "measuring 4 req/s (2/2): 64 requests",
    ]


def test_save_result_is_checked_before_the_load(base_url: str, tmp_path: Path) -> None:
    """An unwritable --save-result was found only after the whole run, and its results lost."""
    blocked = tmp_path / "file"
    blocked.write_text("")
    run = _tuner(base_url, "--model", MODEL, "--save-result", str(blocked / "out"), *QUICK)
    text = _one_line_error(run)
    assert run.returncode == 2 and f"cannot write results to {blocked / 'out'}" in text
    assert "measuring" not in run.stderr and "warm-up" not in run.stderr


def test_a_misnamed_workload_is_said_before_the_server_is_asked_and_nothing_is_made(
    tmp_path: Path,
) -> None:
    """With no server there, a misspelt --workload read as "cannot reach" (exit 1), and the
    --save-result folders were made for a run that never measured."""
    nobody = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    out = tmp_path / "a" / "b"
    for workload, said in (("chatty", "unknown workload 'chatty'"),
                           (f"custom:{tmp_path / 'none.jsonl'}", "cannot read trace")):  # fmt: skip
        run = _tuner(nobody, "--workload", workload, "--save-result", str(out))
        assert run.returncode == 2 and said in _one_line_error(run)
    run = _tuner(nobody, "--save-result", str(out), *QUICK)
    assert run.returncode == 1 and "cannot reach" in _one_line_error(run)
    assert list(tmp_path.iterdir()) == []


def test_sigterm_stops_a_load_as_ctrl_c_does() -> None:
    """`kill PID` ended `tuner load` by the signal (exit -15), without a word."""
    with uvicorn_in_thread(create_app(MODEL, max_num_seqs=8, step_s=0.05)) as url:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tuner", "load", url, "--requests", "400", "--warmup", "0"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stderr is not None
            deadline = time.monotonic() + 60
            while "measuring" not in proc.stderr.readline():
                assert time.monotonic() < deadline and proc.poll() is None
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr


def test_workload_set_reaches_a_traces_replay_options(base_url: str, tmp_path: Path) -> None:
    """A Mooncake trace of 16-token blocks could not be replayed by `tuner load`: the hint
    named a spec's [workload] block_tokens, which the command has no way to set."""
    trace = tmp_path / "blocks16.jsonl"
    rows = [{"timestamp": 10 * i, "input_length": 40, "output_length": 4, "hash_ids": [1, 2, i]}
            for i in range(4)]  # fmt: skip
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    workload = ("--workload", f"mooncake:{trace}", "--warmup", "0", "--requests", "4")
    refused = _tuner(base_url, "--model", MODEL, *workload)
    assert refused.returncode == 2
    assert "--workload-set block_tokens=N with tuner load" in _one_line_error(refused)
    ran = CliRunner().invoke(
        app, ["load", base_url, "--model", MODEL, *workload, "--workload-set",
              "block_tokens=16,speed=4", "--json"],
        catch_exceptions=False,
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    (point,) = [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
    assert point["completed"] == 4 and point["total_input_tokens"] == 160
    # vLLM's request_rate "inf" means every request at once: tuner's key says how they came.
    assert point["request_rate"] == "inf" and point["tuner_arrival"] == "trace"
    assert point["max_concurrency"] is None  # no cap in flight, as vLLM writes it
    huge = _tuner(
        base_url, *workload[:2], "--workload-set", "block_tokens=16,requests_per_window=2000000"
    )
    assert huge.returncode == 2 and "would send 2,000,000 requests" in _one_line_error(huge)
    alone = _tuner(base_url, "--workload-set", "speed=2")
    assert alone.returncode == 2 and "--workload-set changes the fields" in _one_line_error(alone)
    bad = _tuner(base_url, "--workload", f"mooncake:{trace}", "--workload-set", "bogus=1")
    assert bad.returncode == 2 and "unknown workload field 'bogus'" in _one_line_error(bad)


def test_the_summary_names_the_load_as_the_points_do(tmp_path: Path) -> None:
    """A one-row trace (no gap to replay) measured as a closed loop was summarised as "the
    trace's arrivals" beside a progress line of "64 streams"."""
    from tuner.cli.load import summary_line
    from tuner.load.bench import with_workload

    def summary(rows: list[dict[str, float]]) -> str:
        trace = tmp_path / f"t{len(rows)}.jsonl"
        trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
        opts = options(
            url="127.0.0.1:9", model=None, concurrency=None, request_rate=None,
            max_concurrency=None, prompt_tokens=None, output_tokens=None, requests=None,
            warmup=0, vocab_size=1024, text_prompts=False, timeout_s=60, slo=None,
            percentiles="50,99", workload=f"tuner:{trace}",
        )  # fmt: skip
        return summary_line(with_workload(opts, "m"), "m")

    one = {"prompt_tokens": 100, "output_tokens": 10, "arrival_s": 5.0}
    assert "the trace's arrivals" not in summary([one]) and "concurrency" in summary([one])
    assert "the trace's arrivals" in summary([one, {**one, "arrival_s": 6.0}])


def test_conversations_refuse_a_request_rate_before_any_request(base_url: str) -> None:
    """multi-turn at --request-rate 2,200 sent the same closed burst of conversations at both
    points (about 79 req/s each), labelled "2 req/s" and "200 req/s"."""
    turns = ("--model", MODEL, "--workload", "multi-turn", "--warmup", "0", "--requests", "8")
    for load in (("--request-rate", "2,200"), ("--workload-set", "request_rate=5")):
        run = _tuner(base_url, *turns, *load)
        text = _one_line_error(run)
        assert run.returncode == 2 and "a request rate" in text and "would change nothing" in text
        assert "measuring" not in run.stderr and "warm-up" not in run.stderr


def test_a_trace_drawn_at_poisson_arrivals_is_named_by_its_rate(
    base_url: str, tmp_path: Path
) -> None:
    """--workload-set arrival=poisson on a timed trace ran Poisson arrivals at the trace's mean
    rate (10 req/s here) under a header of "concurrency 64", a point of "64 streams" and a JSON
    request_rate of inf; with request_rate=50 the point said 50 req/s, the header still 64."""
    from tuner.cli.load import summary_line
    from tuner.load.bench import with_workload

    trace = tmp_path / "even.jsonl"
    rows = [{"prompt_tokens": 32, "output_tokens": 4, "arrival_s": i * 0.1} for i in range(40)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for sets, rate in (("arrival=poisson", 10.0), ("arrival=poisson,request_rate=50", 50.0)):
        args = ("--model", MODEL, "--workload", f"tuner:{trace}", "--warmup", "0")
        ran = CliRunner().invoke(
            app, ["load", base_url, *args, "--requests", "8", "--workload-set", sets, "--json"],
            catch_exceptions=False,
        )  # fmt: skip
        assert ran.exit_code == 0, ran.output
        (point,) = [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
        assert point["request_rate"] == pytest.approx(rate)
        assert point["tuner_load_point"] == f"{rate:g} req/s"
        assert point["tuner_arrival"] == "poisson"
        assert f"request rate {rate:g} req/s (max 64 in flight)" in ran.stderr
        opts = options(
            url="127.0.0.1:9", model=None, concurrency=None, request_rate=None,
            max_concurrency=None, prompt_tokens=None, output_tokens=None, requests=None,
            warmup=0, vocab_size=1024, text_prompts=False, timeout_s=60, slo=None,
            percentiles="50,99", workload=f"tuner:{trace}", workload_set=sets,
        )  # fmt: skip
        assert "concurrency" not in summary_line(with_workload(opts, "m"), "m")
    streams = _tuner(base_url, *args, "--concurrency", "4", "--workload-set", "arrival=poisson")
    text = _one_line_error(streams)
    assert streams.returncode == 2 and "'poisson' draws its rows at a request rate" in text


def test_help_says_a_workload_sends_its_own_count_of_requests() -> None:
    """The help of --requests gave only the fixed shapes' defaults; --workload sharegpt:FILE
    --request-rate 4 sent all 3,000 rows of the file (12 minutes) at each point."""
    helped = CliRunner().invoke(app, ["load", "--help"], env={"COLUMNS": "200"})
    text = " ".join(helped.output.replace("│", " ").split())
    assert "with --workload, its own count at every load point (a trace: all its rows)" in text


@pytest.mark.parametrize(
    ("times", "sets"),
    [((5.0,), ()), ((5.0, 5.0, 5.0), ()), ((0.0, 10.0), ("--workload-set", "end_s=5"))],
)
def test_rows_of_one_arrival_time_are_replayed_at_once_as_two_times_are(
    base_url: str, tmp_path: Path, times: tuple[float, ...], sets: tuple[str, ...]
) -> None:
    """A timed trace of one row (or equal timestamps, or an end_s leaving one row) was run
    and reported as a closed loop of 64 streams, a cap no one gave: "concurrency 64", a point
    of "64 streams", max_concurrency 64 and tuner_arrival "closed" in --json."""

    def run(times: tuple[float, ...], *extra: str) -> tuple[dict[str, Any], str]:
        trace = tmp_path / f"t{len(times)}.jsonl"
        trace.write_text("".join(json.dumps({"prompt_tokens": 32, "output_tokens": 4,
                                             "arrival_s": t}) + "\n" for t in times))  # fmt: skip
        ran = CliRunner().invoke(
            app, ["load", base_url, "--model", MODEL, "--workload", f"tuner:{trace}",
                  "--warmup", "1", "--json", *extra],
            catch_exceptions=False,
        )  # fmt: skip
        assert ran.exit_code == 0, ran.output
        (point,) = [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
        return point, " ".join(ran.stderr.split())

    point, said = run(times, *sets)
    n = point["completed"]
    assert n == (1 if sets else len(times))
    two, _ = run((0.0, 0.01))  # a replay of two times, as before
    for p, k in ((point, n), (two, 2)):
        assert p["tuner_arrival"] == "trace" and p["max_concurrency"] is None
        assert p["tuner_load_point"] == f"the trace's arrival times, at most {k} in flight"
    assert "64 streams" not in said and "concurrency 64" not in said and "most 64" not in said
    assert (
        f"every request at once (the trace's rows share one arrival time), concurrency {n}" in said
    )
    assert "warm-up: 1 request " in f"{said} " and "1 requests" not in said
    assert f"(1/1): {n} request{'' if n == 1 else 's'}" in said
    capped, said = run(times, "--workload-set", ",".join([*sets[1:], "concurrency=2"]))
    assert capped["max_concurrency"] == 2 and capped["tuner_arrival"] == "trace"
    assert "at most 2 in flight" in capped["tuner_load_point"] and "at most 2 in flight" in said


def test_tokenizer_and_save_result_paths_expand_and_the_tokenizer_is_named(
    base_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--save-result=~/dir made a folder named ~ where tuner ran (the shell expands no ~ after
    =), --tokenizer=~/dir was not found; and the results never named the tokenizer that
    counted a text trace, where vLLM writes tokenizer_id."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    home, cwd = tmp_path / "home", tmp_path / "cwd"
    (home / "tok").mkdir(parents=True)
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    tokenizer = Tokenizer(WordLevel({"[UNK]": 0, "hi": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.save(str(home / "tok" / "tokenizer.json"))
    trace = tmp_path / "c.jsonl"
    trace.write_text('{"prompt": "hi hi hi hi hi hi hi hi hi hi hi hi", "output_tokens": 4}\n')
    args = ("load", base_url, "--model", MODEL, "--workload", f"custom:{trace}", "--warmup", "0")
    ran = CliRunner().invoke(
        app, [*args, "--tokenizer=~/tok", "--save-result=~/out", "--json"], catch_exceptions=False
    )
    assert ran.exit_code == 0, ran.output
    (point,) = [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
    assert point["tokenizer_id"] == str(home / "tok") and point["total_input_tokens"] == 12
    assert len(list((home / "out").iterdir())) == 1 and not list(cwd.iterdir())
    ran = CliRunner().invoke(app, [*args, "--json"], catch_exceptions=False)
    (point,) = [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
    assert point["tokenizer_id"] is None and point["total_input_tokens"] == 9  # 35 chars / 4
