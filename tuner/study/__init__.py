"""A study end to end: composed from a spec, run as an Optuna loop, confirmed against vLLM's
defaults, or taken from the API's queue by a worker."""
