"""What ``tuner doctor`` asks of the vLLM interpreter. Runs *there* (``python -c SOURCE``), so
it uses the standard library and what that interpreter has, never tuner itself.

It prints one line, ``TUNER_DOCTOR_PROBE {json}``, after whatever vLLM logs on import::

    {"python": str,
     "torch": {"version", "cuda", "cuda_available", "error"},
     "flash_attn": {"installed", "version", "error"},
     "vllm": {"version", "platform", "vllm_flash_attn", "backends", "backends_source",
              "backends_note", "error"}}

``backends_source`` is ``"platform"`` when the current platform said which attention backends
are valid here, ``"enum"`` when only vLLM's list of every backend it knows could be read.
vLLM's platform API changed shape between 0.13 and 0.32 (positional knobs, then an
``AttentionSelectorConfig``), so calls are made by parameter name from one table of values,
and any failure falls back to the enum with a note. Every section catches its own errors.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

MARK = "TUNER_DOCTOR_PROBE "
HEAD_SIZE = 128  # the most common head size; validity is asked for a plain decoder
_REGISTRIES = ("vllm.v1.attention.backends.registry", "vllm.attention.backends.registry")
_SELECTORS = ("vllm.v1.attention.selector", "vllm.attention.selector")


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()[:500]


def _first_attr(modules: tuple[str, ...], attr: str) -> Any:
    for name in modules:
        try:
            return getattr(importlib.import_module(name), attr)
        except (ImportError, AttributeError):
            continue
    return None


def call_by_name(fn: Callable[..., Any], values: Mapping[str, Any]) -> Any:
    """Call ``fn`` with the entries of ``values`` its signature names; TypeError when it needs
    a parameter ``values`` does not have."""
    kwargs = {}
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name in values:
            kwargs[name] = values[name]
        elif param.default is param.empty:
            raise TypeError(f"{getattr(fn, '__qualname__', fn)} needs {name!r}")
    return fn(**kwargs)


def backend_name(item: Any) -> str:
    """The enum name in one entry of ``get_valid_backends``: a candidate record with a
    ``backend`` field (0.2x+) or a ``(backend, priority)`` tuple (earlier)."""
    backend = getattr(item, "backend", None)
    if backend is None:
        backend = item[0]
    return str(backend.name)


def _path(member: Any) -> Any:
    try:
        return member.get_path()
    except Exception:  # CUSTOM and placeholders have no class path
        return member.value


def platform_backends(
    platform: Any, enum: Any, torch: Any, selector_config: Any = None
) -> list[str]:
    """The attention backends ``platform`` accepts for a plain decoder (see HEAD_SIZE).

    ``selector_config`` is vLLM's ``AttentionSelectorConfig`` class where it has one (0.2x+).
    """
    try:
        capability = platform.get_device_capability()
    except Exception:
        capability = None
    major = getattr(capability, "major", None)
    dtype = torch.float16 if major is not None and major < 8 else torch.bfloat16
    values: dict[str, Any] = {
        "head_size": HEAD_SIZE,
        "dtype": dtype,
        "kv_cache_dtype": "auto",
        "block_size": None,
        "use_mla": False,
        "has_sink": False,
        "use_sparse": False,
        "use_v1": True,
        "use_mm_prefix": False,
        "attn_type": "decoder",
        "num_heads": None,
        "selected_backend": None,
        "device_capability": capability,
    }
    if selector_config is not None:
        values["attn_selector_config"] = call_by_name(selector_config, values)
    if capability is not None and hasattr(platform, "get_valid_backends"):
        try:
            valid, _invalid = call_by_name(platform.get_valid_backends, values)
        except TypeError:  # older spellings want an int block size
            valid, _invalid = call_by_name(
                platform.get_valid_backends, {**values, "block_size": 16}
            )
        return [backend_name(item) for item in valid]
    # Platforms with one choice (CPU, XPU) only answer "which class would you use".
    chosen = call_by_name(platform.get_attn_backend_cls, values)
    chosen = (
        getattr(chosen, "__module__", "") + "." + chosen.__name__ if callable(chosen) else chosen
    )
    return [m.name for m in enum if m.value and _path(m) == chosen]


def _torch(out: dict[str, Any]) -> Any:
    info: dict[str, Any] = {"version": None, "cuda": None, "cuda_available": None, "error": None}
    out["torch"] = info
    try:
        torch = importlib.import_module("torch")
    except Exception as exc:
        info["error"] = _error(exc)
        return None
    info["version"] = str(torch.__version__)
    info["cuda"] = getattr(torch.version, "cuda", None)
    try:
        info["cuda_available"] = bool(torch.cuda.is_available())
    except Exception as exc:
        info["error"] = _error(exc)
    return torch


def _flash_attn(out: dict[str, Any]) -> None:
    info: dict[str, Any] = {"installed": False, "version": None, "error": None}
    out["flash_attn"] = info
    if importlib.util.find_spec("flash_attn") is None:
        return
    try:
        module = importlib.import_module("flash_attn")
    except Exception as exc:  # present but broken (an ABI mismatch with torch, typically)
        info["error"] = _error(exc)
        return
    info["installed"] = True
    version = getattr(module, "__version__", None)
    if version is None:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            version = importlib.metadata.version("flash-attn")
    info["version"] = None if version is None else str(version)


def _vllm(out: dict[str, Any], torch: Any) -> None:
    info: dict[str, Any] = {
        "version": None,
        "platform": None,
        "vllm_flash_attn": None,
        "backends": [],
        "backends_source": None,
        "backends_note": "",
        "error": None,
    }
    out["vllm"] = info
    try:
        vllm = importlib.import_module("vllm")
        info["version"] = str(getattr(vllm, "__version__", "")) or None
        info["vllm_flash_attn"] = importlib.util.find_spec("vllm.vllm_flash_attn") is not None
        platform = importlib.import_module("vllm.platforms").current_platform
    except Exception as exc:
        info["error"] = _error(exc)
        return
    info["platform"] = str(getattr(platform, "device_name", "") or type(platform).__name__)
    enum = _first_attr(_REGISTRIES, "AttentionBackendEnum")
    if enum is None:
        info["backends_note"] = "this vLLM has no AttentionBackendEnum to list backends from"
        return
    why = "no torch to ask with"
    if torch is not None:
        try:
            selector_config = _first_attr(_SELECTORS, "AttentionSelectorConfig")
            names = platform_backends(platform, enum, torch, selector_config)
            if names:
                info["backends"], info["backends_source"] = names, "platform"
                info["backends_note"] = f"valid here for head size {HEAD_SIZE}, auto KV cache"
                return
            why = "the platform named no valid backend"
        except Exception as exc:
            why = _error(exc)
    info["backends"] = [m.name for m in enum if m.value]
    info["backends_source"] = "enum"
    info["backends_note"] = (
        f"could not ask the platform which backends work here ({why}); "
        "listed: every backend this vLLM knows"
    )


def main() -> None:
    out: dict[str, Any] = {"python": sys.executable}
    torch = _torch(out)
    _flash_attn(out)
    _vllm(out, torch)
    print(MARK + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
