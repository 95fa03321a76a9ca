"""tuner.runner.amx: on a host whose CPU has AMX tiles, every Python process of a vLLM server
asks Linux for the tile state (vLLM 0.32's CPU worker does not, and dies with SIGILL at its
first step); elsewhere the server's environment is left alone. The e2e tests on CPU vLLM run
the real path on any AMX host (this project's CI machines are of that class)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.runner import amx

_GET_PERM = """
import ctypes, os
mask = ctypes.c_uint64(0)
ctypes.CDLL(None).syscall(158, 0x1022, ctypes.byref(mask))  # ARCH_GET_XCOMP_PERM
print(int(bool(mask.value & (1 << 18))), os.environ.get("CHAINED", "-"))
"""


def test_the_hook_goes_first_on_the_path_only_on_an_amx_host() -> None:
    assert amx.server_env({"PYTHONPATH": "/a:/b"}, amx=False) == {}
    added = amx.server_env({"PYTHONPATH": "/a:/b"}, amx=True)
    assert added["PYTHONPATH"].split(os.pathsep) == [str(amx.HOOK_DIR), "/a", "/b"]
    assert amx.server_env({}, amx=True)["PYTHONPATH"] == str(amx.HOOK_DIR)
    assert (amx.HOOK_DIR / "sitecustomize.py").is_file()


def test_the_flag_is_read_from_cpuinfo(tmp_path: Path) -> None:
    with_amx = tmp_path / "amx"
    with_amx.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16 amx_tile amx_int8\n")
    without = tmp_path / "plain"
    without.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\n")
    assert amx.host_has_amx(str(with_amx)) and not amx.host_has_amx(str(without))
    assert not amx.host_has_amx(str(tmp_path / "missing"))


@pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() != "x86_64" or not amx.host_has_amx(),
    reason="needs Linux on an x86_64 CPU with AMX tiles",
)
def test_a_process_started_with_it_holds_the_amx_state_and_runs_the_shadowed_one(
    tmp_path: Path,
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    plain = subprocess.run([sys.executable, "-c", _GET_PERM], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(other)}, check=True)  # fmt: skip
    assert plain.stdout.split() == ["0", "yes"]  # Linux grants it only on request
    env = {**os.environ, "PYTHONPATH": str(other)}
    env |= amx.server_env(env, amx=True)
    hooked = subprocess.run([sys.executable, "-c", _GET_PERM], capture_output=True, text=True,
                            env=env, check=True)  # fmt: skip
    assert hooked.stdout.split() == ["1", "yes"]
