"""Where the noise comes from: launches of one configuration with CPU placement off and pinned
in turns (``tuner.runner.placement``), each summarised in ``tuner_launches`` under its own key
(the placement is part of a noise key), then the launch and window components of each.

Placement off and pinned take turns (off, pinned, off, pinned, ...), so a machine that drifts
(thermal state, caches, other tenants) moves both alike; the very first launch of a fresh
machine is a cold start (compile caches empty) and is recorded as such. Every launch's full
result also goes to ``--launch-log`` (one JSON line per launch: arm, config, encoded result), the
raw data a report re-derives its tables from.

    # on the GPU host, after staging (see scripts/gpu-noise.sh):
    python bench/noise_placement.py --model ernie-0.3b --gpu h200 --workload throughput-256 \
        --pairs 5 --storage sqlite:///$HOME/tuner-noise.db --launch-log $HOME/results/noise.jsonl
    # on CPU vLLM (2 cores: "pinned" puts each process on a CPU of its own):
    .venv/bin/python bench/noise_placement.py --model tiny-ernie --gpu cpu --workload smoke \
        --vllm-python $TUNER_VLLM_PYTHON --pairs 2 --fixed enforce_eager=true
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.abtest.profile import load_profile, profile_lines, record_launch
from tuner.compose import prepare
from tuner.db.codec import encode
from tuner.db.repository import Repository
from tuner.domain import TrialStatus
from tuner.runner import placement
from tuner.scoring.noise import NoiseKey
from tuner.spec.configs import parse_assignments
from tuner.spec.study import StudySpec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="tiny-ernie")
    ap.add_argument("--gpu", default="cpu")
    ap.add_argument("--workload", default="smoke")
    ap.add_argument("--vllm-python", default=os.environ.get("TUNER_VLLM_PYTHON"))
    ap.add_argument("--pairs", type=int, default=5, help="off/pinned pairs of launches")
    ap.add_argument("--modes", default="off,pinned", help="the placements, in turn")
    ap.add_argument(
        "--fixed", default="", help="knobs held in every launch, e.g. enforce_eager=true"
    )
    ap.add_argument("--storage", default=os.environ.get("TUNER_DB_URL", "sqlite:///noise.db"))
    ap.add_argument("--launch-log", type=Path, help="one JSON line per launch (the raw data)")
    ap.add_argument("--deadline", type=float, default=None, help="epoch s: no launch starts "
                    "later than 4 minutes before it")  # fmt: skip
    args = ap.parse_args()

    spec = StudySpec(
        model=args.model, gpu=args.gpu, workload=args.workload, vllm_python=args.vllm_python,
        fixed=parse_assignments(args.fixed, "--fixed") if args.fixed else {},
        startup_timeout_s=1200, source="bench/noise_placement.py",
    )  # fmt: skip
    prepared = prepare(spec, args.storage)
    runner, workload, repo = prepared.runner, prepared.ctx.workload, prepared.repo
    config = prepared.ctx.space.baseline()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    run = f"noise-placement:{time.time():.0f}"
    keys: dict[str, NoiseKey] = {}
    if args.launch_log:
        args.launch_log.parent.mkdir(parents=True, exist_ok=True)
    for i in range(args.pairs):
        for mode in modes:
            if args.deadline is not None and time.time() > args.deadline - 240:
                print(f"deadline: stopping before launch {i + 1} ({mode})", flush=True)
                return finish(repo, keys)
            os.environ[placement.ENV] = mode
            result = runner.run(config, workload)
            server = result.server
            print(
                f"launch {i + 1} {mode}: {result.status.value}"
                f" start {server.startup_s if server else None} s"
                f" caches {server.compile_cache if server else None}"
                f" placement {dict(server.placement or {}) if server else None}"
                + (
                    f" out tok/s {result.metrics['output_throughput'].values}"
                    if result.status is TrialStatus.COMPLETE
                    else f" {result.failure_detail}"
                ),
                flush=True,
            )
            if args.launch_log:
                with args.launch_log.open("a") as fh:
                    line = {"arm": mode, "config": config.to_dict(), "result": encode(result)}
                    fh.write(json.dumps(line) + "\n")
            key = record_launch(
                repo, result, model=prepared.ctx.model, workload=workload.name,
                is_defaults=True, source="noise-placement", run=run,
            )  # fmt: skip
            if key is None:  # only a complete launch with provenance has a noise key
                print(f"  (launch {i + 1} {mode} not summarised: {result.status.value})")
            else:
                keys[mode] = key
    return finish(repo, keys)


def finish(repo: Repository, keys: dict[str, NoiseKey]) -> int:
    for mode, key in keys.items():
        print(f"== placement {mode}")
        for line in profile_lines(load_profile(repo, key), ["output_throughput", "ttft_p99_ms"]):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
