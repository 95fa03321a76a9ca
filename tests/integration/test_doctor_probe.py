"""``tuner doctor`` against fake vLLM interpreters: the real probe runs in a real Python whose
``torch`` and ``vllm`` are tiny packages written here, shaped like vLLM 0.32 on CPU, like an
older vLLM whose platform API the probe cannot call, and like a vLLM that does not import.
Plus the storage and port checks, and the command itself with ``--json``."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.studykit import damage_sqlite
from tuner.catalog.gpus import get_gpu, match_detected
from tuner.db.migrate import head_revision, upgrade
from tuner.db.models import VERSION_TABLE
from tuner.doctor.checks import gather_ports, gather_storage
from tuner.doctor.report import FLASH_ATTN_NOTE, gather_vllm
from tuner.telemetry.nvml import detect_gpus

REPO = Path(__file__).resolve().parents[2]

TORCH = """
__version__ = "2.13.0+cpu"
bfloat16, float16 = "bf16", "fp16"
class version:
    cuda = None
class cuda:
    @staticmethod
    def is_available():
        return False
"""
REGISTRY = """
import enum
class AttentionBackendEnum(enum.Enum):
    FLASH_ATTN = "vllm.backends.flash.FlashAttentionBackend"
    CPU_ATTN = "vllm.backends.cpu.CPUAttentionBackend"
    TORCH_SDPA = ""
    def get_path(self):
        return self.value
"""
SELECTOR = """
from typing import NamedTuple, Any
class AttentionSelectorConfig(NamedTuple):
    head_size: int
    dtype: Any
    kv_cache_dtype: Any
    block_size: Any
"""
CPU_PLATFORM = """
class CpuPlatform:
    device_name = "cpu"
    def get_device_capability(self):
        return None
    def get_attn_backend_cls(self, selected_backend, attn_selector_config, num_heads=None):
        print("INFO Using CPU_ATTN backend.")  # vLLM logs to stdout; the probe must cope
        return "vllm.backends.cpu.CPUAttentionBackend"
current_platform = CpuPlatform()
"""
# An older API the probe does not know how to call: a parameter it has no value for.
OLD_PLATFORM = """
class CudaPlatform:
    device_name = "cuda"
    def get_device_capability(self):
        return (8, 0)
    def get_attn_backend_cls(self, selected_backend, head_size, dtype, use_v3_scheduler):
        raise AssertionError("never called")
