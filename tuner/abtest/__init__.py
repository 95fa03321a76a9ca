"""A/B measurements on fresh launches: interleaved runs, comparisons with intervals, and the
published claims judged on them."""
