"""The real ``tuner`` command on bad input: exit 2, a message that says what is wrong and what is
allowed, and nothing written (no database, no model cache, no logs).

Each case runs ``python -m tuner`` in its own empty directory, with the database and
TUNER_HOME pointed inside it, so "nothing written" means "the directory holds only what the test
put there". The processes are started all at once (each spends about a second importing), so the
whole file takes a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tuner.catalog.gpus import get_gpu, match_detected
from tuner.telemetry.nvml import detect_gpus

REPO = Path(__file__).resolve().parents[2]
DB_FILE = "tuner.db"


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    files: Mapping[str, str] = field(default_factory=dict)  # written into the directory first
    database: bool = False  # create an empty, up-to-date database first


@dataclass(frozen=True)
class Outcome:
    code: int
    output: str  # stdout and stderr, whitespace collapsed: rich wraps lines at the width
    seconds: float
    workdir: Path

    def leftovers(self, case: Case) -> list[str]:
        """What the command left in its directory besides the test's own files."""
        names = {p.name for p in self.workdir.iterdir()} - set(case.files)
        if case.database:  # with its SQLite WAL files, which a reader may leave behind
            names = {n for n in names if not n.startswith(DB_FILE)}
        return sorted(names)


TYPO_SPEC = '[study]\nmodel = "tiny-ernie"\ngpu = "cpu"\ntrails = 3\n'
FLASH_ON_CPU = (
    '[study]\nmodel = "tiny-ernie"\ngpu = "cpu"\n\n[[enqueue]]\nattention_backend = "FLASH_ATTN"\n'
)
ENQUEUE_OUTSIDE_THE_SPACE = (
    '[study]\nmodel = "tiny-ernie"\ngpu = "cpu"\n\n[space]\nparams = ["max_num_seqs"]\n\n'
    "[[enqueue]]\nenable_prefix_caching = true\n"
)
FIXED_PAST_THE_MODEL = (
    '[study]\nmodel = "tiny-ernie"\ngpu = "cpu"\n\n[space]\nfixed = { max_model_len = 999999 }\n'
)

