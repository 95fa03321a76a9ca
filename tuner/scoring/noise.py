"""The noise of a measurement, known before the comparison: windows nested in launches.

A launch of a configuration measures a metric in ``m`` windows. On the log scale the model is
the one-way nested random-effects model

    y[c, i, j] = mu[c] + L[c, i] + e[c, i, j],   L ~ N(0, launch_var),  e ~ N(0, window_var)

for configuration ``c``, launch ``i`` and window ``j``. A launch's value is the mean of its
window logs (the geometric mean of its windows), whose variance around ``mu[c]`` is
``launch_mean_var = launch_var + window_var / m``: that is the noise a comparison of launches
fights, and what more windows (``window_var / m``) or more launches (``/ n``) buy down.

:func:`components` estimates both components by the nested analysis of variance, pooled over
every group of launches measured on one key (host, GPU, vLLM version, model, workload, windows
per launch; :class:`NoiseKey`), each group around its own mean. A group is one configuration's
launches in one run (:func:`tuner.abtest.profile.load_profile`), so ``c`` below is such a group:
two runs may stand on two cards of one host name, and a comparison's arms share one run.

- ``MS_between = m * sum (ybar[c,i] - ybar[c])^2 / sum (n_c - 1)`` estimates
  ``window_var + m * launch_var``, with ``sum (n_c - 1)`` degrees of freedom;
- ``MS_within = sum (y[c,i,j] - ybar[c,i])^2 / sum n_c (m - 1)`` estimates ``window_var``;
- ``launch_mean_var = MS_between / m`` is unbiased whatever the split, and has a scaled
  chi-square distribution with ``df = sum (n_c - 1)``: a comparison's interval uses it with
  Student's t at those degrees of freedom (:func:`pooled_ratio_interval`);
- ``launch_var = max(0, (MS_between - MS_within) / m)``, the usual truncated estimate, says
  where the noise comes from (it is not used for intervals).

A comparison whose own launches scatter more than the profile says (another tenant on the
machine today, a changed driver) must not borrow its tight interval:
:func:`pooled_ratio_interval` tests the ratio of its own pooled variance to the profile's (a
one-sided F test at :data:`CONTRADICTS`) and falls back to Welch's interval on its own launches
when they contradict the profile, saying so in the interval's ``method``.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

from tuner.scoring.caveats import trend_fit
from tuner.scoring.sequential import launches_for
from tuner.scoring.significance import RatioInterval, logs, ratio_interval, t_interval

# One-sided level of the variance-ratio check: below it, a comparison's own launches contradict
# the profile and it is not used (bench/decision_replay.py measured its effect).
CONTRADICTS = 0.05
POOLED = "pooled"
WELCH = "welch"
TREND = "trend taken out"


@dataclass(frozen=True)
class NoiseKey:
    """What a noise profile is valid for: launches on one machine, of one vLLM, model and
    workload, with the same number of windows each and the same CPU placement (pinned launches
    spread differently: :mod:`tuner.runner.placement`). ``host`` names the machine by its GPU's
    UUID where it has one, else by its host name: a card keeps its UUID across container
    restarts (which change the host name) and lent machines that all call themselves ``vm``
    are told apart (launches recorded before 2026-12-06 are keyed by host name)."""

    host: str
    gpu: str
    vllm_version: str
    model: str
    workload: str
    windows: int
    placement: str = "off"

    def text(self) -> str:
        return (
            f"{self.gpu} {self.where()}, vLLM {self.vllm_version}, "
            f"{self.model}, {self.workload}, {self.windows} windows a launch, "
            f"CPU placement {self.placement}"
        )

    def where(self) -> str:
        """'card GPU-141c6883-...' or 'on host-1' (launches keyed before cards were)."""
        if self.host.startswith("GPU-"):
            return f"card {self.host}"
        return f"on {self.host or 'an unnamed host'}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Launch:
    """One launch's window values of a metric on the log scale; ``group`` names its
    configuration (launches of one group share a true mean)."""

    group: str
    logs: tuple[float, ...]

    @classmethod
    def of(cls, group: str, windows: Sequence[float]) -> Launch:
        """From the window values themselves (those not positive and finite left out)."""
        return cls(group, tuple(logs(windows)))


def launch_value(windows: Sequence[float]) -> float | None:
    """A launch's value under the nested model: the geometric mean of its windows."""
    ls = logs(windows)
    return math.exp(sum(ls) / len(ls)) if ls else None


