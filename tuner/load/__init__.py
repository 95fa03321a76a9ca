"""Load: workload shapes, prompts of exact token length, the streaming load generator and
the statistics of what it measured."""