# name: (case, words the output must contain: what is wrong, then what is allowed or to do)
BAD_INPUT: dict[str, tuple[Case, tuple[str, ...]]] = {
    "unknown-model": (
        Case(("run", "--model", "ernie-9b")),
        ("unknown model 'ernie-9b'", "ernie-0.3b, tiny-ernie"),
    ),
    "unknown-gpu": (
        Case(("run", "--gpu", "h900")),
        ("unknown GPU profile 'h900'", "a10g", "h200", "cpu"),
    ),
    "unknown-workload": (
        Case(("run", "--workload", "chatty")),
        (
            "unknown workload 'chatty'",
            "chat, chat-heavy, code, multi-turn, rag",
            "throughput-256",
            "custom:FILE (a trace",
        ),
    ),
    "unknown-objective": (
        Case(("run", "--objective", "fastest")),
        ("--objective: unknown objective 'fastest'", "'balanced', 'throughput'"),
    ),
    "malformed-slo": (
        Case(("run", "--slo", "ttft_p99=fast")),
        ("bad SLO value in 'ttft_p99=fast'", "ms or s", "ttft_p99=500ms"),
    ),
    "spec-typo": (
        Case(("run", "study.toml"), {"study.toml": TYPO_SPEC}),
        ("study.toml:4: unknown key 'trails' in [study]", "'trials'"),
    ),
    "impossible-enqueue": (
        Case(("run", "study.toml"), {"study.toml": FLASH_ON_CPU}),
        ("FLASH_ATTN is not available on CPU", "CPU_ATTN", "fix the [[enqueue]] entry"),
    ),
    # It was refused once the study was written (left queued, for a `tuner worker` to take).
    "enqueue-outside-the-space": (
        Case(("run", "study.toml"), {"study.toml": ENQUEUE_OUTSIDE_THE_SPACE}),
        (
            "enqueued configuration {'enable_prefix_caching': True}: enable_prefix_caching=True "
            "cannot be tried: the study does not search enable_prefix_caching",
            "add enable_prefix_caching to params",
            "or drop that [[enqueue]] entry from study.toml",
        ),
    ),
    # It launched the baseline, which failed as kv_cache_insufficient, then pruned the rest.
    "impossible-fixed": (
        Case(("run", "study.toml"), {"study.toml": FIXED_PAST_THE_MODEL}),
        (
            "vLLM's defaults with the study's fixed values cannot run here",
            "exceeds the model's 4096 positions",
            "change the fixed values ([space] fixed) or the workload, study.toml",
        ),
    ),
    "unknown-option": (
        Case(("run", "--bogus")),
        ("No such option: --bogus", "--help"),
    ),
    "bad-option-value": (
        Case(("run", "--trials", "0")),
        ("Invalid value for '--trials'", "greater than or equal to 1"),
    ),
    "trials-without-database": (
        Case(("trials", "nosuchstudy")),
        ("no study named 'nosuchstudy'", "does not exist", "tuner run"),
    ),
    "trials-unknown-study": (
        Case(("trials", "nosuchstudy"), database=True),
        ("no study named 'nosuchstudy'", "tuner studies"),
    ),
    "calibrate-config": (  # it said --a, an option of compare, not calibrate
        Case(("calibrate", "--model", "tiny-ernie", "--gpu", "cpu", "--config", "max_num_seqs")),
        ("--config: cannot read 'max_num_seqs'", "write --config knob=value"),
    ),
    "calibrate-config-that-cannot-run": (
        Case(
            (
                "calibrate",
                "--model",
                "tiny-ernie",
                "--gpu",
                "cpu",
                "--config",
                "attention_backend=FLASH_ATTN",
            )
        ),
        ("--config (attention_backend=FLASH_ATTN", "not available on CPU", "change --config"),
    ),
    "trials-unknown-study-elsewhere": (  # the hint read the default database
        Case(("trials", "nosuchstudy", "--storage", f"sqlite:///{DB_FILE}"), database=True),
        ("no study named 'nosuchstudy'", f"tuner studies --storage sqlite:///{DB_FILE}"),
    ),
    "worker-joins-on-sqlite": (  # it created tuner.db first
        Case(("worker", "--study", "nosuch")),
        ("needs a database server",),
    ),
    "resume-unknown-study": (
        Case(("run", "--study", "nosuch", "--resume"), database=True),
        ("no study named 'nosuch' to resume", "tuner studies"),
    ),
    "studies-in-an-empty-file": (  # `touch tuner.db`: answered as a missing file is
        Case(("studies",), files={DB_FILE: ""}),
        ("no studies: database", "tuner.db is empty", "tuner run"),
    ),
    "trials-in-an-empty-file": (
        Case(("trials", "nosuchstudy"), files={DB_FILE: ""}),
        ("no study named 'nosuchstudy'", "tuner.db is empty", "tuner run"),
    ),
    "resume-without-database": (
        Case(
            ("run", "--resume"),
        ),
        (
            "no study named 'tiny-ernie-cpu-smoke-balanced' to resume",
            "tuner.db does not exist",  # which database was searched, and that it is not there
            "tuner studies",
        ),
    ),
}
_UPGRADING = threading.Lock()
ACCEPTANCE = Case(("run", "--model", "ernie-0.3b", "--gpu", "a10g"))
HELP = Case(("--help",))


def launch(case: Case, workdir: Path) -> Outcome:
    workdir.mkdir(parents=True)
    for name, text in case.files.items():
        (workdir / name).write_text(text)
    db_url = f"sqlite:///{workdir / DB_FILE}"
    if case.database:
        from tuner.db.migrate import upgrade

        with _UPGRADING:  # alembic's command API is not safe in two threads at once
            upgrade(db_url)
    env = {
        **os.environ,
        "TUNER_DB_URL": db_url,
        "TUNER_HOME": str(workdir / "home"),
        "PYTHONPATH": str(REPO),
        "COLUMNS": "200",
    }
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", *case.args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    seconds = time.monotonic() - start
    output = " ".join((proc.stdout + proc.stderr).split())
    return Outcome(proc.returncode, output, seconds, workdir)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("cli")
    # The acceptance case runs alone, so that its time is its own.
    results = {"acceptance": launch(ACCEPTANCE, root / "acceptance")}
    cases = {name: case for name, (case, _) in BAD_INPUT.items()} | {"help": HELP}
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        futures = {name: pool.submit(launch, case, root / name) for name, case in cases.items()}
        results |= {name: future.result() for name, future in futures.items()}
    return results


