"""What the API app is built from. The CLI reads the environment; the app never does."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from tuner.db import Repository
from tuner.errors import UsageError

DEFAULT_API_KEY_ENV = "TUNER_API_KEY"


@dataclass(frozen=True)
class ApiSettings:
    """Settings of one app instance.

    ``storage`` is a database URL (the app opens it, creating tuner's tables in an empty
    database) or a ready :class:`Repository` (used as is; tests pass one). ``api_key`` guards
    every write; ``None`` refuses all writes, and ``api_key_env`` names the variable the
    refusal tells the operator to set. ``cors_origins`` empty means no CORS headers at all
    (:meth:`from_env` writes them as browsers send them: :func:`origin`).
    ``allow_extra_args``: a queued study may pass ``runner.extra_args`` (any ``vllm serve``
    flag, ``--trust-remote-code`` included) to the workers; off, such a study is refused.
    """

    storage: str | Repository
    api_key: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    cors_origins: tuple[str, ...] = ()
    allow_extra_args: bool = False
    title: str = "tuner"

    @classmethod
    def from_env(
        cls,
        storage: str | Repository,
        *,
        api_key_env: str = DEFAULT_API_KEY_ENV,
        cors_origins: Sequence[str] = (),
        allow_extra_args: bool = False,
    ) -> ApiSettings:
        """Settings with the API key read from ``$api_key_env`` (blank means none)."""
        key = os.environ.get(api_key_env, "").strip() or None
        return cls(
            storage=storage,
            api_key=key,
            api_key_env=api_key_env,
            cors_origins=tuple(origin(o) for o in cors_origins),
            allow_extra_args=allow_extra_args,
        )


def origin(value: str) -> str:
    """A browser origin as browsers send it in ``Origin`` (``scheme://host[:port]``, lower case,
    no trailing slash), which CORS compares exactly; ``*`` (any origin) as it is. UsageError for
    what no browser sends: a path, query or fragment, no scheme or host, a user name."""
    text = value.strip()
    if text == "*":
        return text
    parts = urlsplit(text.rstrip("/"))
    if not (parts.scheme and parts.netloc) or "@" in parts.netloc:
        why = "has no scheme://host"
    elif parts.path or parts.query or parts.fragment:
        why = "has a path, query or fragment"
    else:
        return f"{parts.scheme}://{parts.netloc}".lower()
    raise UsageError(
        f"CORS origin {value!r} {why}: a browser sends scheme://host[:port] only",
        hint="e.g. --cors-origin http://localhost:3000 (no path, no trailing slash)",
    )
