"""What a resume runs (tuner.spec.resume): the stored spec, with what was given checked
against it field by field."""

from __future__ import annotations

import dataclasses
import json
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tuner.db import codec
from tuner.db.migrate import upgrade
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import Objective
from tuner.errors import SpecError, UsageError
from tuner.spec.resume import FINGERPRINT, check_same_requests, resumed_spec, stored_spec
from tuner.spec.study import TRIALS_MAX, StudySpec, load_spec

CREATED = StudySpec(
    name="chat-study",
    model="tiny-ernie",
    gpu="cpu",
    workload="chat",
    objective=Objective.THROUGHPUT,
    trials=2,
    slo="e2e_p99=10s",
    workload_overrides={"requests_per_window": 8, "concurrency_ladder": (2, 4)},
    params=("max_num_seqs",),
    choices={"max_num_seqs": (4, 16)},
    fixed={"enforce_eager": False},
    confirm_launches=2,
    confirm_top=1,
    extra_args=("--dtype", "float32"),
    source="spec.toml",
)


def stored() -> StudySpec:
    """CREATED as the database gives it back (JSON: tuples as lists, the enum as its value)."""
    return stored_spec(codec.encode(CREATED.to_dict()), "chat-study")


def test_the_stored_spec_reads_back_as_it_was_created() -> None:
    assert stored() == CREATED
    assert stored_spec(codec.encode({**CREATED.to_dict(), "name": None}), "x").name == "x"


def test_options_not_given_keep_the_stored_values() -> None:
    # What `tuner run --study NAME --resume` alone gives: no option, so nothing compared.
    demo = StudySpec()  # the embedded demo's workload (smoke) and its 3 trials
    assert resumed_spec(stored(), demo, changed=set()) == stored()
    again = resumed_spec(stored(), stored().with_overrides(workload="chat"), changed={"workload"})
    assert again == stored()


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("workload", "smoke", "--workload chat; this resume asks for smoke"),
        ("model", "ernie-0.3b", "--model tiny-ernie"),
        ("objective", "latency", "--objective throughput"),
        ("slo", "e2e_p99=5s", "--slo e2e_p99=10s"),
        ("confirm_launches", 3, "--confirm-launches 2"),
        ("seed", 7, "--seed 0"),
        ("search", {"stream_interval": (1, 8)}, "--search none"),
    ],
)
def test_an_option_that_contradicts_the_study_is_refused_naming_the_stored_value(
    option: str, value: object, words: str
) -> None:
    with pytest.raises(UsageError) as refused:
        resumed_spec(stored(), stored().with_overrides(**{option: value}), changed={option})
    assert words in refused.value.message
    assert "chat-study" in refused.value.message and "leave" in refused.value.hint


def test_a_spec_file_is_compared_whole() -> None:
    file = dataclasses.replace(CREATED, fixed={"enforce_eager": True}, source="other.toml")
    with pytest.raises(UsageError, match=r"\[space\] fixed"):
        resumed_spec(stored(), file)
    same = resumed_spec(stored(), dataclasses.replace(CREATED, source="moved/spec.toml"))
    assert same.source == "moved/spec.toml" and same.fixed == CREATED.fixed


def test_more_trials_are_taken_fewer_refused() -> None:
    more = resumed_spec(stored(), stored().with_overrides(trials=5), changed={"trials"})
    assert more.trials == 5 and more.workload == "chat"
    with pytest.raises(UsageError, match="--trials 2; this resume asks for 1"):
        resumed_spec(stored(), stored().with_overrides(trials=1), changed={"trials"})


def test_how_servers_start_may_change_and_an_equal_slo_is_the_same() -> None:
    given = stored().with_overrides(
        vllm_python="/opt/vllm/bin/python", slo="e2e_p99=10000ms", startup_timeout_s=60.0
    )
    resumed = resumed_spec(stored(), given)
    assert resumed.vllm_python == "/opt/vllm/bin/python" and resumed.startup_timeout_s == 60.0
    assert resumed.slo == "e2e_p99=10s"  # the stored spelling is kept


BIG = TRIALS_MAX + 5_000  # a study created before tuner bounded the trials
BIG_SPEC = f"""
[study]
name = "big-study"
model = "tiny-ernie"
gpu = "cpu"
workload = "chat"
trials = {BIG}
"""


