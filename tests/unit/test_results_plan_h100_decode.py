"""The decode-bound study's first launch on an H100 (docs/results/plan-h200.md §8, 2026-12-05)
against its committed database: the launch is a real H100 one, the regime was predicted before
it, the defaults' trial was interrupted by the session's deadline, and the section's table is
re-derived here from the stored trial."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import TrialStatus

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "plan-h100" / "2026-12-05"
REPORT = ROOT / "docs" / "results" / "plan-h200.md"
STUDY = "decode-qwen7b-chat-h100"


@pytest.fixture(scope="module")
def repo() -> Repository:
    return Repository(make_engine(f"sqlite:///{DATA / 'tuner-decode-h100.db'}"))


def launch_table(repo: Repository) -> str:
    lines = [
        "| trial | configuration | backend | out tok/s, median [range of 3 windows] | P99 TTFT ms "
        "| P99 ITL ms | P99 E2E ms | start-up s | KV cache tokens | requests running, peak |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in repo.list_trials(STUDY, limit=None):
        if t.status is not TrialStatus.COMPLETE:
            lines.append(f"| #{t.number} | {t.config_label} | | {t.status.value} "
                         f"({t.failure.value if t.failure else ''}) | | | | | | |")  # fmt: skip
            continue
        m, s = t.metrics, t.server
        thr = m["output_throughput"]
        assert s is not None and s.startup_s is not None and s.kv_cache_tokens is not None
        lines.append(
            f"| #{t.number} | {t.config_label} | {t.effective_backend} | {thr.median:,.0f} "
            f"[{thr.low:,.0f}-{thr.high:,.0f}] | {m['ttft_p99_ms'].median:.0f} | "
            f"{m['itl_p99_ms'].median:.1f} | {m['e2e_p99_ms'].median:,.0f} | "
            f"{s.startup_s:.0f} | {s.kv_cache_tokens:,} | "
            f"{(t.server_metrics or {}).get('requests_running_peak', 0):.0f} |"
        )
    return "\n".join(lines) + "\n"


def test_the_launch_is_a_real_h100_one_and_the_defaults_were_interrupted(
    repo: Repository,
) -> None:
    study = repo.get_study(STUDY)
    assert study is not None and study.gpu == "h100" and study.vllm_version == "0.26.0"
    assert study.status == "interrupted"
    recipe, defaults = repo.list_trials(STUDY, limit=None)
    assert recipe.gpu_name == "NVIDIA H100 80GB HBM3" and not recipe.is_baseline
    assert recipe.config_label == "attention_backend=FLASHINFER,async_scheduling=True"
    assert defaults.is_baseline and defaults.failure is not None
    assert defaults.failure.value == "interrupted"
    assert "NVIDIA H100 80GB HBM3" in (DATA / "nvidia-smi.csv").read_text()


def test_the_table_of_the_section(repo: Repository) -> None:
    assert launch_table(repo) in REPORT.read_text()
