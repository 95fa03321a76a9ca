"""What ended a running server's engine, read from its vLLM log (logparse.engine_death)."""

from __future__ import annotations

from tuner.vllm.logparse import engine_death

WORKER_SIGILL = """\
(APIServer pid=6834) INFO 12-02 23:20:20 [api_server.py:1] Started server process
(EngineCore pid=7055) ERROR 12-02 23:20:23 [multiproc_executor.py:316] Worker proc VllmWorker-0 \
died unexpectedly (exit code: -4), shutting down executor.
(EngineCore pid=7055) ERROR 12-02 23:20:23 [core.py:1512] RuntimeError: cancelled
"""

TRACEBACK = """\
(EngineCore pid=7) ERROR 12-02 23:20:23 [core.py:1512] EngineCore encountered a fatal error.
(EngineCore pid=7) ERROR 12-02 23:20:23 [core.py:1512] Traceback (most recent call last):
(EngineCore pid=7) ERROR 12-02 23:20:23 [core.py:1512] ValueError: block table too small
(EngineCore pid=7) ERROR 12-02 23:20:23 [core.py:1512] RuntimeError: cancelled
(APIServer pid=6) ERROR 12-02 23:20:23 [async_llm.py:906] AsyncLLM output_handler failed.
"""


def test_a_dead_worker_is_named_with_its_signal() -> None:
    assert engine_death(WORKER_SIGILL) == "vLLM's worker VllmWorker-0 died (exit code -4, SIGILL)"
    killed = WORKER_SIGILL.replace("exit code: -4", "exit code: -9")
    assert engine_death(killed) == "vLLM's worker VllmWorker-0 died (exit code -9, SIGKILL)"
    plain = WORKER_SIGILL.replace("exit code: -4", "exit code: 1")
    assert engine_death(plain) == "vLLM's worker VllmWorker-0 died (exit code 1)"


def test_else_the_engine_cores_first_exception() -> None:
    assert engine_death(TRACEBACK) == "vLLM's engine core failed: ValueError: block table too small"


def test_a_log_that_says_nothing_of_a_death() -> None:
    assert engine_death("") is None
    assert engine_death("(APIServer pid=6) INFO 12-02 [api_server.py:1] Started server\n") is None
