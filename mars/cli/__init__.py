"""The ``mars`` command line: one subcommand per pipeline stage (the Snakemake rules call these),
declared here in the order ``mars --help`` lists them, defined by concept in :mod:`.evaluate`,
:mod:`.pools` and :mod:`.live` (what they share: :mod:`.common`).

User errors (:class:`mars.errors.MarsError`) print one line and exit with code 2; anything else
is a bug and shows its traceback. The options of ``simulate`` and ``solve`` that are simulation
settings are generated from their declarations in :mod:`mars.method.settings`.
"""

from __future__ import annotations

import gc
import sys

import typer

from .. import __version__
from . import evaluate, live, pools

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="MARS: margin-adversarial risk-controlled stopping for parallel LLM reasoning.",
)


def version():
    """Print the version (as `mars --version` does)."""
    print(__version__)


# the commands, in the order the help lists them
app.command()(evaluate.simulate)
app.command()(evaluate.fit)
app.command()(evaluate.calibrate)
app.command("import")(pools.import_)
app.command()(pools.export)
app.command()(pools.generate)
app.command()(pools.probe)
app.command()(live.solve)
app.command()(live.serve)
app.command()(live.replay)
app.command()(live.audit)
app.command()(pools.consolidate)
app.command()(evaluate.analyze)
app.command()(evaluate.report)
app.command()(version)


def _print_version(value: bool) -> None:
    if value:
        print(__version__)
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Options before the command (``mars --version``); the app's help is the Typer's."""


def main(argv=None) -> int:
    try:
        app(args=argv, standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def run() -> None:
    """The ``mars`` command: :func:`main`, then the exit without the interpreter's last sweep of
    cyclic garbage, which visits every object of every module loaded (seconds once transformers
    has loaded torch, on Ctrl-C too); files and outputs are closed before it (the temporary ones
    removed), and whatever ``atexit`` holds still runs."""
    code = main()
    gc.freeze()
    sys.exit(code)
