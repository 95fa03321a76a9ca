"""Which configuration ``tuner launch`` serves and how it spells it: the local store's choice
across studies, workloads and objectives; the tuner API's answer (a scripted transport for
the failure cases, the real API app on a socket for the contract); the command it builds."""

from __future__ import annotations

import dataclasses
import json
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.test_launch_cli import E2E_CONFIG, insert_measured_study
from tuner.catalog.materialize import tokenizer_dir
from tuner.deploy.local import Measured, best_local, model_source, plan
from tuner.deploy.remote import best_remote
from tuner.domain import Objective, ServingConfig
from tuner.errors import AmbiguousModel, EnvironmentProblem, UsageError
from tuner.runner.ports import free_port

LEAN = ServingConfig(gpu_memory_utilization=0.5, enforce_eager=True)  # less memory, slower


def test_local_choice_follows_objective_workload_and_skips_emulation(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    repo = insert_measured_study(url, [ServingConfig(), LEAN], name="smoke-study")
    insert_measured_study(url, [ServingConfig(), E2E_CONFIG], name="chat", workload="chat")
    insert_measured_study(url, [E2E_CONFIG], name="emu", workload="rag", emulated=True)

    fast = best_local(repo, "tiny-ernie", "cpu", workload="smoke", objective=Objective.THROUGHPUT)
    assert (fast.study, fast.trial, fast.is_baseline, fast.flags) == ("smoke-study", 0, True, ())
    lean = best_local(repo, "tiny-ernie", "cpu", workload="smoke", objective=Objective.MEMORY)
    assert (lean.trial, lean.config, lean.objective) == (1, LEAN, "memory")
    assert lean.flags == ("--gpu-memory-utilization", "0.5", "--enforce-eager")
    assert lean.metrics["output_throughput"].low <= lean.metrics["output_throughput"].high
    assert lean.gpu == "cpu: test host" and lean.vllm_version == "0.32.0"

    chat = best_local(repo, "tiny-ernie", "cpu", workload="chat")
    assert chat.study == "chat" and chat.workload == "chat"
    with pytest.raises(UsageError) as caught:
        best_local(repo, "tiny-ernie", "cpu", workload="rag")  # measured only in emulation
    assert "nothing measured" in caught.value.message and "(emulated)" in caught.value.message
    assert caught.value.exit_code == 2


def measured(config: ServingConfig, version: str = "0.32.0") -> Measured:
    from tuner.vllm import argv

    flags = argv.render_flags(config, version)
    return Measured(
        model="tiny-ernie",
        study="s",
        trial=3,
        flags=flags.args,
        env=flags.env,
        vllm_version=version,
        gpu="NVIDIA H200",
        workload="chat",
        objective="balanced",
        source="test",
        config=config,
        extra_args=("--seed", "1"),
    )


def test_plan_keeps_the_flags_or_respells_them_for_another_vllm(tmp_path: Path) -> None:
    config = ServingConfig(attention_backend="FLASH_ATTN", max_num_seqs=64)
    same = plan(
        measured(config),
        python="/v/python",
        vllm_version="0.32.1",
        host="0.0.0.0",
        port=9000,
        home=tmp_path,
    )
    assert same.env == {} and same.notes[0].startswith("vLLM 0.32.1 will serve")
    assert same.command[:3] == ("/v/python", "-m", "vllm.entrypoints.openai.api_server")
    assert same.command[-6:] == (
        "--seed",
        "1",
        "--max-num-seqs",
        "64",
        "--attention-backend",
        "FLASH_ATTN",
    )
    assert same.shell().startswith("/v/python -m vllm.entrypoints.openai.api_server --model ")

    old = plan(
        measured(config),
        python="/v/python",
        vllm_version="0.12.0",
        host="127.0.0.1",
        port=9000,
        home=tmp_path,
    )
    assert old.env == {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}
    assert "--attention-backend" not in old.command
    assert old.shell().startswith("VLLM_ATTENTION_BACKEND=FLASH_ATTN /v/python ")
    assert any("spelled for vLLM 0.12.0" in n for n in old.notes)


def test_model_source_random_weights_only_where_there_are_none(tmp_path: Path) -> None:
    path, load, tokenizer = model_source("tiny-ernie", tmp_path, dummy_weights=False)
    assert load == "dummy" and Path(path).parent == tmp_path / "models"
    assert tokenizer == str(tokenizer_dir(Path(path))) and (Path(path) / "config.json").is_file()
    assert model_source("ernie-0.3b", tmp_path, dummy_weights=False) == (
        "baidu/ERNIE-4.5-0.3B-PT",
        None,
        None,
    )
    assert model_source("ernie-0.3b", tmp_path, dummy_weights=True)[1] == "dummy"
    local = tmp_path / "my-model"
    local.mkdir()
    (local / "config.json").write_text(json.dumps({"architectures": ["X"]}))
    assert model_source(str(local), tmp_path, dummy_weights=False) == (str(local), None, None)


# -- the API -----------------------------------------------------------------------------------


def scripted(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.MockTransport:
    return httpx.MockTransport(handler)


RECOMMENDATION = {
    "model": "tiny-ernie",
    "gpu": "h200",
    "workload": "chat",
    "objective": "throughput",
    "study": "ernie-h200",
    "trial": 7,
    "config": {"max_num_seqs": 128},
    "flags": ["--max-num-seqs", "128"],
    "env": {},
    "serve_command": "vllm serve ...",
    "vllm_version": "0.26.0",
    "metrics": {
        "output_throughput": {"median": 1000.0, "low": 900.0, "high": 1100.0, "values": [1.0]},
        "e2e_p99_ms": {"median": None, "low": None, "high": None, "values": [None]},
    },
    "provenance": {"gpu_name": "NVIDIA H200", "vllm_version": "0.26.0", "workload": "chat"},
    "is_baseline": False,
}


def test_api_answer_becomes_the_measured_configuration() -> None:
    asked: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(200, json=RECOMMENDATION)

    got = best_remote(
        "http://api.test/",
        "tiny-ernie",
        "h200",
        workload="chat",
        objective=Objective.THROUGHPUT,
        transport=scripted(handler),
    )
    assert asked[0].url.path == "/v1/recommendations"
    assert dict(asked[0].url.params) == {
        "model": "tiny-ernie",
        "gpu": "h200",
        "workload": "chat",
        "objective": "throughput",
    }
    assert (got.study, got.trial, got.flags, got.vllm_version) == (
        "ernie-h200",
        7,
        ("--max-num-seqs", "128"),
        "0.26.0",
    )
    assert got.config == ServingConfig(max_num_seqs=128) and got.gpu == "NVIDIA H200"
    assert set(got.metrics) == {"output_throughput"}  # a metric sent as null is left out


@pytest.mark.parametrize(
    ("status", "body", "error", "words"),
    [
        (
            404,
            {"message": "nothing real was measured", "hint": "run a study"},
            UsageError,
            "nothing real",
        ),
        (500, {"message": "boom"}, EnvironmentProblem, "HTTP 500: boom"),
        (200, {"flags": "--max-num-seqs 8"}, EnvironmentProblem, "cannot read"),
        (200, ["not", "an", "object"], EnvironmentProblem, "HTTP 200"),
    ],
)
def test_api_failures_say_what_happened(
    status: int, body: object, error: type[Exception], words: str
) -> None:
    transport = scripted(lambda _r: httpx.Response(status, json=body))
    with pytest.raises(error) as caught:
        best_remote("http://api.test", "m", "h200", workload="chat", transport=transport)
    assert words in str(caught.value)


def test_api_unreachable_or_without_workload() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(EnvironmentProblem, match="cannot reach the tuner API"):
        best_remote("http://api.test", "m", "h200", workload="chat", transport=scripted(refuse))
    with pytest.raises(UsageError, match="--api needs --workload"):
        best_remote("http://api.test", "m", "h200", workload=None)


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[str]:
    """The real API app over a measured study, served by uvicorn in a thread."""
    app_module = pytest.importorskip("api.app")
    import uvicorn

    from api.settings import ApiSettings

    repo = insert_measured_study(f"sqlite:///{tmp_path / 'api.db'}", [ServingConfig(), LEAN])
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app_module.create_app(ApiSettings(storage=repo)),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the API did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_the_real_api_answers_what_launch_reads(api_server: str) -> None:
    got = best_remote(api_server, "tiny-ernie", "cpu", workload="smoke", objective=Objective.MEMORY)
    assert (got.study, got.trial, got.config) == ("measured", 1, LEAN)
    assert got.flags == ("--gpu-memory-utilization", "0.5", "--enforce-eager")
    assert got.vllm_version == "0.32.0" and "output_throughput" in got.metrics
    with pytest.raises(UsageError, match="nothing measured"):
        best_remote(api_server, "tiny-ernie", "h200", workload="smoke")


def test_a_combination_whose_every_trial_failed_says_so(tmp_path: Path) -> None:
    """It said "nothing measured ... (it has: tiny-ernie/h100/smoke, ...)" and told the user to
    run the study they had just run."""
    from tests.studykit import make_context, make_repo
    from tuner.study.loop import run_study
    from tuner.testing.fake_runner import FakeRunner

    url = f"sqlite:///{tmp_path / 'f.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=2, name="all-failed")
    run_study(ctx, FakeRunner(max_utilization=0.0), repo)  # every launch: out of memory
    with pytest.raises(UsageError) as caught:
        best_local(repo, "tiny-ernie", ctx.gpu.name)
    assert f"no trial of tiny-ernie on {ctx.gpu.name} completed" in caught.value.message
    assert "1 study tried (all-failed)" in caught.value.message
    assert "tuner trials all-failed --state failed" in (caught.value.hint or "")


def test_a_study_s_extra_arguments_reach_every_serve_line_and_the_api(tmp_path: Path) -> None:
    """A study measured with extra vLLM arguments (say --max-model-len 2048 --enforce-eager)
    is served with them: `tuner best`'s serve line and the API's serve_command left them out,
    and `tuner launch --api` served without them, another configuration than the one measured;
    `tuner launch --storage` kept them. The API also sends the study's workload overrides."""
    from fastapi.testclient import TestClient

    from api.app import create_app
    from api.settings import ApiSettings
    from tuner.results.recommend import recommendation

    url = f"sqlite:///{tmp_path / 't.db'}"
    extra = ["--max-model-len", "2048", "--enforce-eager"]
    repo = insert_measured_study(
        url, [ServingConfig(), LEAN], name="x", extra_args=extra,
        workload_overrides={"concurrency": 2},
    )  # fmt: skip
    best = recommendation(repo, "x")
    assert best is not None
    assert " ".join(extra) in best.serve_command, best.serve_command

    client = TestClient(create_app(ApiSettings(storage=repo)))
    body = client.get(
        "/v1/recommendations",
        params={"model": "tiny-ernie", "gpu": "cpu", "workload": "smoke[concurrency=2]"},
    ).json()
    assert body["extra_args"] == extra and body["workload_overrides"] == {"concurrency": 2}
    assert body["serve_command"] == best.serve_command

    from tuner.deploy.remote import from_api

    served = from_api(body, "http://api")
    local = best_local(repo, "tiny-ernie", "cpu")
    assert served.extra_args == local.extra_args == tuple(extra)
    assert served.workload_overrides == local.workload_overrides == {"concurrency": 2}
    assert local.workload == served.workload == "smoke"  # its preset: the warm-up reads it
    assert "workload smoke[concurrency=2]," in "\n".join(local.describe())


def test_an_objective_this_tuner_does_not_know_is_ranked_as_balanced_everywhere(
    tmp_path: Path,
) -> None:
    """A study stored by another tuner with an objective preset this one lacks: `tuner best`
    and `tuner size` ended in a ValueError traceback, and the study's page too; `tuner
    launch` read it as balanced. Every surface now reads it as balanced."""
    from fastapi.testclient import TestClient
    from sqlalchemy import text
    from typer.testing import CliRunner

    from api.app import create_app
    from api.settings import ApiSettings
    from tuner.cli.app import app
    from tuner.db import make_engine

    url = f"sqlite:///{tmp_path / 't.db'}"
    repo = insert_measured_study(url, [ServingConfig(), LEAN], name="o1")
    with make_engine(url).begin() as conn:
        conn.execute(text("UPDATE tuner_studies SET objective = 'goodput'"))
    best = CliRunner().invoke(app, ["best", "o1", "--storage", url])
    assert best.exit_code == 0 and best.exception is None, best.output
    size = CliRunner().invoke(
        app, ["size", "--model", "tiny-ernie", "--rate", "5", "--storage", url]
    )
    assert size.exception is None or isinstance(size.exception, SystemExit), size.output
    assert "Traceback" not in size.output and "goodput" not in size.output.lower()
    page = TestClient(create_app(ApiSettings(storage=repo))).get("/ui/studies/o1")
    assert page.status_code == 200
    assert best_local(repo, "tiny-ernie", "cpu").objective == "balanced"


def test_a_model_measured_from_a_hub_id_is_launched_by_its_short_name(tmp_path: Path) -> None:
    """`tuner best`, `tuner size` and the API find a study of ``myorg/foo`` by ``foo``;
    `tuner launch --model foo` refused it as an unknown model. It now finds it, serves it from
    where the study loaded it, and refuses a name two measured models share."""
    from fastapi.testclient import TestClient

    from api.app import create_app
    from api.settings import ApiSettings
    from tuner.deploy.remote import from_api

    url = f"sqlite:///{tmp_path / 't.db'}"
    repo = insert_measured_study(
        url, [ServingConfig(), LEAN], name="foo-study", model="foo", model_source="myorg/foo"
    )
    found = best_local(repo, "foo", "cpu")
    assert (found.study, found.model, found.model_source) == ("foo-study", "foo", "myorg/foo")
    assert best_local(repo, "myorg/foo", "cpu").study == "foo-study"
    line = plan(found, python="python3", vllm_version="0.32.0", host="127.0.0.1", port=8000,
                home=tmp_path, model="foo")  # fmt: skip
    assert line.command[line.command.index("--model") + 1 :][:1] == ("myorg/foo",), line.command

    client = TestClient(create_app(ApiSettings(storage=repo)))
    body = client.get(
        "/v1/recommendations", params={"model": "foo", "gpu": "cpu", "workload": "smoke"}
    ).json()
    assert from_api(body, "http://api").model_source == "myorg/foo"

    with pytest.raises(UsageError) as unknown:
        best_local(repo, "bar", "cpu")
    assert "bar" in unknown.value.message
    insert_measured_study(url, [ServingConfig()], name="other", model="foo", model_source="o/foo")
    with pytest.raises(AmbiguousModel):
        best_local(repo, "foo", "cpu")


def _command(hint: str) -> list[str]:
    """The command a hint quotes between backticks, as a shell would split it."""
    return shlex.split(hint.split("`")[1])


def test_launch_hints_name_the_storage_and_workload_given_and_paste_whole(tmp_path: Path) -> None:
    """The hints said `tuner trials allfailed --state failed` (the default database, not the
    --storage given), `tuner run --model /tmp/my models/m1 --gpu cpu` (two words where one
    path was) and dropped --workload."""
    from typer.testing import CliRunner

    from tests.studykit import make_context, make_repo
    from tuner.catalog.models import MODELS
    from tuner.cli.app import app
    from tuner.study.loop import run_study
    from tuner.testing.fake_runner import FakeRunner

    (tmp_path / "my dir").mkdir()
    url = f"sqlite:///{tmp_path / 'my dir' / 's2.db'}"
    repo = insert_measured_study(url, [E2E_CONFIG], gpu="h100", workload="chat")
    model = tmp_path / "my models" / "m1"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(dict(MODELS["tiny-ernie"].config)))
    with pytest.raises(UsageError) as caught:
        best_local(repo, str(model), "cpu", workload="chat", storage=url)
    assert _command(caught.value.hint) == [
        "tuner", "run", "--model", str(model), "--gpu", "cpu", "--workload", "chat",
        "--storage", url,
    ]  # fmt: skip

    # A study's label (what `--workload` matches, and the list shows) is no workload name:
    # the hint ran `tuner run --workload 'chat[requests_per_window=24]'`, which is refused.
    with pytest.raises(UsageError) as caught:
        best_local(repo, str(model), "cpu", workload="chat[requests_per_window=24]")
    assert _command(caught.value.hint)[-2:] == ["--workload", "chat"]
    assert "with those [workload] settings in a spec file" in caught.value.hint

    failed = f"sqlite:///{tmp_path / 'my dir' / 'failed.db'}"
    ctx = make_context(failed, trials=2, name="all-failed")
    run_study(ctx, FakeRunner(max_utilization=0.0), make_repo(failed))  # every launch: OOM
    args = ["launch", "--model", "tiny-ernie", "--gpu", ctx.gpu.name, "--storage", failed]
    run = CliRunner().invoke(app, args)
    assert isinstance(run.exception, UsageError), run.output
    assert _command(run.exception.hint) == [
        "tuner", "trials", "all-failed", "--state", "failed", "--storage", failed,
    ]  # fmt: skip


def test_the_flags_line_shows_the_environment_the_configuration_sets() -> None:
    """On a vLLM that takes the attention backend from the environment, `flags:` showed the
    other flags only: VLLM_ATTENTION_BACKEND, part of the configuration, was hidden."""
    old = measured(ServingConfig(attention_backend="FLASH_ATTN", max_num_seqs=64), "0.12.0")
    lines = old.describe()
    assert "  flags: --max-num-seqs 64" in lines
    assert "  env:   VLLM_ATTENTION_BACKEND=FLASH_ATTN" in lines
    only_env = measured(ServingConfig(attention_backend="FLASH_ATTN"), "0.12.0").describe()
    assert "  flags: (none)" in only_env  # not "vLLM defaults": the backend is set
    assert not any(line.startswith("  env:") for line in measured(E2E_CONFIG).describe())


def test_api_given_with_v1_is_asked_at_its_base_and_another_404_is_a_wrong_address() -> None:
    """--api http://host:port/v1 (the URL `tuner serve` prints with /v1 after it) asked
    /v1/v1/recommendations and said "nothing measured ... no such endpoint"."""
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        if request.url.path == "/v1/recommendations":
            return httpx.Response(200, json=RECOMMENDATION)
        message = f"no such endpoint: GET {request.url.path}"
        return httpx.Response(404, json={"error": "not_found", "message": message})

    for api in ("http://api.test/v1", "http://api.test/v1/"):
        got = best_remote(api, "tiny-ernie", "h200", workload="chat", transport=scripted(handler))
        assert got.study == "ernie-h200" and asked[-1] == "/v1/recommendations"
    for answer in (
        httpx.Response(404, json={"error": "not_found", "message": "no such endpoint: GET /x"}),
        httpx.Response(404, json={"detail": "Not Found"}),  # vLLM, or another FastAPI app
        httpx.Response(404, text="<html>404 Not Found</html>"),  # a proxy
    ):
        transport = scripted(lambda _r, a=answer: a)
        with pytest.raises(EnvironmentProblem) as caught:
            best_remote("http://api.test/x", "m", "h200", workload="chat", transport=transport)
        assert "http://api.test/x is not a tuner API" in caught.value.message
        assert "check --api" in (caught.value.hint or "")


def test_the_real_api_at_a_wrong_path_is_a_wrong_address(api_server: str) -> None:
    got = best_remote(f"{api_server}/v1/", "tiny-ernie", "cpu", workload="smoke")
    assert got.study == "measured"
    with pytest.raises(EnvironmentProblem, match="is not a tuner API"):
        best_remote(f"{api_server}/api", "tiny-ernie", "cpu", workload="smoke")


def test_launch_print_with_a_model_cache_that_cannot_be_written_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$TUNER_HOME/models a file: `tuner launch --print` ended in a traceback from mkdir."""
    from typer.testing import CliRunner

    from tuner.cli.app import app

    url = f"sqlite:///{tmp_path / 't.db'}"
    insert_measured_study(url, [ServingConfig()])
    (tmp_path / "models").write_text("not a folder")
    monkeypatch.setenv("TUNER_HOME", str(tmp_path))
    args = ["launch", "--model", "tiny-ernie", "--gpu", "cpu", "--storage", url, "--print"]
    run = CliRunner().invoke(app, [*args, "--vllm-python", str(tmp_path / "none")])
    assert isinstance(run.exception, EnvironmentProblem), run.exception
    assert "models is not a directory" in run.exception.message
    assert "point TUNER_HOME at a writable directory" in (run.exception.hint or "")


def test_a_study_of_a_directory_gone_from_this_machine_says_so(tmp_path: Path) -> None:
    """`tuner launch --model foo` for a study of /data/models/foo where that directory is not:
    "unknown model '/data/models/foo': not a catalog alias…", with the catalog as the hint."""
    gone = str(tmp_path / "models" / "foo")
    study = dataclasses.replace(measured(E2E_CONFIG), model="foo", model_source=gone)
    with pytest.raises(UsageError) as caught:
        plan(study, python="/v/python", vllm_version="0.32.0", host="h", port=1, home=tmp_path)
    assert f"from the directory {gone}, which is not on this machine" in caught.value.message
    assert shlex.quote(gone) in (caught.value.hint or "")
