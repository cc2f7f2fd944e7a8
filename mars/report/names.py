"""Display names of methods (Markdown and LaTeX), their families and the simulate commands behind a run."""

from __future__ import annotations

import shlex
from dataclasses import fields

from ..methods import METHODS
from ..simulate import Settings

#: appendix order: the paper's rows first (SC family, DCO family), then the other methods
SC_FAMILY = [
    "sc",
    "sc-mars",
    "sc-mars-cal",
    "sc-mars-oracle",
    "sc-mars-oracle-cal",
    "sc-mars-cert",
    "sc-mars-oracle-cert",
]
DCO_FAMILY = ["dco", "dco-mars", "dco-mars-cal", "dco-mars-oracle", "dco-mars-cert"]
OTHERS = [
    "sc-pp",
    "sc-pp-faithful",
    "sc-consensus",
    "oracle-first",
    "oracle-last",
    "oracle-dco-first",
    "oracle-dco-last",
]
ORDER = SC_FAMILY + DCO_FAMILY + OTHERS


def method_order(names) -> list[str]:
    known = [m for m in ORDER if m in names]
    return known + sorted(m for m in names if m not in ORDER)


def family_baseline(method: str) -> str:
    """The full-budget vote a method's answer is compared with (its pipeline's baseline)."""
    m = METHODS.get(method)
    if m is not None and (m.deepconf or m.conf_weights):
        return "dco"
    return "sc"


def is_baseline(method: str) -> bool:
    m = METHODS.get(method)
    return m is not None and m.stopping == "never"


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def method_label(method: str, settings: dict | None = None) -> tuple[str, str]:
    """(Markdown/plain, LaTeX) label of a method run under ``settings``."""
    s = settings or {}
    g = s.get("gamma", 1.0)
    u = s.get("pp_conv", 3)
    delta = s.get("delta", 0.05)
    share = s.get("consensus", 0.9)
    gq = "" if g == 1 else f"={_fmt(g)}"
    gamma_md = f"γ{gq or '=1'}"
    gamma_tex = rf"$\gamma{{=}}{_fmt(g) if gq else '1'}$"
    table = {
        "sc": ("SC (baseline)", "SC (baseline)"),
        "dco": ("DCO (baseline)", "DCO (baseline)"),
        "sc-mars": (f"MARS ({gamma_md})", f"MARS ({gamma_tex})"),
        "sc-mars-cal": ("MARS", "MARS"),
        "sc-mars-oracle": (f"MARS (oracle q, {gamma_md})", f"MARS (oracle $q$, {gamma_tex})"),
        "sc-mars-oracle-cal": ("MARS (oracle q)", "MARS (oracle $q$)"),
        "dco-mars": (f"DCO + MARS ({gamma_md})", f"DCO + MARS ({gamma_tex})"),
        "dco-mars-cal": ("DCO + MARS", "DCO + MARS"),
        "dco-mars-oracle": (
            f"DCO + MARS (oracle q, {gamma_md})",
            f"DCO + MARS (oracle $q$, {gamma_tex})",
        ),
        "sc-mars-cert": (
            f"MARS certified (δ={_fmt(delta)})",
            rf"MARS certified ($\delta{{=}}{_fmt(delta)}$)",
        ),
        "sc-mars-oracle-cert": (
            f"MARS certified (oracle q, δ={_fmt(delta)})",
            rf"MARS certified (oracle $q$, $\delta{{=}}{_fmt(delta)}$)",
        ),
        "dco-mars-cert": (
            f"DCO + MARS certified (δ={_fmt(delta)})",
            rf"DCO + MARS certified ($\delta{{=}}{_fmt(delta)}$)",
        ),
        "sc-pp": (f"Parallel-Probe (u={u})", f"Parallel-Probe ($u{{=}}{u}$)"),
        "sc-pp-faithful": (
            f"Parallel-Probe, pruning (u={u})",
            f"Parallel-Probe, pruning ($u{{=}}{u}$)",
        ),
        "sc-consensus": (
            f"Consensus (share ≥ {_fmt(share)})",
            rf"Consensus (share $\geq {_fmt(share)}$)",
        ),
        "oracle-first": ("Oracle stop, first", "Oracle stop, first"),
        "oracle-last": ("Oracle stop, absorbing", "Oracle stop, absorbing"),
        "oracle-dco-first": ("DCO oracle stop, first", "DCO oracle stop, first"),
        "oracle-dco-last": ("DCO oracle stop, absorbing", "DCO oracle stop, absorbing"),
    }
    if method in table:
        return table[method]
    from .fmt import tex_escape

    return method, tex_escape(method)


# -- provenance -----------------------------------------------------------------------------------
_FLAGS = {
    "budget": "--budget",
    "iterations": "--iterations",
    "warmup": "--warmup",
    "seed": "--seed",
    "window": "--window",
    "gamma": "--gamma",
    "ucb_z": "--ucb-z",
    "gamma_min": "--gamma-min",
    "pp_conv": "--pp-conv",
    "pp_warmup": "--pp-warmup",
    "pp_patience": "--pp-patience",
    "delta": "--delta",
    "consensus": "--consensus",
}
_DEFAULTS = {f.name: f.default for f in fields(Settings)}
_ALWAYS = ("budget", "iterations")


def simulate_command(source: str | None, methods: list[str], settings: dict, out: str) -> str:
    """The `mars simulate` command line that writes these methods with these settings."""
    args = ["mars", "simulate", source or "POOL", "-m", ",".join(method_order(methods))]
    for k, flag in _FLAGS.items():
        if k not in settings:
            continue
        v = settings[k]
        if k in _ALWAYS or v != _DEFAULTS.get(k):
            args += [flag, _fmt(v)]
    args += ["--out", out]
    return shlex.join(args)


def run_commands(used) -> list[str]:
    """Simulate commands for the (run, method) pairs a table used, one per run and settings."""
    import json

    groups: dict = {}
    for run, method in used:
        ov = run.overall[method]
        key = (
            str(run.path),
            json.dumps(ov.get("settings") or {}, sort_keys=True),
            (ov.get("input") or {}).get("source"),
        )
        groups.setdefault(key, []).append(method)
    out = []
    for (path, settings, source), methods in sorted(groups.items()):
        out.append(simulate_command(source, sorted(set(methods)), json.loads(settings), path))
    return out
