"""Study spec files (tuner.spec.study): parsing, validation with line numbers, CLI overrides,
names."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tuner.catalog.gpus import get_gpu
from tuner.catalog.models import resolve_model
from tuner.compose import build_space, check_enqueued
from tuner.domain import Objective
from tuner.errors import SpecError, UsageError
from tuner.load.workloads import get_workload
from tuner.spec.study import (
    _SECTIONS,
    DEFAULT_SPEC_PATH,
    TRIALS_MAX,
    StudySpec,
    check_flags,
    load_spec,
)
from tuner.vllm.flags import shipped

REPO = Path(__file__).resolve().parents[2]
STUDY_FILES = sorted((REPO / "studies").glob("*.toml"))

FULL = """\
[study]
name = "full-study"
model = "qwen2.5-0.5b"
gpu = "h100"
workload = "rag"
objective = "latency"
trials = 12
slo = "ttft_p99=500ms,e2e_p99=10s"
seed = 7
notes = "every section"

[workload]
requests_per_window = 32
request_rate = 4
length_jitter = 0.1

[space]
params = ["attention_backend", "max_num_seqs"]
choices = { max_num_seqs = [16, 64, 256], attention_backend = "FLASHINFER" }
fixed = { enforce_eager = true }

[[enqueue]]
gpu_memory_utilization = 0.95

[[enqueue]]
max_num_seqs = 64
attention_backend = "FLASH_ATTN"

