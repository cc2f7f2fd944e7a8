"""Where a server is, and how to speak of it without showing what it must keep.

One check of a server's URL for the command line, the server backend and the workflow's config
check (:func:`check_base_url`), so a URL one refuses the others refuse too, in the same words.
What may be shown of it: credentials written in the URL (``http://user:pass@host``) are replaced
by ``***`` wherever a URL appears in a message (:func:`redact`).  The API key is read from the
environment and refused, naming the variable and never the key, when it holds anything a header
cannot carry (:func:`api_key`).  A server's own text (an error message, a model name) is shown as
printable text only (:func:`printable`): a hostile server's terminal escape sequences never reach
the terminal.

Standard library only: the workflow checks its config with it before any job starts.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import unicodedata
from urllib.parse import urlsplit

from ..errors import MarsError

#: Credentials in a URL (``scheme://user:pass@``), or in one written without its scheme
#: (``user:pass@host``): the part :func:`redact` hides.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s]*@")
_BARE_USERINFO = re.compile(r"(?<![\w/.+:-])[^\s/?#@:'\"]+:[^\s/?#@'\"]*@(?=[\w\[])")
#: Terminal escape sequences: CSI (``ESC [ … final``), OSC/DCS/APC/PM/SOS strings (ended by BEL
#: or ``ESC \``), and any other two-character ``ESC x``.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|\x1b.?",
    re.DOTALL,
)
#: Unicode categories never shown: controls, format characters (bidirectional overrides),
#: private use, surrogates, unassigned, line and paragraph separators.
_HIDDEN = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")


def redact(text: object) -> str:
    """``text`` with the credentials of every URL in it replaced by ``***``."""
    return _BARE_USERINFO.sub("***@", _USERINFO.sub(r"\1***@", str(text)))


class Redacting(logging.Filter):
    """Hides the credentials of every URL in a log record: an HTTP client library's own log
    lines (httpx logs each request's URL at INFO) say no more than our messages do."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = redact(message)
        if hidden != message:
            record.msg, record.args = hidden, None
        return True


def hide_credentials_in_logs(*loggers: str) -> None:
    """Install :class:`Redacting` on the named loggers (once each)."""
    for name in loggers:
        logger = logging.getLogger(name)
        if not any(isinstance(f, Redacting) for f in logger.filters):
            logger.addFilter(Redacting())


def printable(text: object, limit: int = 200) -> str:
    """``text`` as one line of printable text: terminal escape sequences and control or format
    characters removed, whitespace runs made one space, at most ``limit`` characters."""
    s = _ESCAPES.sub("", str(text))
    s = "".join(" " if c.isspace() else c for c in s if _shown_char(c))
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _shown_char(c: str) -> bool:
    return c.isspace() or unicodedata.category(c) not in _HIDDEN


def shown(value: object, limit: int = 120) -> str:
    """A value a user gave or a server sent, quoted for a message: printable, credentials
    hidden."""
    return repr(printable(redact(value), limit))


def check_base_url(url: object, name: str = "--base-url") -> str:
    """``http(s)://HOST[:PORT][/PATH]`` from what a user typed (a trailing ``/`` or ``/v1``
    dropped); anything a client could not connect to — another scheme, no host, a port that is
    not a number in 1..65535, an unclosed IPv6 bracket, spaces, a query — is one line naming
    ``name`` (its credentials hidden)."""
    raw = str(url if url is not None else "").strip()

    def bad(why: str) -> MarsError:
        return MarsError(f"{name} {shown(raw)}: {why}; expected http://HOST:PORT")

    if not raw or any(not 0x21 <= ord(c) <= 0x7E for c in raw):
        raise bad("empty" if not raw else "holds a space, a control or a non-ASCII character")
    u = raw.rstrip("/")
    if u.endswith("/v1"):
        u = u[:-3]
    try:
        parts = urlsplit(u)
        port = parts.port
    except ValueError as exc:
        raise bad(printable(exc, 80).lower()) from None
    if parts.scheme not in ("http", "https"):
        raise bad("not an http(s) URL")
    host = parts.hostname or ""
    if not host:
        raise bad("no host")
    if parts.query or parts.fragment or "?" in u or "#" in u:
        raise bad("a query or fragment has no place in a server's URL")
    if port is not None and not 1 <= port <= 65535:
        raise bad(f"port {port} is not in 1..65535")
    netloc_host = parts.netloc.rpartition("@")[2]
    if netloc_host.startswith("["):
        try:
            ipaddress.IPv6Address(host.split("%")[0])
        except ValueError:
            raise bad(f"{host!r} is not an IPv6 address") from None
    elif re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise bad(f"{host!r} is not an IPv4 address") from None
    elif not _HOST.fullmatch(host) or ".." in host:
        raise bad(f"{printable(host, 60)!r} is not a host name")
    return u


def api_key(env: str | None) -> str:
    """The API key in the environment variable ``env`` (empty: none), surrounding whitespace
    (a file's final newline) dropped.  A key holding a space, a control or a non-ASCII character
    cannot go in a header: one line naming the variable, never the key."""
    if not env:
        return ""
    key = os.environ.get(env, "").strip()
    for k, c in enumerate(key):
        if not 0x21 <= ord(c) <= 0x7E:
            what = (
                "a line break"
                if c in "\r\n"
                else "a space"
                if c.isspace()
                else "a control character"
                if unicodedata.category(c) == "Cc"
                else "a non-ASCII character"
            )
            raise MarsError(
                f"${env}: the API key holds {what} (character {k + 1} of {len(key)}), which "
                "cannot go in an HTTP header: set it to the key alone, on one line"
            )
    return key
