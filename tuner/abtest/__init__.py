"""A/B measurements on fresh launches: interleaved runs that resume from their launch logs,
comparisons with intervals, the one pipeline that ``tuner compare`` and ``tuner verify-claims``
run, and published claims judged on it."""
