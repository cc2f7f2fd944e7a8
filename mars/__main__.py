"""``python -m mars``: the ``mars`` command."""

from .cli import run

run()