@dataclass(frozen=True)
class Components:
    """The variance components of one metric on the log scale (see the module docstring)."""

    launch_var: float
    window_var: float | None  # None when a launch has a single value (peak memory)
    launch_mean_var: float
    df: int  # of launch_mean_var: sum over groups of (launches - 1)
    window_df: int
    windows: int  # m: windows per launch
    launches: int
    groups: int

    @property
    def launch_sd(self) -> float:
        return math.sqrt(self.launch_var)

    @property
    def window_sd(self) -> float | None:
        return None if self.window_var is None else math.sqrt(self.window_var)

    @property
    def sd(self) -> float:
        """The SD of one launch's value (log scale): what a comparison's interval rests on."""
        return math.sqrt(self.launch_mean_var)

    def launches_for(self, half_width: float, confidence: float = 0.95) -> int:
        """Launches a side for an interval of B/A no wider than ``x(1 + half_width)`` either
        way at ``confidence`` (this variance taken as known, both sides alike)."""
        return launches_for(half_width, self.sd, confidence)

    def to_dict(self) -> dict[str, Any]:
        return {
            "launch_sd": self.launch_sd,
            "window_sd": self.window_sd,
            "launch_value_sd": self.sd,
            "df": self.df,
            "window_df": self.window_df,
            "windows": self.windows,
            "launches": self.launches,
            "configurations": self.groups,  # groups: a configuration in one run (the name kept)
        }

    def text(self, *, windowed: bool = True) -> str:
        """'launch SD 0.081, window SD 0.102 (log), a launch's value 0.098, 12 df'. With one
        window a launch of a metric measured per window (``windowed``; peak memory is not)
        the two cannot be told apart, and the line says so."""
        if self.windows == 1 and windowed:
            spread = (
                f"launch and window SD together {self.launch_sd:.3f} (log; one window a "
                "launch: the two cannot be told apart)"
            )
        else:
            window = "" if self.window_sd is None else f", window SD {self.window_sd:.3f}"
            spread = f"launch SD {self.launch_sd:.3f}{window} (log)"
        return (
            f"{spread}, a launch's value "
            f"{self.sd:.3f}, {self.df} df from {self.launches} launches in {self.groups} "
            f"group{'s' if self.groups != 1 else ''} (a configuration in one run)"
        )


def components(launches: Sequence[Launch], windows: int | None = None) -> Components | None:
    """The nested ANOVA estimate from ``launches`` (any configurations; see the module
    docstring). Only launches with exactly ``windows`` usable window values count (default:
    the most common count); None when no configuration has two such launches."""
    usable = [(launch.group, list(launch.logs)) for launch in launches if launch.logs]
    if not usable:
        return None
    m = windows or Counter(len(ls) for _, ls in usable).most_common(1)[0][0]
    groups: dict[str, list[list[float]]] = {}
    for g, ls in usable:
        if len(ls) == m:
            groups.setdefault(g, []).append(ls)
    ss_between = ss_within = 0.0
    df_between = df_within = n_launches = 0
    for runs in groups.values():
        means = [sum(ls) / m for ls in runs]
        grand = sum(means) / len(means)
        ss_between += m * sum((x - grand) ** 2 for x in means)
        df_between += len(runs) - 1
        ss_within += sum((y - mean) ** 2 for ls, mean in zip(runs, means, strict=True) for y in ls)
        df_within += len(runs) * (m - 1)
        n_launches += len(runs)
    if df_between == 0:
        return None
    ms_between = ss_between / df_between
    if m == 1 or df_within == 0:
        return Components(ms_between, None, ms_between, df_between, 0, m, n_launches, len(groups))
    ms_within = ss_within / df_within
    return Components(
        launch_var=max(0.0, (ms_between - ms_within) / m),
        window_var=ms_within,
        launch_mean_var=ms_between / m,
        df=df_between,
        window_df=df_within,
        windows=m,
        launches=n_launches,
        groups=len(groups),
    )


def own_variance(a: Sequence[float], b: Sequence[float]) -> tuple[float, int] | None:
    """The pooled variance of the log launch values of both sides around their own means, and
    its degrees of freedom; None without any."""
    la, lb = logs(a), logs(b)
    df = len(la) + len(lb) - 2
    if len(la) < 1 or len(lb) < 1 or df < 1:
        return None
    ss = sum((x - sum(side) / len(side)) ** 2 for side in (la, lb) for x in side)
    return ss / df, df


def contradicts(own: float, own_df: int, profile: Components) -> float:
    """The p-value of the F test that ``own`` (a comparison's pooled variance of its launch
    values, ``own_df`` df) is larger than the profile's; below :data:`CONTRADICTS` the own
    launches contradict the profile. One-sided: launches quieter than the profile do not make
    its interval wrong, only wider than it need be, while falling back to Welch's on three
    quiet launches a side would give intervals narrower than the noise."""
    if profile.launch_mean_var <= 0:
        return 0.0 if own > 0 else 1.0
    f = own / profile.launch_mean_var
    return float(stats.f(own_df, profile.df).sf(f))


