"""Multi-turn conversations against the fake vLLM server, whose prefill skips the prompt
tokens its prefix cache holds: the cache must show in the later turns' TTFT."""

from __future__ import annotations

from tests.studykit import uvicorn_in_thread
from tuner.load.fingerprints import fingerprint
from tuner.load.generator import LoadGenerator, LoadReport
from tuner.load.prompts import PromptFactory
from tuner.load.stats import ttft_by_turn
from tuner.load.workloads import WORKLOADS, plan_requests
from tuner.testing.fake_server import create_app

MODEL = "tuner-multi-turn"
# Long turns and a slow prefill (80 us a token; the fake's default is 20), so that prefill
# dominates TTFT even on a busy machine (at 20 us a clean-clone run, CPU vLLM beside it, saw
# x0.65 against the 0.6 asserted); short think time.
WORKLOAD = WORKLOADS["multi-turn"].replace(
    prompt_tokens=1280,
    output_tokens=16,
    shared_prefix_tokens=256,
    concurrency=4,
    requests_per_window=32,
    windows=2,
    # A warm server and client before the clock: a cold first window, on a machine busy with
    # CPU vLLM beside it, once read turn 2 at 545 ms with the cache on against 195 ms off.
    warmup_requests=8,
    think_time_s=0.01,
)


def _run(prefix_caching: bool) -> LoadReport:
    app = create_app(
        MODEL,
        max_num_seqs=8,
        max_model_len=8192,
        step_s=0.001,
        enable_prefix_caching=prefix_caching,
        prefill_s_per_token=80e-6,
    )
    with uvicorn_in_thread(app) as url:
        prompts = PromptFactory(1024, synthetic=True, seed=WORKLOAD.seed)
        return LoadGenerator(url, MODEL, prompts, request_timeout_s=60).run(WORKLOAD)


def test_prefix_caching_speeds_up_the_later_turns() -> None:
    on, off = _run(True), _run(False)
    for report in (on, off):
        for index, records in enumerate(report.records):
            plan = plan_requests(WORKLOAD, WORKLOAD.requests_per_window, seed=index + 1)
            assert [r.prompt_tokens for r in records] == [p.prompt_tokens for p in plan]
            assert all(r.ok for r in records)
            # Turns of one conversation never overlap: each starts after the one before ended.
            ends: dict[str, float] = {}
            for p, r in zip(plan, records, strict=True):
                assert p.session is not None and r.e2e_s is not None
                if p.session in ends:
                    assert r.start_s >= ends[p.session]
                ends[p.session] = r.start_s + r.e2e_s
    turns_on = ttft_by_turn(on.records, on.turns)
    turns_off = ttft_by_turn(off.records, off.turns)
    assert sorted(turns_on) == [1, 2, 3, 4]
    # Turn 4 carries three turns' worth of prompt: uncached, its prefill takes longest.
    assert turns_off[4].p50 > turns_off[1].p50
    for turn in (2, 3, 4):
        assert turns_on[turn].p50 < 0.6 * turns_off[turn].p50
    assert fingerprint(WORKLOAD).prefix_reuse > 0.6