@pytest.mark.parametrize("name", list(BAD_INPUT))
def test_bad_input_exits_2_saying_why_and_writes_nothing(
    outcomes: dict[str, Outcome], name: str
) -> None:
    case, words = BAD_INPUT[name]
    outcome = outcomes[name]
    assert outcome.code == 2, outcome.output
    for word in words:
        assert word in outcome.output
    assert "Traceback" not in outcome.output
    assert outcome.leftovers(case) == []


def test_a_study_that_is_not_there_is_refused_before_its_header(
    outcomes: dict[str, Outcome],
) -> None:
    """`--resume` of an unknown study says so alone: no header of the demo's study before it."""
    for name in ("resume-unknown-study", "resume-without-database"):
        assert "workload smoke" not in outcomes[name].output, outcomes[name].output
        assert not outcomes[name].output.startswith("study ")


def test_a_reading_command_leaves_an_empty_database_file_as_it_was(
    outcomes: dict[str, Outcome], tmp_path: Path
) -> None:
    """Opening a 0-byte SQLite file writes SQLite's header into it (4 KiB): the commands that
    only read leave it at 0 bytes, and `tuner db current` neither writes it nor creates one."""
    from typer.testing import CliRunner

    from tuner.cli.app import app

    for name in ("studies-in-an-empty-file", "trials-in-an-empty-file"):
        assert (outcomes[name].workdir / DB_FILE).stat().st_size == 0, outcomes[name].output
    empty, missing = tmp_path / "empty.db", tmp_path / "missing.db"
    empty.touch()
    for path, said in ((empty, "is empty"), (missing, "does not exist")):
        run = CliRunner().invoke(app, ["db", "current", "--storage", f"sqlite:///{path}"])
        assert run.exit_code == 0 and f"at nothing (database {path} {said})" in run.output
    assert empty.stat().st_size == 0 and not missing.exists()


def test_db_current_says_what_a_database_without_tuner_tables_holds(tmp_path: Path) -> None:
    """Not "at nothing (empty)" for another application's tables, nor "damaged" for a file
    that never was a database."""
    import sqlite3

    from typer.testing import CliRunner

    from tuner.cli.app import app
    from tuner.db.migrate import head_revision

    other, blank, text = tmp_path / "other.db", tmp_path / "blank.db", tmp_path / "notes.db"
    with sqlite3.connect(other) as conn:
        conn.executescript("CREATE TABLE users (id); CREATE TABLE orders (id);")
    conn.close()
    with sqlite3.connect(blank) as conn:
        conn.execute("PRAGMA user_version = 1")  # a SQLite file with no table at all
    conn.close()
    text.write_text("hello\n")
    before = other.read_bytes()

    def current(path: Path) -> str:
        run = CliRunner().invoke(app, ["db", "current", "--storage", f"sqlite:///{path}"])
        return " ".join((run.output or str(run.exception)).split())

    assert current(other) == (
        f"sqlite:///{other}: at nothing (database {other} has no tuner tables "
        f"(2 other tables)), head {head_revision()}"
    )
    assert current(blank).endswith(
        f"at nothing (database {blank} is empty), head {head_revision()}"
    )
    said = current(text)
    assert f"file {text} is not a SQLite database" in said and "damaged" not in said
    # Read, not written: it was left in WAL mode (header bytes 18-19), and a resume of a study
    # it cannot hold created tuner's and Optuna's tables in it.
    resume = CliRunner().invoke(
        app, ["run", "--study", "x", "--resume", "--storage", f"sqlite:///{other}"]
    )
    assert "no study named 'x' to resume" in str(resume.exception)
    # Another application's database: said as such, not only "run tuner db upgrade" on it.
    trials = CliRunner().invoke(app, ["trials", "x", "--storage", f"sqlite:///{other}"])
    said = str(trials.exception)
    assert f"{other} has no tuner tables (2 other tables)" in said
    assert "point --storage (or $TUNER_DB_URL) at tuner's database" in said
    assert other.read_bytes() == before
    # Tuner's tables without a revision record: said as such, not "no study named 'x'".
    leftovers = tmp_path / "leftovers.db"
    with sqlite3.connect(leftovers) as conn:
        conn.execute("CREATE TABLE tuner_studies (id)")
    conn.close()
    again = CliRunner().invoke(
        app, ["run", "--study", "x", "--resume", "--storage", f"sqlite:///{leftovers}"]
    )
    assert "has tuner tables ['tuner_studies'] but no revision record" in str(again.exception)


