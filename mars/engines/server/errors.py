"""What a server request can end in, typed, so a library caller can tell a failure worth trying
again from a refusal.

Every error is a :class:`ServerError`, hence a :class:`~mars.errors.MarsError`: the command line
prints its first line and exits with code 2.  ``retryable`` says whether the same request may
succeed later (the server was down, slow or busy).  :class:`ServerUnavailable` is a request that
failed for such a reason (on every try the retry policy allowed, when it was retried): another
replica, or a rerun later, may take it.  No message holds a key, a header or a password
(:class:`~mars.engines.server.transport.Http` hides them).
"""

from __future__ import annotations

from typing import Self

from ...errors import MarsError
from .retry import RETRY_STATUS

#: What a command-line user can do about a server that failed every try (the stages resume).
RESUME = "rerun the same command to resume"


class ServerError(MarsError):
    """The server is unreachable, refuses, or answers what the backend cannot use (one line)."""

    #: whether the same request may succeed if tried again later
    retryable: bool = False
    #: what a command-line user can do about it, the message's last clause ("" for none)
    hint: str = ""

    def without_hint(self) -> str:
        """The message without :attr:`hint`: what a client of ``mars serve`` is told (it runs no
        command)."""
        return str(self).removesuffix(f"; {self.hint}") if self.hint else str(self)

    def retold(self, message: str) -> Self:
        """This error (its type and attributes) with another message: a refusal re-worded, e.g.
        with what the server echoed of a key hidden."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.args = (message,)
        return new


class ServerStatusError(ServerError):
    """The server answered an HTTP error status (``status``); retryable when the status says
    it is busy, overloaded, restarting or timed out (:data:`~.retry.RETRY_STATUS`)."""

    def __init__(self, message: str, *, status: int):
        super().__init__(message)
        self.status = int(status)
        self.retryable = self.status in RETRY_STATUS


class ServerUnavailable(ServerError):
    """A request failed every try (no connection, timeouts, busy or failing answers): the server
    is down or overloaded, not refusing the request (another replica may take it)."""

    retryable = True


class ServerConnectionError(ServerUnavailable):
    """No connection to the server: refused, reset, not made in time, a host that does not
    resolve, a TLS handshake that failed."""


class ServerTimeout(ServerUnavailable):
    """The server did not answer the whole request within its deadline."""


class ServerBusy(ServerStatusError, ServerUnavailable):
    """A busy, overloaded or failing status (408, 429, 5xx) on every try."""
