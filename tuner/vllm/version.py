"""vLLM versions: an installation as :func:`tuner.runner.interpreter.detect_vllm` finds it,
and version strings read the way vLLM writes them."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from tuner.errors import EnvironmentProblem


@dataclass(frozen=True)
class VllmInstall:
    """A vLLM installation: the interpreter that runs it, its version and package directory."""

    python: str
    version: str
    location: str


def parse_version(text: str) -> Version:
    """Parse a vLLM version string, local parts included ("0.32.0+cpu", "v0.26.0").

    Raises :class:`EnvironmentProblem` when the text is not a version at all (a source
    checkout without its generated version file reports "dev").
    """
    cleaned = text.strip()
    if cleaned[:1] in ("v", "V"):
        cleaned = cleaned[1:]
    try:
        return Version(cleaned)
    except InvalidVersion:
        raise EnvironmentProblem(
            f"cannot read the vLLM version {text!r}",
            hint="install a released vLLM (pip install vllm) or build it from a git checkout "
            "with its tags so that it knows its own version",
        ) from None
