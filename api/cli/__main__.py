"""``python -m engram.api.cli``: the ``engram`` command (``api.cli.main.main``) without the console script."""

from engram.api.cli.main import main

main()
