"""The search space: which vLLM knobs a study tries, with which values, and which
combinations are hopeless before any server starts. A study's trials become configurations
here, through ``trial.suggest_*`` (a replay asks over a measured table instead:
:mod:`bench.replay_space`).

Every searched knob is categorical and its choices include the sentinel ``"default"`` (leave
vLLM's default, ``None`` in :class:`ServingConfig`), so vLLM's defaults are a point of the
space: the baseline trial. One documented exception: on ``cpu`` vLLM's default
``--gpu-memory-utilization`` (0.92 of host memory for the worker) does not fit beside the OS
and fails at start, so the cpu baseline uses :data:`CPU_BASELINE_UTILIZATION` (unless
``fixed`` says otherwise) and ``"default"`` is a cpu choice for that knob only when the caller
asks for it through ``choices``.

``flash_attn_version`` is asked of the sampler only in trials whose attention backend is
FLASH_ATTN (a conditional parameter), so the sampler does not waste trials on combinations
vLLM ignores.

Beyond the nine typed knobs, any ``vllm serve`` flag of the installed vLLM is a knob
(``ServingConfig.extra``): named by its dest or spelling (``stream_interval``,
``--stream-interval``, ``compilation_config.cudagraph_mode``) in ``params``, ``choices``,
``fixed``, ``search`` or an enqueued entry, resolved and typed against ``flags`` (the vLLM's
flag list, :mod:`tuner.vllm.flags`), with built-in candidates for the levers of
:mod:`tuner.catalog.levers`. An unknown flag is refused naming the closest real ones.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, get_args, get_type_hints

import optuna

from tuner.catalog import FLASH_ATTN, has_facts, levers, rules
from tuner.domain import FailureClass, GpuProfile, ModelSpec, ServingConfig, Workload, typed_knobs
from tuner.errors import UsageError
from tuner.vllm import Flag, FlagCatalog, argv, knob_flag, knob_key, spelling_key, typed_value

DEFAULT = "default"
LISTED = 4096  # a space of at most this many combinations is listed whole (:func:`listed`)
KNOBS: tuple[str, ...] = typed_knobs()
# 0.1 of a 24 GB CI host is 2.4 GB for the CPU worker: its own RSS (about 0.6 GB of imports
# plus the model) and the KV cache. Below that the worker has nothing left for KV.
CPU_BASELINE_UTILIZATION = 0.1

# Each typed knob's type, as ServingConfig declares it (``int | None``: int).
_TYPES: Mapping[str, type] = {
    k: get_args(hint)[0] for k, hint in get_type_hints(ServingConfig).items() if k in KNOBS
}
_MAX_LEN_CANDIDATES = 4
_UTIL = "gpu_memory_utilization"
_FA_VERSION = "flash_attn_version"
# Knobs drawn only where another knob's value asks for them (the FlashAttention version only
# with FLASH_ATTN): a trial without them is no trial of a smaller space.
CONDITIONAL = frozenset({_FA_VERSION})
# What a knob's values are, for a hint: by name, else by type.
_DESCRIBED = {_UTIL: "a fraction in (0, 1]", _FA_VERSION: "2 or 3"}
_KIND_NAMES = {bool: "true/false", int: "a positive integer", str: "a name"}


class NothingToSearch(UsageError):
    """Nothing to search: every value given for a knob beyond the typed ones is vLLM's
    default, or a new study's space would measure nothing but the defaults
    (:func:`tuner.compose.check_something_to_search`)."""


class SearchSpace:
    """Candidate values per knob for one model, GPU and workload, plus the validity rules.

    ``params``: knobs to search (default: every typed knob with more than one sensible value
    here). ``choices``: candidate values per knob, replacing the built-in ones (``"default"``
    is added). ``fixed``: knob values held in every trial, baseline included (``"default"``
    holds vLLM's default). ``search``: knobs searched on top of those, with their values (an
    empty list: a lever's built-in candidates). ``flags``: the installed vLLM's flag list, which
    any knob beyond the typed ones needs. Bad names, types or overlaps raise
    :class:`UsageError`.
    """

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuProfile,
        workload: Workload,
        params: Sequence[str] | None = None,
        choices: Mapping[str, Sequence[Any]] | None = None,
        fixed: Mapping[str, Any] | None = None,
        *,
        search: Mapping[str, Sequence[Any]] | None = None,
        flags: FlagCatalog | None = None,
    ) -> None:
        self.model, self.gpu, self.workload, self.flags = model, gpu, workload, flags
        self._extra_flags: dict[str, tuple[Flag, str | None]] = {}
        fixed_values = {
            name: self._value(name, v, "fixed")
            for k, v in (fixed or {}).items()
            for name in [self._name(k, "fixed")]
        }
        given = {
            self._name(k, "choices"): self._values(k, v, "choices")
            for k, v in (choices or {}).items()
        }
        wanted = {self._name(k, "search"): (k, v) for k, v in (search or {}).items()}
        twice = sorted(set(wanted) & set(given))
        if twice:
            raise UsageError(f"knob(s) {twice} are given both search values and choices")
        for name, (raw, values) in wanted.items():
            if values:
                given[name] = self._values(raw, values, "search")
        both = sorted((set(given) | set(wanted)) & set(fixed_values))
        if both:
            raise UsageError(
                f"knob(s) {both} are both fixed and given choices",
                hint="a knob is either held constant (fixed) or searched (choices), not both",
            )
        if params is None:
            names = [k for k in KNOBS if k not in fixed_values and self._builtin(k)] + [*given]
        else:
            names = [self._name(p, "params") for p in params]
            clash = sorted(set(names) & set(fixed_values))
            if clash:
                raise UsageError(
                    f"knob(s) {clash} are both searched (params) and fixed",
                    hint="remove them from params or from fixed",
                )
            stray = sorted(set(given) - set(names) - set(wanted))
            if stray:
                raise UsageError(
                    f"choices given for {stray}, which are not in params",
                    hint="add them to params or drop their choices",
                )
        chosen = [*names, *wanted]
        searched = [k for k in KNOBS if k in chosen]
        searched += [k for k in dict.fromkeys(chosen) if k not in KNOBS]
        for knob in searched:
            if knob not in given and not self._builtin(knob):
                raise UsageError(
                    f"{knob} has no candidate values to search on {gpu.name} for this model",
                    hint=f"give its values: --search {knob}=V1,V2 (or choices for {knob})",
                )
        if _FA_VERSION in searched and not self._flash_attn_possible(searched, given, fixed_values):
            if params is not None:
                raise UsageError(
                    "flash_attn_version is searched but attention_backend can never be FLASH_ATTN",
                    hint="search attention_backend with FLASH_ATTN among its choices, "
                    "or fix attention_backend = 'FLASH_ATTN'",
                )
            searched.remove(_FA_VERSION)
        self.searched: tuple[str, ...] = tuple(searched)
        self.fixed: dict[str, Any] = dict(fixed_values)
        self.given_fixed: dict[str, Any] = dict(fixed_values)  # as the spec held them
        if gpu.is_cpu and _UTIL not in fixed_values and _UTIL not in searched:
            self.fixed[_UTIL] = CPU_BASELINE_UTILIZATION
        self.choices: dict[str, tuple[Any, ...]] = {
            k: self._categories(k, given.get(k)) for k in self.searched
        }
        for knob, values in self.choices.items():
            if knob not in KNOBS and values == (DEFAULT,):
                raise NothingToSearch(
                    f"the values given for {knob} are all vLLM's default: nothing to search",
                    hint=f"give {knob} a value other than its default "
                    f"({self._extra_flags[knob][0].default!r})",
                )

    # -- knob names and values --------------------------------------------------------------

    def _name(self, raw: str, where: str) -> str:
        """The knob ``raw`` names: a typed knob, else a vLLM flag's dest (or ``dest.key``)."""
        if spelling_key(raw) in KNOBS:
            return spelling_key(raw)
        if self.flags is None:
            raise UsageError(
                f"unknown knob {raw!r} in {where}",
                hint=f"knobs: {', '.join(KNOBS)}; any other vLLM flag needs vLLM's flag list "
                "(tuner run reads it from the installed vLLM)",
            )
        found = knob_flag(self.flags, raw)
        if found is None:
            message, hint = self.flags.unknown(raw)
            lever = levers.get(spelling_key(raw))
            known = f" (tuner's levers: it is in vLLM {lever.versions})" if lever else ""
            raise UsageError(f"{where}: {message}{known}", hint=hint)
        flag, sub = found
        name = knob_key(flag, sub)
        if name in KNOBS:
            return name
        why = argv.reserved(name)
        if why is not None:
            raise UsageError(f"{flag.option} cannot be a knob ({where}): {why}")
        self._extra_flags[name] = found
        return name

    def _value(self, knob: str, raw: Any, where: str) -> Any:
        if knob in KNOBS:
            return normalize_knob(knob, raw, where)
        flag, sub = self._extra_flags[knob]
        try:
            return typed_value(flag, raw, sub)
        except ValueError as exc:
            raise UsageError(f"{where}: {exc}", hint=flag.help.split(". ")[0][:200]) from None

    def _values(self, raw: str, values: Sequence[Any], where: str) -> tuple[Any, ...]:
        knob = self._name(raw, where)
        if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            raise UsageError(
                f"{where} for {knob} must be a non-empty list", hint=f"e.g. {knob} = [...]"
            )
        return tuple(self._value(knob, v, where) for v in values)

    # -- candidates -------------------------------------------------------------------------

    def _builtin(self, knob: str) -> tuple[Any, ...]:
        """Built-in candidate values of ``knob`` here, without the sentinel; () if none."""
        gpu, cpu = self.gpu, self.gpu.is_cpu
        if knob not in KNOBS:
            lever = levers.get(knob)
            if lever is None:
                return ()
            typed = (self._value(knob, v, "built-in candidates") for v in lever.candidates(gpu))
            return tuple(v for v in typed if v is not None)
        if knob == "attention_backend":
            return gpu.attention_backends if len(gpu.attention_backends) > 1 else ()
        if knob == _FA_VERSION:
            return gpu.flash_attn_versions if len(gpu.flash_attn_versions) > 1 else ()
        if knob == "kv_cache_dtype":
            return tuple(d for d in gpu.kv_cache_dtypes if d != "auto")
        if knob == "max_model_len":
            return self._max_len_candidates()
        if knob == _UTIL:
            return (0.1, 0.15, 0.2, 0.3) if cpu else (0.5, 0.7, 0.85, 0.95)
        if knob == "max_num_seqs":
            return (4, 8, 16, 32, 64) if cpu else (16, 32, 64, 128, 256, 512)
        if knob == "max_num_batched_tokens":
            return (512, 1024, 2048, 4096) if cpu else (2048, 4096, 8192, 16384)
        return (True, False)  # enable_prefix_caching, enforce_eager

    def _max_len_candidates(self) -> tuple[int, ...]:
        # Powers of two from the workload's longest request up to (not including) the model's
        # positions, which is what "default" means. Unknown positions: nothing to offer.
        if not has_facts(self.model):
            return ()
        limit = self.model.max_position_embeddings
        value = 1 << max(0, self.workload.max_request_tokens - 1).bit_length()
        out: list[int] = []
        while value < limit and len(out) < _MAX_LEN_CANDIDATES:
            out.append(value)
            value *= 2
        return tuple(out)

    def _flash_attn_possible(
        self, searched: list[str], given: Mapping[str, tuple[Any, ...]], fixed: Mapping[str, Any]
    ) -> bool:
        if "attention_backend" in fixed:
            return bool(fixed["attention_backend"] == FLASH_ATTN)
        if "attention_backend" not in searched:
            return False
        return FLASH_ATTN in given.get("attention_backend", self._builtin("attention_backend"))

    def _categories(self, knob: str, given: tuple[Any, ...] | None) -> tuple[Any, ...]:
        values = list(given) if given is not None else list(self._builtin(knob))
        if self.gpu.is_cpu and knob == _UTIL:
            # No automatic "default" here (see the module docstring); the baseline's value
            # must be a choice so that the baseline can be enqueued.
            values = [DEFAULT if v is None else v for v in values]
            if CPU_BASELINE_UTILIZATION not in values:
                values.append(CPU_BASELINE_UTILIZATION)
            return tuple(dict.fromkeys(values))
        return tuple(dict.fromkeys([DEFAULT, *(v for v in values if v is not None)]))

    # -- trials -----------------------------------------------------------------------------

    def baseline_params(self) -> dict[str, Any]:
        """Optuna params of the baseline trial (vLLM's defaults), for ``study.enqueue_trial``."""
        params: dict[str, Any] = {}
        for knob in self.searched:
            if knob == _FA_VERSION and self.fixed.get("attention_backend") != FLASH_ATTN:
                continue  # the backend stays at its default, so the version is never asked
            cpu_util = self.gpu.is_cpu and knob == _UTIL
            params[knob] = CPU_BASELINE_UTILIZATION if cpu_util else DEFAULT
        return params

    def baseline(self) -> ServingConfig:
        """The configuration :meth:`baseline_params` stands for."""
        values = dict(self.fixed)
        if self.gpu.is_cpu and _UTIL in self.searched:
            values[_UTIL] = CPU_BASELINE_UTILIZATION
        return _config(values)

    def suggest(self, trial: optuna.trial.BaseTrial) -> ServingConfig:
        """Ask ``trial`` for a value of every searched knob; fixed knobs applied."""
        return self._drawn(trial.suggest_categorical)

    def _drawn(self, pick: Callable[[str, Sequence[Any]], Any]) -> ServingConfig:
        """The configuration of the searched knobs' values ``pick`` gives (knob, choices)."""
        values = dict(self.fixed)
        for knob in self.searched:
            if knob == _FA_VERSION and values.get("attention_backend") != FLASH_ATTN:
                continue
            raw = pick(knob, self.choices[knob])
            values[knob] = None if raw == DEFAULT else raw
        return _config(values)

    def exhausted_by(self, tried: Collection[ServingConfig]) -> bool:
        """Whether every configuration of the space that its rules allow is among ``tried``;
        False for a space of more than :data:`LISTED` combinations (not listed)."""
        combos = listed([self.choices[k] for k in self.searched])
        if combos is None:
            return False
        for combo in combos:
            config = self._drawn(_picking(dict(zip(self.searched, combo, strict=True))))
            if config not in tried and not self.violations(config):
                return False
        return True

    def config_from(self, item: Mapping[str, Any], where: str = "enqueue") -> ServingConfig:
        """The configuration an ``[[enqueue]]`` entry (or what ``where`` names) stands for: the
        baseline with ``item``'s knobs applied (``"default"`` = vLLM's default). Bad names or
        types, or a value that contradicts ``fixed``, raise :class:`UsageError`."""
        values = _values_of(self.baseline())
        for raw_name, raw in item.items():
            knob = self._name(raw_name, where)
            value = self._value(knob, raw, where)
            if knob in self.fixed and value != self.fixed[knob]:
                raise UsageError(
                    f"enqueue sets {knob}={raw!r} but the study fixes it to {self.fixed[knob]!r}",
                    hint=f"drop {knob} from the enqueued entry or from fixed",
                )
            values[knob] = value
        return _config(values)

    def params_for(self, config: ServingConfig) -> dict[str, Any]:
        """Optuna params that make :meth:`suggest` return ``config``, for ``enqueue_trial``.

        A knob left at None takes the baseline's value. A knob set to a value that the space
        cannot produce (not among its choices, or not searched and not fixed to that value)
        raises :class:`UsageError`.
        """
        baseline = self.baseline_params()
        params: dict[str, Any] = {}
        values = _values_of(config)
        for knob in dict.fromkeys([*KNOBS, *self.searched, *values]):
            value = values.get(knob)
            if knob not in self.searched:
                if value is not None and value != self.fixed.get(knob):
                    raise UsageError(
                        f"{knob}={value!r} cannot be tried: the study does not search {knob}",
                        hint=f"add {knob} to params (with {value!r} among its choices)",
                    )
                continue
            if knob == _FA_VERSION and config.attention_backend != FLASH_ATTN:
                continue  # never asked in such a trial; the rules explain a stray version
            param = baseline.get(knob, DEFAULT) if value is None else value
            if param not in self.choices[knob]:
                raise UsageError(
                    f"{knob}={value!r} is not among the study's choices {self.choices[knob]}",
                    hint=f"add {value!r} to the choices for {knob}",
                )
            params[knob] = param
        return params

    # -- rules ------------------------------------------------------------------------------

    def violations(self, config: ServingConfig) -> list[str]:
        """Why ``config`` cannot work here, one sentence per broken rule; [] when valid.

        The rules live in :mod:`tuner.catalog.rules`: backend and FlashAttention version
        available on this GPU, KV cache dtype supported by GPU and backend, max_model_len
        within the model's positions and above the workload's longest request,
        max_num_batched_tokens >= max_num_seqs, weights (and one full-length request's KV
        cache) within gpu_memory_utilization × memory; and, for the extra knobs, in
        :mod:`tuner.catalog.levers` (chunked prefill, CUDA graphs with eager mode, ...).
        """
        out = rules.violations(self.model, self.gpu, self.workload, config)
        return out + levers.violations(self.model, self.gpu, self.workload, config)

    def dominated_by(
        self, config: ServingConfig, failures: Sequence[tuple[ServingConfig, FailureClass]]
    ) -> ServingConfig | None:
        """The earliest failed config that makes ``config`` hopeless, or None: which failure
        dominates what is :func:`tuner.catalog.rules.dominated_by`'s. Only failures with the
        same extra knobs count: tuner knows nothing of what those change."""
        alike = [(c, f) for c, f in failures if c.extra == config.extra]
        return rules.dominated_by(self.model, config, alike)


def listed(choices: Sequence[Sequence[Any]]) -> Iterator[tuple[Any, ...]] | None:
    """Every combination of one value from each of ``choices``, in order; None where there
    are more than :data:`LISTED` (too many to list)."""
    if math.prod(len(c) for c in choices) > LISTED:
        return None
    return itertools.product(*choices)


def kernel_twins(
    values: Mapping[str, Any], backend: str | None, fa_version: int | None, unset: Any = None
) -> list[dict[str, Any]]:
    """The knob changes that leave a launch of ``values`` (knob -> value, ``unset`` where
    vLLM chose) the same launch: none, and the attention backend and FlashAttention version
    that vLLM chose (``backend``, ``fa_version``: its log) set where ``values`` left them to it.
    ``--attention-backend FLASH_ATTN`` runs the kernel that vLLM runs when it chooses FLASH_ATTN
    itself (Hopper's default), so a search that measured one need not launch the other."""
    fills: dict[str, Any] = {}
    if backend and values.get("attention_backend", unset) == unset:
        fills["attention_backend"] = backend
    if backend == FLASH_ATTN and fa_version and values.get(_FA_VERSION, unset) == unset:
        fills[_FA_VERSION] = fa_version
    twins: list[dict[str, Any]] = [{}]
    for knob, value in fills.items():
        twins += [{**twin, knob: value} for twin in twins]
    return twins


def _picking(values: Mapping[str, Any]) -> Callable[[str, Sequence[Any]], Any]:
    """A pick for :meth:`SearchSpace._drawn` that gives each knob its value in ``values``."""
    return lambda knob, _choices: values[knob]


def _config(values: Mapping[str, Any]) -> ServingConfig:
    """A ServingConfig from knob values, typed and extra ones alike."""
    typed = {k: v for k, v in values.items() if k in KNOBS}
    return ServingConfig(**typed, extra={k: v for k, v in values.items() if k not in KNOBS})


def _values_of(config: ServingConfig) -> dict[str, Any]:
    """Every knob of ``config`` by name (None for typed knobs left at vLLM's default)."""
    return {**{k: getattr(config, k) for k in KNOBS}, **config.extra}


def normalize_knob(knob: str, value: Any, where: str) -> Any:
    """``value`` checked against ``knob``'s type; ``"default"`` and None become None."""
    if knob not in KNOBS:
        raise UsageError(f"unknown knob(s) {[knob]} in {where}", hint=f"knobs: {', '.join(KNOBS)}")
    if value is None or value == DEFAULT:
        return None
    kind = _TYPES[knob]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if ok and kind in (int, float):
        finite = kind is int or math.isfinite(value)
        ok = finite and value > 0 and not (knob == _UTIL and value > 1)
    if ok and knob == _FA_VERSION:
        ok = value in (2, 3)
    if not ok:
        described = _DESCRIBED.get(knob) or _KIND_NAMES[kind]
        raise UsageError(
            f"{where}: {value!r} is not a valid value for {knob}",
            hint=f"{knob} takes {described} or 'default'",
        )
    return value
