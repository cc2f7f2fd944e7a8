"""When a failed server request is tried again, and how long to wait first.

One small policy object: at most ``retries`` further tries of a request that lost its connection,
timed out or got a busy status, each after an exponential backoff with jitter (so many clients of
one restarting server do not come back in step), or after the wait the server asks for
(``Retry-After``, in seconds or as an HTTP date), never longer than ``max_wait``.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime

#: HTTP statuses worth another try: the server is busy, overloaded, restarting or timed out.
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: Longest wait between two tries (seconds), whatever ``Retry-After`` asks.
MAX_BACKOFF = 30.0


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` further tries; the k-th (from 0) waits ``backoff · 2**k`` seconds less up to
    ``jitter`` of it, drawn at random, or what ``Retry-After`` asks; at most ``max_wait``."""

    retries: int = 4
    backoff: float = 0.5
    jitter: float = 0.25
    max_wait: float = MAX_BACKOFF
    statuses: frozenset[int] = RETRY_STATUS
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff < 0 or not 0 <= self.jitter <= 1 or self.max_wait < 0:
            raise ValueError(f"bad retry policy {self!r}")

    @property
    def tries(self) -> int:
        return self.retries + 1

    def wait(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait after failed try ``attempt`` (0: the first) before the next; the
        server's ``Retry-After`` header value, when it sends one that reads, decides."""
        asked = parse_retry_after(retry_after)
        if asked is not None:
            return min(asked, self.max_wait)
        base = min(self.backoff * 2**attempt, self.max_wait)
        return base * (1.0 - self.jitter * self.rng.random())


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait: a number of seconds, or an HTTP date
    (seconds from ``now``); None when there is none or it does not read."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, when - (time.time() if now is None else now))
