"""`tuner compare` and `tuner verify-claims` end to end as subprocesses, on the fake server
(the test seam $TUNER_SERVER_MODULE of tuner.compose.prepare): real launches, ports, load and
storage, at about a second a launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.studykit import processes_mentioning
from tuner.abtest.claims.figures import EFFECT_VERDICTS
from tuner.db.repository import Repository
from tuner.db.session import make_engine

REPO = Path(__file__).parents[2]
CLAIMS = REPO / "studies" / "claims" / "seed-claims.toml"
# 16 concurrent streams: max_num_seqs=1 then serves one at a time.
QUICK = "concurrency=16,requests_per_window=16,warmup_requests=2,output_tokens=6,windows=2"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TUNER_DB_URL", "TUNER_VLLM_PYTHON")}
    return {
        **env,
        "PYTHONPATH": str(REPO),
        "TUNER_HOME": str(tmp_path / "home"),
        "TUNER_SERVER_MODULE": "tuner.testing.fake_server",
        "TUNER_SERVER_VERSION": "0.32.0",
        "TUNER_FAKE_STARTUP_S": "0.1",
        # Decode steps of 20 ms rather than 2: sleeping, not the CPU, dominates a request, so a
        # 2-core machine busy with CPU vLLM beside it cannot make A's launches disagree x2.
        "TUNER_FAKE_STEP_MS": "20",
    }


def _tuner(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args, "--storage", url],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _compare(tmp_path: Path, a: str, b: str, *extra: str) -> subprocess.CompletedProcess[str]:
    base = ["compare", "--model", "tiny-ernie", "--gpu", "cpu", "--a", a, "--b", b]
    return _tuner(tmp_path, *base, "--workload", "smoke", "--workload-set", QUICK, *extra)


def _repo(tmp_path: Path) -> Repository:
    return Repository(make_engine(f"sqlite:///{tmp_path / 'tuner.db'}"))


def test_one_server_at_a_time_is_significantly_worse_and_stored(tmp_path: Path) -> None:
    run = _compare(tmp_path, "defaults", "max_num_seqs=1", "--json")
    data = json.loads(run.stdout)
    thr = next(m for m in data["results"]["metrics"] if m["metric"] == "output_throughput")
    assert len(thr["a"]["values"]) == len(thr["b"]["values"]) == 3
    # One stream at a time serves about a tenth of sixteen, whatever else runs on the machine.
    assert thr["b"]["median"] < 0.5 * thr["a"]["median"], run.stdout
    if thr["verdict"] == "worse":
        assert run.returncode == 0 and thr["high"] < 1.0, run.stdout + run.stderr
        assert data["verdicts"]["overall"] == "worse"
    else:
        # All that a shared 2-core machine allows besides: another process (CI's CPU vLLM)
        # slowed one whole launch x5.7, tuner flagged its windows disturbed, and the launches
        # of that side disagree beyond their noise: inconclusive (exit 1), never "better".
        assert run.returncode == 1, run.stdout + run.stderr
        assert thr["verdict"].startswith("inconclusive: launches of"), thr["verdict"]
        assert sum(side["disturbed"] for side in data["results"]["windows"].values()) > 0
        # Never "better" on what one stream at a time costs (its P99 ITL may well be better:
        # a decode step of one sequence is short).
        throughputs = ("output_throughput", "request_throughput", "overall")
        assert all(data["verdicts"][m] != "better" for m in throughputs), data["verdicts"]
    # Progress went to stderr, interleaved A B, B A, A B (counterbalanced).
    launches = [line for line in run.stderr.splitlines() if line.startswith("launch ")]
    a, b = "defaults", "max_num_seqs=1"
    assert [line.split(": ", 1)[1] for line in launches] == [a, b, b, a, a, b]
    # Each launch's line names its windows' median; the decision's values name theirs.
    assert run.stderr.count("out tok/s (median of 2 windows)") == 6, run.stderr
    assert data["results"]["launch_value"] == "geomean"
    assert "comparison 1 stored: API /v1/compare/1, dashboard /ui/compare/1" in run.stderr
    # The workload's fingerprint, before the launches and in the JSON.
    assert run.stderr.index("prefix reuse: ") < run.stderr.index("launch 1/")
    fp = data["workload_fingerprint"]
    assert fp["requests"] > 0 and 0.0 < fp["prefix_reuse"] < 1.0

    row = _repo(tmp_path).get_comparison(data["id"])
    assert row is not None and row.results["kind"] == "compare"
    assert row.verdicts["output_throughput"] == data["verdicts"]["output_throughput"]
    assert row.a_config.gpu_memory_utilization == 0.1  # the CPU baseline applied to "defaults"
    assert row.b_config.max_num_seqs == 1 and row.repeats == 3 and row.gpu == "cpu"
    assert row.provenance is not None and row.provenance.vllm_version == "0.32.0"
    assert row.workload.startswith("smoke[concurrency=16")
    assert processes_mentioning(str(tmp_path)) == []


def test_a_config_against_itself_shows_no_significant_difference(tmp_path: Path) -> None:
    # 0.999: the same config differs "significantly" in 1 - confidence of runs by design.
    run = _compare(
        tmp_path, "max_num_seqs=8", "max_num_seqs=8", "--confidence", "0.999", "--no-trend"
    )
    thr = next(line for line in run.stdout.splitlines() if "output tok/s: " in line)
    plan = next(line for line in run.stdout.splitlines() if "interleaved pairs A B" in line)
    assert "a look after each pair" in plan and "trend" not in plan, run.stdout
    (row,) = _repo(tmp_path).list_comparisons()
    assert row.results["decision"]["trend"] is None
    # What a busy 2-core machine allows: no difference, or (exit 1) the launches of one side
    # disagree beyond their noise because another process took the CPU; never a verdict.
    if run.returncode == 0:
        assert thr.endswith("-> no significant difference"), run.stdout
    else:
        assert run.returncode == 1 and "inconclusive: launches of" in thr, run.stdout
        assert "windows disturbed" in run.stdout
    assert "better" not in thr and "worse" not in thr
    assert "B/A per metric (99.9 % intervals across launches):" in run.stdout
    assert "A (max_num_seqs=8): out tok/s per launch" in run.stdout
    assert "(a launch's value: the geometric mean of its windows)" in run.stdout
    assert "provenance: cpu" in run.stdout and "vLLM 0.32.0, model tiny-ernie" in run.stdout
    assert "comparison 1 stored" in run.stdout


def test_a_side_that_cannot_start_is_not_measured_and_not_launched_again(tmp_path: Path) -> None:
    # The fake server, like vLLM on CPU, refuses a utilization above what the host has free.
    run = _compare(tmp_path, "defaults", "gpu_memory_utilization=0.97", "--json")
    assert run.returncode == 1, run.stdout + run.stderr
    data = json.loads(run.stdout)
    assert set(data["verdicts"].values()) == {"not measured"}
    assert [f.split(":")[0] for f in data["results"]["failures"]["b"]] == ["memory_exceeded"]
    launches = [line for line in run.stderr.splitlines() if line.startswith("launch ")]
    assert len(launches) == 4  # A three times, B once
    assert "B (gpu_memory_utilization=0.97) cannot start here, so it was not measured" in run.stderr


def test_bad_input_exits_2_before_anything_starts(tmp_path: Path) -> None:
    unknown = _compare(tmp_path, "defaults", "max_num_seq=4")
    assert unknown.returncode == 2
    # Not a typed knob, so a vLLM flag: refused by vLLM's flag list, naming the closest.
    assert "--b: vLLM 0.32.0 has no flag 'max_num_seq'" in unknown.stderr, unknown.stderr
    assert "did you mean --max-num-seqs" in unknown.stderr
    assert _compare(tmp_path, "defaults", "warp speed=4").returncode == 2  # not even a flag
    impossible = _compare(tmp_path, "attention_backend=FLASH_ATTN", "defaults")
    assert impossible.returncode == 2 and "FLASH_ATTN is not available on CPU" in impossible.stderr
    for extra in (["--confidence", "1.5"], ["--repeats", "1"]):
        assert _compare(tmp_path, "defaults", "max_num_seqs=4", *extra).returncode == 2
    bad_field = _tuner(
        tmp_path, "compare", "--model", "tiny-ernie", "--gpu", "cpu", "--a", "defaults",
        "--b", "max_num_seqs=4", "--workload-set", "sped=2",
    )  # fmt: skip
    assert bad_field.returncode == 2 and "unknown workload field 'sped'" in bad_field.stderr
    assert not (tmp_path / "tuner.db").exists()  # nothing was written


def test_verify_claims_on_the_fake_server(tmp_path: Path) -> None:
    only = ["fa2-throughput", "fa2-context-8k", "max-model-len-memory", "prefix-caching-throughput"]
    run = _tuner(
        tmp_path, "verify-claims", str(CLAIMS), "--model", "tiny-ernie", "--gpu", "cpu",
        "--repeats", "2", "--json",
        "--workload-set", "requests_per_window=8,warmup_requests=2,output_tokens=4,windows=2",
        *[arg for claim in only for arg in ("--only", claim)],
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    records = {r["id"]: r for r in json.loads(run.stdout)}
    assert list(records) == [
        "fa2-throughput",
        "max-model-len-memory",
        "prefix-caching-throughput",
        "fa2-context-8k",
    ]
    for fa in ("fa2-throughput", "fa2-context-8k"):
        assert records[fa]["verdict"] == "not applicable"
        assert "FLASH_ATTN is not available on CPU" in records[fa]["reason"]
    assert "exceeds the model's 4096 positions" in records["fa2-context-8k"]["reason"]
    assert "same configuration" in records["max-model-len-memory"]["reason"]
    prefix = records["prefix-caching-throughput"]
    assert prefix["verdict"] in EFFECT_VERDICTS
    assert prefix["measured"]["low"] <= prefix["measured"]["ratio"] <= prefix["measured"]["high"]
    assert prefix["article"] == "ernie-fa2" and "+15 %" in prefix["figure"]
    row = _repo(tmp_path).get_comparison(prefix["comparison_id"])
    assert row is not None and row.results["kind"] == "claim"
    assert row.results["claim"]["id"] == "prefix-caching-throughput"
    assert row.a_config.enable_prefix_caching is False and row.b_config.enable_prefix_caching
    assert "comparison_id" not in records["fa2-throughput"]
    assert len(_repo(tmp_path).list_comparisons()) == 1


def test_verify_claims_prints_a_table_and_needs_no_vllm_when_nothing_applies(
    tmp_path: Path,
) -> None:
    run = _tuner(
        tmp_path, "verify-claims", str(CLAIMS), "--model", "tiny-ernie", "--gpu", "cpu",
        "--only", "fa2-ttft", "--only", "max-model-len-memory",
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split() == ["claim", "metric", "measured", "[interval]", "claimed", "verdict"]
    assert lines[1].split() == ["fa2-ttft", "ttft_p50_ms", "-", "≤", "-500", "ms", "not",
                                "applicable"]  # fmt: skip
    assert any(line.startswith("fa2-ttft: not applicable: ") for line in lines)
    assert not (tmp_path / "tuner.db").exists()
    unknown = _tuner(tmp_path, "verify-claims", str(CLAIMS), "--model", "tiny-ernie",
                     "--gpu", "cpu", "--only", "warp-drive")  # fmt: skip
    assert unknown.returncode == 2 and "no claim ['warp-drive']" in unknown.stderr


def test_an_interrupted_compare_resumes_from_its_launches(tmp_path: Path) -> None:
    import signal

    base = ["compare", "--model", "tiny-ernie", "--gpu", "cpu", "--a", "defaults"]
    args = [*base, "--b", "max_num_seqs=4", "--workload", "smoke", "--workload-set", QUICK]
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner", *args, "--storage", url],
        cwd=tmp_path,
        # Servers that take 2 s to come up: the Ctrl-C lands in the third launch's start-up
        # even when a busy machine makes this test read the line late.
        env={**_env(tmp_path), "TUNER_FAKE_STARTUP_S": "2"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # stop it while the third launch runs
        seen.append(line)
        if line.startswith("launch 3/6"):
            proc.send_signal(signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen)
    logs = list((tmp_path / "home" / "launches").glob("compare-*.jsonl"))
    assert len(logs) == 1 and len(logs[0].read_text().splitlines()) == 2
    # It says what it kept and how to go on (it said only "interrupted").
    assert "interrupted: 2 launches finished in this run are kept; the same command again " in rest

    again = _tuner(tmp_path, *args)
    # What is asserted is the resume, not the verdict: 1 is an inconclusive one (three launches
    # a side on a busy 2-core machine can disagree), anything else a failure.
    assert again.returncode in (0, 1), again.stderr
    assert "error:" not in again.stderr, again.stderr
    said = again.stdout + again.stderr
    assert again.returncode == 0 or "decision: inconclusive" in said, said
    out = again.stdout + again.stderr
    assert "resuming: 1 of defaults, 1 of max_num_seqs=4" in out
    launched = [line for line in out.splitlines() if line.startswith("launch ")]
    # Two pairs complete the first look (3 a side); a look that did not decide takes another
    # pair (a busy CI run: 3 pairs), as the sequential design does.
    pairs = len(launched) // 2
    assert pairs >= 2, out
    # Rounds 2, 3, ... of A B, B A, A B, ...: B A first.
    turns = [["max_num_seqs=4", "defaults"], ["defaults", "max_num_seqs=4"]]
    expected = [arm for k in range(pairs) for arm in turns[k % 2]]
    assert [line.split(": ", 1)[1] for line in launched] == expected
    row = _repo(tmp_path).get_comparison(1)
    assert row is not None and row.results["launches"] == {"a": 1 + pairs, "b": 1 + pairs}
    assert not logs[0].exists()  # stored: the launch log is gone
    left = processes_mentioning(str(tmp_path))
    assert left == [], [(p.pid, p.cmdline(), p.ppid()) for p in left]


def test_a_flag_beyond_the_typed_knobs_reaches_b_launches_and_a_misspelt_one_is_refused(
    tmp_path: Path,
) -> None:
    run = _compare(tmp_path, "defaults", "stream_interval=4", "--repeats", "2", "--json")
    assert run.returncode in (0, 1), run.stdout + run.stderr  # 1: an inconclusive verdict
    data = json.loads(run.stdout)
    assert data["b"]["stream_interval"] == 4 and "stream_interval" not in data["a"]
    # Each launch's server log opens with the arguments it was given (vLLM's "non-default
    # args" line): B's two launches had --stream-interval 4, A's two none.
    logs = [p.read_text() for p in sorted((tmp_path / ".tuner" / "logs").glob("*.log"))]
    assert len(logs) == 4
    assert sorted("'stream_interval': 4" in log for log in logs) == [False, False, True, True]

    bad = _compare(tmp_path, "defaults", "stream_intervall=4")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "stream_intervall" in bad.stderr and "--stream-interval" in bad.stderr
    assert "launch " not in bad.stderr  # refused before anything started


def test_a_calibration_whose_launches_all_fail_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said "none for this key yet (`tuner calibrate` measures one)": the command just run."""
    monkeypatch.setenv("TUNER_FAKE_FAULT", "crash_at_start")
    run = _tuner(tmp_path, "calibrate", "--model", "tiny-ernie", "--gpu", "cpu", "--launches",
                 "2", "--workload", "smoke", "--workload-set", QUICK)  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    said = run.stdout + run.stderr
    assert "noise profile: none, 0 of 2 launches complete" in said
    assert "measures one" not in said
    # a run on CPU vLLM spends no GPU time: its cost line says CPU-minutes
    assert " CPU-minutes" in said and "GPU-minutes" not in said
