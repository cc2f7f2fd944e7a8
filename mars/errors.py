"""The project's one exception type for user errors.

Everything a user can get wrong (a bad pool, a bad setting, an unknown method or backend, a
missing file) raises :class:`MarsError` or a subclass. The command line prints its first line and
exits with code 2; any other exception is a bug and shows its traceback. It subclasses
``ValueError`` so library callers that already catch ``ValueError`` keep working.
"""

from __future__ import annotations

#: the distribution's name (``pip install``); the package imports as ``mars`` and its command is
#: ``mars``. ``mars`` on PyPI is an unrelated project: no install hint may name it.
DISTRIBUTION = "mars-stopping"


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


def install_hint(extra: str) -> str:
    """The command that installs the package extra ``extra``, for an install and for a checkout
    (pip installs only the extra's dependencies where the package itself is already installed)."""
    return f"pip install '{DISTRIBUTION}[{extra}]' (in a checkout: pip install -e '.[{extra}]')"


def need_extra(modules: tuple[str, ...], extra: str, what: str) -> None:
    """Refuse in one line, before any work, a command whose optional dependencies (the package
    extra ``extra``) are not installed: the core (pools, fit, simulate, the stopping rules) needs
    none of them."""
    from importlib.util import find_spec

    missing = [m for m in modules if find_spec(m) is None]
    if missing:
        raise UsageError(
            f"{what} needs {' and '.join(missing)}, which are not installed: {install_hint(extra)}"
        )
