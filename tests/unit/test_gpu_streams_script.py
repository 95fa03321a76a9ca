"""scripts/gpu-streams.sh: the detached plan runner used on the GPU machine, exercised here with
plans of shell commands (no GPU, no vLLM), in a private HOME and OUT."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-streams.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _run(home: Path, out: Path, *args: str, env: dict[str, str] | None = None):
    full = {**os.environ, "HOME": str(home), "OUT": str(out), **(env or {})}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=full, capture_output=True, text=True, timeout=60
    )


def test_wait_on_a_machine_without_streams_fails_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    result = _run(tmp_path / "home", tmp_path / "out", "wait", "30")
    assert result.returncode == 3
    assert "no streams on this machine" in result.stderr
    assert time.monotonic() - started < 10


def test_streams_run_their_plans_skip_guarded_lines_and_wait_collects(tmp_path: Path) -> None:
    home, out = tmp_path / "home", tmp_path / "out"
    home.mkdir()
    seed = tmp_path / "seed.db"
    with sqlite3.connect(seed) as db:
        db.execute("create table t (x int)")
        db.execute("insert into t values (7)")
    plan = tmp_path / "a.plan"
    plan.write_text(
        "# a comment\n"
        "echo first on $CUDA_VISIBLE_DEVICES\n"
        "mkdir -p $TUNER_HOME/launches && echo '{}' > $TUNER_HOME/launches/x.jsonl\n"
        "@999 echo never\n"
        "echo last\n"
    )
    deadline = str(int(time.time()) + 600)
    started = _run(
        home,
        out,
        "start",
        deadline,
        f"a:1:{plan}:claims",
        env={"SEED_DB_claims": str(seed)},
    )
    assert started.returncode == 0, started.stderr
    assert "started stream a on GPU 1" in started.stdout

    waited = _run(home, out, "wait", "30")
    assert waited.returncode == 0, waited.stderr
    log = (home / "streams" / "a.log").read_text()
    assert "first on 1" in log and "last" in log
    assert "skipped" in log and "echo never" in log
    assert "stream done" in log
    # wait brought back what the streams produced so far, as collect does
    with sqlite3.connect(out / "tuner-claims.db") as db:
        assert db.execute("select x from t").fetchall() == [(7,)]
    with tarfile.open(out / "launches.tgz") as tgz:
        assert "launches/x.jsonl" in tgz.getnames()
    with tarfile.open(out / "streams.tgz") as tgz:
        assert "./a.log" in tgz.getnames()


def test_start_refuses_a_missing_plan(tmp_path: Path) -> None:
    result = _run(tmp_path / "home", tmp_path / "out", "start", "0", "a:0:no/such.plan")
    assert result.returncode == 2
    assert "no plan file" in result.stderr and "no/such.plan" in result.stderr


def test_the_compile_cache_comes_back_while_it_fits_and_the_next_machine_gets_it(
    tmp_path: Path,
) -> None:
    home, out = tmp_path / "home", tmp_path / "out"
    kernels = home / ".cache" / "vllm" / "torch_compile_cache" / "abc"
    kernels.mkdir(parents=True)
    (kernels / "graph.py").write_text("compiled = True\n")
    (home / ".triton" / "cache").mkdir(parents=True)
    (home / ".triton" / "cache" / "k.cubin").write_bytes(b"\0" * 100)
    collected = _run(home, out, "collect")
    assert collected.returncode == 0, collected.stderr
    with tarfile.open(out / "compile-cache.tgz") as tgz:
        names = tgz.getnames()
    assert ".cache/vllm/torch_compile_cache/abc/graph.py" in names
    assert ".triton/cache/k.cubin" in names

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    plan = tmp_path / "a.plan"
    plan.write_text("cat $HOME/.cache/vllm/torch_compile_cache/abc/graph.py\n")
    started = _run(
        fresh,
        tmp_path / "out2",
        "start",
        str(int(time.time()) + 600),
        f"a:0:{plan}",
        env={"SEED_COMPILE_CACHE": str(out / "compile-cache.tgz")},
    )
    assert started.returncode == 0, started.stderr
    assert "compile cache restored" in started.stdout
    assert _run(fresh, tmp_path / "out2", "wait", "30").returncode == 0
    assert "compiled = True" in (fresh / "streams" / "a.log").read_text()


def test_a_compile_cache_too_large_to_return_stays_behind_and_says_so(tmp_path: Path) -> None:
    home, out = tmp_path / "home", tmp_path / "out"
    (home / ".cache" / "flashinfer").mkdir(parents=True)
    (home / ".cache" / "flashinfer" / "big.so").write_bytes(os.urandom(16 * 1024 * 1024))
    collected = _run(home, out, "collect")
    assert collected.returncode == 0, collected.stderr
    assert not (out / "compile-cache.tgz").exists()
    assert "too large to bring back" in collected.stderr
