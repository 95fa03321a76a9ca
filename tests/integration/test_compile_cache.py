"""Warm starts through the real runner: launches of one cache key share a compile cache, whose
second start is faster (the fake server, like vLLM, reuses what VLLM_CACHE_ROOT holds); "cold"
starts every launch from an empty directory and removes it after."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tests.studykit import fake_server_runner
from tuner.domain import ServingConfig, TrialStatus, Workload

W = Workload(
    name="tiny", prompt_tokens=8, output_tokens=4, concurrency=2, requests_per_window=4,
    windows=1, warmup_requests=1, length_jitter=0.0,
)  # fmt: skip


def _runner(tmp_path: Path, mode: str):  # type: ignore[no-untyped-def]
    runner = fake_server_runner(tmp_path, env={"TUNER_FAKE_STARTUP_S": "4.5"})
    runner.settings = dataclasses.replace(
        runner.settings, compile_cache=mode, cache_root=tmp_path / "cache"
    )
    return runner


def test_shared_caches_make_the_second_start_warm_and_faster(tmp_path: Path) -> None:
    runner = _runner(tmp_path, "shared")
    first = runner.run(ServingConfig(max_num_seqs=4), W)
    second = runner.run(ServingConfig(max_num_seqs=16), W)  # same key: no kernel knob changed
    other = runner.run(ServingConfig(enforce_eager=True), W)  # a key of its own
    for r in (first, second, other):
        assert r.status is TrialStatus.COMPLETE, r.failure_detail
        assert r.server is not None and r.server.startup_s is not None
    assert [r.server.compile_cache for r in (first, second, other)] == ["cold", "warm", "cold"]  # type: ignore[union-attr]
    # Cold 4.5 s, warm 1.5 s: a 3 s gap, twice what a loaded 2-core machine adds to an import.
    assert second.server.startup_s < first.server.startup_s - 1.5  # type: ignore[union-attr,operator]
    assert len(list((tmp_path / "cache").iterdir())) == 2
    # The recommendation's environment never carries tuner's cache paths.
    assert "VLLM_CACHE_ROOT" not in first.server.env  # type: ignore[union-attr]


def test_cold_starts_each_launch_from_nothing_and_cleans_up(tmp_path: Path) -> None:
    runner = _runner(tmp_path, "cold")
    runs = [runner.run(ServingConfig(), W) for _ in range(2)]
    assert [r.server.compile_cache for r in runs] == ["cold", "cold"]  # type: ignore[union-attr]
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_cold_cache_left_by_a_killed_tuner_is_removed_by_the_next(tmp_path: Path) -> None:
    """After `kill -9` nothing removed a cold launch's folder (a full set of compile artefacts
    per kill on real vLLM). One whose owner is gone goes at the next cold launch; a live
    tuner's, and one of an older tuner (no owner in its name), stay."""
    import os
    import subprocess
    import sys

    from tuner.telemetry import since_boot

    root = tmp_path / "cache"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    start = since_boot(gone.pid)
    gone.wait()
    left = root / f"cold-{gone.pid}.{start:.2f}-0123456789ab"
    live = root / f"cold-{os.getpid()}.{since_boot(os.getpid()):.2f}-ba9876543210"
    older = root / "cold-0123456789ab"
    for path in (left, live, older):
        (path / "inductor").mkdir(parents=True)
    runner = _runner(tmp_path, "cold")
    assert runner.run(ServingConfig(), W).status is TrialStatus.COMPLETE
    assert sorted(p.name for p in root.iterdir()) == sorted([live.name, older.name])
