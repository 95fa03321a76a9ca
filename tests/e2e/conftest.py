"""End-to-end tests on real vLLM (the CPU build in CI). They need TUNER_VLLM_PYTHON, the
interpreter of an environment with vLLM (scripts/bootstrap.sh makes one). Without it they are
skipped, unless TUNER_REQUIRE_E2E=1 (set by scripts/test.sh), which turns the skip into a failure.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def vllm_python() -> str:
    python = os.environ.get("TUNER_VLLM_PYTHON")
    if not python:
        if os.environ.get("TUNER_REQUIRE_E2E") == "1":
            pytest.fail("TUNER_VLLM_PYTHON is not set: run the tests through scripts/test.sh")
        pytest.skip("TUNER_VLLM_PYTHON not set: real-vLLM tests skipped")
    return python