def test_a10g_on_this_machine_fails_at_once(outcomes: dict[str, Outcome]) -> None:
    detected = detect_gpus()
    if match_detected(get_gpu("a10g"), [g.name for g in detected]):
        pytest.skip("this machine has an A10G: the study would really run")
    outcome = outcomes["acceptance"]
    assert outcome.code == 2, outcome.output
    assert outcome.seconds < 10
    assert "--gpu a10g asks for an NVIDIA A10G" in outcome.output
    if detected:
        assert detected[0].name in outcome.output
    else:
        assert "no NVIDIA GPU" in outcome.output
        assert "use --gpu cpu" in outcome.output
    assert "Traceback" not in outcome.output
    assert outcome.leftovers(ACCEPTANCE) == []


def test_help_exits_0(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["help"]
    assert outcome.code == 0, outcome.output
    assert "Usage:" in outcome.output
    for command in ("run", "studies", "trials", "best"):
        assert f" {command} " in outcome.output
    assert outcome.leftovers(HELP) == []


# --- every input that once ended in a traceback (issue 29): one error line, non-zero exit ---

# A comparison's options, for the checks made before anything starts.
_COMPARE = ("compare", "--model", "tiny-ernie", "--gpu", "cpu",
            "--a", "defaults", "--b", "max_num_seqs=4")  # fmt: skip

EXISTING = "kept.jsonl"  # an earlier export that must survive
ONE_LINE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "export-to-a-folder": (("export", "s1", "--out", "folder"), ("--out folder is a folder",)),
    "export-into-no-folder": (
        ("export", "s1", "--out", "/nonexistent/x.jsonl"),
        ("folder /nonexistent does not exist", "mkdir -p /nonexistent"),
    ),
    "export-md-into-no-folder": (
        ("export", "s1", "--format", "md", "--out", "/nonexistent/x.md"),
        ("folder /nonexistent does not exist",),
    ),
    "export-comparisons-into-no-folder": (
        ("export", "--comparisons", "--out", "/nonexistent/x.jsonl"),
        ("folder /nonexistent does not exist",),
    ),
    "export-over-a-file": (("export", "s1", "--out", EXISTING), ("exists", "--force")),
    "export-bench-over-a-file": (
        ("export", "s1", "--format", "vllm-bench", "--out", EXISTING),
        ("is a file", "writes a folder"),
    ),
    "trace-not-utf8": (
        ("run", "--workload", "trace:bad.jsonl"),
        ("trace bad.jsonl is not UTF-8 text (byte 0 is 0xff)", "save the trace as UTF-8"),
    ),
    "spec-not-utf8": (("run", "bad.toml"), ("bad.toml:2: not UTF-8 text", "UTF-8")),
    "study-name": (
        ("run", "--study", "../x <script>"),
        ("--study: study name '../x <script>' is not", "letters, digits"),
    ),
    "no-windows": ((*_COMPARE, "--workload-set", "windows=0"), ("windows must be >= 1",)),
    "min-effect-with-a-fixed-design": (
        (*_COMPARE, "--repeats", "3", "--min-effect", "0.5"),
        ("--min-effect stops a sequential design", "add --max-launches"),
    ),
    "merge-suffix": (
        ("db", "merge", DB_FILE, "--storage", "sqlite:///other.db", "--rename-suffix", "../<x> y"),
        ("--rename-suffix '../<x> y' is not a usable suffix",),
    ),
    "serve-a-missing-file": (
        ("serve", "--port", "0", "--storage", "sqlite:///typo.db"),
        ("database typo.db does not exist", "tuner db upgrade --storage sqlite:///typo.db"),
    ),
    "upgrade-a-damaged-file": (
        ("db", "upgrade", "--storage", "sqlite:///damaged.db"),
        ("malformed", "damaged"),
    ),
    "current-of-a-damaged-file": (
        ("db", "current", "--storage", "sqlite:///damaged.db"),
        ("malformed", "damaged"),
    ),
    "confirmation-budget-past-what-launches-resolve": (
        ("run", "--confirm-max-launches", "100"),
        ("--confirm-max-launches 100: at most 40 launches a candidate", "lower it"),
    ),
    "resume-on-another-workload": (
        ("run", "--study", "s1", "--resume", "--workload", "chat"),
        ("study 's1' was created with --workload smoke; this resume asks for chat", "leave"),
    ),
}


