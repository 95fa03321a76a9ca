"""vLLM's Prometheus ``/metrics``: reading the text format, a scraper and a poller.

Metric names are those of vLLM 0.32 (its module ``vllm.v1.metrics.loggers``). prometheus_client
exposes a counter registered as ``vllm:prompt_tokens`` as ``vllm:prompt_tokens_total``; the
names below are the exposed ones. Older names are kept as aliases:

=============================  ==============================================================
summary key                    exposed metric (aliases for older vLLM versions after it)
=============================  ==============================================================
kv_cache_usage_peak            vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc)
preemptions                    vllm:num_preemptions_total (vllm:num_preemptions)
prefix_cache_hit_rate          vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total
                               (vllm:gpu_prefix_cache_hits_total / ..._queries_total, also
                               without ``_total``)
requests_waiting_peak          vllm:num_requests_waiting
requests_running_peak          vllm:num_requests_running
prompt_tokens                  vllm:prompt_tokens_total
generation_tokens              vllm:generation_tokens_total
prefill_time_s                 vllm:request_prefill_time_seconds_sum
decode_time_s                  vllm:request_decode_time_seconds_sum
queue_time_s                   vllm:request_queue_time_seconds_sum
inference_time_s               vllm:request_inference_time_seconds_sum
=============================  ==============================================================

The four ``*_time_s`` keys are the seconds the requests that finished during the load spent in
each phase, summed over those requests (the histograms' ``_sum``): waiting in the scheduler's
queue, in prefill (scheduled to first token), in decode (first token to last) and in all of
prefill and decode. Over the same requests, ``prefill_time_s / inference_time_s`` is the share
of the GPU-side time that went to prefill, and a large ``queue_time_s`` says requests waited for
room in the batch.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tuner.telemetry.periodic import Periodic

log = logging.getLogger(__name__)

# Histogram buckets summed across ``le`` mean nothing; ``_created`` samples are timestamps.
_SKIPPED_SUFFIXES = ("_bucket", "_created")
_LABELLED_SUFFIXES = ("_sum", "_count")


def _escaped(value: str) -> str:
    """A label value as the exposition format writes it (``\\``, ``\\"``, ``\\n``)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labelled_key(name: str, labels: Mapping[str, str]) -> str:
    inner = ",".join(f'{k}="{_escaped(labels[k])}"' for k in sorted(labels))
    return f"{name}{{{inner}}}"


def _samples(line: str) -> list[Sample] | None:
    """The samples of one exposition line by prometheus_client's parser; None when malformed.

    One line at a time, so that a bad line costs only itself. The parser takes a value glued
    to the closing brace (``x{a="1"}3``), which the format separates by a space: refused here.
    """
    if "{" in line and line.rpartition("}")[2][:1] not in (" ", "\t"):
        return None
    try:
        return [s for family in text_string_to_metric_families(line + "\n") for s in family.samples]
    except ValueError:
        return None


def parse_text(text: str) -> dict[str, float]:
    """Parse Prometheus text exposition (what vLLM's ``/metrics`` serves) into flat numbers.

    Lines are read by prometheus_client's parser. What comes out:

    * ``key = metric name`` without labels; samples of one name are summed across label sets
      (all engines, all finish reasons, ...). For a ratio gauge such as
      ``vllm:kv_cache_usage_perc`` that sum is right only with one engine, which is how tuner
      runs vLLM.
    * Histogram/summary ``_sum`` and ``_count`` samples that carry labels are *also* kept under
      ``name{label="value",...}`` with the labels sorted by name.
    * Skipped, never fatal: comments (``# HELP``, ``# TYPE``, ``# EOF``), blank lines,
      malformed lines, NaN values, ``_bucket`` samples (summing buckets across ``le`` means
      nothing; tuner measures latency percentiles on the client) and ``_created`` samples
      (timestamps). Timestamps after values are ignored.
    """
    out: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        samples = _samples(line)
        if samples is None:
            log.debug("skipping malformed metrics line: %r", raw)
            continue
        for sample in samples:
            name, value = sample.name, float(sample.value)
            if name.endswith(_SKIPPED_SUFFIXES) or math.isnan(value):
                continue
            out[name] = out.get(name, 0.0) + value
            if sample.labels and name.endswith(_LABELLED_SUFFIXES):
                key = _labelled_key(name, sample.labels)
                out[key] = out.get(key, 0.0) + value
    return out


def scrape(
    url: str, timeout_s: float = 5.0, *, client: httpx.Client | None = None
) -> dict[str, float] | None:
    """GET ``url`` (a ``/metrics`` address) and parse it; None when unreachable or not 2xx.

    ``client`` lets a poller reuse one connection; the caller keeps ownership of it.
    """
    try:
        if client is None:
            # trust_env=False: a proxy from the environment must never see local trial traffic
            response = httpx.get(url, timeout=timeout_s, trust_env=False)
        else:
            response = client.get(url, timeout=timeout_s)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        log.debug("scrape of %s failed: %s", url, exc)
        return None
    return parse_text(response.text)


# Each summary key's metric, then its older names (see the module docstring).
_PEAKS = {
    "kv_cache_usage_peak": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "requests_waiting_peak": ("vllm:num_requests_waiting",),
    "requests_running_peak": ("vllm:num_requests_running",),
}
# Counters, and histogram sums (parse_text adds up every label set's ``_sum`` under the bare name).
_DELTAS = {
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "prefill_time_s": ("vllm:request_prefill_time_seconds_sum",),
    "decode_time_s": ("vllm:request_decode_time_seconds_sum",),
    "queue_time_s": ("vllm:request_queue_time_seconds_sum",),
    "inference_time_s": ("vllm:request_inference_time_seconds_sum",),
}
_PREFIX_HITS = (
    "vllm:prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_hits",
)
_PREFIX_QUERIES = (
    "vllm:prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_queries",
)


def _peak(names: Sequence[str], *snapshots: Mapping[str, float]) -> float | None:
    for name in names:
        values = [s[name] for s in snapshots if name in s]
        if values:
            return max(values)
    return None


def _delta(
    names: Sequence[str], before: Mapping[str, float], after: Mapping[str, float]
) -> float | None:
    for name in names:
        if name in before and name in after:
            change = after[name] - before[name]
            # A counter that went down means the server restarted: the delta is unknown.
            return change if change >= 0 else None
    return None


def summarize_vllm(
    before: Mapping[str, float], after: Mapping[str, float], peaks: Mapping[str, float]
) -> dict[str, float]:
    """Numbers for one trial (the module docstring's keys) from two scrapes (``before``/``after``
    the load) and per-key peaks: a ``*_peak`` is the max over ``peaks``, ``before`` and
    ``after`` (``kv_cache_usage_peak`` a fraction, 1 = full), a counter or time is after - before,
    ``prefix_cache_hit_rate`` delta hits / delta queries (only when queries grew). A key is left
    out when the server does not expose its metric or a counter went backwards."""
    found = {key: _peak(names, peaks, before, after) for key, names in _PEAKS.items()}
    found.update({key: _delta(names, before, after) for key, names in _DELTAS.items()})
    out = {key: value for key, value in found.items() if value is not None}
    hits = _delta(_PREFIX_HITS, before, after)
    queries = _delta(_PREFIX_QUERIES, before, after)
    if hits is not None and queries:
        out["prefix_cache_hit_rate"] = hits / queries
    return out


class MetricsPoller(Periodic):
    """Scrapes ``url`` every ``interval_s`` in a background thread.

    Keeps the first and the last successful scrape and, per key, the highest value seen.
    ``start()`` scrapes once at once (the "before" of the counters); ``stop()`` joins the
    thread and scrapes once more (the "after"). Failed scrapes are logged and skipped; nothing
    raises into the caller's thread.
    """

    thread_name = "tuner-metrics-poller"

    def __init__(self, url: str, interval_s: float = 1.0, timeout_s: float = 5.0) -> None:
        super().__init__(interval_s)
        self.url = url
        self._timeout_s = timeout_s
        self._client: httpx.Client | None = None
        self._first: dict[str, float] | None = None
        self._last: dict[str, float] | None = None
        self._peaks: dict[str, float] = {}
        self._scrapes = 0
        self._failures = 0

    @property
    def scrapes(self) -> int:
        """Successful scrapes so far."""
        with self._lock:
            return self._scrapes

    def _tick(self) -> None:
        try:
            snapshot = scrape(self.url, self._timeout_s, client=self._client)
        except Exception as exc:  # a parser bug must not kill the poller
            log.warning("scrape of %s failed: %s", self.url, exc)
            snapshot = None
        if snapshot is None:
            self._failures += 1
            if self._failures == 1:
                log.warning("cannot scrape %s; will keep trying", self.url)
            return
        with self._lock:
            self._scrapes += 1
            if self._first is None:
                self._first = snapshot
            self._last = snapshot
            for key, value in snapshot.items():
                self._peaks[key] = max(self._peaks.get(key, value), value)

    def _before_start(self) -> None:
        self._client = httpx.Client(trust_env=False)  # no proxy: see scrape

    def _after_stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def summary(self) -> dict[str, float]:
        """:func:`summarize_vllm` of the first and last scrapes; ``{}`` before any success."""
        with self._lock:
            if self._first is None or self._last is None:
                return {}
            return summarize_vllm(self._first, self._last, self._peaks)