[runner]
startup_timeout_s = 300
extra_args = ["--dtype", "float32"]
vllm_python = "/opt/vllm/bin/python"
load_format = "auto"
"""


def write(tmp_path: Path, text: str, name: str = "study.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def spec_error(tmp_path: Path, text: str) -> SpecError:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.path == str(path)
    assert info.value.exit_code == 2  # bad input
    return info.value


def flag_error(tmp_path: Path, text: str) -> SpecError:
    """A knob that is no typed knob and no flag of the vLLM (here 0.32.0's shipped list) is
    refused when the study is prepared, naming the file and line."""
    path = write(tmp_path, text)
    spec = load_spec(path)  # a flag-shaped name may be a flag of the installed vLLM
    catalog = shipped("0.32.0")
    assert catalog is not None
    with pytest.raises(SpecError) as info:
        check_flags(spec, catalog)
    assert info.value.path == str(path)
    assert info.value.exit_code == 2
    assert "vLLM 0.32.0 has no flag" in info.value.message
    return info.value


# --- valid files ------------------------------------------------------------------------------


def test_a_full_spec_sets_every_field(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    spec = load_spec(path)
    assert spec == StudySpec(
        model="qwen2.5-0.5b",
        gpu="h100",
        workload="rag",
        objective=Objective.LATENCY,
        trials=12,
        slo="ttft_p99=500ms,e2e_p99=10s",
        seed=7,
        name="full-study",
        notes="every section",
        workload_overrides={"requests_per_window": 32, "request_rate": 4, "length_jitter": 0.1},
        params=("attention_backend", "max_num_seqs"),
        choices={"max_num_seqs": (16, 64, 256), "attention_backend": ("FLASHINFER",)},
        fixed={"enforce_eager": True},
        enqueue=(
            {"gpu_memory_utilization": 0.95},
            {"max_num_seqs": 64, "attention_backend": "FLASH_ATTN"},
        ),
        startup_timeout_s=300.0,
        extra_args=("--dtype", "float32"),
        vllm_python="/opt/vllm/bin/python",
        load_format="auto",
        source=str(path),
    )
    assert spec.study_name() == "full-study"
    assert spec.to_dict()["objective"] == "latency"


def test_an_empty_file_is_the_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    assert load_spec(path) == StudySpec(source=str(path))


def test_the_embedded_default_study() -> None:
    spec = load_spec(DEFAULT_SPEC_PATH)
    assert (spec.model, spec.gpu, spec.workload) == ("tiny-ernie", "cpu", "smoke")
    assert spec.objective is Objective.BALANCED
    assert spec.fixed == {"enforce_eager": True}
    assert spec.params is not None and "max_num_seqs" in spec.params


def test_the_repository_has_study_files() -> None:
    assert STUDY_FILES, f"no studies/*.toml under {REPO}"


@pytest.mark.parametrize("path", STUDY_FILES, ids=lambda p: p.name)
def test_every_study_file_parses_and_resolves(path: Path) -> None:
    spec = load_spec(path)
    # The names it uses exist, and its space is one tuner can build.
    model, gpu = resolve_model(spec.model), get_gpu(spec.gpu)
    workload = get_workload(spec.workload).replace(**spec.workload_overrides)
    # Flags beyond the nine knobs resolve against the flag list of the vLLM the study will meet
    # (the H200 machine's 0.26.0 for GPU profiles, the CPU build's 0.32.0 for cpu).
    flags = shipped("0.32.0" if gpu.is_cpu else "0.26.0")
    build_space(spec, model, gpu, workload, flags)  # and its [[enqueue]] entries hold
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", spec.study_name())


def test_the_spec_reference_in_the_docs_is_a_valid_spec(tmp_path: Path) -> None:
    """docs/specs.md's example names every key a spec file may hold, and parses."""
    text = (REPO / "docs" / "specs.md").read_text(encoding="utf-8")
    example = re.search(r"```toml\n(.*?)```", text, re.S)
    assert example is not None
    spec = load_spec(write(tmp_path, example.group(1)))
    assert spec.name == "ernie-h200-chat" and spec.confirm_max_launches == 6
    written = set(re.findall(r"^(\w+) =", example.group(1), re.M))
    sections = {"study", "space", "confirm", "runner"}
    allowed = set().union(*(v for k, v in _SECTIONS.items() if k in sections))
    assert allowed <= written, f"keys the docs leave out: {sorted(allowed - written)}"


def test_the_spec_reference_in_the_docs_builds_its_space(tmp_path: Path) -> None:
    """docs/specs.md's example enqueued gpu_memory_utilization = 0.95 beside params that do
    not search it: `tuner run` on it wrote the study, then stopped ("cannot be tried")."""
    text = (REPO / "docs" / "specs.md").read_text(encoding="utf-8")
    example = re.search(r"```toml\n(.*?)```", text, re.S)
    assert example is not None
    spec = load_spec(write(tmp_path, example.group(1)))
    model, gpu = resolve_model(spec.model), get_gpu(spec.gpu)
    workload = get_workload(spec.workload).replace(**spec.workload_overrides)
    space = build_space(spec, model, gpu, workload, shipped("0.26.0"), new_study=True)
    check_enqueued(spec, space)  # as `tuner run` does before it writes the study


def test_the_commands_the_spec_reference_names_run() -> None:
    """It named `tuner studies gpus`, which fails ("unexpected extra argument"): `tuner gpus`."""
    from typer.testing import CliRunner

    from tuner.cli.app import app

    text = (REPO / "docs" / "specs.md").read_text(encoding="utf-8")
    commands = re.findall(r"`tuner ([^`]*)`", text)
    assert commands
    for command in commands:
        done = CliRunner().invoke(app, command.split())
        assert done.exit_code == 0, f"tuner {command}: {done.output}"


# --- errors name the line ---------------------------------------------------------------------


def test_unknown_section(tmp_path: Path) -> None:
    error = spec_error(tmp_path, '[study]\nmodel = "tiny-ernie"\n\n[studdy]\ntrials = 2\n')
    assert error.line == 4
    assert "unknown section [studdy]" in error.message
    assert "study" in error.hint and "enqueue" in error.hint
    assert str(error).startswith(f"{error.path}:4: ")


def test_unknown_key_names_its_line_and_the_allowed_keys(tmp_path: Path) -> None:
    error = spec_error(tmp_path, '[study]\nmodel = "tiny-ernie"\ntrails = 3\n')
    assert error.line == 3
    assert "unknown key 'trails' in [study]" in error.message
    assert "trials" in error.hint


def test_unknown_key_that_is_valid_in_an_earlier_section(tmp_path: Path) -> None:
    # `seed` is fine in [study]; the error is the one under [runner].
    error = spec_error(
        tmp_path, "[study]\nseed = 1\n\n[runner]\nstartup_timeout_s = 60\nseed = 2\n"
    )
    assert error.line == 6
    assert "[runner]" in error.message


def test_unknown_knob_in_choices(tmp_path: Path) -> None:
    text = (
        '[study]\nmodel = "tiny-ernie"\n[space]\nchoices = { max_num_seqs = [8], max_seqs = [1] }\n'
    )
    error = flag_error(tmp_path, text)
    assert error.line == 4
    assert "no flag 'max_seqs' (in choices)" in error.message
    assert "--max-num-seqs" in error.hint


def test_unknown_knob_in_a_choices_table(tmp_path: Path) -> None:
    error = flag_error(tmp_path, "[space.choices]\nmax_num_seqs = [8]\nprefix_caching = [true]\n")
    assert error.line == 3
    assert "'prefix_caching'" in error.message


def test_unknown_knob_in_a_multiline_params_array(tmp_path: Path) -> None:
    text = '[space]\nparams = ["max_num_seqs",\n          "max_model_length"]\n'
    error = flag_error(tmp_path, text)
    assert error.line == 3
    assert "'max_model_length' (in params)" in error.message


def test_unknown_knob_in_enqueue(tmp_path: Path) -> None:
    text = """\
        [study]
        model = "tiny-ernie"

        [[enqueue]]
        max_num_seqs = 8

        [[enqueue]]
        max_num_seqs = 16
        kv_dtype = "fp8"
        """
    error = flag_error(tmp_path, text)
    assert error.line == 9
    assert "'kv_dtype' (in enqueue)" in error.message
    assert "--kv-cache-dtype" in error.hint


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('[study]\ntrials = "3"\n', 2, "trials must be an integer"),
        ("[study]\ntrials = true\n", 2, "trials must be an integer"),
        ("[study]\nmodel = 3\n", 2, "model must be a string"),
        ("[study]\nseed = 1.5\n", 2, "seed must be an integer"),
        ('[workload]\nconcurrency = "8"\n', 2, "concurrency must be an integer"),
        ('[workload]\nlength_jitter = "low"\n', 2, "length_jitter must be a number"),
        ('[runner]\nstartup_timeout_s = "slow"\n', 2, "startup_timeout_s must be a number"),
        ("[runner]\nstartup_timeout_s = -1\n", 2, "must be positive"),
        ("[runner]\nstartup_timeout_s = inf\n", 2, "must be positive and finite"),
        ("[runner]\nstartup_timeout_s = nan\n", 2, "must be positive and finite"),
        ('[runner]\nextra_args = "--dtype float32"\n', 2, "extra_args must be a list"),
        # vLLM took the later --port: every trial waited out its start-up timeout
        ('[runner]\nextra_args = ["--port", "8123"]\n', 2, "sets --port: tuner picks a free"),
        ('[runner]\nextra_args = ["--served-model-name=x"]\n', 2, "sets --served-model-name"),
        ('[runner]\nextra_args = ["--load-format", "dummy"]\n', 2, "use [runner] load_format"),
        # a traceback at the launch, the study left interrupted
        ('[runner]\nextra_args = ["--revision", "a\\u0000b"]\n', 2, "extra_args holds a NUL"),
        ('[runner]\nvllm_python = "py\\u0000"\n', 2, "vllm_python holds a NUL"),
        ('[space]\nparams = "max_num_seqs"\n', 2, "params must be a list"),
        ("[space]\nchoices = 3\n", 2, "choices must be a table"),
        ("study = 3\n", 1, "[study] must be a table"),
        ("enqueue = [1, 2]\n", 1, "array of tables"),
    ],
)
def test_wrong_types(tmp_path: Path, text: str, line: int, words: str) -> None:
    error = spec_error(tmp_path, text)
    assert words in error.message
    assert error.line == line


