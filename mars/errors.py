"""The project's one exception type for user errors.

Everything a user can get wrong (a bad pool, a bad setting, an unknown method or backend, a
missing file) raises :class:`MarsError` or a subclass. The command line prints its first line and
exits with code 2; any other exception is a bug and shows its traceback. It subclasses
``ValueError`` so library callers that already catch ``ValueError`` keep working.
"""

from __future__ import annotations


class MarsError(ValueError):
    """Bad input from the user. The message is one line naming the file / question / argument."""


class UsageError(MarsError):
    """A bad argument or option (a count out of range, an unknown name, a malformed list)."""


class SimulationError(MarsError):
    """Bad simulation settings, or a method that does not apply to the pool."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name if it has none): what a
    one-line error quotes of a library's error."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def need_extra(modules: tuple[str, ...], extra: str, what: str) -> None:
    """Refuse in one line, before any work, a command whose optional dependencies (the package
    extra ``extra``) are not installed: the core (pools, fit, simulate, the stopping rules) needs
    none of them."""
    from importlib.util import find_spec

    missing = [m for m in modules if find_spec(m) is None]
    if missing:
        raise UsageError(
            f"{what} needs {' and '.join(missing)}, which are not installed: "
            f"pip install 'mars[{extra}]'"
        )
