"""``tuner doctor``: the facts of this machine and what would stop a study, with the fix."""