def test_an_integer_is_a_fine_float(tmp_path: Path) -> None:
    spec = load_spec(
        write(tmp_path, "[workload]\nrequest_rate = 2\n[runner]\nstartup_timeout_s = 60\n")
    )
    assert spec.workload_overrides == {"request_rate": 2}
    assert spec.startup_timeout_s == 60.0


def test_bad_toml_names_the_line(tmp_path: Path) -> None:
    error = spec_error(tmp_path, '[study]\nmodel = "tiny-ernie"\ngpu = "cpu\ntrials = 3\n')
    assert error.line == 3
    assert "not valid TOML" in error.message


def test_trials_must_be_positive(tmp_path: Path) -> None:
    error = spec_error(tmp_path, '[study]\nmodel = "tiny-ernie"\ntrials = 0\n')
    assert error.line == 3
    assert "at least 1" in error.message


@pytest.mark.parametrize("trials", [TRIALS_MAX + 1, 99999999999999999999])
def test_a_trial_count_past_the_bound_is_refused(tmp_path: Path, trials: int) -> None:
    """It crashed the study's insert with SQLAlchemy's OverflowError after the banner."""
    error = spec_error(tmp_path, f"[study]\ntrials = {trials}\n")
    assert error.line == 2 and f"trials must be at most {TRIALS_MAX}" in error.message
    with pytest.raises(UsageError, match=f"--trials must be at most {TRIALS_MAX}"):
        StudySpec().with_overrides(trials=trials)
    assert StudySpec().with_overrides(trials=TRIALS_MAX).trials == TRIALS_MAX


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_a_seed_the_sampler_cannot_take_is_refused(tmp_path: Path, seed: int) -> None:
    """numpy takes seeds 0 to 2^32 - 1; another crashed the study after its row was stored."""
    error = spec_error(tmp_path, f"[study]\nseed = {seed}\n")
    assert error.line == 2 and "study.seed must be 0 to 4294967295" in error.message
    with pytest.raises(UsageError, match="--seed must be 0 to 4294967295"):
        StudySpec().with_overrides(seed=seed)
    assert StudySpec().with_overrides(seed=2**32 - 1).seed == 2**32 - 1


