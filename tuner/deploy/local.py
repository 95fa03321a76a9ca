"""``tuner launch``: the best configuration tuner measured for a model, from the local store
(:func:`best_local`) or a tuner API (:mod:`tuner.deploy.remote`), and the exact ``vllm serve``
command for it (:func:`plan`); :mod:`tuner.cli.launch` serves it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.catalog import MODELS, check_one_model, model_key, resolve_model
from tuner.domain import Estimate, Objective, ServingConfig, TrialStatus
from tuner.domain.workload import overridden_name
from tuner.errors import UsageError
from tuner.vllm import argv

if TYPE_CHECKING:
    from tuner.db import Repository, StudyRow

_SHOWN = (
    ("output_throughput", "output tok/s"),
    ("request_throughput", "requests/s"),
    ("ttft_p99_ms", "P99 TTFT ms"),
    ("itl_p99_ms", "P99 ITL ms"),
    ("e2e_p99_ms", "P99 E2E ms"),
)


@dataclass(frozen=True)
class Measured:
    """The best measured configuration of a model on a GPU, and where it was measured."""

    model: str  # the catalog alias (or the name resolve_model gives)
    study: str
    trial: int
    flags: tuple[str, ...]  # spelled for vllm_version
    env: Mapping[str, str]
    vllm_version: str  # the vLLM it was measured with
    gpu: str  # what it ran on, as recorded
    workload: str  # the preset's name (the label with the study's overrides: describe())
    objective: str
    source: str  # the database or API it came from
    config: ServingConfig | None = None
    metrics: Mapping[str, Estimate] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()  # the study's own extra vLLM arguments
    is_baseline: bool = False
    # The study's [workload] overrides of its preset (the warm-up sends its shapes).
    workload_overrides: Mapping[str, Any] = field(default_factory=dict)
    # Where the study loaded the model from (a hub id, a directory); None for a catalog alias.
    model_source: str | None = None

    def describe(self) -> list[str]:
        """Provenance lines: study, trial, GPU, vLLM version, metrics with their window ranges."""
        trial = f"trial #{self.trial}" + (" (vLLM's defaults)" if self.is_baseline else "")
        defaults = "(none: vLLM defaults)"
        lines = [
            f"best measured for {self.model}: {trial} of study {self.study}",
            f"  measured on {self.gpu} with vLLM {self.vllm_version}, workload "
            f"{overridden_name(self.workload, self.workload_overrides)}, objective "
            f"{self.objective} ({self.source})",
            f"  flags: {shlex.join(self.flags) or ('(none)' if self.env else defaults)}",
        ]
        if self.env:  # what old vLLMs take from the environment (the attention backend)
            lines.append(
                f"  env:   {' '.join(f'{k}={shlex.quote(v)}' for k, v in self.env.items())}"
            )
        if self.extra_args:
            lines.append(f"  study's extra arguments: {shlex.join(self.extra_args)}")
        for key, label in _SHOWN:
            e = self.metrics.get(key)
            if e is not None:
                lines.append(f"  {label:>13}: {e.text()}")
        if self.metrics:
            lines.append("  (medians [range] over the measurement windows of one launch)")
        return lines


def nothing_measured(model: str, gpu: str, workload: str | None, where: str, seen: str) -> str:
    what = f"{model} on {gpu}" + (f" with workload {workload}" if workload else "")
    return f"nothing measured for {what} in {where}" + (f" (it has: {seen})" if seen else "")


def best_local(
    repo: Repository,
    model: str,
    gpu: str,
    *,
    workload: str | None = None,
    objective: Objective | None = None,
    source: str = "local store",
    storage: str | None = None,
) -> Measured:
    """The best measured configuration over the real (not emulated) studies of ``model`` on
    ``gpu`` (a profile name), optionally of one ``workload``.

    Each study offers its pick for ``objective`` (default: the study's own), as ``tuner best``
    makes it. Picks compare by SLO feasibility, then score (1.0 = that study's vLLM defaults),
    then the most recently updated study (:func:`tuner.study.standings.best_across`).
    UsageError (exit 2) when nothing was measured, naming the combinations the store does have;
    its hint repeats ``storage`` (the --storage given, if any).
    """
    from tuner.db import with_storage
    from tuner.study import best_across, choose, study_objective

    studies = repo.list_studies()
    alias, wanted = _wanted(model, studies)
    tried = [  # the real studies of this model, GPU (and workload), measured or not
        s
        for s in studies
        if model_key(s.model, s.model_source) == wanted
        and s.gpu == gpu
        and not s.emulated
        and (workload is None or s.workload_label == workload)
    ]
    offers = []
    for study in (s for s in tried if s.trial_counts.get(TrialStatus.COMPLETE, 0)):
        chosen = objective or study_objective(study)
        confirmed = choose(repo.list_comparisons(study.name), chosen)
        offers.append((study, repo.list_trials(study.name, limit=None), chosen, confirmed))
    picks = best_across(offers)
    if not picks and tried:  # studies ran, and none of their trials completed
        names = [s.name for s in tried]
        trials = f"tuner trials {shlex.quote(names[0])} --state failed"
        raise UsageError(
            f"no trial of {alias} on {gpu} completed in {source}: "
            f"{len(names)} {'study' if len(names) == 1 else 'studies'} tried ({', '.join(names)})",
            hint=f"`{with_storage(trials, storage)}` says why each trial failed",
        )
    if not picks:
        seen = {
            f"{s.model}/{s.gpu}/{s.workload_label}" + (" (emulated)" if s.emulated else "")
            for s in studies
        }
        # A study's label (chat[requests_per_window=24]) is its preset and a spec's [workload].
        preset = (workload or "").partition("[")[0]
        run = f"tuner run --model {shlex.quote(model)} --gpu {shlex.quote(gpu)}" + (
            f" --workload {shlex.quote(preset)}" if preset else ""
        )
        settings = (
            " with those [workload] settings in a spec file" if preset != (workload or "") else ""
        )
        raise UsageError(
            nothing_measured(alias, gpu, workload, source, ", ".join(sorted(seen))),
            hint=f"run `{with_storage(run, storage)}`{settings} first, or pass the "
            "--storage / --api that holds the study",
        )
    study, top = picks[0]
    trial = top.row
    version = trial.vllm_version or study.vllm_version or "0"
    flags = argv.render_flags(top.config, version)
    return Measured(
        model=alias,
        study=study.name,
        trial=top.number,
        flags=tuple(flags.args),
        env=dict(flags.env),
        vllm_version=version,
        gpu=trial.gpu_name or study.gpu,
        workload=trial.workload or study.workload,
        objective=(objective or study_objective(study)).value,
        source=source,
        config=top.config,
        metrics=dict(trial.metrics),
        extra_args=study.extra_args,
        is_baseline=top.is_baseline,
        workload_overrides=study.workload_overrides,
        model_source=study.model_source,
    )


def _wanted(model: str, studies: Sequence[StudyRow]) -> tuple[str, str]:
    """``(alias, model_key)`` of the model ``model`` names: as :func:`resolve_model` reads it,
    else (``foo`` for a study of ``myorg/foo``) the one measured model whose alias or source it
    is, as `tuner best`, `tuner size` and the API match it."""
    try:
        spec = resolve_model(model)
    except UsageError:
        keys = {model_key(s.model, s.model_source): s.model for s in studies
                if model in (s.model, s.model_source)}  # fmt: skip
        if not keys:
            raise
        check_one_model(model, keys)
        return next(iter(keys.values())), next(iter(keys))
    return spec.alias, model_key(spec.alias, spec.source)


@dataclass(frozen=True)
class LaunchPlan:
    """The exact server command, and what a client needs to know about it."""

    command: tuple[str, ...]
    env: Mapping[str, str]  # added to the environment (only old vLLMs take knobs from it)
    host: str
    port: int
    served_model_name: str
    vllm_version: str
    notes: tuple[str, ...] = ()
    # Served with tuner's synthetic tokenizer (a model without weights): prompts are its words.
    synthetic_tokenizer: bool = False

    def shell(self) -> str:
        """The command as one shell line, environment assignments first."""
        env = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        return " ".join([*env, shlex.join(self.command)])


def model_source(
    model: str, home: Path, *, dummy_weights: bool
) -> tuple[str, str | None, str | None]:
    """``(--model, --load-format, --tokenizer)`` as the study ran it, or with real weights.

    A model without published weights (tiny-ernie) runs from the directory tuner writes, with
    random weights and the synthetic tokenizer; a catalogued model with weights is served
    from its hub id (``dummy_weights`` keeps random weights instead); a directory or hub id
    given by the user is served as it is.
    """
    from tuner.catalog import tokenizer_dir
    from tuner.catalog.materialize import materialize

    spec = resolve_model(model)
    if spec.source is not None:
        return spec.source, ("dummy" if dummy_weights else None), None
    if spec.weights_available and not dummy_weights:
        return spec.hub_id, None, None
    path = materialize(spec, home / "models")
    return str(path), "dummy", str(tokenizer_dir(path))


def plan(
    measured: Measured,
    *,
    python: str,
    vllm_version: str,
    host: str,
    port: int,
    home: Path,
    module: str = argv.VLLM_API_SERVER_MODULE,
    dummy_weights: bool = False,
    model: str | None = None,
) -> LaunchPlan:
    """The command that serves ``measured`` with the vLLM of ``python`` (``vllm_version``),
    under its alias; ``model`` is what the user named it by (an alias, a directory or a hub
    id; default: the alias), which says where the weights come from (:func:`model_source`).

    The measured flags are used verbatim when that vLLM spells the config the same way as
    the one it was measured with; otherwise they are rendered again for it (with a note).
    """
    notes = []
    flags = argv.RenderedFlags(args=measured.flags, env=measured.env)
    if measured.config is not None:
        here = argv.render_flags(measured.config, vllm_version)
        if here != argv.render_flags(measured.config, measured.vllm_version):
            flags = here
            notes.append(
                f"flags spelled for vLLM {vllm_version} (measured with {measured.vllm_version})"
            )
    if vllm_version != measured.vllm_version:
        notes.append(
            f"vLLM {vllm_version} will serve a configuration measured with "
            f"{measured.vllm_version}: its numbers may differ"
        )
    name = model or measured.model
    if measured.model_source and name == measured.model and name not in MODELS:
        name = measured.model_source  # the short name of a hub id or directory studied
        if Path(name).is_absolute() and not Path(name).is_dir():
            raise UsageError(
                f"study {measured.study} measured {measured.model} from the directory {name}, "
                "which is not on this machine",
                hint=f"put the model at {shlex.quote(name)} here (the study is of that "
                "directory), or launch it where it is",
            )
    model_path, load_format, tokenizer = model_source(name, home, dummy_weights=dummy_weights)
    args = argv.base_args(
        model_path,
        served_model_name=measured.model,
        host=host,
        port=port,
        load_format=load_format,
        tokenizer=tokenizer,
        dtype=None,
        extra=measured.extra_args,
    )
    return LaunchPlan(
        command=tuple(argv.server_command(python, [*args, *flags.args], module=module)),
        env=dict(flags.env),
        host=host,
        port=port,
        served_model_name=measured.model,
        vllm_version=vllm_version,
        notes=tuple(notes),
        synthetic_tokenizer=tokenizer is not None,
    )
