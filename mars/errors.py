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
