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
    no trailing slash, no default port), which CORS compares exactly; ``*`` (any origin) and
    ``null`` (a page opened from a file, a sandboxed frame) as they are. UsageError for what no
    browser sends: a path, query or fragment, a user name, no scheme or host."""
    text = value.strip()
    if text in ("*", "null"):
        return text
    try:
        parts = urlsplit(text.rstrip("/"))
        port = parts.port
    except ValueError as exc:  # an unclosed [IPv6 address, a port that is not a number
        why = f"is no URL ({exc})"
    else:
        if not (parts.scheme and parts.hostname):
            why = "has no scheme://host"
        elif parts.username is not None:
            why = "has a user name"
        elif parts.path or parts.query or parts.fragment:
            why = "has a path, query or fragment"
        else:
            scheme, netloc = parts.scheme.lower(), parts.netloc.lower()
            if port == {"http": 80, "https": 443}.get(scheme):  # browsers leave it out
                netloc = netloc.rpartition(":")[0]
            return f"{scheme}://{netloc}"
    raise UsageError(
        f"CORS origin {value!r} {why}: a browser sends scheme://host[:port], or null",
        hint="e.g. --cors-origin http://localhost:3000 (no path, no trailing slash)",
    )