def test_unknown_objective_lists_the_presets(tmp_path: Path) -> None:
    error = spec_error(tmp_path, '[study]\n\nobjective = "fastest"\n')
    assert error.line == 3
    assert "unknown objective 'fastest'" in error.message
    assert all(o.value in error.hint for o in Objective)


def test_bad_slo_names_the_line(tmp_path: Path) -> None:
    error = spec_error(tmp_path, '[study]\nmodel = "tiny-ernie"\nslo = "ttft_p99=fast"\n')
    assert error.line == 3
    assert "ms or s" in error.message


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read spec file"):
        load_spec(tmp_path / "nope.toml")


# --- CLI overrides and names ------------------------------------------------------------------


def test_with_overrides_none_means_not_given() -> None:
    spec = StudySpec(model="ernie-0.3b", gpu="h200", trials=16, slo="ttft_p99=1s", seed=3)
    same = spec.with_overrides(
        model=None, gpu=None, workload=None, trials=None, objective=None, slo=None, seed=None
    )
    assert same == spec


def test_with_overrides_replaces_what_is_given() -> None:
    spec = StudySpec(model="ernie-0.3b", gpu="h200", trials=16)
    changed = spec.with_overrides(gpu="a10g", trials=4, objective="memory", seed=0, name=None)
    assert (changed.model, changed.gpu, changed.trials) == ("ernie-0.3b", "a10g", 4)
    assert changed.objective is Objective.MEMORY
    assert changed.seed == 0  # 0 is a value, not "not given"
    assert spec.gpu == "h200"  # the original is unchanged


def test_with_overrides_rejects_an_unknown_objective() -> None:
    with pytest.raises(UsageError) as info:
        StudySpec(source="studies/x.toml").with_overrides(objective="fastest")
    # The bad value came from the command line, not from the spec file.
    assert "--objective" in str(info.value) and "studies/x.toml" not in str(info.value)
    assert "balanced" in info.value.hint


def test_study_name_default() -> None:
    assert StudySpec().study_name() == "tiny-ernie-cpu-smoke-balanced"
    spec = StudySpec(model="ernie-0.3b", gpu="h200", workload="chat", objective=Objective.LATENCY)
    assert spec.study_name() == "ernie-0.3b-h200-chat-latency"


def test_an_explicit_name_wins() -> None:
    assert StudySpec(name="mine").study_name() == "mine"


@pytest.mark.parametrize(
    ("model", "workload", "expected"),
    [
        ("Qwen/Qwen2.5-0.5B", "chat", "Qwen_Qwen2.5-0.5B-cpu-chat-balanced"),
        (
            "tiny-ernie",
            "trace:/tmp/my trace.jsonl",
            "tiny-ernie-cpu-trace_tmp_my_trace.jsonl-balanced",
        ),
        ("/models/my model", "smoke", "_models_my_model-cpu-smoke-balanced"),
    ],
)
def test_study_name_is_sanitised(model: str, workload: str, expected: str) -> None:
    assert StudySpec(model=model, workload=workload).study_name() == expected


