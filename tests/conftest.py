"""Test-suite wide: the modules `scripts/test.sh --fast` leaves to the full run.

Each of these spends 10 s or more on a 2-core machine running whole studies, many server
launches or API fuzzing on the fake server (the suite's --durations list says which). Their
paths are what `--fast` would need most rarely: the study loop's and the runner's behaviour
across processes. They carry the marker ``slow``; the full run (CI) runs every one of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SLOW = frozenset(
    {
        "integration/test_api_fuzz.py",
        "integration/test_cli_errors.py",
        "integration/test_compare_cli.py",
        "integration/test_compile_cache.py",
        "integration/test_export.py",
        "integration/test_fake_regimes.py",
        "integration/test_faults_api_during_study.py",
        "integration/test_faults_crash_mid_load.py",
        "integration/test_faults_tuner_killed.py",
        "integration/test_hostile_input.py",
        "integration/test_launch_cli.py",
        "integration/test_load_cli.py",
        "integration/test_load_cli_turns.py",
        "integration/test_plan_fake.py",
        "integration/test_resume_stored_spec.py",
        "integration/test_search_any_flag.py",
        "integration/test_worker_queue.py",
        "postgres/test_postgres_api_fuzz.py",
        "postgres/test_postgres_one_study.py",
        "postgres/test_postgres_workers.py",
        "unit/test_load_generator.py",
    }
)
# Modules whose assertions read the machine's CPU time or the timing of signals, kills and
# sleeps: a machine busy with other tests moves them (a fake server's cores, a Ctrl-C that must
# land in the third launch, a watchdog or a worker that must act within seconds).
# scripts/test.sh runs them alone, after the tests spread over workers.
SERIAL = frozenset(
    {
        "integration/test_compare_cli.py",
        "integration/test_compile_cache.py",
        "integration/test_fake_regimes.py",
        "integration/test_faults_api_during_study.py",
        "integration/test_faults_crash_mid_load.py",
        "integration/test_fake_server_app.py",
        "integration/test_faults_tuner_killed.py",
        "integration/test_load_cli.py",
        "integration/test_load_cli_turns.py",
        "integration/test_load_multi_turn.py",
        "integration/test_plan_fake.py",
        "integration/test_resume_stored_spec.py",
        "integration/test_server_lifecycle.py",
        "integration/test_worker_queue.py",
        "postgres/test_postgres_one_study.py",
        "postgres/test_postgres_optuna.py",
        "postgres/test_postgres_workers.py",
        "unit/test_load_generator.py",
        "unit/test_telemetry_cpu.py",
    }
)
# CPU-bound modules that time nothing (the dashboards in chromium, the API fuzzing), which the
# full run takes out of the suite and runs in the end-to-end stream once the real-vLLM tests are
# done: that stream ended five to six minutes before the suite's, with a core to spare. So do
# the serial modules on PostgreSQL (about 90 s) and two serial modules that wait on fake servers
# (a resumed study's stored spec, the compile caches: about 80 s), which moved that stream's end
# to the suite's: beside the suite's serial stage they have one other process beside them, as
# they had beside the end-to-end tests before. The killed-tuner faults (about 70 s) went too:
# on 2026-12-08 the suite's serial stage still ended 130 s after that stream.
AFTER_E2E = (
    "browser/",
    "integration/test_api_fuzz.py",
    "integration/test_compile_cache.py",
    "integration/test_faults_tuner_killed.py",
    "integration/test_resume_stored_spec.py",
    "postgres/test_postgres_api_fuzz.py",
    "postgres/test_postgres_one_study.py",
    "postgres/test_postgres_optuna.py",
    "postgres/test_postgres_workers.py",
)
# Serial modules whose fake server must keep a whole core busy to show its regime (the frontend
# regime's CPU per streamed event): beside CI's CPU vLLM it got 0.58 of a core and the study
# diagnosed another regime; and those whose assertions compare a fake server's wall-clock
# times (one request at a time against a batch, a cached turn's TTFT against the first), which
# beside CI's CPU vLLM saw a batch of 10 ms steps take 1.2 s. The full run of scripts/test.sh
# runs them last, on an idle machine.
QUIET = frozenset(
    {
        "integration/test_fake_regimes.py",
        "integration/test_fake_server_app.py",
        "integration/test_load_cli_turns.py",
        "integration/test_load_multi_turn.py",
        "integration/test_plan_fake.py",
    }
)
_ROOT = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            where = item.path.relative_to(_ROOT).as_posix()
        except ValueError:
            continue
        if where in SLOW:
            item.add_marker(pytest.mark.slow)
        if where in SERIAL:
            item.add_marker(pytest.mark.serial)
        if where in QUIET:
            item.add_marker(pytest.mark.quiet)
        if where.startswith(AFTER_E2E):
            item.add_marker(pytest.mark.after_e2e)
