"""AMX on CPU hosts: the environment that lets a vLLM server's processes use it.

On a host whose CPU has AMX tiles (``amx_tile`` in ``/proc/cpuinfo``), vLLM's CPU build runs
AMX kernels in a worker process that never asked Linux for the tile state, and that worker dies
with SIGILL at its first step (seen on this project's 2-core CI machines, Sapphire Rapids class;
the engine then reports ``RuntimeError: cancelled``). :func:`server_env` puts
``amx_site/sitecustomize.py`` first on the server's ``PYTHONPATH``: each of its Python
processes asks for the state as it starts (and then runs the ``sitecustomize`` it shadows).
Elsewhere it adds nothing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path

HOOK_DIR = Path(__file__).parent / "amx_site"


@functools.cache
def host_has_amx(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this host's CPU advertises AMX tiles (False where that cannot be read)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            return "amx_tile" in line.split(":", 1)[-1].split()
    return False


def server_env(env: Mapping[str, str], *, amx: bool | None = None) -> dict[str, str]:
    """What to add to ``env`` (a server's environment) for AMX: the hook first on its
    ``PYTHONPATH`` on an AMX host (``amx``: None reads this host), else nothing."""
    if not (host_has_amx() if amx is None else amx):
        return {}
    path = [str(HOOK_DIR), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(path))}
