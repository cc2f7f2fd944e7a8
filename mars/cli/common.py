"""What the commands share: one-line user errors, the resumable progress bar, and options
generated from their declarations (:class:`mars.declare.Option`: the simulation settings in
:mod:`mars.method.settings`, the engine options in :mod:`mars.engines.options`, ``mars serve``'s in
:mod:`mars.serve.options`)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from ..declare import Option
from ..engines.endpoint import printable
from ..engines.factory import BACKENDS, bundled_presets
from ..errors import MarsError
from ..method.settings import SPECS
from ..store.atomic import disk_full_message
from ..store.problems import bundled_problem_sets

err = Console(stderr=True, width=110)

PROBLEMS_HELP = (
    "jsonl file ({question, answer} per line) or bundled set: "
    f"{', '.join(bundled_problem_sets())}"
)
PRESET_HELP = f"synthetic preset (a name or a JSON file): {', '.join(bundled_presets())}"
BACKEND_HELP = " | ".join(BACKENDS)
MODEL_HELP = "model path (transformers/sglang) or served model name (server)"


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Report a :class:`MarsError` or a full disk in one line and exit 2; let every other
    exception through."""
    try:
        yield
    except MarsError as exc:
        msg = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
        # printable text only: a message may quote a file's or a server's words
        print(f"error: {printable(msg, 4000)}", file=sys.stderr)
        raise typer.Exit(2) from None
    except OSError as exc:
        full = disk_full_message(exc)
        if full is None:
            raise
        print(f"error: {full}", file=sys.stderr)
        raise typer.Exit(2) from None


@contextlib.contextmanager
def resumable_bar(description: str, quiet: bool, out: Path) -> Iterator[Any]:
    """The progress of a stage that resumes (generate, probe, solve); Ctrl-C ends it with one
    line saying what is kept and the command that goes on from there (exit 130)."""
    from ..progress import bar

    with bar(description, disable=quiet) as shown:
        try:
            yield shown
        except KeyboardInterrupt:
            pass
        else:
            return
    done = f"{shown.done} of {shown.total} questions" if shown.total else "no question"
    again = "the same command"
    if sys.argv[1:2] and _is_mars(Path(sys.argv[0])):
        again = f"`{shlex.join(['mars', *sys.argv[1:]])}`"
    print(
        f"interrupted: {done} finished in this run, kept in {out}; {again} resumes from there",
        file=sys.stderr,
        flush=True,
    )
    raise typer.Exit(130)


def _is_mars(program: Path) -> bool:
    """Whether the program running is the ``mars`` command (or ``python -m mars[.cli]``)."""
    return program.name == "mars" or program.parts[-2:] in (
        ("cli", "__main__.py"),
        ("mars", "__main__.py"),
    )


def setting_help(spec: Option, more: str = "") -> str:
    """An option's help from its declaration: what it sets (and ``more``), the range it must lie
    in and its default (a default of None, "derive it", is explained in the help itself)."""
    tags = f"[range: {spec.range_text()}]" if spec.range_text() else ""
    if not spec.optional:
        tags += f" [default: {spec.default}]"
    return f"{spec.help}{more} {escape(tags.strip())}".rstrip()


def with_options(
    declared: list[tuple[str, Any, Any]], receiver: str, collect: Callable
) -> Callable:
    """Give a command one keyword option per ``(name, annotation, typer.Option)`` of ``declared``;
    the command receives ``collect({name: value})`` as its ``receiver`` argument."""
    names = [name for name, _, _ in declared]

    def deco(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        params = [p for n, p in sig.parameters.items() if n != receiver]
        annotations = {k: v for k, v in fn.__annotations__.items() if k != receiver}
        for name, kind, option in declared:
            params.append(
                inspect.Parameter(
                    name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind
                )
            )
            annotations[name] = kind

        @functools.wraps(fn)
        def wrapper(**kwargs: Any) -> Any:
            given = {n: kwargs.pop(n) for n in names}
            return fn(**kwargs, **{receiver: collect(given)})

        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = annotations
        return wrapper

    return deco


def typer_option(opt: Option, panel: str | None = None) -> tuple[str, Any, Any]:
    """A declaration as a command's ``(name, annotation, typer.Option)``: its flag (``--x/--no-x``
    for a switch), its default and its help with the range and default in it."""
    kind = opt.type if opt.default is not None else Optional[opt.type]  # noqa: UP045
    flag = f"{opt.flag}/--no-{opt.flag[2:]}" if opt.type is bool else opt.flag
    option = typer.Option(
        opt.default,
        flag,
        help=setting_help(opt),
        show_default=False,
        rich_help_panel=opt.panel or panel,
    )
    return opt.name, kind, option


def with_declared(options: Sequence[Option], receiver: str, panel: str | None = None) -> Callable:
    """Give a command one option per declaration of ``options``, each value checked against its
    declaration (one line, exit 2); the command receives them all as ``receiver``."""

    def collect(given: dict) -> dict:
        with user_errors():
            for o in options:
                o.check(given[o.name])
        return given

    return with_options([typer_option(o, panel) for o in options], receiver, collect)


def with_settings(names: Sequence[str]) -> Callable:
    """Give a command one option per simulation setting in ``names`` (help, flag and default from
    :mod:`mars.method.settings`); the command receives those the user set as ``settings_given``."""
    declared = [
        (
            name,
            Optional[SPECS[name].type],  # noqa: UP045 - typer needs a runtime type
            typer.Option(
                None,
                SPECS[name].flag,
                help=setting_help(SPECS[name]),
                show_default=False,
                rich_help_panel="Settings",
            ),
        )
        for name in names
    ]
    return with_options(
        declared, "settings_given", lambda given: {k: v for k, v in given.items() if v is not None}
    )


def with_engine_options(command: str) -> Callable:
    """Give a command one option per engine option it takes (name, type, default and help from
    :mod:`mars.engines.options`, checked against its range); the command receives them all as
    ``engine_options``."""
    from ..engines.options import check, options_of

    declared = [typer_option(o, "Engine") for o in options_of(command)]

    def collect(given: dict) -> dict:
        with user_errors():
            check(given)
        return given

    return with_options(declared, "engine_options", collect)


def stood_in_note(out: Path) -> None:
    """Say how many of a written pool's confidences were stood in for (its pool.json records
    the count; none: nothing said)."""
    import json

    from ..engines.server import MAX_STOOD_IN_SHARE
    from ..store.schema import POOL_MANIFEST
    from ..store.write import STOOD_IN_MANIFEST_KEY

    try:
        n = json.loads((out / POOL_MANIFEST).read_text()).get(STOOD_IN_MANIFEST_KEY)
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(n, int) and n > 0:
        err.print(
            f"note: {n:,} token confidence{' was' if n == 1 else 's were'} stood in for "
            "log-probabilities the server did not send (each takes the confidence of the token "
            f"before it; {out / POOL_MANIFEST} records the count as {STOOD_IN_MANIFEST_KEY}): "
            "llama.cpp sends none for a token after which the text ends inside a character; a "
            f"server leaving out more than {MAX_STOOD_IN_SHARE * 100:g} % of a question's "
            "otherwise is refused",
            highlight=False,
            soft_wrap=True,
        )
