"""Display names of methods (Markdown and LaTeX) and the simulate commands behind a run.

Labels come from the method registry (:mod:`mars.method.registry`), symbols, flags and defaults of
the
settings from their declarations (:mod:`mars.method.settings`): nothing here needs an edit when a
method
or a setting is added.
"""

from __future__ import annotations

import json
import re
import shlex

from ..method.registry import METHODS, ORACLE_FIRST_STOP, SELF_CONSISTENCY, method_order
from ..method.settings import SPECS
from .fmt import tex_escape

__all__ = [
    "ORACLE_FIRST",
    "family_baseline",
    "is_baseline",
    "method_label",
    "method_order",
    "run_commands",
]

#: the oracle-first stop of self-consistency votes: what captions and headers call that stop
ORACLE_FIRST = ORACLE_FIRST_STOP.of(SELF_CONSISTENCY)

_PLACEHOLDER = re.compile(r"\{(\w+)(:value)?\}")


def family_baseline(method: str) -> str:
    """The full-budget vote a method's answer is compared with (its pipeline's baseline)."""
    m = METHODS.get(method)
    return m.baseline if m is not None else SELF_CONSISTENCY


def is_baseline(method: str) -> bool:
    m = METHODS.get(method)
    return m is not None and m.is_baseline


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def method_label(method: str, settings: dict | None = None) -> tuple[str, str]:
    """(Markdown/plain, LaTeX) label of a method run under ``settings``."""
    m = METHODS.get(method)
    if m is None:
        return method, tex_escape(method)
    s = settings or {}
    md_parts: list[str] = []
    tex_parts: list[str] = []
    pos = 0
    for match in _PLACEHOLDER.finditer(m.label):
        literal = m.label[pos : match.start()]
        md_parts.append(literal)
        tex_parts.append(tex_escape(literal).replace("oracle q", "oracle $q$"))
        spec = SPECS[match.group(1)]
        value = _fmt(s.get(spec.name, spec.default))
        if match.group(2):
            md_parts.append(value)
            tex_parts.append(value)
        else:
            symbol = spec.symbol or spec.name
            md_parts.append(f"{symbol}={value}")
            tex_sym = tex_escape(symbol).strip("$")
            tex_parts.append(f"${tex_sym}{{=}}{value}$")
        pos = match.end()
    md_parts.append(m.label[pos:])
    tex_parts.append(tex_escape(m.label[pos:]).replace("oracle q", "oracle $q$"))
    return "".join(md_parts), "".join(tex_parts)


#: settings always spelled out in a command (the rest only where they differ from the default)
_ALWAYS = ("budget", "iterations")


def simulate_command(
    source: str | None,
    methods: list[str],
    settings: dict,
    out: str,
    calibration: str | None = None,
) -> str:
    """The `mars simulate` command line that writes these methods with these settings (and the
    calibration they read, which changes their results as a setting does)."""
    args = ["mars", "simulate", source or "POOL", "-m", ",".join(method_order(methods))]
    for name, spec in SPECS.items():
        if name not in settings or settings[name] is None:
            continue
        v = settings[name]
        if name in _ALWAYS or v != spec.default:
            args += [spec.flag, _fmt(v)]
    if calibration:
        args += ["--calibration", calibration]
    args += ["--out", out]
    return shlex.join(args)


def run_commands(used) -> list[str]:
    """Simulate commands for the (run, method) pairs a table used, one per run and settings."""
    groups: dict = {}
    for run, method in used:
        ov = run.overall[method]
        key = (
            str(run.path),
            json.dumps(ov.get("settings") or {}, sort_keys=True),
            (ov.get("input") or {}).get("source"),
            (ov.get("calibration") or {}).get("path") or "",
        )
        groups.setdefault(key, []).append(method)
    out = []
    for (path, settings, source, cal), methods in sorted(groups.items()):
        out.append(
            simulate_command(source, sorted(set(methods)), json.loads(settings), path, cal or None)
        )
    return out
