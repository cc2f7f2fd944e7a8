"""One declaration type for every option and setting (:class:`Option`).

The engine stages' options (:mod:`mars.engines.options`), the simulation settings
(:mod:`mars.method.settings`) and ``mars serve``'s own options (:mod:`mars.serve.options`) are
each a tuple of these. A declaration holds what every reader needs — the type, the default, the
range or the choices, the help — and where the value is set (the commands that take it, its key
in the workflow config, what a setting changes), so the command line, the config schema, the
dataclasses that carry the values, the checks and docs/cli.md all read one place. A value is
refused in one line naming the option by its flag (or, as a keyword, by its name).
"""

from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from typing import Any

from .errors import MarsError, UsageError


@dataclass(frozen=True)
class Option:
    """One option or setting."""

    name: str
    type: type
    help: str
    #: the commands that take it (:mod:`mars.engines.options`' GENERATE, PROBE, SOLVE, SERVE)
    commands: tuple[str, ...] = ()
    #: where the workflow config sets it (:mod:`mars.engines.options`), or None
    config: str | None = None
    #: None: unset, the engine's, the model's or the pool's own (the help says which)
    default: Any = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    pattern: str | None = None  # a string's pattern, for the config schema
    key: str | None = None  # its key in the workflow config, if not its name
    # what a simulation setting changes (mars.method.settings)
    sampling: bool = False
    fit: bool = False
    live: bool = False
    section: str | None = None
    symbol: str | None = None
    #: the heading of ``--help`` the option is listed under (None: "Options")
    panel: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def config_key(self) -> str:
        return self.key or self.name

    @property
    def optional(self) -> bool:
        """None is allowed (and means "derive it", e.g. the pool's spacing)."""
        return self.default is None

    def range_text(self) -> str:
        """Where the value must lie (``≥ 1``, ``> 0 and ≤ 1``, ``one of a, b``); empty: anywhere."""
        if self.choices is not None:
            return "one of " + ", ".join(self.choices)
        lo = hi = ""
        if self.low is not None:
            lo = f"{'>' if self.low_open else '≥'} {_num(self.low)}"
        if self.high is not None:
            hi = f"{'<' if self.high_open else '≤'} {_num(self.high)}"
        return " and ".join(p for p in (lo, hi) if p)

    def check(
        self, value: Any, keyword: bool = False, error: builtins.type[MarsError] = UsageError
    ) -> None:
        """Refuse ``value`` in one line naming the option by its flag, or as a keyword (a
        setting given to a library call); None passes where the default is None."""
        if value is None and self.optional:
            return
        what = f"{self.name}={_shown(value)}" if keyword else f"{self.flag} {_shown(value)}"
        if self.choices is not None:
            if value not in self.choices:
                raise error(f"{what}: must be {self.range_text()}")
            return
        if self.type is bool:
            if not isinstance(value, bool):
                raise error(f"{what}: must be true or false")
            return
        if self.type is str:
            if not isinstance(value, str):
                raise error(f"{what}: must be a string")
            return
        if self.type is int:
            if isinstance(value, bool) or not _is_int(value):
                raise error(f"{what}: must be a whole number {self.range_text()}".rstrip())
        else:
            if isinstance(value, bool):
                raise error(f"{what}: must be a number {self.range_text()}".rstrip())
            try:
                value = float(value)
            except (TypeError, ValueError, OverflowError):
                value = math.nan  # not a number, or none a float can hold
            if not math.isfinite(value):
                raise error(f"{what}: must be a finite number {self.range_text()}".rstrip())
        bad_low = self.low is not None and (
            value <= self.low if self.low_open else value < self.low
        )
        bad_high = self.high is not None and (
            value >= self.high if self.high_open else value > self.high
        )
        if bad_low or bad_high:
            raise error(f"{what}: must be {self.range_text()}")

    def schema(self) -> dict[str, Any]:
        """The option as a JSON-schema property (the workflow config's)."""
        kinds = {bool: "boolean", int: "integer", float: "number", str: "string"}
        out: dict[str, Any] = {"type": kinds[self.type]}
        if self.low is not None:
            out["exclusiveMinimum" if self.low_open else "minimum"] = self.low
        if self.high is not None:
            out["exclusiveMaximum" if self.high_open else "maximum"] = self.high
        if self.pattern is not None:
            out["pattern"] = self.pattern
        if self.choices is not None:
            out["enum"] = list(self.choices)
        out["description"] = self.help
        return out


def by_name(options: tuple[Option, ...]) -> dict[str, Option]:
    """A tuple of declarations by name (each name once)."""
    out = {o.name: o for o in options}
    assert len(out) == len(options), "an option declared twice"
    return out


def _num(x: float) -> str:
    if float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:g}"


def _shown(value: Any) -> str:
    """A value as a message shows it: at most 40 characters (a 5,000-digit integer cannot even be
    turned into a string)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return f"{'-' if value < 0 else ''}(a {value.bit_length() * 0.30103:.0f}-digit number)"
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_int(value: Any) -> bool:
    try:
        import numpy as np

        if isinstance(value, np.integer):
            return True
    except ImportError:  # pragma: no cover
        pass
    return isinstance(value, int)