def pooled_ratio_interval(
    a: Sequence[float],
    b: Sequence[float],
    confidence: float,
    profile: Components | None,
) -> RatioInterval | None:
    """B/A from launch values ``a`` and ``b`` with the profile's variance pooled with the
    comparison's own (t at the profile's df plus its own); Welch's interval on the own launches
    when there is no profile or the own launches contradict it (``method`` says which)."""
    la, lb = logs(a), logs(b)
    if profile is None:
        return _welch(a, b, confidence, "no noise profile for this key")
    if not la or not lb:
        return None
    pooled = _pooled(own_variance(a, b), profile)
    if isinstance(pooled, str):
        return _welch(a, b, confidence, f"own launches {pooled}")
    var, df = pooled
    diff = sum(lb) / len(lb) - sum(la) / len(la)
    se = math.sqrt(var * (1.0 / len(la) + 1.0 / len(lb)))
    return t_interval(diff, se, float(df), confidence, len(la), len(lb), POOLED)


def trend_ratio_interval(
    a: Sequence[tuple[float, float]],
    b: Sequence[tuple[float, float]],
    confidence: float,
    profile: Components | None,
    own_confidence: float | None = None,
) -> RatioInterval | None:
    """B/A from launches ``a`` and ``b`` ((time in seconds, value) each) with a common
    straight-line trend over the launches' times taken out (:func:`tuner.scoring.caveats.
    trend_fit`): the fit's B/A, its residual variance pooled with the profile's unless it
    contradicts it (as :func:`pooled_ratio_interval`), t at the pooled df. An interval on the
    residuals alone is at ``own_confidence`` where given (a sequential design's level for t at
    the fit's few df: :func:`tuner.scoring.sequential.pocock_confidence_own`), else at
    ``confidence``. None where no trend can be fitted (launches within a minute, too few): the
    caller then takes :func:`pooled_ratio_interval` on the values."""
    fit = trend_fit(a, b)
    if fit is None:
        return None
    var, df, method = fit.rss / fit.df, fit.df, f"{TREND}: no noise profile for this key"
    level = own_confidence or confidence
    if profile is not None:
        pooled = _pooled((var, fit.df), profile)
        if isinstance(pooled, str):
            method = f"{TREND}: residuals {pooled}"
        else:
            (var, df), method, level = pooled, f"{POOLED}, {TREND}", confidence
    return fit.interval(1, var, df, level, method)


def _pooled(own: tuple[float, int] | None, profile: Components) -> tuple[float, int] | str:
    """The profile's variance of a launch's value pooled with a comparison's own (variance,
    df), and the pooled df; or, where the own variance contradicts the profile
    (:func:`contradicts`), why the profile is not used: 'spread x2.10 the profile's SD (F test
    p = 0.004): the profile is not used'."""
    var, df = profile.launch_mean_var * profile.df, profile.df
    if own is None:
        return var / df, df
    p = contradicts(own[0], own[1], profile)
    if p < CONTRADICTS:
        ratio = math.sqrt(own[0] / profile.launch_mean_var) if profile.launch_mean_var else 0
        return f"spread x{ratio:.2f} the profile's SD (F test p = {p:.3f}): the profile is not used"
    return (var + own[0] * own[1]) / (df + own[1]), df + own[1]


def trend_taken_out(method: str) -> bool:
    """Whether an interval's ``method`` is :func:`trend_ratio_interval`'s."""
    return method.split(":", 1)[0].endswith(TREND)


def _welch(
    a: Sequence[float], b: Sequence[float], confidence: float, why: str
) -> RatioInterval | None:
    found = ratio_interval(a, b, confidence)
    return None if found is None else dataclasses.replace(found, method=f"{WELCH}: {why}")


@dataclass(frozen=True)
class NoiseProfile:
    """The components per metric on one key, from ``launches`` stored launches."""

    key: NoiseKey
    metrics: Mapping[str, Components]
    launches: int

    def get(self, metric: str) -> Components | None:
        return self.metrics.get(metric)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key.to_dict(),
            "launches": self.launches,
            "metrics": {name: c.to_dict() for name, c in self.metrics.items()},
        }


def profile_of(
    key: NoiseKey, per_metric: Mapping[str, Sequence[Launch]], launches: int
) -> NoiseProfile:
    """The profile from each metric's launches (metrics without two launches of one
    configuration are left out)."""
    metrics = {}
    for name, runs in per_metric.items():
        found = components(runs, None if name == "memory_gib" else key.windows)
        if found is not None:
            metrics[name] = found
    return NoiseProfile(key, metrics, launches)
