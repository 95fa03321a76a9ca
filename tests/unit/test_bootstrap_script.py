"""scripts/bootstrap.sh, sourced as the README's "Using it" shows it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _bash(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script],
        cwd=REPO,
        env={**os.environ, "TUNER_VLLM_VENV": str(tmp_path / "vllm"), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_sourcing_it_leaves_the_shell_s_options_as_they_were(tmp_path: Path) -> None:
    """It set -euo pipefail in the shell that sourced it: the next command that failed (`tuner
    doctor` with a problem, a grep that found nothing) closed the user's terminal."""
    done = _bash(
        "source scripts/bootstrap.sh; false; echo still here; echo $TUNER_VLLM_PYTHON; set -o",
        tmp_path,
        TUNER_BOOTSTRAP_TUNER="0",
        TUNER_BOOTSTRAP_VLLM="0",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["still here", str(tmp_path / "vllm" / "bin" / "python")]
    options = dict(line.split() for line in lines[2:])
    assert options["errexit"] == options["nounset"] == options["pipefail"] == "off"


def test_an_install_that_fails_stops_there_and_says_so_by_its_status(tmp_path: Path) -> None:
    done = _bash(
        "source scripts/bootstrap.sh; echo status $?",
        tmp_path,
        TUNER_BOOTSTRAP_TUNER="0",
        PYTHON=str(tmp_path / "no-python"),
    )
    assert done.stdout == "status 127\n"
    assert "no-python: No such file or directory" in done.stderr
    assert "bin/pip" not in done.stderr  # nothing after the failed step ran
