"""The fake server's HTTP surface, in process (ASGI transport, no sockets)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
from starlette.applications import Starlette

from tuner.testing.fake_server import create_app


async def _post(app: Starlette, path: str, body: dict[str, Any]) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://fake") as client:
        return await client.post(path, json=body)


async def _get(app: Starlette, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://fake") as client:
        return await client.get(path)


def _events(response: httpx.Response) -> list[Any]:
    lines = [line for line in response.text.split("\n\n") if line]
    assert all(line.startswith("data: ") for line in lines)
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:]) for line in lines]


def test_health_and_models_list_served_name() -> None:
    app = create_app("trial-3", 4, model_path="/models/x", max_model_len=1024)
    assert asyncio.run(_get(app, "/health")).status_code == 200
    models = asyncio.run(_get(app, "/v1/models")).json()
    assert models["object"] == "list"
    assert [(m["id"], m["root"], m["max_model_len"]) for m in models["data"]] == [
        ("trial-3", "/models/x", 1024)
    ]


def test_streamed_completion_is_shaped_like_vllm() -> None:
    app = create_app("m", step_s=0.0)
    body = {"model": "m", "prompt": "t1 t2 t3", "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    events = _events(asyncio.run(_post(app, "/v1/completions", body)))
    assert events[-1] == "[DONE]"
    chunks, usage = events[:-2], events[-2]
    assert len(chunks) == 4
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("cmpl-")
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "length"]
    assert all(c["choices"][0]["text"].startswith(" t") for c in chunks)
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 3, "total_tokens": 7, "completion_tokens": 4}


def test_stream_without_include_usage_has_no_usage_chunk() -> None:
    app = create_app("m", step_s=0.0)
    body = {"model": "m", "prompt": "a b", "max_tokens": 2, "stream": True}
    events = _events(asyncio.run(_post(app, "/v1/completions", body)))
    assert len(events) == 3 and all("usage" not in e for e in events[:-1])


def test_streamed_chat_opens_with_role_then_deltas() -> None:
    app = create_app("m", step_s=0.0)
    body = {"model": "m", "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    events = _events(asyncio.run(_post(app, "/v1/chat/completions", body)))
    first, *deltas, usage, done = events
    assert done == "[DONE]"
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [d["choices"][0]["finish_reason"] for d in deltas] == [None, None, "length"]
    assert all(set(d["choices"][0]["delta"]) == {"content"} for d in deltas)
    assert usage["usage"]["completion_tokens"] == 3
    assert usage["usage"]["prompt_tokens"] == 4  # two words and the fake chat template


def test_non_streaming_completion_and_chat() -> None:
    app = create_app("m", step_s=0.0)
    done = asyncio.run(_post(app, "/v1/completions", {"model": "m", "prompt": [1, 2, 3],
                                                      "max_tokens": 2})).json()  # fmt: skip
    assert done["object"] == "text_completion"
    assert done["usage"] == {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2}
    assert done["choices"][0]["text"].count(" t") == 2
    chat = asyncio.run(_post(app, "/v1/chat/completions", {
        "model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1,
    })).json()  # fmt: skip
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant"


def test_unknown_model_is_404_like_vllm() -> None:
    response = asyncio.run(_post(create_app("mine"), "/v1/completions",
                                 {"model": "theirs", "prompt": "a"}))  # fmt: skip
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["type"] == "NotFoundError" and error["code"] == 404
    assert error["message"] == "The model `theirs` does not exist. Valid aliases: mine."


def test_request_longer_than_max_model_len_is_400() -> None:
    app = create_app("m", max_model_len=8)
    response = asyncio.run(_post(app, "/v1/completions",
                                 {"model": "m", "prompt": "a b c d", "max_tokens": 5}))  # fmt: skip
    assert response.status_code == 400
    assert "maximum context length is 8 tokens" in response.json()["error"]["message"]


def test_metrics_count_tokens_and_prefix_hits() -> None:
    app = create_app("m", step_s=0.0)
    prompt = " ".join(f"t{i}" for i in range(40))  # two full 16-token blocks
    for _ in range(2):
        asyncio.run(
            _post(app, "/v1/completions", {"model": "m", "prompt": prompt, "max_tokens": 3})
        )
    text = asyncio.run(_get(app, "/metrics")).text
    values = {line.split("{")[0]: float(line.rsplit(" ", 1)[1])
              for line in text.splitlines() if line.startswith("vllm:")}  # fmt: skip
    assert values["vllm:prompt_tokens_total"] == 80
    assert values["vllm:generation_tokens_total"] == 6
    assert values["vllm:prefix_cache_queries_total"] == 80
    assert values["vllm:prefix_cache_hits_total"] == 32  # the second request hit both blocks
    assert values["vllm:num_requests_running"] == 0
    assert values["vllm:num_requests_waiting"] == 0
    assert values["vllm:num_preemptions_total"] == 0
    assert 'model_name="m"' in text and "vllm:kv_cache_usage_perc" in values


def test_crash_after_runs_the_crash_hook() -> None:
    crashes: list[int] = []
    app = create_app("m", step_s=0.0, crash_after=2, crash=lambda: crashes.append(1))
    for _ in range(2):
        asyncio.run(_post(app, "/v1/completions", {"model": "m", "prompt": "a", "max_tokens": 1}))
    assert crashes == []
    asyncio.run(_post(app, "/v1/completions", {"model": "m", "prompt": "a", "max_tokens": 1}))
    assert crashes == [1]


async def _burst(app: Starlette, streams: int, tokens: int) -> float:
    transport = httpx.ASGITransport(app=app)
    body = {"model": "m", "prompt": "a b c", "max_tokens": tokens, "stream": True}
    async with httpx.AsyncClient(transport=transport, base_url="http://fake") as client:
        start = time.perf_counter()
        replies = await asyncio.gather(
            *(client.post("/v1/completions", json=body) for _ in range(streams))
        )
        elapsed = time.perf_counter() - start
    assert all(r.status_code == 200 for r in replies)
    return elapsed


def test_max_num_seqs_one_is_clearly_slower_under_concurrency() -> None:
    # Steps long enough that the client's own work (the same on both sides, and what a busy
    # machine slows: at 2 ms steps a CI run measured x2.9) stays small beside the steps.
    step = 0.01
    serial = asyncio.run(_burst(create_app("m", 1, step_s=step), streams=16, tokens=8))
    batched = asyncio.run(_burst(create_app("m", 256, step_s=step), streams=16, tokens=8))
    # 16 requests one at a time: >= 16 * 8 steps; batched: about 8 slightly longer steps.
    assert serial >= 16 * 8 * step
    assert serial > 3 * batched  # about 8x when idle; margin for a busy 2-core CI machine
