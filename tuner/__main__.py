"""``python -m tuner``: the same as the ``tuner`` command."""

from tuner.cli.app import main

main()
