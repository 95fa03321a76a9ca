"""``tuner launch --api URL``: the best measured configuration, asked of a tuner API.

``GET {api}/v1/recommendations?model=&gpu=&workload=[&objective=]`` answers one JSON object
(see ``api/schemas.py``'s RecommendationOut): ``flags`` (argv elements, spelled for
``vllm_version``), ``env``, ``config`` (the knobs), ``study``, ``trial``, ``metrics`` (name ->
``{median, low, high, values}``), ``provenance`` (``gpu_name``, ``vllm_version``, ...). A 404
answers ``{error, message, hint, ...}`` when nothing was measured for the combination.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from tuner.deploy.local import Measured, nothing_measured
from tuner.domain import Estimate, Objective, ServingConfig
from tuner.errors import EnvironmentProblem, UsageError

API_TIMEOUT_S = 30.0


def best_remote(
    api: str,
    model: str,
    gpu: str,
    *,
    workload: str | None,
    objective: Objective | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Measured:
    """The API's recommendation for ``model`` on ``gpu`` with ``workload``.

    ``api`` is the API's base URL, with or without a trailing ``/v1``. UsageError when
    ``workload`` is missing (the API recommends per workload) or the API has nothing measured
    (its 404); EnvironmentProblem when it cannot be reached, is no tuner API (another 404) or
    answers anything else than a recommendation.
    """
    if not workload:
        raise UsageError(
            "--api needs --workload: the tuner API recommends per workload",
            hint="e.g. --workload chat (`tuner studies` on the API's database lists them)",
        )
    params = {"model": model, "gpu": gpu, "workload": workload}
    if objective is not None:
        params["objective"] = objective.value
    base = api.rstrip("/")
    base = base.removesuffix("/v1")  # given as OpenAI clients take it: the same API
    url = base + "/v1/recommendations"
    hint = "check --api (the tuner API's base URL, e.g. http://HOST:8080), or use a local --storage"
    try:
        with httpx.Client(timeout=API_TIMEOUT_S, transport=transport) as client:
            response = client.get(url, params=params)
    except httpx.HTTPError as exc:
        raise EnvironmentProblem(f"cannot reach the tuner API at {api}: {exc}", hint=hint) from None
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code == 404:
        message, their_hint = _message(body, response)
        if not _nothing_measured(body, message):  # another server, or no such endpoint there
            raise EnvironmentProblem(
                f"{api} is not a tuner API: GET {url} answered HTTP 404"
                + (f" ({message})" if message else ""),
                hint=hint,
            )
        raise UsageError(
            nothing_measured(model, gpu, workload, api, "") + (f": {message}" if message else ""),
            hint=their_hint or f"run a study of {model} on {gpu} first, or ask another --api",
        )
    if response.status_code != 200 or not isinstance(body, dict):
        message, _ = _message(body, response)
        raise EnvironmentProblem(
            f"the tuner API at {api} answered HTTP {response.status_code}: {message}", hint=hint
        )
    try:
        return from_api(body, api)
    except (KeyError, TypeError, ValueError) as exc:
        raise EnvironmentProblem(
            f"the tuner API at {api} sent a recommendation tuner cannot read: {exc}", hint=hint
        ) from None


def _nothing_measured(body: Any, message: str) -> bool:
    """Whether a 404 is the API's answer that nothing was measured: its JSON error with a
    message (error ``not_found``), not a missing endpoint (``no such endpoint: ...``), nor
    another server's 404 (an HTML page, FastAPI's ``{"detail": "Not Found"}``)."""
    return (
        isinstance(body, dict)
        and body.get("error", "not_found") == "not_found"
        and bool(body.get("message"))
        and not message.startswith("no such endpoint")
    )


def _message(body: Any, response: httpx.Response) -> tuple[str, str]:
    if isinstance(body, dict):
        text = body.get("message") or body.get("detail") or ""
        return str(text)[:400], str(body.get("hint") or "")
    return response.text[:400], ""


def _estimates(data: Mapping[str, Any]) -> dict[str, Estimate]:
    out = {}
    for name, e in data.items():
        # The API sends null for a number that is not finite; such a metric is left out.
        if isinstance(e, dict) and all(e.get(k) is not None for k in ("median", "low", "high")):
            values = tuple(float(v) for v in e.get("values") or () if v is not None)
            out[name] = Estimate(float(e["median"]), float(e["low"]), float(e["high"]), values)
    return out


def from_api(data: Mapping[str, Any], api: str) -> Measured:
    """A :class:`Measured` from the API's JSON. KeyError/TypeError/ValueError when malformed."""
    flags = _strings(data["flags"], "flags")
    prov = data.get("provenance") or {}
    config = data.get("config")
    return Measured(
        model=str(data["model"]),
        study=str(data["study"]),
        trial=int(data["trial"]),
        flags=tuple(flags),
        env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
        vllm_version=str(data["vllm_version"]),
        gpu=str(prov.get("gpu_name") or data.get("gpu") or "?"),
        # The preset's name (provenance's), not the label: its overrides come beside it.
        workload=str(prov.get("workload") or data.get("workload") or "?"),
        objective=str(data.get("objective") or "?"),
        source=api,
        config=ServingConfig.from_dict(config) if isinstance(config, dict) else None,
        metrics=_estimates(data.get("metrics") or {}),
        extra_args=tuple(_strings(data.get("extra_args") or [], "extra_args")),
        is_baseline=bool(data.get("is_baseline", False)),
        workload_overrides=dict(data.get("workload_overrides") or {}),
        model_source=data.get("model_source") or None,
    )


def _strings(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{name} is not a list of strings")
    return value
