"""The ``tuner`` command line: argument handling and printing only; the work is done by the
packages below it."""