def _damaged_copy(url: str, path: Path) -> None:
    """A SQLite file whose tables exist but whose studies table's page is overwritten."""
    from tests.studykit import damage_sqlite
    from tuner.db.migrate import upgrade

    upgrade(url)
    damage_sqlite(path)


@pytest.fixture(scope="module")
def one_line(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess]:
    from tests.studykit import make_context, make_repo
    from tuner.study.loop import run_study
    from tuner.testing.fake_runner import FakeRunner

    root = tmp_path_factory.mktemp("one-line")
    db_url = f"sqlite:///{root / DB_FILE}"
    run_study(make_context(db_url, trials=2, gpu="cpu"), FakeRunner(), make_repo(db_url))
    (root / "folder").mkdir()
    (root / EXISTING).write_text("an earlier export\n")
    (root / "bad.jsonl").write_bytes(b"\xff\xfe{}\n")
    (root / "bad.toml").write_bytes(b'[study]\nmodel = "tiny-\xe9rnie"\n')
    _damaged_copy(f"sqlite:///{root / 'damaged.db'}", root / "damaged.db")
    env = {
        **os.environ,
        "TUNER_DB_URL": db_url,
        "TUNER_HOME": str(root / "home"),
        "PYTHONPATH": str(REPO),
        "COLUMNS": "200",
    }

    def one(args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tuner", *args],
            cwd=root, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(one, args) for name, (args, _) in ONE_LINE.items()}
        done = {name: future.result() for name, future in futures.items()}
    assert (root / EXISTING).read_text() == "an earlier export\n", "an export overwrote a file"
    assert not (root / "typo.db").exists() and not (root / "folder" / "x.jsonl").exists()
    return done


@pytest.mark.parametrize("name", list(ONE_LINE))
def test_each_once_fatal_input_is_one_error_line_and_a_non_zero_exit(
    one_line: dict[str, subprocess.CompletedProcess], name: str
) -> None:
    run = one_line[name]
    assert run.returncode != 0, run.stdout + run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    lines = run.stderr.splitlines()
    assert lines and lines[0].startswith("error: "), run.stderr
    assert all(line.startswith("hint: ") for line in lines[1:]) and len(lines) <= 2, run.stderr
    text = " ".join(run.stderr.split())
    for words in ONE_LINE[name][1]:
        assert words in text, text
    if name == "no-windows":  # refused where the workload is read: no header, no launch
        assert run.stdout == "", run.stdout