def test_the_confirmations_launch_budget(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, "[confirm]\nlaunches = 3\nmax_launches = 8\n"))
    assert (spec.confirm_launches, spec.confirm_max_launches) == (3, 8)
    assert load_spec(write(tmp_path, "[confirm]\nlaunches = 3\n")).confirm_max_launches is None
    below = spec_error(tmp_path, "[confirm]\nlaunches = 4\nmax_launches = 3\n")
    assert "max_launches (3) is below launches (4)" in below.message and below.line == 3
    assert "raise max_launches" in below.hint
    assert StudySpec.from_dict(spec.to_dict()).confirm_max_launches == 8  # stored with a study
    # The same sequential design as `tuner compare --max-launches`, whose cap it lacked: at
    # 100 its bounds were simulated for a minute before the confirmation's first launch.
    above = spec_error(tmp_path, "[confirm]\nlaunches = 3\nmax_launches = 100\n")
    assert "max_launches (100) is above 40" in above.message and above.line == 3
    first = spec_error(tmp_path, "[confirm]\nlaunches = 100\n")  # its first look alone
    assert "launches (100) is above 40" in first.message and first.line == 2


def test_a_budget_below_the_first_look_names_where_each_came_from(tmp_path: Path) -> None:
    """A spec's `max_launches = 6` under `--confirm-launches 8` was reported as
    `--confirm-max-launches 6`, an option the user never gave."""
    from typer.testing import CliRunner

    from tuner.cli.app import app

    path = write(tmp_path, '[study]\nmodel = "tiny-ernie"\n\n[confirm]\nmax_launches = 6\n')
    done = CliRunner().invoke(app, ["run", str(path), "--confirm-launches", "8"])
    assert isinstance(done.exception, UsageError), done.output
    said = done.exception.message
    assert f"[confirm] max_launches = 6 in {path} is below the confirmation's first look" in said
    done = CliRunner().invoke(app, ["run", "--confirm-launches", "100"])
    assert isinstance(done.exception, UsageError), done.output
    assert "--confirm-launches 100: at most 40 launches" in done.exception.message


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("[workload]\nrequests_per_window = -5\n", 2, "requests_per_window must be >= 1"),
        ("[workload]\nwindows = 1\nprompt_tokens = -3\n", 3, "below prompt_tokens (-3)"),
        # a traceback from numpy after the study's header
        ("[workload]\nwindows = 1\nseed = -1\n", 3, "seed must be 0 to 4294967295"),
        # a window no one waits for: the API queued 2,147,483,647 requests a window
        ("[workload]\nrequests_per_window = 2000000\n", 2, "a window, more than 1,000,000"),
    ],
)
def test_a_workload_override_a_load_cannot_take_is_reported_at_its_line(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    """docs/specs.md: a mistake is reported with the file's name and line. The workload's own
    checks ran after the file was read and named neither; a prompt shape was refused only when
    the first plan was drawn, after the study's header."""
    from tuner.compose import resolve_workload

    spec = load_spec(write(tmp_path, text))
    with pytest.raises(SpecError) as caught:
        resolve_workload(spec)
    assert caught.value.line == line and words in caught.value.message


def test_a_request_rate_for_conversations_is_refused_at_its_line(tmp_path: Path) -> None:
    """A spec's rate_ladder on the multi-turn preset was silently dropped: every point sent
    the same closed burst of conversations, labelled with a rate it never had."""
    from tuner.compose import resolve_workload

    text = '[study]\nworkload = "multi-turn"\n\n[workload]\nwindows = 3\nrate_ladder = [1.0, 4.0]\n'
    with pytest.raises(SpecError) as caught:
        resolve_workload(load_spec(write(tmp_path, text)))
    assert caught.value.line == 6 and "a request rate" in caught.value.message


def test_an_infinite_request_rate_is_refused_before_the_study(tmp_path: Path) -> None:
    """rate_ladder = [inf, 2.0] passed every check; the study measured four windows, then
    stopped mid-trial ("request_rate must be > 0, got inf") and was left interrupted."""
    from tuner.spec.configs import parse_workload_overrides

    refused = spec_error(tmp_path, "[workload]\nrate_ladder = [inf, 2.0]\n")
    assert "positive numbers" in refused.message and refused.line == 2
    from tuner.compose import resolve_workload  # a single rate: at its line too

    spec = load_spec(write(tmp_path, "[workload]\nrequest_rate = inf\n"))
    with pytest.raises(SpecError) as one:
        resolve_workload(spec)
    assert "request_rate must be > 0 and finite" in one.value.message and one.value.line == 2
    with pytest.raises((SpecError, UsageError)):
        parse_workload_overrides("rate_ladder=inf;2")


def test_a_ladder_can_be_written_on_the_command_line() -> None:
    """--workload-set offered concurrency_ladder and rate_ladder among its fields, and read
    none of `[4]`, `[2,4]` (its commas part fields) or `2`."""
    from tuner.load.workloads import get_workload
    from tuner.spec.configs import parse_workload_overrides

    sets = parse_workload_overrides("concurrency_ladder=4;16;64,windows=2")
    assert sets == {"concurrency_ladder": (4, 16, 64), "windows": 2}
    assert get_workload("chat", parse_workload_overrides("rate_ladder=2;4.5")).rate_ladder == (
        2.0,
        4.5,
    )
    assert parse_workload_overrides("concurrency_ladder=8") == {"concurrency_ladder": (8,)}
    with pytest.raises((SpecError, UsageError)) as refused:
        parse_workload_overrides("concurrency_ladder=4;x")
    assert "concurrency_ladder=4;16;64" in str(refused.value)


def test_a_gpu_named_in_another_case_is_one_study(tmp_path: Path) -> None:
    """`gpu = "CPU"` ran on the cpu profile but made the study tiny-ernie-CPU-smoke-balanced,
    which `--gpu cpu --resume` then could not find (and refused as another GPU)."""
    spec = load_spec(write(tmp_path, '[study]\nmodel = "tiny-ernie"\ngpu = "CPU"\n'))
    assert spec.gpu == "cpu" and spec.study_name() == "tiny-ernie-cpu-smoke-balanced"
    assert StudySpec().with_overrides(gpu=" H200 ").gpu == "h200"
    assert StudySpec().with_overrides(gpu="nosuch").gpu == "nosuch"  # refused where prepared


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        # The rate was dropped: every point a closed loop of the ladder's streams.
        ("[workload]\nrequest_rate = 1.0\nconcurrency_ladder = [4, 8]\n", 3, "request_rate"),
        # The rate was dropped: every point at the ladder's own rate.
        ("[workload]\nrequest_rate = 1.0\nrate_ladder = [1.0, 2.0]\n", 2, "beside rate_ladder"),
        # Two points were measured, labelled a ladder of three; the API refused the same.
        ("[workload]\nconcurrency_ladder = [4, 4, 8]\n", 2, "gives 4 twice"),
        ("[workload]\nrate_ladder = [2.0, 1.0, 2.0]\n", 2, "gives 2 twice"),
        # Refused only when the first plan was drawn, after the study's header.
        ('[study]\nworkload = "multi-turn"\n[workload]\nthink_time_s = -1.0\n', 4, "think_time_s"),
        ('[study]\nworkload = "multi-turn"\n[workload]\nthink_time_s = nan\n', 4, "got nan"),
        ('[study]\nworkload = "multi-turn"\n[workload]\nwindows = 1\nturns = 0\n', 5, "turns"),
    ],
)
def test_workload_settings_a_study_would_drop_or_fail_on_are_refused_at_their_line(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    from tuner.compose import resolve_workload

    spec = load_spec(write(tmp_path, text))
    with pytest.raises(SpecError) as caught:
        resolve_workload(spec)
    assert caught.value.line == line and words in caught.value.message, caught.value


def test_a_confirmation_of_one_launch_is_refused_on_every_surface(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`launches = 1` was taken: its max_launches budget was dropped, and `tuner best` then
    recommended vLLM's defaults for "not enough launches" on every metric (the API: see
    tests/integration/test_api_writes.py)."""
    from typer.testing import CliRunner

    import tuner.compose
    from tuner.cli.app import app

    def prepare(*_: object, **__: object) -> None:
        raise AssertionError("a study was prepared")

    monkeypatch.setattr(tuner.compose, "prepare", prepare)

    one = spec_error(tmp_path, "[confirm]\nlaunches = 1\nmax_launches = 6\n")
    assert one.line == 2 and "at least 2" in one.message and "or launches = 0" in one.hint
    assert load_spec(write(tmp_path, "[confirm]\nlaunches = 2\n")).confirm_launches == 2
    assert load_spec(write(tmp_path, "[confirm]\nlaunches = 0\n")).confirm_launches == 0
    done = CliRunner().invoke(app, ["run", "--confirm-launches", "1"])
    assert isinstance(done.exception, UsageError), done.output
    assert "--confirm-launches 1: one launch a candidate" in done.exception.message
    assert "or --confirm-launches 0 to turn" in (done.exception.hint or "")