def test_a_study_past_the_trials_bound_resumes_from_its_own_spec_file(tmp_path: Path) -> None:
    file = tmp_path / "spec.toml"
    file.write_text(BIG_SPEC)
    with pytest.raises(SpecError, match=f"study.trials must be at most {TRIALS_MAX}"):
        load_spec(file)  # a new study from it is still refused
    created = load_spec(file, resume=True)
    big = stored_spec(codec.encode(created.to_dict()), "big-study")
    assert resumed_spec(big, load_spec(file, resume=True)).trials == BIG
    assert resumed_spec(big, big.with_overrides(resume=True, trials=BIG), changed={"trials"}) == big
    with pytest.raises(UsageError, match=f"--trials {BIG}; this resume asks for {BIG + 1}"):
        resumed_spec(big, big.with_overrides(resume=True, trials=BIG + 1), changed={"trials"})
    # A study within the bound grows to it, not past it.
    with pytest.raises(UsageError, match=f"a study runs {TRIALS_MAX} trials at most"):
        resumed_spec(stored(), stored().with_overrides(resume=True, trials=BIG), changed={"trials"})
    with pytest.raises(UsageError, match=f"--trials must be at most {TRIALS_MAX}"):
        stored().with_overrides(trials=BIG)


def test_tuner_run_file_resume_continues_a_study_past_the_trials_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    import tuner.compose
    from tuner.cli.app import app

    file = tmp_path / "spec.toml"
    file.write_text(BIG_SPEC)
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    upgrade(url)
    created = load_spec(file, resume=True)
    Repository(make_engine(url)).create_study(
        "big-study", "big-study", "tiny-ernie", None, "cpu", "chat", "balanced", {},
        codec.encode(created.to_dict()), False, None, BIG,
    )  # fmt: skip
    prepared: list[StudySpec] = []

    def prepare(spec: StudySpec, *_: object, **__: object) -> None:
        prepared.append(spec)
        raise UsageError("stop here: the resume was let through")

    monkeypatch.setattr(tuner.compose, "prepare", prepare)
    run = CliRunner().invoke(app, ["run", str(file), "--resume", "--storage", url])
    assert "the resume was let through" in str(run.exception), run.exception
    assert [s.trials for s in prepared] == [BIG]


def test_a_trace_study_measured_at_the_old_cap_in_flight_resumes_at_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace replayed at its own times capped 64 requests in flight unless its spec gave a
    cap, and caps none now: a study measured at 64 was refused on resume as measured on other
    requests (cap 64 then, 100 now). It keeps its cap, from its stored spec (`tuner run --study
    NAME --resume`, a worker) and from its spec file; a study measured without one keeps none."""
    from typer.testing import CliRunner

    import tuner.compose
    from tuner.cli.app import app
    from tuner.compose import resolve_workload
    from tuner.load import fingerprint

    trace = tmp_path / "timed.jsonl"
    rows = [{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": i} for i in range(100)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    file = tmp_path / "spec.toml"
    file.write_text(f'[study]\nname = "timed"\nmodel = "tiny-ernie"\ngpu = "cpu"\n'
                    f'workload = "tuner:{trace}"\n')  # fmt: skip
    spec = load_spec(file)
    then: dict[int, dict[str, object]] = {}  # the fingerprint stored, by the cap measured at
    for cap, given in ((64, {"concurrency": 64}), (100, {})):  # the old default, the new one
        measured = spec.with_overrides(workload_overrides=given)
        then[cap] = fingerprint(resolve_workload(measured)).as_dict()
        row = codec.encode({**spec.to_dict(), FINGERPRINT: then[cap]})
        resumed = resolve_workload(stored_spec(row, "timed"))
        check_same_requests(then[cap], resumed, "timed")
        assert resumed.concurrency == cap
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    upgrade(url)
    Repository(make_engine(url)).create_study(
        "timed", "timed", "tiny-ernie", None, "cpu", spec.workload, "balanced", {},
        codec.encode({**spec.to_dict(), FINGERPRINT: then[64]}),
        False, None, spec.trials,
    )  # fmt: skip
    prepared: list[StudySpec] = []

    def prepare(asked: StudySpec, *_: object, **__: object) -> None:
        prepared.append(asked)
        raise UsageError("stop here: the resume was let through")

    monkeypatch.setattr(tuner.compose, "prepare", prepare)
    run = CliRunner().invoke(app, ["run", str(file), "--resume", "--storage", url])
    assert "the resume was let through" in str(run.exception), run.exception
    assert [resolve_workload(s).concurrency for s in prepared] == [64]


def test_a_trace_study_whose_first_window_starts_at_once_keeps_its_old_cap(tmp_path: Path) -> None:
    """The first window's rows all at t=0 fingerprint a closed loop, though the whole selection
    spans time and was capped at 64 in flight: kept_cap passed it by, and its resume was
    refused (cap 64 then, 8 now)."""
    from tuner.compose import resolve_workload
    from tuner.load import fingerprint

    trace = tmp_path / "burst.jsonl"
    rows = [{"prompt_tokens": 8, "output_tokens": 4, "arrival_s": 0 if i < 10 else i}
            for i in range(50)]  # fmt: skip
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = StudySpec(model="tiny-ernie", gpu="cpu", workload=f"tuner:{trace}",
                     workload_overrides={"requests_per_window": 8})  # fmt: skip
    old = fingerprint(resolve_workload(spec).replace(concurrency=64)).as_dict()
    assert old["arrival"] == "closed loop" and old["concurrency"] == 64
    resumed = resolve_workload(stored_spec(codec.encode({**spec.to_dict(), FINGERPRINT: old}), "b"))
    check_same_requests(old, resumed, "b")
    assert resumed.concurrency == 64


def test_only_a_sharegpt_refusal_says_a_file_is_now_counted_otherwise() -> None:
    """The hint that an unchanged file is read otherwise since the BOS count holds for
    ShareGPT alone; it was added to every refusal, a preset's included."""
    from tuner.load import fingerprint
    from tuner.load.workloads import get_workload

    chat = get_workload("chat")
    stored = {**fingerprint(chat).as_dict(), "requests": 1}
    with pytest.raises(UsageError) as refused:
        check_same_requests(stored, chat, "s")
    assert "ShareGPT" not in refused.value.hint


