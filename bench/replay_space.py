"""The search space of a replay: only what the table measured.

Two ways to keep unmeasured configurations honest (``mode``):

- ``"nearest"`` (the default): every knob takes the values some row of the table has (vLLM's
  default among them), as categorical choices; ``flash_attn_version`` is asked only with the
  FLASH_ATTN backend, as :mod:`tuner.space` asks it. A combination that was never measured is
  *imputed*: it gets the numbers of its nearest measured row (the fewest knobs that differ),
  and is flagged. Several rows equally near: the one that stands lowest by the ranking rule
  (a finding below everything), so imputation never makes a configuration look better than a
  neighbour measured it. No number is invented: each point carries one row's measurements.
- ``"table"``: one categorical parameter whose choices are the measured rows themselves;
  unmeasured combinations are excluded. Honest, but the samplers see no knob structure.

:meth:`ReplaySpace.grid` is the exhaustive walk vLLM's ``auto_tune.sh`` makes: nested loops over
each knob's values, the first knob outermost, vLLM's default first in each list (so the first
point is the baseline). Identical configurations (a FlashAttention version under another
backend) are walked once.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from bench.replay import Row, Table, knob_value
from tuner.catalog import FLASH_ATTN
from tuner.domain import ServingConfig
from tuner.space import DEFAULT

Mode = Literal["nearest", "table"]
ROW_PARAM = "config"
_FA_VERSION = "flash_attn_version"


class Suggests(Protocol):
    """What the space needs of an Optuna trial."""

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...


@dataclass(frozen=True)
class Point:
    """A configuration of the space and the row whose numbers it is replayed with."""

    config: ServingConfig
    row: Row
    imputed: bool  # never measured: the numbers are its nearest row's
    distance: int  # knobs that differ from that row


class ReplaySpace:
    def __init__(self, table: Table, mode: Mode = "nearest") -> None:
        self.table, self.mode = table, mode
        self._base = {
            k: v for k, v in table.baseline.config.to_dict().items() if k not in table.knobs
        }
        self._by_config = {row.config: row for row in table.rows}
        if mode == "table":
            self._ordered = sorted(table.rows, key=self._grid_key)
            self.choices: dict[str, tuple[Any, ...]] = {
                ROW_PARAM: tuple(str(r.number) for r in self._ordered)
            }
        else:
            self.choices = {k: self._knob_choices(k) for k in table.knobs}

    # -- the parameters a sampler sees ------------------------------------------------------

    def _knob_choices(self, knob: str) -> tuple[Any, ...]:
        values = {knob_value(r.config, knob) for r in self.table.rows} - {None}
        return (DEFAULT, *sorted(values, key=lambda v: (type(v).__name__, v)))

    def suggest(self, trial: Suggests) -> ServingConfig:
        if self.mode == "table":
            number = str(trial.suggest_categorical(ROW_PARAM, self.choices[ROW_PARAM]))
            return next(r for r in self.table.rows if str(r.number) == number).config
        params: dict[str, Any] = {}
        for knob in self.table.knobs:
            if knob == _FA_VERSION and params.get("attention_backend") != FLASH_ATTN:
                continue
            params[knob] = trial.suggest_categorical(knob, self.choices[knob])
        return self.config_of(params)

    def config_of(self, params: Mapping[str, Any]) -> ServingConfig:
        values = dict(self._base)
        values.update({k: v for k, v in params.items() if v != DEFAULT})
        return ServingConfig.from_dict(values)

    def params_of(self, config: ServingConfig) -> dict[str, Any]:
        """Optuna params that make :meth:`suggest` return ``config`` (for enqueue_trial)."""
        if self.mode == "table":
            return {ROW_PARAM: str(self._by_config[config].number)}
        params: dict[str, Any] = {}
        for knob in self.table.knobs:
            value = knob_value(config, knob)
            if knob == _FA_VERSION and knob_value(config, "attention_backend") != FLASH_ATTN:
                continue
            params[knob] = DEFAULT if value is None else value
        return params

    # -- the walk and the look-up -----------------------------------------------------------

    def grid(self) -> list[ServingConfig]:
        """Every configuration of the space, in auto_tune.sh's nested-loop order."""
        if self.mode == "table":
            return [r.config for r in self._ordered]
        seen: dict[ServingConfig, None] = {}
        for combo in itertools.product(*(self.choices[k] for k in self.table.knobs)):
            params = dict(zip(self.table.knobs, combo, strict=True))
            if params.get("attention_backend") != FLASH_ATTN and _FA_VERSION in params:
                params[_FA_VERSION] = DEFAULT
            seen.setdefault(self.config_of(params), None)
        return list(seen)

    def lookup(self, config: ServingConfig) -> Point:
        row = self._by_config.get(config)
        if row is not None:
            return Point(config, row, imputed=False, distance=0)
        distances = [(self._distance(config, r.config), r) for r in self.table.rows]
        nearest = min(d for d, _ in distances)
        tied = [r for d, r in distances if d == nearest]
        worst = min(tied, key=lambda r: self.table.truth(r).key())
        return Point(config, worst, imputed=True, distance=nearest)

    def _distance(self, a: ServingConfig, b: ServingConfig) -> int:
        return sum(knob_value(a, k) != knob_value(b, k) for k in self.table.knobs)

    def _grid_key(self, row: Row) -> tuple[int, ...]:
        """A row's place in the nested loops (the knobs' choices as in "nearest" mode)."""
        key = []
        for knob in self.table.knobs:
            value = knob_value(row.config, knob)
            key.append(self._knob_choices(knob).index(DEFAULT if value is None else value))
        return tuple(key)
