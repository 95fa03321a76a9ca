"""A study's measurements in the shape of ``vllm bench serve --save-result`` JSON: one file per
measurement window of every complete trial that kept its per-request records, so that tuner's
numbers can be read by the same scripts as vLLM's own benchmark results."""

from __future__ import annotations

import datetime as dt
from typing import Any

from tuner.db import Repository, TrialRow
from tuner.domain import Slo, TrialStatus, WindowMetrics
from tuner.load import bench_result, goodput_bounds
from tuner.results import energy


def bench_files(repo: Repository, study: str) -> dict[str, dict[str, Any]]:
    """``{file name: vLLM-shaped result}`` for the study's complete trials (search and
    confirmation); trials without stored requests are skipped."""
    row = repo.get_study(study)
    slo = Slo(**(row.slo if row else {}))
    goodput = goodput_bounds(slo) or None
    files: dict[str, dict[str, Any]] = {}
    for trial in repo.list_trials(study, status=TrialStatus.COMPLETE, limit=None):
        requests = repo.trial_requests(trial.id)
        if not requests:
            continue
        model = trial.provenance.model if trial.provenance else (row.model if row else "")
        when = dt.datetime.fromtimestamp(trial.finished_at or 0.0)
        for index, (window, records) in enumerate(zip(trial.windows, requests, strict=False)):
            point = (
                f"qps{window.request_rate:g}"
                if window.request_rate is not None
                else f"concurrency{window.concurrency or 'x'}"
            )
            name = f"{study}-{trial.phase}-{trial.number}-{point}-w{index + 1}.json"
            files[name] = bench_result(
                records,
                window.duration_s,
                model=model,
                concurrency=window.concurrency,
                request_rate=window.request_rate,
                goodput=goodput,
                client=window.client,
                energy=window.energy,
                date=when,
                extra={
                    "tuner_study": study,
                    "tuner_trial": trial.number,
                    "tuner_phase": trial.phase,
                    "tuner_config": trial.config_label,
                    "tuner_window": index + 1,
                    **_energy_note(trial, window),
                },
            )
    return files


def _energy_note(trial: TrialRow, window: WindowMetrics) -> dict[str, str]:
    """``tuner_energy_note`` saying why a window has no energy ("not measured on CPU")."""
    if window.energy is not None:
        return {}
    on_gpu = trial.gpu_uuid is not None
    return {"tuner_energy_note": energy.NOT_MEASURED if on_gpu else energy.NOT_ON_CPU}