def test_the_refusals_hint_covers_a_spec_file_that_leaves_the_option_out() -> None:
    """A spec file without its `seed = 3` line asks for the default seed 0: the hint said
    "leave --seed out (of the command line and of the spec file)", which it already was."""
    created = stored().with_overrides(seed=3)
    with pytest.raises(UsageError) as refused:
        resumed_spec(created, created.with_overrides(seed=0), changed={"seed"})
    hint = refused.value.hint
    assert "`tuner run --study chat-study --resume` reads its stored settings" in hint
    assert "give --seed 3" in hint and "leaves it out asks for its default" in hint


@pytest.mark.parametrize(
    ("stored", "given", "again"),
    [  # each hint was a command that did not parse: `--gpu-price none`, `--early-stop true`
        ({}, {"gpu_price": 2.0}, None),
        ({"early_stop": True}, {"early_stop": False}, "or give --early-stop ("),
        ({"early_stop": False}, {"early_stop": True}, "or give --no-early-stop ("),
        ({"emulate": False}, {"emulate": True}, None),
        ({"gpu_price": 2.5}, {"gpu_price": 3.0}, "or give --gpu-price 2.5 ("),
        # "or give --slo the workload's recommended SLO"
        ({"slo": ""}, {"slo": "ttft_p99=1s"}, None),
    ],
)
def test_a_refused_resume_hints_only_commands_that_parse(
    stored: dict[str, Any], given: dict[str, Any], again: str | None
) -> None:
    from tuner.spec import resumed_spec

    with pytest.raises(UsageError) as refused:
        resumed_spec(StudySpec(**stored), StudySpec(**given), changed=set(given))
    hint = refused.value.hint or ""
    assert hint.startswith("leave --") and "start a new study" in hint
    if again is None:
        assert " or give " not in hint, hint
    else:
        assert again in hint, hint


def test_a_study_named_before_gpu_names_were_the_profile_s_resumes(tmp_path: Path) -> None:
    """A study created with `--gpu H100` (tiny-ernie-H100-smoke-balanced, its spec's gpu
    "H100") was not found by `--gpu H100 --resume` once GPU names became the profile's (h100),
    and `--study` it was refused as created on another GPU."""
    from tuner.cli.study import _resumed

    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url)
    repo = Repository(make_engine(url))
    old = dataclasses.replace(StudySpec(), gpu="H100")
    name = old.study_name()
    assert name == "tiny-ernie-H100-smoke-balanced"
    repo.create_study(name=name, optuna_study_name=name, model=old.model, model_source=None,
                      gpu="H100", workload=old.workload, objective=old.objective.value, slo={},
                      spec=old.to_dict(), emulated=False, vllm_version="0.32.0",
                      n_trials_requested=old.trials, status="interrupted")  # fmt: skip
    given = StudySpec().with_overrides(gpu="H100")
    assert given.gpu == "h100"
    spec = _resumed(given, url, {"gpu": "H100"}, from_file=False)
    assert spec.study_name() == name
    by_name = StudySpec(name=name).with_overrides(gpu="H100")
    assert _resumed(by_name, url, {"gpu": "H100", "name": name}, from_file=False).name == name


