"""``tuner doctor``'s judgement, JSON and screen from injected facts, and the probe's logic
against fake vLLM platforms shaped like 0.32 (CPU and CUDA) and older releases."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import pytest

from tuner.catalog.gpus import get_gpu
from tuner.cli.doctor import render
from tuner.doctor import probe as doctor_probe
from tuner.doctor.checks import PortFacts, Problem, StorageFacts
from tuner.doctor.report import (
    FLASH_ATTN_NOTE,
    GpuFacts,
    Report,
    VllmFacts,
    find_problems,
    gather_gpus,
    parse_probe_output,
)
from tuner.telemetry.nvml import DetectedGpu

GIB = 1024**3
H200 = DetectedGpu(0, "NVIDIA H200", "GPU-1234", 141 * GIB, (9, 0), "580.95.05", "13.0")
PORTS = PortFacts("127.0.0.1", (40001, 40002, 40003), (32768, 60999), True)
STORAGE = StorageFacts("sqlite:////tmp/t.db", "0001", "0001")


def probe(
    *,
    platform: str = "cpu",
    cuda_available: bool = False,
    backends: tuple[str, ...] = ("CPU_ATTN",),
    torch_error: str | None = None,
    vllm_error: str | None = None,
) -> dict[str, Any]:
    return {
        "python": "/venv/bin/python",
        "torch": {
            "version": None if torch_error else "2.13.0+cpu",
            "cuda": None,
            "cuda_available": None if torch_error else cuda_available,
            "error": torch_error,
        },
        "flash_attn": {"installed": False, "version": None, "error": None},
        "vllm": {
            "version": "0.32.0",
            "platform": platform,
            "vllm_flash_attn": True,
            "backends": list(backends),
            "backends_source": "platform",
            "backends_note": "valid here",
            "error": vllm_error,
        },
    }


def vllm_facts(**kwargs: Any) -> VllmFacts:
    return VllmFacts("/venv/bin/python", "0.32.0", "/venv/site/vllm", probe(**kwargs))


def report(gpu: str | None, gpus: GpuFacts, vllm: VllmFacts, **kw: Any) -> Report:
    storage = kw.get("storage", STORAGE)
    ports = kw.get("ports", PORTS)
    profile = get_gpu(gpu) if gpu else None
    problems = find_problems(profile, gpus, vllm, storage, ports)
    return Report(profile, gpus, vllm, storage, ports, tuple(problems))


# -- judging ---------------------------------------------------------------------------------


def test_cpu_machine_with_cpu_vllm_has_nothing_blocking_a_cpu_study() -> None:
    r = report("cpu", GpuFacts(), vllm_facts())
    assert r.ok and r.problems == ()


def test_h200_asked_on_a_cpu_machine_is_a_problem_with_the_fix() -> None:
    r = report("h200", GpuFacts(), vllm_facts())
    whats = " | ".join(p.what for p in r.problems)
    assert not r.ok
    assert "--gpu h200 asks for an NVIDIA H200" in whats and "no NVIDIA GPU" in whats
    assert "cannot use CUDA" in whats  # the CPU build of torch could not serve it either
    assert any("--gpu cpu" in p.fix for p in r.problems)


def test_h200_present_with_cuda_torch_passes() -> None:
    vllm = vllm_facts(platform="cuda", cuda_available=True, backends=("FLASH_ATTN",))
    r = report("h200", GpuFacts(gpus=(H200,)), vllm)
    assert r.ok, r.problems


def test_missing_vllm_and_storage_behind_head_and_busy_ports_each_say_the_fix() -> None:
    missing = VllmFacts("/usr/bin/python3", error="vLLM is not installed", fix="pip install vllm")
    behind = StorageFacts(
        "sqlite:///x.db", "0000", "0001", problem=Problem("at 0000, tuner needs 0001", "upgrade")
    )
    busy = PortFacts("127.0.0.1", (), None, False, error="cannot bind a port")
    r = report(None, GpuFacts(), missing, storage=behind, ports=busy)
    assert [(p.what.split(":")[0], bool(p.fix)) for p in r.problems] == [
        ("vLLM", True),
        ("at 0000, tuner needs 0001", True),
        ("ports", True),
    ]


def test_broken_nvml_blocks_gpu_studies_but_not_cpu_ones() -> None:
    broken = GpuFacts(error="NVML failed while initialising", fix="check nvidia-smi")
    assert report("cpu", broken, vllm_facts()).ok
    problems = report("h100", broken, vllm_facts(platform="cuda", cuda_available=True)).problems
    assert [p.what for p in problems] == ["NVML failed while initialising"]


def test_vllm_that_does_not_import_and_a_cuda_vllm_for_a_cpu_study() -> None:
    r = report(None, GpuFacts(), vllm_facts(torch_error="ImportError: libtorch.so"))
    assert "torch does not import" in r.problems[0].what
    r = report(None, GpuFacts(), vllm_facts(vllm_error="RuntimeError: torchvision::nms"))
    assert "vLLM does not import" in r.problems[0].what and "reinstall" in r.problems[0].fix
    r = report("cpu", GpuFacts(gpus=(H200,)), vllm_facts(platform="cuda", cuda_available=True))
    assert "runs on cuda, not on the CPU" in r.problems[0].what


# -- JSON and screen ---------------------------------------------------------------------------


def test_json_has_the_documented_fields() -> None:
    vllm = vllm_facts(platform="cuda", cuda_available=True, backends=("FLASH_ATTN", "FLASHINFER"))
    data = json.loads(json.dumps(report("h200", GpuFacts(gpus=(H200,)), vllm).to_json()))
    assert set(data) >= {"gpus", "driver", "cuda", "torch", "vllm", "flash_attn", "storage"}
    assert set(data) >= {"ports", "problems", "ok"}
    assert data["gpus"][0]["compute_capability"] == [9, 0]
    assert data["gpus"][0]["uuid"] == "GPU-1234"
    assert (data["driver"], data["cuda"]) == ("580.95.05", "13.0")
    assert data["torch"]["version"] == "2.13.0+cpu"
    v = data["vllm"]
    assert (v["version"], v["python"], v["location"]) == (
        "0.32.0",
        "/venv/bin/python",
        "/venv/site/vllm",
    )
    assert v["backends"] == ["FLASH_ATTN", "FLASHINFER"]
    assert data["flash_attn"] == {
        "installed": False,
        "version": None,
        "note": FLASH_ATTN_NOTE,
        "error": None,
    }
    assert data["storage"]["ok"] and data["storage"]["revision"] == data["storage"]["head"]
    assert data["ports"]["ok"] and data["ports"]["checked"] == [40001, 40002, 40003]
    assert data["problems"] == [] and data["ok"] is True


def test_screen_shows_every_section_and_each_problem_with_its_fix() -> None:
    text = "\n".join(render(report("h200", GpuFacts(), vllm_facts()).to_json()))
    for words in ("GPUs", "none", "torch", "2.13.0+cpu", "vLLM", "0.32.0", "CPU_ATTN"):
        assert words in text
    for words in ("flash-attn", "vllm.vllm_flash_attn", "storage", "ports", "32768-60999"):
        assert words in text
    assert "problem(s) stop a study" in text and "fix:" in text
    ok_text = "\n".join(render(report("cpu", GpuFacts(), vllm_facts()).to_json()))
    assert "nothing blocks a study" in ok_text and "fix:" not in ok_text


def test_screen_of_a_gpu_machine_and_of_missing_vllm() -> None:
    gpu_text = "\n".join(
        render(report(None, GpuFacts(gpus=(H200,)), vllm_facts(platform="cuda")).to_json())
    )
    assert "NVIDIA H200, 141.0 GiB, compute capability 9.0" in gpu_text
    assert "driver" in gpu_text and "580.95.05" in gpu_text
    missing = VllmFacts("/usr/bin/python3", error="vLLM is not installed", fix="pip install vllm")
    text = "\n".join(render(report(None, GpuFacts(), missing).to_json()))
    assert "not found" in text and "pip install vllm" in text


def test_probe_output_is_found_after_vllm_log_lines() -> None:
    out = "INFO something\nTriton is installed\n" + doctor_probe.MARK + '{"a": 1}\n'
    assert parse_probe_output(out) == {"a": 1}
    assert parse_probe_output("Traceback ...\nImportError: no torch\n") is None
    assert parse_probe_output(doctor_probe.MARK + "{broken") is None


# -- NVML --------------------------------------------------------------------------------------


class FakeNvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"fake NVML error {value}")
        self.value = value


class FakeNvml:
    NVMLError = FakeNvmlError

    def __init__(self, init_error: int | None = None) -> None:
        self.init_error = init_error

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNvmlError(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.95.05"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return "GPU-1234"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return type("Memory", (), {"total": 141 * GIB, "used": 0})()

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return (9, 0)


def test_gpus_come_from_nvml_and_its_failures_become_facts() -> None:
    facts = gather_gpus(FakeNvml())  # type: ignore[arg-type]
    assert facts.error is None and facts.gpus == (H200,)
    assert gather_gpus(FakeNvml(init_error=9)).gpus == ()  # type: ignore[arg-type]  # no driver
    broken = gather_gpus(FakeNvml(init_error=3))  # type: ignore[arg-type]
    assert broken.gpus == () and broken.error is not None and "NVML failed" in broken.error


# -- the probe's logic against fake platforms ------------------------------------------------


class FakeTorch:
    bfloat16 = "bf16"
    float16 = "fp16"


class Backend(enum.Enum):
    FLASH_ATTN = "pkg.flash.FlashBackend"
    FLASHINFER = "pkg.flashinfer.FlashInferBackend"
    CPU_ATTN = "pkg.cpu.CPUBackend"
    TORCH_SDPA = ""  # no class: never listed

    def get_path(self) -> str:
        return str(self.value)


class Capability(NamedTuple):
    major: int
    minor: int


class SelectorConfig(NamedTuple):
    head_size: int
    dtype: Any
    kv_cache_dtype: str | None
    block_size: int | None
    use_mla: bool = False


class Candidate(NamedTuple):
    backend_class: type
    backend: Backend
    priority: int


class CpuPlatform032:
    device_name = "cpu"
    asked: Mapping[str, Any] = {}

    @classmethod
    def get_device_capability(cls) -> None:
        return None

    @classmethod
    def get_attn_backend_cls(
        cls, selected_backend: Any, attn_selector_config: Any, num_heads: int | None = None
    ) -> str:
        cls.asked = {"selected": selected_backend, "config": attn_selector_config}
        return Backend.CPU_ATTN.get_path()


class CudaPlatform032:
    @classmethod
    def get_device_capability(cls) -> Capability:
        return Capability(9, 0)

    @classmethod
    def get_valid_backends(
        cls, device_capability: Capability, attn_selector_config: Any, num_heads: Any = None
    ) -> tuple[list[Candidate], dict[Backend, Any]]:
        assert attn_selector_config.dtype == "bf16" and device_capability.major == 9
        return [
            Candidate(object, Backend.FLASH_ATTN, 0),
            Candidate(object, Backend.FLASHINFER, 1),
        ], {}


class CudaPlatform013:
    """vLLM 0.13's spelling: every knob a parameter, (backend, priority) tuples back."""

    @classmethod
    def get_device_capability(cls) -> Capability:
        return Capability(8, 6)

    @classmethod
    def get_valid_backends(
        cls,
        head_size: int,
        dtype: Any,
        kv_cache_dtype: Any,
        block_size: int,
        use_mla: bool,
        has_sink: bool,
        use_sparse: bool,
        device_capability: Capability,
        attn_type: str,
    ) -> tuple[list[tuple[Backend, int]], dict[Backend, list[str]]]:
        if block_size is None:
            raise TypeError("block_size must be an int here")
        assert dtype == "bf16" and attn_type == "decoder"
        return [(Backend.FLASHINFER, 0)], {Backend.FLASH_ATTN: ["head size"]}


