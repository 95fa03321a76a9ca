"""docs/results/gpu-sockets-h100.md's table, re-derived from the raw files of the H100 run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "studies" / "results" / "gpu-sockets" / "2026-12-07"
REPORT = (ROOT / "docs" / "results" / "gpu-sockets-h100.md").read_text()


def _logged() -> list[tuple[int, int, bool]]:
    """(epoch, socket files, directory present) for each look of the logger, every 2 s."""
    looks: list[list[int | bool]] = []
    for line in (RUN / "sockets-during.txt").read_text().splitlines():
        if re.fullmatch(r"\d{10}", line.strip()):
            looks.append([int(line), 0, False])
        elif looks and line.startswith("total"):
            looks[-1][2] = True
        elif looks and line.startswith("s"):
            looks[-1][1] = int(looks[-1][1]) + 1
    return [(int(t), int(n), bool(d)) for t, n, d in looks]


def test_the_clean_runs_row_is_what_the_logger_saw() -> None:
    looks = _logged()
    start, end = looks[0][0], looks[-1][0]
    present = [t for t, _, d in looks if d]
    row = (
        f"present from {present[0] - start} s to {present[-1] - start} s of the "
        f"{end - start} s logged every 2 s | {max(n for _, n, _ in looks)} |"
    )
    assert row in REPORT
    assert not looks[-1][2], "the directory was gone before the logger stopped"
    assert (RUN / "sockets-before.txt").read_text().split() == ["0", "0"]
    after = (RUN / "sockets-after.txt").read_text()
    assert after.split()[:2] == ["0", "0"] and "No such file or directory" in after
    assert "exit 0" in (RUN / "run.txt").read_text()


def test_the_kill_rows_are_what_the_two_looks_saw() -> None:
    during = (RUN / "kill9.txt").read_text()
    sockets = [line for line in during.splitlines() if line.startswith("srw")]
    assert len(sockets) == 3 and "| present | 3 |" in REPORT
    killed_at = during.splitlines()[1]
    after = (RUN / "kill9-after.txt").read_text().splitlines()
    h, m, s = (int(x) for x in after[0].split(":"))
    kh, km, ks = (int(x) for x in killed_at.split(":"))
    gap = (h * 3600 + m * 60 + s) - (kh * 3600 + km * 60 + ks)
    assert f"{gap} s after the kill: no directory, no process on the GPU, no vLLM process" in (
        REPORT
    )
    text = "\n".join(after)
    assert "cannot access '/tmp/tuner-vllm-*'" in text
    gpu = after[after.index("GPU apps:") + 1 : after.index("procs:")]
    assert gpu == []  # nothing on the GPU
    procs = after[after.index("procs:") + 1 : after.index("run log tail:")]
    assert not [p for p in procs if "vllm" in p.lower() and "tuner-vllm" not in p]
    assert "measuring window 1/3" in text  # killed during its first measurement window
