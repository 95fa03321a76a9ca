"""POST /v1/studies: the API key rules (403 without a configured key, 401 without or with a
wrong one) and the spec checks (422 with a message naming the problem), then the queued row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import ApiSettings
from tests.studykit import make_repo
from tuner.db.repository import Repository
from tuner.spec import TRIALS_MAX

KEY = "s3cret-key"
SPEC: dict[str, Any] = {
    "study": {
        "name": "queued-1",
        "model": "tiny-ernie",
        "gpu": "h100",
        "workload": "chat",
        "objective": "latency",
        "trials": 8,
        "slo": "ttft_p99=500ms",
    },
    "space": {"params": ["max_num_seqs"], "choices": {"max_num_seqs": [16, 64]}},
}


@pytest.fixture()
def repo(tmp_path: Path) -> Repository:
    return make_repo(f"sqlite:///{tmp_path / 'w.db'}")


def _client(repo: Repository, key: str | None) -> TestClient:
    return TestClient(create_app(ApiSettings(storage=repo, api_key=key, api_key_env="MY_KEY")))


def test_writes_are_refused_when_no_key_is_configured(repo: Repository) -> None:
    r = _client(repo, None).post("/v1/studies", json=SPEC, headers={"X-API-Key": "anything"})
    assert r.status_code == 403
    assert r.json()["error"] == "writes_disabled" and "MY_KEY" in r.json()["hint"]
    assert repo.list_studies() == []


@pytest.mark.parametrize(
    "headers",
    [{}, {"X-API-Key": "wrong"}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}],
)
def test_missing_or_wrong_key_is_401(repo: Repository, headers: dict[str, str]) -> None:
    r = _client(repo, KEY).post("/v1/studies", json=SPEC, headers=headers)
    assert r.status_code == 401, r.text
    assert r.json()["message"] in ("this endpoint needs an API key", "wrong API key")
    assert r.headers["www-authenticate"] == "Bearer"
    assert repo.list_studies() == []


@pytest.mark.parametrize("headers", [{"X-API-Key": KEY}, {"Authorization": f"Bearer {KEY}"}])
def test_a_study_is_queued_with_the_key(repo: Repository, headers: dict[str, str]) -> None:
    client = _client(repo, KEY)
    r = client.post("/v1/studies", json=SPEC, headers=headers)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["name"] == "queued-1" and body["status"] == "queued"
    assert body["objective"] == "latency" and body["slo"] == {"ttft_p99_ms": 500.0}
    assert body["spec"]["choices"] == {"max_num_seqs": [16, 64]}
    assert r.headers["location"] == "/v1/studies/queued-1"
    row = repo.get_study("queued-1")
    assert row is not None and row.status == "queued" and row.n_trials_requested == 8
    assert client.get("/v1/studies?status=queued").json()["total"] == 1
    again = client.post("/v1/studies", json=SPEC, headers=headers)
    assert again.status_code == 409 and "already exists" in again.json()["message"]


def _with(section: str, **changes: Any) -> dict[str, Any]:
    return {**SPEC, section: {**SPEC.get(section, {}), **changes}}


def test_an_emulated_study_is_listed_as_emulated_from_the_moment_it_is_queued(
    repo: Repository,
) -> None:
    """It read emulated: false until a worker claimed it, beside a spec that said emulate."""
    client = _client(repo, KEY)
    r = client.post("/v1/studies", json=_with("study", gpu="a10g", emulate=True),
                    headers={"X-API-Key": KEY})  # fmt: skip
    assert r.status_code == 201, r.text
    assert r.json()["emulated"] is True and r.json()["spec"]["emulate"] is True
    (listed,) = client.get("/v1/studies").json()["items"]
    assert listed["emulated"] is True


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (_with("study", model="no-such-model"), "unknown model"),
        (_with("study", gpu="tpu9"), "unknown GPU profile"),
        (_with("study", workload="bowling"), "unknown workload"),
        (_with("study", objective="fastest"), "unknown objective"),
        (_with("study", slo="ttft=fast"), "bad SLO item"),
        (_with("study", trials=0), "trials must be at least 1"),
        (_with("study", trials=TRIALS_MAX + 1), f"trials must be at most {TRIALS_MAX}"),
        (_with("study", model="/etc"), "local path"),
        (_with("study", workload="trace:/etc/passwd"), "trace workloads"),
        (_with("space", params=["warp_speed"]), "unknown serving knob"),
        ({**SPEC, "telemetry": {}}, "unknown section"),
        ({"model": "tiny-ernie"}, "needs a 'study' object"),
        # Queued before, and failed on the worker (the command line refuses it at once).
        (_with("study", gpu="cpu", emulate=True), "gpu 'cpu' is not emulated"),
        # Queued before, and failed on the worker: refused where the workload is read.
        (
            {**SPEC, "workload": {"concurrency_ladder": [2, 4], "rate_ladder": [1.0, 2.0]}},
            "give a concurrency ladder or a rate ladder, not both",
        ),
        # Queued before: a window of 2,147,483,647 requests, a first look of as many launches
        (_with("workload", requests_per_window=2_000_000), "more than 1,000,000"),
        (_with("confirm", launches=41), "launches (41) is above 40"),
    ],
)
def test_bad_specs_are_422_with_a_message(repo: Repository, body: Any, words: str) -> None:
    r = _client(repo, KEY).post("/v1/studies", json=body, headers={"X-API-Key": KEY})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_spec" and words in r.json()["message"]
    assert repo.list_studies() == []


def test_a_body_that_is_not_an_object_is_422(repo: Repository) -> None:
    client = _client(repo, KEY)
    for content in (b"[1, 2]", b"{not json"):
        r = client.post(
            "/v1/studies",
            content=content,
            headers={"X-API-Key": KEY, "Content-Type": "application/json"},
        )
        assert r.status_code == 422 and r.json()["error"] == "invalid"
        assert "request body" in r.json()["message"]


def test_a_space_that_cannot_run_here_is_fitted_and_what_cannot_is_said(
    repo: Repository,
) -> None:
    """These were queued as given, and the worker then launched servers that could not serve:
    the defaults twice (labelled as the baseline beating itself), or a failed baseline."""
    client = _client(repo, KEY)

    def post(name: str, **sections: Any) -> Any:
        body = {"study": {**SPEC["study"], "name": name, **sections.pop("study", {})}, **sections}
        r = client.post("/v1/studies", json=body, headers={"X-API-Key": KEY})
        assert r.status_code == 201, r.text
        return r.json()

    idle = post("idle", study={"gpu": "cpu"}, space={"params": ["attention_backend"]})
    assert idle["spec"].get("params") is None  # the lever plan decides, as for no space
    assert any("none of the named knobs" in a for a in idle["adjustments"])
    long = post("long", space={"fixed": {"max_model_len": 999999999}})
    assert "max_model_len" not in long["spec"].get("fixed", {})
    assert any("exceeds the model's 4096 positions" in a for a in long["adjustments"])
    two = post("two", study={"gpu": "cpu"}, space={"fixed": {"max_model_len": 10_000_000,
               "attention_backend": "FLASHINFER"}})  # fmt: skip  # each breaks a rule alone
    assert two["spec"].get("fixed", {}) == {} and two["warnings"] == []
    huge = post("huge", workload={"prompt_tokens": 100000})
    assert huge["warnings"] and "will fail before any launch" in huge["warnings"][0]
    assert post("fine")["warnings"] == []


def test_a_form_encoded_or_broken_body_says_what_to_send(repo: Repository) -> None:
    client = _client(repo, KEY)
    # curl -d without -H 'Content-Type: application/json': it read "see /docs".
    form = client.post("/v1/studies", content=b'{"study": {}}', headers={"X-API-Key": KEY,
                       "Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert form.status_code == 422
    assert "Content-Type: application/json" in form.json()["hint"]
    broken = client.post("/v1/studies", content=b'{"study": ', headers={"X-API-Key": KEY,
                         "Content-Type": "application/json"})  # fmt: skip
    assert broken.status_code == 422
    assert broken.json()["message"].startswith("request body: not valid JSON at character 10")


def test_levers_are_queued_and_a_misspelt_one_names_the_closest(repo: Repository) -> None:
    client = _client(repo, KEY)
    space = {"choices": {"stream_interval": [1, 8]}, "fixed": {"quantization": "fp8"}}
    body = {**SPEC, "study": {**SPEC["study"], "name": "levers-1"}, "space": space}
    r = client.post("/v1/studies", json=body, headers={"X-API-Key": KEY})
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["choices"]["stream_interval"] == [1, 8]
    assert r.json()["spec"]["fixed"] == {"quantization": "fp8"}
    for knob, hint in (
        ("stream_intervall", "did you mean stream_interval"),
        ("--stream-interval", "by its flag's dest: stream_interval"),
        ("data_parallel_size", "one GPU per launch"),
    ):
        bad = {**body, "study": {**body["study"], "name": "levers-2"}, "space": {"params": [knob]}}
        r = client.post("/v1/studies", json=bad, headers={"X-API-Key": KEY})
        assert r.status_code == 422 and "unknown serving knob" in r.json()["message"], r.text
        assert hint in r.json()["hint"], r.text
    searched = {**body, "study": {**body["study"], "name": "levers-3"},
                "space": {"search": {"block_size": [16, 32]}}}  # fmt: skip
    r = client.post("/v1/studies", json=searched, headers={"X-API-Key": KEY})
    assert r.status_code == 422 and "space.search is for `tuner run`" in r.json()["message"]
    # A lever whose only choice is vLLM's default (stream_interval 1) is left there, and said.
    only_default = {"params": ["max_num_seqs"], "choices": {"stream_interval": [1, "default"]}}
    idle = {**body, "study": {**body["study"], "name": "levers-4"}, "space": only_default}
    r = client.post("/v1/studies", json=idle, headers={"X-API-Key": KEY})
    assert r.status_code == 201, r.text
    assert "stream_interval" not in r.json()["spec"].get("choices", {})
    assert r.json()["spec"]["params"] == ["max_num_seqs"]
    assert "stream_interval is not searched: its only choice is vLLM's default" in "\n".join(
        r.json()["adjustments"]
    )
    assert sorted(s.name for s in repo.list_studies()) == ["levers-1", "levers-4"]


def test_extra_args_are_refused_unless_the_server_takes_them(repo: Repository) -> None:
    """A key lets its holder queue studies, not run any `vllm serve` flag on the workers:
    runner.extra_args (e.g. --trust-remote-code with a hub model: its repository's code on the
    worker) need `tuner serve --allow-extra-args`."""
    body = {**SPEC, "runner": {"extra_args": ["--trust-remote-code"]}}
    headers = {"X-API-Key": KEY}
    r = _client(repo, KEY).post("/v1/studies", json=body, headers=headers)
    assert r.status_code == 403, r.text
    assert r.json()["error"] == "extra_args_disabled"
    assert "--trust-remote-code" in r.json()["message"] and "--allow-extra-args" in r.json()["hint"]
    assert repo.list_studies() == []
    assert _client(repo, KEY).post("/v1/studies", json=SPEC, headers=headers).status_code == 201
    opted_in = ApiSettings(storage=repo, api_key=KEY, allow_extra_args=True)
    r = TestClient(create_app(opted_in)).post(
        "/v1/studies", json={**body, "study": {**SPEC["study"], "name": "q2"}}, headers=headers
    )
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["extra_args"] == ["--trust-remote-code"]


def test_the_api_takes_every_spec_file_key_but_those_of_this_machine() -> None:
    """docs/specs.md: the API takes a spec file's tables as JSON. It refused early_stop,
    space.plan, runner.compile_cache and cpu_placement, and the multi-turn preset's turns and
    think_time_s, none of which names a file or program here."""
    from api import spec_body
    from tuner.load.workloads import REPLAY_FIELDS
    from tuner.spec.study import _SECTIONS

    sections = {
        "study": spec_body.StudySection,
        "workload": spec_body.WorkloadSection,
        "space": spec_body.SpaceSection,
        "confirm": spec_body.ConfirmSection,
        "runner": spec_body.RunnerSection,
    }
    missing = {k: set(keys) - set(sections[k].__annotations__) for k, keys in _SECTIONS.items()}
    # A trace file's options (traces are read on the worker's machine), --search (a flag of the
    # worker's vLLM, which the API cannot check), the worker's interpreter, and a budget that
    # must not be below confirm.launches (a rule the exact schema cannot state).
    assert missing == {
        "study": set(), "workload": set(REPLAY_FIELDS), "space": {"search"},
        "confirm": set(), "runner": {"vllm_python"},
    }  # fmt: skip


def test_run_settings_and_multi_turn_overrides_are_queued(repo: Repository) -> None:
    body = {
        "study": {**SPEC["study"], "workload": "multi-turn", "early_stop": True, "slo": "None"},
        "workload": {"turns": 2, "think_time_s": 0.1},
        "space": {**SPEC["space"], "plan": "off"},
        "confirm": {"launches": 3},
        "runner": {"compile_cache": "cold", "cpu_placement": "off"},
    }
    r = _client(repo, KEY).post("/v1/studies", json=body, headers={"X-API-Key": KEY})
    assert r.status_code == 201, r.text
    spec = r.json()["spec"]
    assert spec["early_stop"] is True and spec["plan"] == "off"
    assert spec["workload_overrides"] == {"turns": 2, "think_time_s": 0.1}
    assert spec["confirm_launches"] == 3 and spec["compile_cache"] == "cold"
    assert spec["cpu_placement"] == "off"
    # Listed under its workload and under the load it measures, which the recommendations match.
    client = _client(repo, KEY)
    (listed,) = client.get("/v1/studies", params={"workload": "multi-turn"}).json()["items"]
    label = listed["workload_label"]
    assert label.startswith("multi-turn[") and "turns=2" in label
    assert client.get("/v1/studies", params={"workload": label}).json()["total"] == 1
    other = label.replace("turns=2", "turns=3")
    assert client.get("/v1/studies", params={"workload": other}).json()["total"] == 0
    bad = {**body, "runner": {"cpu_placement": "sideways"}}
    refused = _client(repo, KEY).post("/v1/studies", json=bad, headers={"X-API-Key": KEY})
    assert refused.status_code == 422 and "cpu_placement" in refused.text


def test_conversations_at_a_request_rate_are_queued_with_the_warning_of_their_failure(
    repo: Repository,
) -> None:
    """A request rate for the multi-turn preset was dropped: every trial measured the same
    closed loop of conversations. The worker refuses it; the API says so when it queues it
    (as for any workload its plans cannot draw, a rule between fields the schema cannot state
    exactly)."""
    body = {
        "study": {**SPEC["study"], "workload": "multi-turn"},
        "workload": {"rate_ladder": [1.0, 4.0]},
    }
    r = _client(repo, KEY).post("/v1/studies", json=body, headers={"X-API-Key": KEY})
    assert r.status_code == 201, r.text
    (warning,) = r.json()["warnings"]
    assert warning.startswith("the study will fail before any launch: workload 'multi-turn")
    assert "a request rate (request_rate, rate_ladder, --request-rate) would change" in warning


def test_a_study_with_nothing_to_search_is_queued_with_the_warning_of_its_failure(
    repo: Repository,
) -> None:
    """`tuner run` refuses a space that searches nothing (every trial would measure vLLM's
    defaults); the API queued it without a word, and the worker refused it later."""
    body = {**SPEC, "space": {"params": []}}
    r = _client(repo, KEY).post("/v1/studies", json=body, headers={"X-API-Key": KEY})
    assert r.status_code == 201, r.text
    (warning,) = r.json()["warnings"]
    assert warning.startswith("the study will fail before any launch: nothing to search")
    searched = {**SPEC, "study": {**SPEC["study"], "name": "some"}}
    r = _client(repo, KEY).post("/v1/studies", json=searched, headers={"X-API-Key": KEY})
    assert r.status_code == 201 and r.json()["warnings"] == [], r.text


def test_the_warning_of_a_study_with_nothing_to_search_says_what_to_change(
    repo: Repository,
) -> None:
    """The warning carried only the worker's message: the caller learnt the study would fail,
    not what to queue instead. It now ends, as the other warnings do, with what to change, in
    the API's terms (the worker's hint)."""
    body = {**SPEC, "study": {**SPEC["study"], "name": "idle"}, "space": {"params": []}}
    r = _client(repo, KEY).post("/v1/studies", json=body, headers={"X-API-Key": KEY})
    assert r.status_code == 201, r.text
    (warning,) = r.json()["warnings"]
    assert warning.endswith(
        "every trial would measure the defaults again; queue it again (POST /v1/studies, "
        "another study.name) with knobs to search in space.params or space.choices (an "
        "enqueue configuration can only set knobs the space searches); without space.params "
        "the study searches tuner's lever plan"
    ), warning


def test_a_shape_no_plan_can_draw_is_queued_with_the_warning_of_its_failure(
    repo: Repository,
) -> None:
    """A shared prefix past the prompt is a rule between two numbers the API's schema cannot
    state: refusing it (as `tuner run` does) made schema-valid bodies 422 under the fuzz."""
    body = {**SPEC, "workload": {"prompt_tokens": 64, "shared_prefix_tokens": 64}}
    r = _client(repo, KEY).post("/v1/studies", json=body, headers={"X-API-Key": KEY})
    assert r.status_code == 201, r.text
    (warning,) = r.json()["warnings"]
    assert "shared_prefix_tokens (64) must be >= 0 and below prompt_tokens (64)" in warning


def test_a_queued_study_is_withdrawn_and_a_taken_one_is_not(repo: Repository) -> None:
    """A study queued by mistake (its warning said it would fail) stayed queued for good: no
    endpoint withdrew it, and its name could not be queued again. DELETE withdraws it while no
    worker has taken it; a taken study stays, with what it measured."""
    client = _client(repo, KEY)
    auth = {"X-API-Key": KEY}
    assert client.post("/v1/studies", json=SPEC, headers=auth).status_code == 201
    assert client.delete("/v1/studies/queued-1").status_code == 401
    assert _client(repo, None).delete("/v1/studies/queued-1").status_code == 403
    gone = client.delete("/v1/studies/queued-1", headers=auth)
    assert gone.status_code == 204 and gone.content == b""
    assert repo.get_study("queued-1") is None
    assert client.get("/v1/studies/queued-1").status_code == 404
    assert client.delete("/v1/studies/queued-1", headers=auth).status_code == 404
    assert client.post("/v1/studies", json=SPEC, headers=auth).status_code == 201  # its name

    taken = repo.claim_queued_study(worker={"host": "h", "pid": 1})
    assert taken is not None and taken.name == "queued-1"
    kept = client.delete("/v1/studies/queued-1", headers=auth)
    assert kept.status_code == 409, kept.text
    assert "is running, not queued" in kept.json()["message"]
    assert "stop the worker" in kept.json()["hint"]
    assert repo.get_study("queued-1") is not None


def test_extra_args_the_worker_would_refuse_are_said_at_once(repo: Repository) -> None:
    """A study whose extra arguments repeat a knob it searches was queued without a word, and
    its worker refused it ("vLLM would get it twice"); one that set --port was queued and each
    of its trials waited out the start-up timeout."""
    client = TestClient(create_app(ApiSettings(storage=repo, api_key=KEY, allow_extra_args=True)))
    headers = {"X-API-Key": KEY}
    twice = {**SPEC, "runner": {"extra_args": ["--max-num-seqs", "4"]}}
    r = client.post("/v1/studies", json=twice, headers=headers)
    assert r.status_code == 201, r.text
    assert any("--max-num-seqs" in w and "twice" in w for w in r.json()["warnings"]), r.json()
    port = {
        **SPEC,
        "study": {**SPEC["study"], "name": "q3"},
        "runner": {"extra_args": ["--port", "1"]},
    }
    r = client.post("/v1/studies", json=port, headers=headers)
    assert r.status_code == 422 and "tuner picks a free port" in r.json()["message"], r.text


def test_a_gpu_named_in_another_case_is_queued_as_the_cli_takes_it(repo: Repository) -> None:
    """`--gpu H100` and a spec file's gpu = "H100" run the h100 profile; the API answered 422
    "Input should be 'a10g', ..., 'h100'" to the same study."""
    client = _client(repo, KEY)
    r = client.post("/v1/studies", json=_with("study", gpu="H100"), headers={"X-API-Key": KEY})
    assert r.status_code == 201, r.text
    row = repo.get_study("queued-1")
    assert row is not None and row.gpu == "h100"


def test_the_confirmations_budget_is_queued_and_one_launch_refused(repo: Repository) -> None:
    """`[confirm] max_launches`, which spec files and `tuner run` take, was refused ("Extra
    inputs are not permitted"); `launches = 1` was queued, its budget then dropped and its
    candidates never confirmed. The schema states both rules, as tuner's check refuses."""
    import jsonschema_rs  # schemathesis's, as the fuzz test validates with it

    from api import spec_body

    client = _client(repo, KEY)
    budget = _with("confirm", launches=3, max_launches=6)
    r = client.post("/v1/studies", json=budget, headers={"X-API-Key": KEY})
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["confirm_max_launches"] == 6
    schema = jsonschema_rs.validator_for(spec_body.openapi_schema())
    assert schema.is_valid(budget)
    for body, words in (
        (_with("confirm", launches=1), "one launch a candidate"),
        (_with("confirm", launches=4, max_launches=3), "max_launches (3) is below launches (4)"),
        (_with("confirm", max_launches=2), "max_launches (2) is below launches (3)"),
    ):
        refused = client.post("/v1/studies", json=body, headers={"X-API-Key": KEY})
        assert refused.status_code == 422 and words in refused.json()["message"], refused.text
        assert not schema.is_valid(body), body


def test_a_request_rate_beside_a_ladder_is_refused_as_the_schema_says(repo: Repository) -> None:
    """`request_rate` beside a ladder was queued and dropped: the ladder's points set the load."""
    import jsonschema_rs

    from api import spec_body

    schema = jsonschema_rs.validator_for(spec_body.openapi_schema())
    for ladder in ({"concurrency_ladder": [4, 8]}, {"rate_ladder": [1.0, 2.0]}):
        body = _with("workload", request_rate=1.0, **ladder)
        r = _client(repo, KEY).post("/v1/studies", json=body, headers={"X-API-Key": KEY})
        assert r.status_code == 422 and "request_rate" in r.json()["message"], r.text
        assert not schema.is_valid(body) and schema.is_valid(_with("workload", **ladder))
