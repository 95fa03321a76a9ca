"""The canary: its request shapes pass on a server that answers them as vLLM does, and a server
that dies on one, or answers one in the wrong form, is caught at that shape. Through the real
runner, such a configuration is a CANARY_FAILED finding; through the confirmation (the full
set on each candidate's first launch) it is never recommended; ``tuner launch`` does not
announce it; ``tuner canary URL`` says the same for any running server."""

from __future__ import annotations

import json
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