current_platform = CudaPlatform()
"""


def fake_python(tmp_path: Path, files: dict[str, str]) -> str:
    """An executable that runs this interpreter with ``files`` (path -> source) importable."""
    site = tmp_path / "site"
    for name, text in files.items():
        path = site / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def vllm_032(version: str = "0.32.0") -> dict[str, str]:
    return {
        "torch/__init__.py": TORCH,
        "vllm/__init__.py": f'__version__ = "{version}"\n',
        "vllm/version.py": f'__version__ = "{version}"\n',
        "vllm/vllm_flash_attn/__init__.py": "",
        "vllm/platforms/__init__.py": CPU_PLATFORM,
        "vllm/v1/__init__.py": "",
        "vllm/v1/attention/__init__.py": "",
        "vllm/v1/attention/backends/__init__.py": "",
        "vllm/v1/attention/backends/registry.py": REGISTRY,
        "vllm/v1/attention/selector.py": SELECTOR,
    }


def test_cpu_vllm_032_reports_cpu_attn_from_its_platform(tmp_path: Path) -> None:
    facts = gather_vllm(fake_python(tmp_path, vllm_032()))
    assert facts.error is None, facts.error
    assert facts.version == "0.32.0" and facts.location and facts.location.endswith("vllm")
    assert facts.section("torch") == {
        "version": "2.13.0+cpu",
        "cuda": None,
        "cuda_available": False,
        "error": None,
    }
    v = facts.section("vllm")
    assert (v["platform"], v["backends"], v["backends_source"]) == ("cpu", ["CPU_ATTN"], "platform")
    assert v["vllm_flash_attn"] is True
    assert facts.section("flash_attn") == {"installed": False, "version": None, "error": None}


def test_older_platform_api_falls_back_to_the_enum_with_a_note(tmp_path: Path) -> None:
    files = vllm_032("0.13.0")
    del files["vllm/v1/attention/backends/registry.py"], files["vllm/v1/attention/selector.py"]
    files["vllm/attention/__init__.py"] = ""
    files["vllm/attention/backends/__init__.py"] = ""
    files["vllm/attention/backends/registry.py"] = REGISTRY  # where 0.13 kept it
    files["vllm/platforms/__init__.py"] = OLD_PLATFORM
    files["flash_attn/__init__.py"] = '__version__ = "2.8.3"\n'
    v = gather_vllm(fake_python(tmp_path, files))
    info = v.section("vllm")
    assert info["backends"] == ["FLASH_ATTN", "CPU_ATTN"] and info["backends_source"] == "enum"
    assert "could not ask the platform" in info["backends_note"]
    assert "use_v3_scheduler" in info["backends_note"]
    assert v.section("flash_attn") == {"installed": True, "version": "2.8.3", "error": None}


def test_vllm_that_fails_to_import_is_reported_not_raised(tmp_path: Path) -> None:
    files = vllm_032()
    files["vllm/__init__.py"] = "raise RuntimeError('operator torchvision::nms does not exist')\n"
    facts = gather_vllm(fake_python(tmp_path, files))
    assert facts.error is None and facts.version == "0.32.0"  # found, without importing it
    assert "torchvision::nms" in facts.section("vllm")["error"]


def test_interpreter_without_vllm_or_at_all(tmp_path: Path) -> None:
    facts = gather_vllm(fake_python(tmp_path, {"torch/__init__.py": TORCH}))
    assert facts.error is not None and "not installed" in facts.error
    assert "--vllm-python" in facts.fix
    assert gather_vllm(str(tmp_path / "nope")).error is not None


def test_storage_missing_current_and_from_a_newer_tuner(tmp_path: Path) -> None:
    missing = tmp_path / "none" / "t.db"
    facts = gather_storage(f"sqlite:///{missing}")
    assert facts.problem is None and "does not exist" in facts.note
    assert not missing.exists() and not missing.parent.exists()  # doctor only looks

    db = tmp_path / "t.db"
    upgrade(f"sqlite:///{db}")
    facts = gather_storage(f"sqlite:///{db}")
    assert facts.problem is None and facts.revision == facts.head == head_revision()

    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = 'ffff'")
    facts = gather_storage(f"sqlite:///{db}")
    assert facts.problem is not None and facts.revision == "ffff"
    assert "does not know" in facts.problem.what and "upgrade tuner" in facts.problem.fix

    # A damaged file is a problem, not "ok" (`tuner db current` and `upgrade` refuse it).
    damaged = tmp_path / "damaged.db"
    upgrade(f"sqlite:///{damaged}")
    damage_sqlite(damaged, index_of="tuner_trials")  # tables still read: only the check sees it
    facts = gather_storage(f"sqlite:///{damaged}")
    assert facts.problem is not None and "is damaged" in facts.problem.what


def test_storage_in_an_empty_file_is_noted_and_left_empty(tmp_path: Path) -> None:
    empty = tmp_path / "t.db"
    empty.touch()  # as `touch` or another tool leaves it: opening it would write 4 KiB
    facts = gather_storage(f"sqlite:///{empty}")
    assert (
        facts.problem is None and facts.note == "is empty: `tuner run` creates tuner's tables in it"
    )
    assert empty.stat().st_size == 0 and sorted(tmp_path.iterdir()) == [empty]  # doctor only looks


def test_storage_whose_alembic_version_is_another_applications_is_a_problem(
    tmp_path: Path,
) -> None:
    """Not "ok (no tuner tables yet)": `tuner run` refuses that database."""
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES ('1a2b3c4d5e6f')")
    conn.close()
    facts = gather_storage(f"sqlite:///{db}")
    assert facts.problem is not None and "another application" in facts.problem.what
    assert "database of its own" in facts.problem.fix


def test_storage_with_tuner_tables_but_no_revision_is_a_problem(tmp_path: Path) -> None:
    """A half-made or half-dropped schema: `tuner run` refuses it (it cannot tell what its
    tables hold), so doctor does not call it "ok (no tuner tables yet)"."""
    db = tmp_path / "half.db"
    upgrade(f"sqlite:///{db}")
    with sqlite3.connect(db) as conn:
        conn.execute(f"DROP TABLE {VERSION_TABLE}")
    conn.close()
    facts = gather_storage(f"sqlite:///{db}")
    assert facts.problem is not None and "but no revision record" in facts.problem.what
    assert "move them out of the way" in facts.problem.fix


def test_ports_are_taken_and_bound_like_trials_do() -> None:
    facts = gather_ports()
    assert facts.error is None and len(set(facts.checked)) == 3
    with socket.socket() as sock:  # every port was released again
        sock.bind(("127.0.0.1", facts.checked[0]))
    bad = gather_ports(host="192.0.2.1")  # TEST-NET: no address of this machine
    assert bad.error is not None and bad.checked == ()


def _doctor(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TUNER_DB_URL", "TUNER_VLLM_PYTHON")}
    return subprocess.run(
        [sys.executable, "-m", "tuner", "doctor", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_doctor_json_for_cpu_and_exit_1_for_a_gpu_this_machine_lacks(tmp_path: Path) -> None:
    python = fake_python(tmp_path, vllm_032())
    ok = _doctor(["--json", "--gpu", "cpu", "--vllm-python", python], tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    data = json.loads(ok.stdout)
    assert data["ok"] is True and data["problems"] == []
    assert data["vllm"]["version"] == "0.32.0" and data["vllm"]["backends"] == ["CPU_ATTN"]
    assert data["flash_attn"]["note"] == FLASH_ATTN_NOTE
    assert data["storage"]["ok"] and data["ports"]["ok"]
    assert list(tmp_path.glob("tuner.db*")) == []  # the default store was looked at, not made

    if any(match_detected(get_gpu("h200"), [g.name]) for g in detect_gpus()):
        pytest.skip("this machine has an H200")
    bad = _doctor(["--gpu", "h200", "--vllm-python", python], tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    text = " ".join(bad.stdout.split())
    assert "--gpu h200 asks for an NVIDIA H200" in text and "fix:" in text

    unknown = _doctor(["--gpu", "h900"], tmp_path)
    assert unknown.returncode == 2 and "unknown GPU profile" in unknown.stderr
