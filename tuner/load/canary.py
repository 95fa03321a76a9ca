"""The canary: request shapes a real client sends that a study's workload never does.

A configuration is only worth recommending if its server survives what clients send. A study's
warm-up and windows use the workload's own shapes (say 512-token prompts); a vLLM build that
dies on a 3-token first prompt, or a flag that breaks ``n`` > 1 or logprobs, passes them and
fails in production. So before a configuration can be recommended its server answers this
fixed set, in this order (a fresh server's first requests are part of the test):

==================  ===================================================================
``first-1-token``   a 1-token prompt, the first request the server sees
``first-3-token``   a 3-token prompt
``chat-system``     a chat request with a system prompt
``max-model-len``   a prompt that fills the context (max-model-len minus the 8 generated)
``sampling``        temperature 0.8, top-p 0.9, a seed
``n-2``             two completions of one prompt
``logprobs``        the top-2 log-probabilities of every generated token
``stop-string``     a stop string
``streamed``        a streamed completion with its usage chunk, ending in ``[DONE]``
``cancelled``       a streamed request dropped after its first tokens
``still-serving``   a plain request after all of the above
==================  ===================================================================

Each answer is checked for its form (status 200, the choices asked for, the exact prompt
length where the prompt is token ids, a finish reason, tokens within ``max_tokens``), and the
server for life after it (``GET /health``; ``GET /v1/models`` where a server has no
``/health``). The first failure ends the run: the shape that broke the server is the finding.
A chat answer may hold its text as the reasoning (a server with ``--reasoning-parser``); a model
without a chat template (a base model: vLLM answers every chat request HTTP 400) passes
``chat-system`` as not applicable.
:data:`QUICK` (the first three) runs on every trial's server before its warm-up; :data:`FULL`
on a configuration's first confirmation launch and in ``tuner launch`` before it announces the
server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from tuner.domain import FailureClass
from tuner.errors import ServerFailure, UsageError
from tuner.load.prompts import PromptFactory

GENERATED = 8  # tokens asked of each request (the cancelled one asks for more)
CANCEL_AFTER_CHUNKS = 2
CANCELLED_TOKENS = 512  # asked of the request that is dropped (fewer if the context is short)
HEALTH_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ShapeOutcome:
    """One shape's answer: ``ok``, or what was wrong with it and whether the server lived."""

    shape: str
    ok: bool
    detail: str = ""
    seconds: float = 0.0
    server_alive: bool = True
    # What the look at the server after the shape saw, when it was not serving: "the server
    # process exited", "the server stopped answering", "GET /health answers HTTP 500".
    after: str = ""


@dataclass(frozen=True)
class CanaryReport:
    outcomes: tuple[ShapeOutcome, ...]
    shapes: tuple[str, ...]  # the set that was asked for, in order
    skipped: tuple[str, ...] = ()  # not sent: an earlier shape failed
    # What told whether the server still served after each shape: GET /health, or GET
    # /v1/models for a server whose /health was not found (404) before the first shape.
    liveness: str = "/health"

    @property
    def passed(self) -> bool:
        return all(o.ok for o in self.outcomes) and not self.skipped

    @property
    def broken_by(self) -> ShapeOutcome | None:
        return next((o for o in self.outcomes if not o.ok), None)

    def summary(self) -> str:
        """One line: "canary passed (11 shapes)" or which shape broke what."""
        bad = self.broken_by
        if bad is None:
            return f"canary passed ({len(self.outcomes)} shapes)"
        after = "the server kept serving" if bad.server_alive else bad.after or "not serving"
        return f"canary failed at {bad.shape!r}: {bad.detail} ({after})"

    def raise_if_failed(self) -> None:
        """ServerFailure (CANARY_FAILED, with :meth:`summary`) when a shape broke the server:
        the one rule by which a failed canary becomes a finding."""
        if not self.passed:
            raise ServerFailure(FailureClass.CANARY_FAILED, self.summary())

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "summary": self.summary(),
            "shapes": list(self.shapes),
            "skipped": list(self.skipped),
            "liveness": self.liveness,
            "outcomes": [o.__dict__ for o in self.outcomes],
        }


class CanaryError(Exception):
    """An answer of the wrong form (the message says what was expected)."""


class NotApplicable(Exception):
    """A shape the served model does not take, whatever the flags (chat without a chat
    template): no finding, the shape is passed with the reason."""


