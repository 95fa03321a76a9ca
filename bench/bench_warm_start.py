"""Cold against warm vLLM starts: what sharing the compile caches across a study's launches saves.

Launches one configuration through tuner's real runner, alternating a cold start (an empty
compile-cache directory, ``compile_cache = "cold"``) with a warm one (the study's shared
directory, primed by one launch that is not counted), and prints each start-up time (launch to
ready, as the runner records it), the medians and their ratio. Cold and warm take turns, so a
machine that grows busier slows both alike.

    # CPU vLLM (torch.compile on, which is what the caches hold there):
    .venv/bin/python bench/bench_warm_start.py --model tiny-ernie --gpu cpu \
        --vllm-python $TUNER_VLLM_PYTHON --pairs 3
    # on the GPU host (see scripts/gpu-warm-start.sh):
    python bench/bench_warm_start.py --model ernie-0.3b --gpu h200 --pairs 3 --json-out OUT.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.compose import prepare
from tuner.domain import TrialStatus
from tuner.spec.study import StudySpec

# A short measurement: the start is what is measured, the load only proves the server serves.
QUICK = {"requests_per_window": 4, "warmup_requests": 2, "windows": 1, "output_tokens": 8,
         "concurrency": 2}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="tiny-ernie")
    ap.add_argument("--gpu", default="cpu")
    ap.add_argument("--vllm-python", default=os.environ.get("TUNER_VLLM_PYTHON"))
    ap.add_argument("--pairs", type=int, default=3, help="cold/warm pairs measured")
    ap.add_argument("--gpu-memory-utilization", type=float, default=None)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tuner-warm-start-"))
    os.environ["TUNER_HOME"] = str(work / "home")
    spec = StudySpec(
        model=args.model, gpu=args.gpu, workload="smoke", workload_overrides=QUICK,
        vllm_python=args.vllm_python, startup_timeout_s=1200, source="bench_warm_start",
    )  # fmt: skip
    prepared = prepare(spec, f"sqlite:///{work / 'bench.db'}", log_dir=work / "logs")
    runner, workload = prepared.runner, prepared.ctx.workload
    config = prepared.ctx.space.baseline()
    if args.gpu_memory_utilization is not None:
        config = config.replace(gpu_memory_utilization=args.gpu_memory_utilization)
    shared = runner.settings
    cold = dataclasses.replace(shared, compile_cache="cold")

    def start(settings: object, label: str) -> float:
        runner.settings = settings  # type: ignore[assignment]
        result = runner.run(config, workload)
        if result.status is not TrialStatus.COMPLETE or result.server is None:
            raise SystemExit(f"{label} launch failed: {result.failure_detail}")
        seconds = float(result.server.startup_s or 0.0)
        print(f"{label:>5} start ({result.server.compile_cache}): {seconds:6.1f} s", flush=True)
        return seconds

    t0 = time.monotonic()
    start(shared, "prime")  # fills the shared directory; not counted
    colds, warms = [], []
    for _ in range(args.pairs):
        colds.append(start(cold, "cold"))
        warms.append(start(shared, "warm"))
    c, w = statistics.median(colds), statistics.median(warms)
    print(f"cold median {c:.1f} s ({min(colds):.1f}-{max(colds):.1f}), warm median {w:.1f} s "
          f"({min(warms):.1f}-{max(warms):.1f}): warm/cold {w / c:.2f} "
          f"({(1 - w / c) * 100:.0f} % faster); {time.monotonic() - t0:.0f} s in all")  # fmt: skip
    record = {
        "model": args.model, "gpu": runner.hardware.name, "vllm_version": shared.vllm_version,
        "config": config.to_dict(), "cold_s": colds, "warm_s": warms,
        "cold_median_s": c, "warm_median_s": w, "warm_over_cold": w / c,
    }  # fmt: skip
    if args.json_out:
        args.json_out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
