"""``python -m mars.cli``: the ``mars`` command."""

from . import run

run()