def test_cpu_platform_names_its_one_backend() -> None:
    names = doctor_probe.platform_backends(CpuPlatform032, Backend, FakeTorch, SelectorConfig)
    assert names == ["CPU_ATTN"]
    assert CpuPlatform032.asked["selected"] is None


def test_cuda_platforms_of_both_spellings_list_the_valid_backends() -> None:
    assert doctor_probe.platform_backends(CudaPlatform032, Backend, FakeTorch, SelectorConfig) == [
        "FLASH_ATTN",
        "FLASHINFER",
    ]
    assert doctor_probe.platform_backends(CudaPlatform013, Backend, FakeTorch) == ["FLASHINFER"]


def test_call_by_name_passes_what_the_signature_names_and_refuses_unknown_needs() -> None:
    def f(head_size: int, dtype: str, extra: int = 3) -> tuple[int, str, int]:
        return head_size, dtype, extra

    assert doctor_probe.call_by_name(f, {"head_size": 64, "dtype": "x", "other": 1}) == (64, "x", 3)
    assert (
        doctor_probe.call_by_name(
            SelectorConfig,
            {"head_size": 1, "dtype": "d", "kv_cache_dtype": "auto", "block_size": None},
        ).head_size
        == 1
    )
    with pytest.raises(TypeError, match="needs 'dtype'"):
        doctor_probe.call_by_name(f, {"head_size": 64})


def test_torch_unchecked_and_a_busy_launch_port_say_what_happened_and_what_to_run() -> None:
    """Without vLLM for the interpreter the probe never ran, yet the screen said "torch not
    importable"; and a busy launch port said "(use --port)", an option the doctor lacks."""
    missing = VllmFacts("/usr/bin/python3", error="vLLM is not installed", fix="pip install vllm")
    ports = PortFacts("127.0.0.1", (40001,), (32768, 60999), launch_port_free=False)
    from rich.text import Text

    shown = "\n".join(render(report(None, GpuFacts(), missing, ports=ports).to_json()))
    text = Text.from_markup(shown).plain
    assert "not checked (no vLLM found for that python)" in text
    assert "not importable" not in text
    assert "in use (`tuner launch --port N`)" in text
