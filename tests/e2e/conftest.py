"""End-to-end tests on real vLLM (the CPU build in CI). They need TUNER_VLLM_PYTHON, the
interpreter of an environment with vLLM (scripts/bootstrap.sh makes one). Without it they are
skipped, unless TUNER_REQUIRE_E2E=1 (set by scripts/test.sh), which turns the skip into a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def vllm_python() -> str:
    python = os.environ.get("TUNER_VLLM_PYTHON")
    if not python:
        if os.environ.get("TUNER_REQUIRE_E2E") == "1":
            pytest.fail("TUNER_VLLM_PYTHON is not set: run the tests through scripts/test.sh")
        pytest.skip("TUNER_VLLM_PYTHON not set: real-vLLM tests skipped")
    return python


@pytest.fixture(scope="session")
def e2e_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One TUNER_HOME for every real-vLLM test of the session: the model directory is written
    once, vLLM's flag list read once, and the compile caches (with vLLM's model-inspection
    cache, about 25 s of a cold start on 2 cores) warm after the first launch of each key, as
    they are for a user's second study on one machine. Each test keeps its own database."""
    return tmp_path_factory.mktemp("tuner-home")
