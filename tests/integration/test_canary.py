"""The canary: its request shapes pass on a server that answers them as vLLM does, and a server
that dies on one, or answers one in the wrong form, is caught at that shape. Through the real
runner, such a configuration is a CANARY_FAILED finding; through the confirmation (the full
set on each candidate's first launch) it is never recommended; ``tuner launch`` does not
announce it; ``tuner canary URL`` says the same for any running server."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from typer.testing import CliRunner

from tests.integration.test_launch_cli import (
    FAKE_SERVER,
    LAUNCH,
    clean_env,
    insert_measured_study,
    serve_and_stop,
    tuner,
)
from tests.studykit import (
    TINY_WORKLOAD,
    fake_server_runner,
    make_repo,
    memory_confirmation_context,
    processes_mentioning,
    uvicorn_in_thread,
)
from tuner.cli.app import app
from tuner.domain import FailureClass, ModelSpec, ServingConfig, TrialStatus
from tuner.errors import UsageError
from tuner.load.canary import FULL, QUICK, run_canary
from tuner.load.prompts import PromptFactory
from tuner.results.recommend import recommendation
from tuner.runner.ports import free_port
from tuner.study.loop import run_study
from tuner.study.standings import rank
from tuner.testing.fake_runner import FakeRunner
from tuner.testing.fake_server import create_app

MODEL = "canary-model"


def test_the_full_canary_passes_on_a_server_that_answers_like_vllm() -> None:
    with uvicorn_in_thread(create_app(MODEL, max_model_len=256, step_s=0.0005)) as url:
        report = run_canary(url, MODEL, prompts=PromptFactory(1000, synthetic=True))
    assert report.passed, report.summary()
    assert tuple(o.shape for o in report.outcomes) == FULL and report.skipped == ()
    assert all(o.server_alive for o in report.outcomes)
    assert report.summary() == f"canary passed ({len(FULL)} shapes)"


def test_a_server_that_dies_on_a_short_first_prompt_is_caught_at_the_first_shape() -> None:
    died: list[bool] = []
    fragile = create_app(MODEL, step_s=0.0005, short_first_prompt_kills=lambda: died.append(True))
    with uvicorn_in_thread(fragile) as url:
        report = run_canary(url, MODEL, shapes=FULL)
    assert died == [True] and not report.passed
    bad = report.broken_by
    assert bad is not None and bad.shape == "first-1-token" and not bad.server_alive
    assert "HTTP 500" in bad.detail and "EngineDeadError" in bad.detail
    assert report.skipped == FULL[1:]  # nothing more is sent to a dead server
    assert "canary failed at 'first-1-token'" in report.summary()
    # The fake's API server lives on with a dead engine, as vLLM's does: said as seen.
    assert "(the server answers, but GET /health says HTTP 500)" in report.summary()
    assert "died" not in report.summary().replace("EngineCore died", "")


def _one_choice_server() -> Starlette:
    """Answers every completion with one choice, whatever ``n`` asks: a wrong form."""

    async def completions(request: Request) -> Response:
        body = await request.json()
        prompt = body["prompt"]
        tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        usage = {"prompt_tokens": tokens, "completion_tokens": 2, "total_tokens": tokens + 2}
        choice: dict[str, Any] = {"index": 0, "text": " a b", "finish_reason": "length"}
        if body.get("logprobs"):
            choice["logprobs"] = {"tokens": [" a", " b"], "top_logprobs": [{" a": -1}, {" b": -1}]}
        return JSONResponse({"choices": [choice], "usage": usage})

    async def chat(request: Request) -> Response:
        usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        message = {"role": "assistant", "content": "ok"}
        return JSONResponse(
            {"choices": [{"message": message, "finish_reason": "stop"}], "usage": usage}
        )

    return _healthy_server(completions, chat)


Handler = Callable[[Request], Awaitable[Response]]


def _healthy_server(completions: Handler, chat: Handler) -> Starlette:
    """A server that lists MODEL (a context of 64), says it is healthy, and answers
    completions and chat with the handlers given."""

    async def models(_: Request) -> Response:
        return JSONResponse({"data": [{"id": MODEL, "max_model_len": 64}]})

    async def health(_: Request) -> Response:
        return Response(status_code=200)

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models),
            Route("/health", health),
        ]
    )


def test_an_answer_of_the_wrong_form_is_caught_and_the_server_reported_alive() -> None:
    with uvicorn_in_thread(_one_choice_server()) as url:
        report = run_canary(url, MODEL)
        run = CliRunner().invoke(app, ["canary", url, "--json"])
    bad = report.broken_by
    assert bad is not None and bad.shape == "n-2" and bad.server_alive
    assert bad.detail == "1 choices, 2 asked for"
    assert [o.shape for o in report.outcomes if o.ok] == list(FULL[: FULL.index("n-2")])
    assert run.exit_code == 1
    data = json.loads(run.stdout)
    assert data["model"] == MODEL and data["passed"] is False
    assert data["outcomes"][-1]["shape"] == "n-2" and data["skipped"][0] == "logprobs"


def _erring_server() -> Starlette:
    """A live server that lists its model and answers every other request, /health included,
    with HTTP 500."""

    async def fail(_: Request) -> Response:
        return JSONResponse({"error": "internal"}, status_code=500)

    async def models(_: Request) -> Response:
        return JSONResponse({"data": [{"id": MODEL, "max_model_len": 64}]})

    paths = ("/v1/completions", "/v1/chat/completions", "/health")
    return Starlette(
        routes=[
            Route("/v1/models", models),
            *(Route(p, fail, methods=["GET", "POST"]) for p in paths),
        ]
    )


def test_a_server_answering_500_is_said_to_answer_not_to_have_died() -> None:
    with uvicorn_in_thread(_erring_server()) as url:
        report = run_canary(url, MODEL, shapes=QUICK)
        run = CliRunner().invoke(app, ["canary", url, "--shapes", "quick"])
        gone = run_canary(url, MODEL, shapes=QUICK, alive=lambda: False)
    bad = report.broken_by
    assert bad is not None and not bad.server_alive and "HTTP 500" in bad.detail
    assert bad.after == "the server answers, but GET /health says HTTP 500"
    assert report.summary().endswith("(the server answers, but GET /health says HTTP 500)")
    assert "died" not in report.summary() and "dead" not in run.stdout
    assert run.exit_code == 1 and "GET /health says HTTP 500" in " ".join(run.stdout.split())
    assert gone.summary().endswith("(the server process exited)")  # the runner's own check
    with uvicorn_in_thread(_erring_server()) as url:
        pass  # stopped: nothing listens there now
    silent = run_canary(url, MODEL, shapes=QUICK, timeout_s=2)
    assert silent.summary().endswith("(the server stopped answering)")


def test_canary_command_passes_and_refuses_unknown_shapes() -> None:
    with uvicorn_in_thread(create_app(MODEL, max_model_len=256, step_s=0.0005)) as url:
        run = CliRunner().invoke(app, ["canary", url + "/v1", "--shapes", "quick"])
        bad = CliRunner().invoke(app, ["canary", url, "--shapes", "first-1-token,bogus"])
    assert run.exit_code == 0, run.output
    assert "canary passed (3 shapes)" in run.stdout
    assert all(shape in run.stdout for shape in QUICK)
    assert bad.exit_code != 0


@pytest.mark.parametrize(
    ("option", "words"),
    [
        (["--max-model-len", "8"], "--max-model-len must be above 8"),
        (["--max-model-len", "0"], "--max-model-len must be above 8"),
        (["--timeout", "0"], "--timeout must be > 0 seconds"),
        (["--timeout", "-1"], "--timeout must be > 0 seconds"),
    ],
)
def test_canary_options_out_of_range_are_usage_errors(option: list[str], words: str) -> None:
    """Refused as usage errors (exit 2, no traceback, from tuner's main) before any request: a
    context of 8 or less left the shape that fills it no prompt, a timeout of 0 read as
    'cannot reach the server'."""
    run = CliRunner().invoke(app, ["canary", "http://127.0.0.1:9", *option])
    assert isinstance(run.exception, UsageError) and words in str(run.exception), run.output
    with pytest.raises(ValueError, match="leaves no room for a prompt"):
        run_canary("http://127.0.0.1:9", MODEL, max_model_len=8)


def test_the_real_runner_records_a_canary_finding_with_the_log(tmp_path: Path) -> None:
    for name in ("ok", "bad"):
        (tmp_path / name).mkdir()
    healthy = fake_server_runner(tmp_path / "ok").run(ServingConfig(), TINY_WORKLOAD)
    assert healthy.status is TrialStatus.COMPLETE, healthy.failure_detail
    assert healthy.server is not None and healthy.server.canary == QUICK

    runner = fake_server_runner(
        tmp_path / "bad", env={"TUNER_FAKE_FAULT": "dies_on_short_first_prompt"}
    )
    result = runner.run(ServingConfig(), TINY_WORKLOAD)
    assert result.status is TrialStatus.FAILED
    assert result.failure is FailureClass.CANARY_FAILED and result.failure.is_finding
    assert "'first-1-token'" in result.failure_detail and "died" in result.failure_detail
    assert "Starting vLLM server" in result.log_tail  # the server's own log comes with it
    assert processes_mentioning(str(tmp_path / "bad" / "model")) == []


def test_the_real_runner_measures_a_model_whose_vocab_size_is_unknown(tmp_path: Path) -> None:
    # An uncached hub id, or a model directory whose config.json lacks vocab_size: the prompts
    # fall back to ids every vocabulary has instead of dying at the canary (KeyError).
    unknown = ModelSpec("unknown-7b", "acme/unknown-7b", {}, source="acme/unknown-7b")
    result = fake_server_runner(tmp_path, model=unknown).run(ServingConfig(), TINY_WORKLOAD)
    assert result.status is TrialStatus.COMPLETE, result.failure_detail


def test_a_study_never_recommends_a_configuration_that_broke_the_canary(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'c.db'}"
    repo = make_repo(db_url)
    ctx = memory_confirmation_context(db_url)  # the search finds utilization 0.5 a winner
    lean = ServingConfig(gpu_memory_utilization=0.5)
    runner = FakeRunner(canary_breaks={lean: "logprobs"})  # not among the quick shapes
    run_study(ctx, runner, repo)

    search = repo.list_trials(ctx.name, phase="search", limit=None)
    assert [t.status for t in search] == [TrialStatus.COMPLETE] * 2  # the quick set passed
    assert runner.canaries[:2] == [QUICK, QUICK]
    confirm = repo.list_trials(ctx.name, phase="confirm", limit=None)
    broken = [t for t in confirm if t.config == lean]
    assert len(broken) == 1 and broken[0].failure is FailureClass.CANARY_FAILED  # once only
    assert runner.canaries[2:4] == [FULL, FULL]  # each arm's first confirmation launch
    assert all(c == QUICK for c in runner.canaries[4:])

    assert all(r.config != lean for r in rank(repo, ctx.name, ctx.spec.objective))
    rec = recommendation(repo, ctx.name)
    assert rec is not None and rec.is_baseline and "0.5" not in rec.serve_command


def test_launch_does_not_announce_a_server_that_breaks_on_a_short_first_prompt(
    tmp_path: Path,
) -> None:
    db_url = f"sqlite:///{tmp_path / 't.db'}"
    insert_measured_study(db_url, [ServingConfig()])
    env = {**clean_env(tmp_path), "TUNER_FAKE_FAULT": "dies_on_short_first_prompt"}
    args = [*LAUNCH, "--storage", db_url, "--port", str(free_port()), *FAKE_SERVER]
    done = tuner(args, tmp_path, env, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "base URL" not in done.stdout
    text = " ".join(done.stderr.split())
    assert "failed a request shape a client may send" in text
    assert "'first-1-token'" in text and "whole log: .tuner/logs/" in text
    assert processes_mentioning(str(tmp_path / "home")) == []


def test_launch_warms_up_and_runs_the_canary_before_the_base_url(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 't.db'}"
    insert_measured_study(db_url, [ServingConfig()])
    port = free_port()
    output, _ = serve_and_stop(
        [*LAUNCH[1:], "--storage", db_url, "--port", str(port), *FAKE_SERVER],
        tmp_path,
        clean_env(tmp_path),
        str(tmp_path / "home"),
        ready_timeout_s=60,
        run_client=False,
    )
    order = [output.index(s) for s in ("canary: 3", "warming up: 8", "canary passed", "base URL")]
    assert order == sorted(order), output


def test_launch_warms_up_with_the_shapes_its_study_measured(tmp_path: Path) -> None:
    """The warm-up sent the workload preset's requests, not the study's overrides of them."""
    db_url = f"sqlite:///{tmp_path / 't.db'}"
    insert_measured_study(
        db_url, [ServingConfig()], workload_overrides={"warmup_requests": 2, "output_tokens": 4}
    )
    output, _ = serve_and_stop(
        [*LAUNCH[1:], "--storage", db_url, "--port", str(free_port()), *FAKE_SERVER],
        tmp_path,
        clean_env(tmp_path),
        str(tmp_path / "home"),
        ready_timeout_s=60,
        run_client=False,
    )
    assert "warming up: 2 requests of workload smoke as its study changed it" in output, output


def test_a_context_beyond_the_servers_is_refused_before_any_prompt_is_built() -> None:
    """--max-model-len 100000000000 built a 745 GiB prompt in memory (a MemoryError
    traceback); one above what /v1/models reports is refused, as is one beyond any model's
    context when the server reports none."""
    with uvicorn_in_thread(create_app(MODEL, max_model_len=256, step_s=0.0005)) as url:
        over = CliRunner().invoke(app, ["canary", url, "--max-model-len", "100000000000"])
        ok = CliRunner().invoke(
            app, ["canary", url, "--max-model-len", "256", "--shapes", "max-model-len"]
        )
    assert isinstance(over.exception, UsageError), over.output
    assert "beyond the server's max_model_len (256, from /v1/models)" in str(over.exception)
    assert ok.exit_code == 0, ok.output


def _odd_server(*, models: Any, completion: Any, health: int = 200) -> Starlette:
    """Answers /v1/models and every completion with the JSON given (status 200), whatever its
    shape, and /health with ``health``; chat like vLLM."""

    async def complete(_: Request) -> Response:
        return JSONResponse(completion)

    async def listing(_: Request) -> Response:
        return JSONResponse(models)

    async def alive(_: Request) -> Response:
        return Response(status_code=health)

    return Starlette(
        routes=[
            Route("/v1/completions", complete, methods=["POST"]),
            Route("/v1/models", listing),
            Route("/health", alive),
        ]
    )


GOOD_MODELS = {"data": [{"id": MODEL, "max_model_len": 64}]}
ONE_TOKEN = {  # a right answer to the first shape (a 1-token prompt)
    "choices": [{"text": " a", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1},
}


@pytest.mark.parametrize(
    ("models", "completion", "detail"),
    [
        ([MODEL], ONE_TOKEN, ""),  # a list where vLLM answers an object: no context read
        ({"data": [MODEL]}, ONE_TOKEN, ""),
        (GOOD_MODELS, {"choices": [None]}, "a choice is not a JSON object: None"),
        (GOOD_MODELS, {"choices": ["a"]}, "a choice is not a JSON object: a"),
        (
            GOOD_MODELS,
            {"choices": [{"text": "a", "finish_reason": "length", "message": 3}]},
            "a choice's message is not a JSON object: 3",
        ),
        (
            GOOD_MODELS,
            {"choices": ONE_TOKEN["choices"], "usage": [1]},
            "usage is not a JSON object: [1]",
        ),
    ],
)
def test_answers_of_an_unexpected_shape_fail_the_shape_not_the_canary(
    models: Any, completion: Any, detail: str
) -> None:
    """A server's JSON in a shape vLLM never sends (a list for an object, null for a choice) is
    the canary's finding at that shape, with what was wrong: it raised AttributeError out of
    ``tuner canary``, ``tuner launch`` and every trial's quick canary."""
    with uvicorn_in_thread(_odd_server(models=models, completion=completion)) as url:
        report = run_canary(url, MODEL, shapes=("first-1-token",))
        run = CliRunner().invoke(app, ["canary", url, "--model", MODEL, "--shapes", "quick"])
    assert run.exception is None or isinstance(run.exception, SystemExit), run.output
    assert "Traceback" not in run.output
    if not detail:
        assert report.passed, report.summary()
        return
    bad = report.broken_by
    assert bad is not None and bad.shape == "first-1-token" and bad.server_alive
    assert bad.detail == detail
    assert run.exit_code == 1 and detail in " ".join(run.stdout.split())


def _odd_stream(events: list[Any]) -> Starlette:
    """Streams ``events`` as server-sent events, then [DONE]."""

    async def complete(_: Request) -> Response:
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return Response(body, media_type="text/event-stream")

    async def listing(_: Request) -> Response:
        return JSONResponse(GOOD_MODELS)

    return Starlette(
        routes=[
            Route("/v1/completions", complete, methods=["POST"]),
            Route("/v1/models", listing),
            Route("/health", lambda _: Response(status_code=200)),
        ]
    )


@pytest.mark.parametrize(
    ("events", "detail"),
    [
        ([[1, 2]], "an event is not a JSON object: [1, 2]"),
        ([{"choices": "abc"}], "an event's choices is not a JSON array: abc"),
        ([{"choices": [7]}], "an event's choice is not a JSON object: 7"),
        ([{"choices": [], "usage": "x"}], "an event's usage is not a JSON object: x"),
        ([{"choices": [], "usage": {"completion_tokens": "8"}}], "usage {'completion_tokens'"),
        ([{"choices": [{"text": "a"}], "usage": None}], "no usage chunk before [DONE]"),
    ],
)
def test_a_stream_of_unexpected_events_fails_the_streamed_shape(
    events: list[Any], detail: str
) -> None:
    with uvicorn_in_thread(_odd_stream(events)) as url:
        report = run_canary(url, MODEL, shapes=("streamed",))
    bad = report.broken_by
    assert bad is not None and bad.shape == "streamed" and bad.server_alive
    assert bad.detail.startswith(detail), bad.detail


def test_a_server_without_health_is_watched_through_its_model_list() -> None:
    """An OpenAI-compatible server (or proxy) whose GET /health is 404 before the first shape
    is watched through GET /v1/models, and the command says so: every such server failed the
    first shape as one that 'stopped serving'. /health is still what a server that answers it
    is watched through."""
    no_health = _odd_server(models=GOOD_MODELS, completion=ONE_TOKEN, health=404)
    with uvicorn_in_thread(no_health) as url:
        report = run_canary(url, MODEL, shapes=("first-1-token",))
        run = CliRunner().invoke(app, ["canary", url, "--shapes", "first-1-token"])
        as_json = CliRunner().invoke(app, ["canary", url, "--shapes", "first-1-token", "--json"])
    assert report.passed and report.liveness == "/v1/models", report.summary()
    assert run.exit_code == 0, run.output
    text = " ".join(run.stdout.split())
    assert "whether the server still served was read from GET /v1/models" in text
    assert json.loads(as_json.stdout)["liveness"] == "/v1/models"
    with uvicorn_in_thread(_odd_server(models=GOOD_MODELS, completion=ONE_TOKEN)) as url:
        assert run_canary(url, MODEL, shapes=("first-1-token",)).liveness == "/health"


@pytest.mark.parametrize(
    ("address", "words"),
    [
        (
            "http://127.0.0.1:9/v1/completions",
            "is one of the server's endpoints (/v1/completions), not its address",
        ),
        ("127.0.0.1:9/v1/chat/completions/", "give the server's base URL: http://127.0.0.1:9"),
        (
            "http://127.0.0.1:9/proxy/v1/models",
            "give the server's base URL: http://127.0.0.1:9/proxy",
        ),
        ("http://[::1", "is not a server address"),
    ],
)
def test_an_endpoint_or_a_broken_address_is_refused_naming_the_base_url(
    address: str, words: str
) -> None:
    """A pasted endpoint was taken for the base URL: the hint said 'name the model with
    --model', and with --model every shape answered 404. An unclosed IPv6 bracket was a
    traceback."""
    for command in (["canary", address], ["load", address]):
        run = CliRunner().invoke(app, command)
        assert isinstance(run.exception, UsageError), run.output
        assert words in " ".join(f"{run.exception} {run.exception.hint}".split())


def _chat_server(chat: Response) -> Starlette:
    """Answers completions as vLLM does (``n`` choices, the prompt counted) and every chat
    request with ``chat``."""

    async def completions(request: Request) -> Response:
        body = await request.json()
        tokens = len(body["prompt"])
        usage = {"prompt_tokens": tokens, "completion_tokens": 2, "total_tokens": tokens + 2}
        choices = [{"index": i, "text": " a b", "finish_reason": "length"}
                   for i in range(body.get("n", 1))]  # fmt: skip
        return JSONResponse({"choices": choices, "usage": usage})

    async def answer_chat(_: Request) -> Response:
        return chat

    return _healthy_server(completions, answer_chat)


def test_a_base_model_or_a_reasoning_parser_passes_the_chat_shape() -> None:
    """Every trial of a base model (no chat template: vLLM 0.32 answers a chat request HTTP
    400) and of a server with --reasoning-parser (the 8 tokens all in `reasoning`, `content`
    null) failed the quick canary at 'chat-system' on a healthy server: no study measured."""
    refused = JSONResponse(
        {"error": {"message": "As of transformers v4.44, default chat template is no longer "
                              "allowed, so you must provide a chat template if the tokenizer "
                              "does not define one.", "code": 400}},
        status_code=400,
    )  # fmt: skip
    usage = {"prompt_tokens": 9, "completion_tokens": 8, "total_tokens": 17}
    message = {"role": "assistant", "content": None, "reasoning": "t267 t267 t267 t267"}
    thinking = JSONResponse(
        {"choices": [{"message": message, "finish_reason": "length"}], "usage": usage}
    )
    for chat, said in ((refused, "not applicable: the model has no chat template"), (thinking, "")):
        with uvicorn_in_thread(_chat_server(chat)) as url:
            report = run_canary(url, MODEL, shapes=QUICK)
        assert report.passed, report.summary()
        assert report.outcomes[-1].shape == "chat-system"
        assert report.outcomes[-1].detail.startswith(said)
    broken = JSONResponse({"error": {"message": "Internal", "code": 400}}, status_code=400)
    with uvicorn_in_thread(_chat_server(broken)) as url:
        report = run_canary(url, MODEL, shapes=QUICK)
    assert not report.passed and "HTTP 400" in report.summary()  # any other 400 is a finding
