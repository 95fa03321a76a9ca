"""Talk to a server started by ``tuner launch`` with the ``openai`` package.

    tuner launch --model tiny-ernie --gpu cpu          # in one terminal
    python examples/openai_client.py                   # in another

It sends a streamed chat completion (printing the text as it arrives) and a plain completion,
and exits 1 if either comes back without text. Any OpenAI-compatible client works the same
way: the base URL ends in ``/v1``, the model is the alias ``tuner launch`` serves under, and
the API key is not checked by the server (the client insists on one: any string will do).
"""

from __future__ import annotations

import argparse
import sys

from openai import OpenAI


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--model", default="tiny-ernie")
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()

    client = OpenAI(base_url=args.base_url, api_key="unused", timeout=120.0)

    print("chat (streamed): ", end="", flush=True)
    chat = []
    stream = client.chat.completions.create(
        model=args.model,
        messages=[{"role": "user", "content": "Say something about tuned servers."}],
        max_tokens=args.max_tokens,
        stream=True,
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            chat.append(chunk.choices[0].delta.content)
            print(chunk.choices[0].delta.content, end="", flush=True)
    print()

    completion = client.completions.create(
        model=args.model, prompt="Once upon a time", max_tokens=args.max_tokens
    )
    text = completion.choices[0].text
    print(f"completion: {text}")

    if not "".join(chat).strip() or not text.strip():
        print("error: the server answered without text", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