def test_a_taken_study_name_is_refused_before_the_studys_header(tmp_path: Path) -> None:
    """`tuner run --study NAME` on a name taken printed the study's header and the workload's
    fingerprint, then refused it."""
    from tests.studykit import make_context, make_repo
    from tuner.study.loop import run_study
    from tuner.testing.fake_runner import FakeRunner

    db_url = f"sqlite:///{tmp_path / DB_FILE}"
    run_study(make_context(db_url, trials=1, gpu="cpu"), FakeRunner(), make_repo(db_url))
    env = {
        **os.environ, "TUNER_DB_URL": db_url, "TUNER_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(REPO), "TUNER_SERVER_MODULE": "tuner.testing.fake_server",
        "TUNER_SERVER_VERSION": "0.32.0",
    }  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "--study", "s1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    assert "error: study 's1' already exists (finished)" in run.stderr
    assert run.stdout == ""


def test_early_stopping_under_the_memory_objective_says_it_is_off(tmp_path: Path) -> None:
    """`--early-stop --objective memory` ran every trial in full without a word: a memory
    score is the peak GPU memory, known only at a trial's end, so nothing can stop early."""
    env = {
        **os.environ, "TUNER_DB_URL": f"sqlite:///{tmp_path / DB_FILE}",
        "TUNER_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO),
        "TUNER_SERVER_MODULE": "tuner.testing.fake_server", "TUNER_SERVER_VERSION": "0.32.0",
        "TUNER_FAKE_STARTUP_S": "0.1", "COLUMNS": "200",
    }  # fmt: skip
    args = ["run", "--model", "tiny-ernie", "--gpu", "cpu", "--workload", "smoke", "--trials",
            "1", "--objective", "memory", "--early-stop", "--confirm-launches", "0"]  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "early stopping is off for the memory objective" in " ".join(run.stdout.split())


def test_a_waiting_worker_names_a_database_path_with_a_space_as_a_shell_reads_it(
    tmp_path: Path,
) -> None:
    """`tuner worker --storage "sqlite:///my dir/x.db"` waited for the file with commands that
    did not parse when pasted ("Got unexpected extra argument(s) (dir/x.db)")."""
    import shlex

    url = f"sqlite:///{tmp_path / 'my dir' / 'x.db'}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TUNER_HOME": str(tmp_path / "home")}
    worker = subprocess.Popen(
        [sys.executable, "-m", "tuner", "worker", "--storage", url],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    with worker:  # closes its pipe
        try:
            assert worker.stdout is not None
            line = worker.stdout.readline()
        finally:
            worker.kill()
    assert f"`tuner db upgrade --storage {shlex.quote(url)}` creates it" in line, line


def test_a_study_of_a_relative_model_directory_resumes_from_anywhere(tmp_path: Path) -> None:
    """`tuner run --model ./m` stored `./m`: a resume from another directory failed with
    "unknown model './m'", no hint offered worked, and where that directory had an `m` of its
    own the resume measured that other model as the same study."""
    from tuner.catalog.models import MODELS

    env = {
        **os.environ, "TUNER_DB_URL": f"sqlite:///{tmp_path / DB_FILE}",
        "TUNER_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO),
        "TUNER_SERVER_MODULE": "tuner.testing.fake_server", "TUNER_SERVER_VERSION": "0.32.0",
        "TUNER_FAKE_STARTUP_S": "0.1", "COLUMNS": "200",
    }  # fmt: skip
    first, other = tmp_path / "a", tmp_path / "b"
    for where in (first, other):
        where.mkdir()
    (first / "m").mkdir()
    (first / "m" / "config.json").write_text(json.dumps(dict(MODELS["tiny-ernie"].config)))

    def tuner(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tuner", "run", "--study", "rel", *args],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    made = tuner(first, "--model", "./m", "--gpu", "cpu", "--workload", "smoke", "--trials", "1",
                 "--confirm-launches", "0")  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    resumed = tuner(other, "--resume", "--trials", "2")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    (other / "m").mkdir()  # another model of the same name, here
    (other / "m" / "config.json").write_text((first / "m" / "config.json").read_text())
    refused = tuner(other, "--model", "./m", "--resume", "--trials", "3")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert str((first / "m").resolve()) in refused.stderr, refused.stderr
