"""One study, four workers on a real PostgreSQL: three with the fake server, one with CPU vLLM.

The vLLM worker starts first and takes the first trial (vLLM's defaults); the fake workers join
once it measures, run the other trials in seconds and wait for it; the study ends with every
trial accounted for. About two minutes, most of it vLLM's start on 2 cores.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.postgres.conftest import pg_url, postgres_admin  # noqa: F401 - the fixtures
from tests.postgres.test_postgres_one_study import (
    STUDY,
    check_accounting,
    env,  # noqa: F401 - a fixture
    optuna_trials,
    repo,  # noqa: F401 - a fixture
    set_up,
    spec_text,
    tagged,
    tuner,
)
from tuner.db.repository import Repository
from tuner.domain import TrialStatus
from tuner.study import sharing

pytestmark = pytest.mark.e2e
TRIALS = 6


def test_three_fake_workers_and_one_cpu_vllm_worker_share_a_study(
    pg_url: str,  # noqa: F811
    env: dict[str, str],  # noqa: F811
    repo: Repository,  # noqa: F811
    tmp_path: Path,
    vllm_python: str,
    e2e_home: Path,
) -> None:
    (tmp_path / "spec.toml").write_text(spec_text(TRIALS, "fixed = { enforce_eager = true }", 600))
    real = {k: v for k, v in env.items() if not k.startswith(("TUNER_SERVER_", "TUNER_FAKE_"))}
    real["TUNER_VLLM_PYTHON"] = vllm_python
    real["TUNER_HOME"] = str(e2e_home)  # the session's warm caches and model directory
    set_up(pg_url, env, tmp_path)
    cpu_vllm = tuner(real, tmp_path, "worker", "--study", STUDY, "--storage", pg_url)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        mine = [t for t in optuna_trials(pg_url) if t.user_attrs.get(sharing.WORKER, {}).get("pid")
                == cpu_vllm.pid]  # fmt: skip
        if mine or cpu_vllm.poll() is not None:
            break
        time.sleep(0.5)
    assert cpu_vllm.poll() is None, cpu_vllm.communicate()[0]
    join = ("worker", "--study", STUDY, "--storage", pg_url)
    fakes = [tuner(env, tmp_path, *join) for _ in range(3)]
    outputs = [w.communicate(timeout=900)[0] for w in [cpu_vllm, *fakes]]
    assert [w.returncode for w in [cpu_vllm, *fakes]] == [0] * 4, outputs
    rows = repo.list_trials(STUDY, limit=None)
    check_accounting(pg_url, rows, trials=TRIALS)
    owners = {t.number: t.user_attrs[sharing.WORKER]["pid"] for t in optuna_trials(pg_url)
              if sharing.WORKER in t.user_attrs}  # fmt: skip
    by_vllm = [r for r in rows if owners.get(r.number) == cpu_vllm.pid]
    assert by_vllm and all(r.status is TrialStatus.COMPLETE for r in by_vllm), outputs[0]
    assert by_vllm[0].is_baseline
    # Real vLLM on CPU reports its own attention backend; the fake reports FLASH_ATTN.
    assert all(r.effective_backend != "FLASH_ATTN" for r in by_vllm), by_vllm
    assert any(owners.get(r.number) != cpu_vllm.pid for r in rows if r.status.is_finished())
    study = repo.get_study(STUDY)
    assert study is not None and study.status == "finished"
    assert tagged(env["TUNER_TEST_TAG"]) == []