def _object(value: Any, what: str) -> dict[str, Any]:
    """``value``, a JSON object, or CanaryError saying which part of the answer was not one."""
    if not isinstance(value, dict):
        raise CanaryError(f"{what} is not a JSON object: {str(value)[:200]}")
    return value


def _array(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise CanaryError(f"{what} is not a JSON array: {str(value)[:200]}")
    return value


@dataclass
class _Context:
    client: httpx.Client
    model: str
    prompts: PromptFactory
    max_model_len: int | None
    chat_text: Callable[[int], str]


Shape = Callable[[_Context], None]


def _completion(ctx: _Context, prompt_tokens: int, **params: Any) -> dict[str, Any]:
    prompt = ctx.prompts.token_ids(prompt_tokens)
    body = {"model": ctx.model, "prompt": prompt, "max_tokens": GENERATED, **params}
    return _json_answer(ctx.client.post("/v1/completions", json=body))


def _json_answer(answer: httpx.Response) -> dict[str, Any]:
    if answer.status_code != 200:
        raise CanaryError(f"HTTP {answer.status_code}: {answer.text[:300]}")
    try:
        data = answer.json()
    except ValueError:
        raise CanaryError(f"not JSON: {answer.text[:200]!r}") from None
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        raise CanaryError(f"no choices in the answer: {str(data)[:200]}")
    return data


def _check_choices(data: dict[str, Any], n: int, prompt_tokens: int | None = None) -> None:
    choices = data["choices"]
    if len(choices) != n:
        raise CanaryError(f"{len(choices)} choices, {n} asked for")
    for choice in choices:
        choice = _object(choice, "a choice")
        message = _object(choice.get("message") or {}, "a choice's message")
        text = choice.get("text", message.get("content"))
        if text is None:  # a reasoning parser's answer: the tokens went to the reasoning
            text = message.get("reasoning", message.get("reasoning_content"))
        if not isinstance(text, str):
            raise CanaryError(f"a choice without text: {str(choice)[:200]}")
        if choice.get("finish_reason") not in ("stop", "length"):
            raise CanaryError(f"finish_reason {choice.get('finish_reason')!r}")
    usage = _object(data.get("usage") or {}, "usage")
    done = usage.get("completion_tokens")
    if not isinstance(done, int) or not 0 <= done <= GENERATED * n:
        raise CanaryError(f"completion_tokens {done!r} for max_tokens {GENERATED} x {n}")
    if prompt_tokens is not None and usage.get("prompt_tokens") != prompt_tokens:
        raise CanaryError(f"prompt_tokens {usage.get('prompt_tokens')!r}, sent {prompt_tokens}")


def _plain(n: int, **params: Any) -> Shape:
    """One completion of an ``n``-token prompt, whose length the answer must count exactly."""

    def shape(ctx: _Context) -> None:
        _check_choices(_completion(ctx, n, **params), 1, prompt_tokens=n)

    return shape


def _chat_system(ctx: _Context) -> None:
    body = {
        "model": ctx.model,
        "messages": [
            {"role": "system", "content": ctx.chat_text(6)},
            {"role": "user", "content": ctx.chat_text(2)},
        ],
        "max_tokens": GENERATED,
        "temperature": 0,
    }
    answer = ctx.client.post("/v1/chat/completions", json=body)
    if answer.status_code == 400 and "chat template" in answer.text.lower():
        # A base model: vLLM refuses every chat request, and clients call /v1/completions.
        raise NotApplicable("the model has no chat template (HTTP 400 to any chat request)")
    data = _json_answer(answer)
    _check_choices(data, 1)
    if (data["choices"][0].get("message") or {}).get("role") != "assistant":
        raise CanaryError(f"not an assistant message: {str(data['choices'][0])[:200]}")


def _max_model_len(ctx: _Context) -> None:
    if ctx.max_model_len is None:
        raise CanaryError("the server does not report its max_model_len in /v1/models")
    _plain(ctx.max_model_len - GENERATED, temperature=0)(ctx)


def _n_2(ctx: _Context) -> None:
    _check_choices(_completion(ctx, 16, temperature=0.8, n=2, seed=2), 2)


def _logprobs(ctx: _Context) -> None:
    data = _completion(ctx, 16, temperature=0, logprobs=2)
    _check_choices(data, 1)
    logprobs = _object(data["choices"][0].get("logprobs") or {}, "logprobs")
    tokens, top = logprobs.get("tokens"), logprobs.get("top_logprobs")
    if not isinstance(tokens, list) or not isinstance(top, list) or len(tokens) != len(top):
        raise CanaryError(f"logprobs without tokens / top_logprobs: {str(logprobs)[:200]}")
    if any(not isinstance(t, dict) or not t for t in top):
        raise CanaryError("an empty top_logprobs entry")


def _stop_string(ctx: _Context) -> None:
    _check_choices(_completion(ctx, 16, temperature=0, stop=["\n", ctx.chat_text(1)]), 1)


def _stream(ctx: _Context, max_tokens: int) -> Iterator[dict[str, Any]]:
    body = {
        "model": ctx.model,
        "prompt": ctx.prompts.token_ids(16),
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with ctx.client.stream("POST", "/v1/completions", json=body) as answer:
        if answer.status_code != 200:
            raise CanaryError(f"HTTP {answer.status_code}: {answer.read()[:300]!r}")
        for line in answer.iter_lines():
            if not line.strip():
                continue
            if not line.startswith("data: "):
                raise CanaryError(f"not a server-sent event: {line[:120]!r}")
            payload = line[len("data: ") :]
            if payload == "[DONE]":
                yield {"done": True}
                return
            try:
                event = json.loads(payload)
            except ValueError:
                raise CanaryError(f"an event that is not JSON: {payload[:120]!r}") from None
            yield _object(event, "an event")
    raise CanaryError("the stream ended without [DONE]")


def _streamed(ctx: _Context) -> None:
    text, usage = "", None
    for event in _stream(ctx, GENERATED):
        if event.get("done"):  # the only way out: a stream without [DONE] raises
            break
        if "error" in event:
            raise CanaryError(f"error event: {str(event['error'])[:200]}")
        for choice in _array(event.get("choices") or [], "an event's choices"):
            text += _object(choice, "an event's choice").get("text") or ""
        if event.get("usage") is not None:  # vLLM's chunks before the last carry a null one
            usage = _object(event["usage"], "an event's usage")
    if usage is None:
        raise CanaryError("no usage chunk before [DONE]")
    done = usage.get("completion_tokens")
    if not isinstance(done, int) or not 0 <= done <= GENERATED:
        raise CanaryError(f"usage {usage}")


def _cancelled(ctx: _Context) -> None:
    chunks = 0
    room = (ctx.max_model_len - 16) if ctx.max_model_len else CANCELLED_TOKENS
    for event in _stream(ctx, max(GENERATED, min(CANCELLED_TOKENS, room))):
        if event.get("done"):
            return  # the stream ended before it could be dropped
        if event.get("choices"):
            chunks += 1
        if chunks >= CANCEL_AFTER_CHUNKS:
            return  # leaving the with-block closes the connection mid-stream


SHAPES: dict[str, Shape] = {
    "first-1-token": _plain(1, temperature=0),
    "first-3-token": _plain(3, temperature=0),
    "chat-system": _chat_system,
    "max-model-len": _max_model_len,
    "sampling": _plain(16, temperature=0.8, top_p=0.9, seed=1),
    "n-2": _n_2,
    "logprobs": _logprobs,
    "stop-string": _stop_string,
    "streamed": _streamed,
    "cancelled": _cancelled,
    "still-serving": _plain(4, temperature=0),
}
FULL: tuple[str, ...] = tuple(SHAPES)
QUICK: tuple[str, ...] = ("first-1-token", "first-3-token", "chat-system")


def served_models(answer: Any) -> list[dict[str, Any]] | None:
    """The model entries (each with an ``id``) of an OpenAI ``GET /v1/models`` answer's JSON,
    or None for an answer of any other shape."""
    entries = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(entries, list) or not all(isinstance(m, dict) and "id" in m for m in entries):
        return None
    return entries


def server_max_model_len(client: httpx.Client, model: str) -> int | None:
    """The context length ``/v1/models`` reports for ``model`` (vLLM's ``max_model_len``)."""
    try:
        entries = served_models(client.get("/v1/models").json())
    except (httpx.HTTPError, ValueError):
        return None
    for entry in entries or []:
        if entry.get("id") == model and isinstance(entry.get("max_model_len"), int):
            return int(entry["max_model_len"])
    return None


def _liveness(client: httpx.Client) -> str:
    """The path that tells whether the server still serves: ``/health`` (vLLM's), unless it
    is not found before any shape is sent (an OpenAI-compatible server or proxy without it),
    then ``/v1/models``. Any other answer to /health (a 500 included) is the server's health."""
    try:
        status = client.get("/health", timeout=HEALTH_TIMEOUT_S).status_code
    except httpx.HTTPError:
        return "/health"
    return "/v1/models" if status == 404 else "/health"


def _health(client: httpx.Client, alive: Callable[[], bool] | None, path: str) -> str:
    """ "" when the server serves (``GET path`` is 200 and ``alive``, if given, says so);
    else what was seen, in words that claim no more than that: a server that answers HTTP 500
    lives, whatever its engine did."""
    if alive is not None and not alive():
        return "the server process exited"
    try:
        status = client.get(path, timeout=HEALTH_TIMEOUT_S).status_code
    except httpx.HTTPError:
        return "the server stopped answering"
    return "" if status == 200 else f"the server answers, but GET {path} says HTTP {status}"


# No served model's context comes near this many tokens; a prompt this long (held in memory
# before it is sent) is a typo.
MAX_CONTEXT = 1 << 24


def _check_context(max_model_len: int, reported: int | None) -> None:
    """UsageError for a ``max_model_len`` beyond what the server reports in /v1/models (or,
    when it reports none, beyond :data:`MAX_CONTEXT`): checked before any prompt is built."""
    if max_model_len > (reported or MAX_CONTEXT):
        where = (
            f"the server's max_model_len ({reported:,}, from /v1/models)"
            if reported
            else f"any model's context ({MAX_CONTEXT:,} tokens)"
        )
        raise UsageError(
            f"--max-model-len {max_model_len:,} is beyond {where}",
            hint="leave it out to fill the context the server reports",
        )


def run_canary(
    base_url: str,
    model: str,
    *,
    shapes: Sequence[str] = FULL,
    prompts: PromptFactory | None = None,
    max_model_len: int | None = None,
    timeout_s: float = 120.0,
    alive: Callable[[], bool] | None = None,
) -> CanaryReport:
    """Send ``shapes`` to the server at ``base_url`` (without ``/v1``), in order, and check
    each answer and the server's life after it. ``alive`` adds a check of its own (the
    runner's: is the server process still running?) to ``GET /health`` (``GET /v1/models`` for a
    server whose ``/health`` is not found before the first shape)."""
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise ValueError(f"unknown canary shapes {unknown}: use {list(SHAPES)}")
    if max_model_len is not None and max_model_len <= GENERATED:
        raise ValueError(
            f"max_model_len {max_model_len} leaves no room for a prompt: it must be above "
            f"{GENERATED}, the tokens each canary request asks for"
        )
    prompts = prompts or PromptFactory(1024, synthetic=False)
    outcomes: list[ShapeOutcome] = []
    with httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s, trust_env=False) as client:
        reported = server_max_model_len(client, model)
        if max_model_len is not None:
            _check_context(max_model_len, reported)
        liveness = _liveness(client)
        ctx = _Context(
            client=client,
            model=model,
            prompts=prompts,
            max_model_len=max_model_len or reported,
            chat_text=(
                (lambda n: " ".join(f"t{i + 1}" for i in range(n)))
                if prompts.synthetic
                else (lambda n: " ".join(["Please", "answer", "in", "a", "few", "words"][:n]))
            ),
        )
        for i, name in enumerate(shapes):
            started = time.perf_counter()
            try:
                SHAPES[name](ctx)
                detail, ok = "", True
            except NotApplicable as exc:
                detail, ok = f"not applicable: {exc}", True
            except CanaryError as exc:
                detail, ok = str(exc), False
            except httpx.HTTPError as exc:
                detail, ok = f"{type(exc).__name__}: {exc}", False
            after = _health(client, alive, liveness)
            if ok and after:
                detail, ok = "the answer came, then the server stopped serving", False
            seconds = time.perf_counter() - started
            outcomes.append(ShapeOutcome(name, ok, detail, seconds, not after, after))
            if not ok:
                return CanaryReport(
                    tuple(outcomes), tuple(shapes), tuple(shapes[i + 1 :]), liveness
                )
    return CanaryReport(tuple(outcomes), tuple(shapes), liveness=liveness)