def test_a_refused_resume_writes_the_stored_value_as_its_surface_reads_it() -> None:
    """Created with `--search stream_interval=1,8` and resumed with `=1,4`, the hint said
    `give --search {"stream_interval": [1, 8]}`, which --search cannot read; a spec file's
    `[space] fixed` was given back as JSON, not TOML."""
    from tuner.spec import parse_search

    json_valued = '{"method":"ngram","num_speculative_tokens":3}'
    searched = StudySpec(
        name="s", search={"stream_interval": (1, 8), "speculative_config": (json_valued,)}
    )
    asked = searched.with_overrides(search={"stream_interval": (1, 4)})
    with pytest.raises(UsageError) as refused:
        resumed_spec(searched, asked, changed={"search"})
    assert "was created with --search " in refused.value.message
    hint = refused.value.hint or ""
    assert "--search stream_interval=1,8" in hint and '{"stream_interval"' not in hint
    # What the hint gives, pasted: the study's own search, which resumes.
    given = hint.split("or give ", 1)[1].split(" (a spec file", 1)[0]
    words = shlex.split(given)
    items = [words[i + 1] for i, word in enumerate(words) if word == "--search"]
    again = searched.with_overrides(search=parse_search(items))
    assert resumed_spec(searched, again, changed={"search"}) == searched

    held = dataclasses.replace(CREATED, fixed={"enforce_eager": True})
    with pytest.raises(UsageError) as refused:
        resumed_spec(held, dataclasses.replace(CREATED, fixed={}))  # a file without it
    assert "[space] fixed = { enforce_eager = true }" in refused.value.message
    hint = refused.value.hint or ""
    assert "`fixed = { enforce_eager = true }` under [space]" in hint
    assert "leave [space] fixed out" not in hint and "--study chat-study --resume" in hint
    written = hint.split("`")[3]  # the TOML the hint gives, read as a spec file reads it
    assert tomllib.loads(written) == {"fixed": {"enforce_eager": True}}


def test_a_spec_file_that_leaves_a_setting_out_is_not_told_to_leave_it_out() -> None:
    created = stored().with_overrides(seed=3)
    file = dataclasses.replace(CREATED, seed=0, source="spec.toml")  # no `seed` line
    with pytest.raises(UsageError) as refused:
        resumed_spec(created, file)
    hint = refused.value.hint or ""
    assert hint.startswith("resume it by name") and "give --seed 3" in hint
    other = dataclasses.replace(file, seed=5)  # `seed = 5`: leaving it out is a way back
    with pytest.raises(UsageError) as refused:
        resumed_spec(created, other)
    assert (refused.value.hint or "").startswith("leave --seed out")


def test_a_study_stored_with_settings_now_refused_resumes_as_it_was_measured() -> None:
    """[workload] settings a tuner now refuses (a request rate beside a ladder, a rung given
    twice, a replay option a trace has no use for) were taken and ignored before: a study
    created so could no longer be resumed, nor a queued one run, by any route."""
    from tuner.compose import resolve_workload

    old = {
        **CREATED.to_dict(),
        "workload": "smoke",
        "workload_overrides": {"concurrency_ladder": [2, 2, 4], "request_rate": 2.0},
    }
    spec = stored_spec(old, "old")
    assert spec.workload_overrides == {"concurrency_ladder": (2, 4)}
    assert [p.concurrency for p in resolve_workload(spec).load_points()] == [2, 4]
    trace = {**old, "workload": "sharegpt:x.json", "workload_overrides": {"speed": 2.0}}
    assert stored_spec(trace, "old").workload_overrides == {}
    timed = {**old, "workload": "mooncake:x.jsonl", "workload_overrides": {"speed": 2.0}}
    assert stored_spec(timed, "old").workload_overrides == {"speed": 2.0}


def test_a_study_of_a_directory_stored_as_given_resumes_at_the_directory_measured(
    tmp_path: Path,
) -> None:
    """A tuner before model directories were stored whole kept `./m`: a resume elsewhere read
    another `m`, and the hint to give the measured directory was refused in turn."""
    measured = tmp_path / "a dir" / "m"
    old = {**CREATED.to_dict(), "model": "./m"}
    assert stored_spec(old, "old", str(measured)).model == str(measured)
    assert stored_spec(old, "old", "/elsewhere/other").model == "./m"  # not its directory
    with pytest.raises(UsageError) as refused:
        resumed_spec(stored_spec(old, "old", str(measured)), CREATED, changed={"model"})
    assert f"give --model {shlex.quote(str(measured))}" in refused.value.hint


def test_a_study_of_one_confirmation_launch_is_pointed_only_at_its_resume_by_name() -> None:
    """A study created with `[confirm] launches = 1` (taken then) was told to give
    --confirm-launches 1, which is refused now: the hints went round in a circle."""
    old = dataclasses.replace(CREATED, confirm_launches=1)
    with pytest.raises(UsageError) as refused:
        resumed_spec(old, CREATED, changed={"confirm_launches"})
    assert "--confirm-launches 1" not in refused.value.hint
    assert "--study chat-study --resume" in refused.value.hint


def test_a_confirmation_budget_below_two_is_refused_in_a_spec_file_as_elsewhere(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text("[confirm]\nlaunches = 0\nmax_launches = 1\n")
    with pytest.raises(SpecError, match="2 or more"):
        load_spec(spec)
