"""The paper's tables (1, 2, 3–5) and the new ones, built from simulate outputs only.

Every number comes from a run's ``overall.json`` (accuracy, savings, mean tokens) or is computed
from its ``per_question.csv`` / ``per_iteration.csv`` (probe tokens, the risk audit); nothing is
typed in. Each builder returns a :class:`~mars.report.fmt.Table` whose ``data`` (the CSV) holds the
unrounded numbers and whose ``commands`` name the report command and the simulate runs used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import beta

from ..method.registry import (
    CALIBRATED_MARS,
    DEEPCONF,
    MARS_CERTIFIED,
    METHODS,
    ORACLE_FIRST_STOP,
    ORACLE_LAST_STOP,
    PIPELINES,
    PROBE_PRUNING_STOP,
    PROBE_STOP,
    SELF_CONSISTENCY,
)
from ..method.settings import same_sampling
from ..store.schema import SWITCH_FEATURES
from .collect import Results, Run
from .fmt import Cell, Table, integer, num, pct, tex_escape, text
from .names import family_baseline, is_baseline, method_label, method_order, run_commands
from .provenance import describe

#: the name the tables give the oracle-first stop (its self-consistency method)
ORACLE_FIRST = ORACLE_FIRST_STOP.of(SELF_CONSISTENCY)


class _Used:
    """Collects the (run, method) pairs a table reads, for its provenance lines."""

    def __init__(self):
        self.items: list[tuple[Run, str]] = []

    def __call__(self, run: Run | None, method: str):
        if run is not None and method in run.overall:
            self.items.append((run, method))
            return run.overall[method]
        return None

    def commands(self, report_command: str | None) -> list[str]:
        uniq = list({(str(r.path), m): (r, m) for r, m in self.items}.values())
        return ([report_command] if report_command else []) + run_commands(uniq)

    def source(self, results: Results) -> str:
        """What the data read is (synthetic stand-ins flagged, real sources named)."""
        return describe(results.sources([r for r, _ in self.items]))


def _get(ov: dict | None, key: str):
    if ov is None:
        return None
    v = ov.get(key)
    return None if v is None else float(v)


#: the sign of a savings cell against the method's own narrower sample, and its note
NARROW = "†"


class _Narrow:
    """The methods of a table that run fewer traces than the budget (``single-sac``: one):
    their savings are against those traces, not the full-budget vote, and their cost against the
    vote is what a reader needs beside it (issue 35: "Savings 0.0 %" while spending 0.2 %)."""

    def __init__(self, results: Results):
        self.results = results
        self.spend: dict[str, list[float]] = {}

    def mark(self, pair: tuple[str, str], run: Run, method: str) -> str:
        """``NARROW`` for such a method (its share of the vote's tokens noted), else ""."""
        m = METHODS.get(method)
        if m is None or m.width is None:
            return ""
        base = family_baseline(method)
        base_run = self.results.find(*pair, base)
        tokens = _get(run.overall[method], "tokens_mean")
        vote = None if base_run is None else _get(base_run.overall[base], "tokens_mean")
        if tokens is not None and vote:
            self.spend.setdefault(method, []).append(100.0 * tokens / vote)
        return NARROW

    def notes(self) -> list[str]:
        out = []
        for method in self.spend or {}:
            m = METHODS[method]
            lo, hi = min(self.spend[method]), max(self.spend[method])
            spent = f"{lo:.1f} %" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}–{hi:.1f} %"
            base = family_baseline(method)
            traces = "that trace" if m.width == 1 else f"those {m.width} traces"
            out.append(
                f"{NARROW} {method} runs {m.width} trace{'s' if m.width != 1 else ''} of each "
                f"sample: its savings are against {traces} run to the end, not against the "
                f"full-budget vote ({base}); it spends {spent} of {base}'s tokens."
            )
        return out


def _model_cells(results: Results, pair, prev_model):
    model, dataset = pair
    return text(model if model != prev_model else ""), text(dataset)


def _breaks_by_model(pairs) -> list[int]:
    out, prev = [], None
    for i, (m, _) in enumerate(pairs):
        if m != prev:
            out.append(i)
        prev = m
    return out


# -- Table 1 --------------------------------------------------------------------------------------
def table_main(results: Results, command: str | None = None) -> Table:
    """Table 1: SC and DeepConf baselines, +MARS (calibrated) accuracy and savings."""
    used = _Used()
    pipes = [(base, CALIBRATED_MARS.of(base)) for base in PIPELINES]
    rows, data, prev = [], [], None
    for pair in results.pairs:
        ov = {m: used(results.find(*pair, m), m) for pipe in pipes for m in pipe}
        if not any(ov.values()):
            continue
        rec = {"model": pair[0], "dataset": pair[1]}
        for m in ov:
            rec[f"{m}.accuracy_pct"] = _get(ov[m], "accuracy_pct")
        for _, mars in pipes:
            rec[f"{mars}.savings_pct"] = _get(ov[mars], "savings_pct")
        data.append(rec)
        cells = list(_model_cells(results, pair, prev))
        for base, mars in pipes:
            cells += [
                num(rec[f"{base}.accuracy_pct"]),
                num(rec[f"{mars}.accuracy_pct"]),
                pct(rec[f"{mars}.savings_pct"]),
            ]
        rows.append(cells)
        prev = pair[0]
    cols = ["model", "dataset"]
    for base, mars in pipes:
        cols += [f"{base}.accuracy_pct", f"{mars}.accuracy_pct", f"{mars}.savings_pct"]
    return Table(
        key="table1-main",
        title="Table 1: accuracy and token savings of calibrated MARS",
        caption="Accuracy (%) and token savings for calibrated MARS "
        f"({', '.join(mars for _, mars in pipes)}). Baseline is the full-budget vote "
        f"({', '.join(base for base, _ in pipes)}); +MARS is the early-stopped vote; savings are "
        "the mean per-question token reduction against the same pipeline's baseline.",
        headers=["Model", "Dataset"] + ["Baseline", "+MARS", "Savings"] * len(pipes),
        groups=[("", 2, None)] + [(title, 3, f"{title} Family") for title in PIPELINES.values()],
        rows=rows,
        data=pd.DataFrame(data, columns=cols),
        breaks=_breaks_by_model([(d["model"], 0) for d in data]),
        align="ll" + "rrr" * len(pipes),
        commands=used.commands(command),
        source=used.source(results),
    )


# -- Table 2 --------------------------------------------------------------------------------------
def _pp_runs(results: Results, model: str, dataset: str, method: str) -> dict:
    """{u: (run, overall)} of a Parallel-Probe method, the main setting winning ties."""
    out: dict[int, Run] = {}
    for r in results.comparable_runs(model, dataset):
        if method in r.overall:
            u = int(r.settings(method).get("pp_conv", 3))
            out.setdefault(u, r)
    return out


def table_pp(results: Results, command: str | None = None) -> Table:
    """Table 2: Parallel-Probe (every u found, emulated and with pruning) against MARS (SC)."""
    used = _Used()
    pp, pruning = PROBE_STOP.of(SELF_CONSISTENCY), PROBE_PRUNING_STOP.of(SELF_CONSISTENCY)
    mars = CALIBRATED_MARS.of(SELF_CONSISTENCY)
    variants = []  # (method, u)
    for method in (pp, pruning):
        us = sorted({u for pair in results.pairs for u in _pp_runs(results, *pair, method)})
        variants += [(method, u) for u in us]
    rows, data, prev = [], [], None
    for pair in results.pairs:
        rec: dict[str, Any] = {"model": pair[0], "dataset": pair[1]}
        accs = []
        for method, u in variants:
            run = _pp_runs(results, *pair, method).get(u)
            ov = used(run, method)
            rec[f"{method}-u{u}.accuracy_pct"] = _get(ov, "accuracy_pct")
            rec[f"{method}-u{u}.savings_pct"] = _get(ov, "savings_pct")
            accs.append(rec[f"{method}-u{u}.accuracy_pct"])
        ov = used(results.find(*pair, mars), mars)
        rec[f"{mars}.accuracy_pct"] = _get(ov, "accuracy_pct")
        rec[f"{mars}.savings_pct"] = _get(ov, "savings_pct")
        accs.append(rec[f"{mars}.accuracy_pct"])
        if all(a is None for a in accs):
            continue
        best = max(a for a in accs if a is not None)
        cells = list(_model_cells(results, pair, prev))
        for method, u in variants:
            a = rec[f"{method}-u{u}.accuracy_pct"]
            cells += [
                num(a, bold=a is not None and round(a, 1) == round(best, 1)),
                num(rec[f"{method}-u{u}.savings_pct"]),
            ]
        a = rec[f"{mars}.accuracy_pct"]
        cells += [
            num(a, bold=a is not None and round(a, 1) == round(best, 1)),
            num(rec[f"{mars}.savings_pct"]),
        ]
        rows.append(cells)
        data.append(rec)
        prev = pair[0]
    groups: list[tuple[str, int, str | None]] = [("", 2, None)]
    for method, u in variants:
        name = "PP" if method == pp else "PP + pruning"
        groups.append((f"{name} (u={u})", 2, f"{name} ($u{{=}}{u}$)"))
    groups.append(("MARS (SC)", 2, None))
    headers = ["Model", "Dataset"] + ["Acc.", "Sav."] * (len(variants) + 1)
    notes = []
    if not variants:
        notes.append(
            f"No Parallel-Probe run (method {pp}) found: run `mars simulate -m {pp} --pp-conv U` "
            "into a setting such as `pp-u4`."
        )
    if any(m == pruning for m, _ in variants):
        notes.append(
            f"PP + pruning is {pruning}: pruned traces stop voting and stop costing tokens, as "
            f"Parallel-Probe's authors define it; PP ({pp}) is the MARS reference's emulation."
        )
    notes.append("Bold: the best accuracy of the row.")
    cols = (
        ["model", "dataset"]
        + [f"{m}-u{u}.{k}" for m, u in variants for k in ("accuracy_pct", "savings_pct")]
        + [f"{mars}.accuracy_pct", f"{mars}.savings_pct"]
    )
    return Table(
        key="table2-parallel-probe",
        title="Table 2: Parallel-Probe against MARS",
        caption="Comparison with Parallel-Probe (PP; stop after u equal majority answers in a "
        "row). Accuracy (%) and mean per-question token savings (%); MARS is calibrated MARS on "
        f"self-consistency ({mars}).",
        headers=headers,
        groups=groups,
        rows=rows,
        data=pd.DataFrame(data, columns=cols),
        breaks=_breaks_by_model([(d["model"], 0) for d in data]),
        align="ll" + "r" * (len(headers) - 2),
        notes=notes,
        commands=used.commands(command),
        source=used.source(results),
    )


# -- Tables 3-5 -----------------------------------------------------------------------------------
def tables_full(results: Results, command: str | None = None) -> list[Table]:
    """Appendix tables: every method of every setting, one table per model."""
    out = []
    for i, model in enumerate(results.models):
        used = _Used()
        narrow = _Narrow(results)
        rows: list[list[Cell]] = []
        data, breaks = [], []
        for pair in [p for p in results.pairs if p[0] == model]:
            runs = results.runs_of(*pair)
            for run in runs:
                block = pair[1] if len(runs) == 1 else f"{pair[1]} · {run.setting}"
                if results.sampling_difference(run):  # never mixed silently with the others
                    block += f" ({results.sampling_difference(run)})"
                first = True
                breaks.append(len(rows))
                for method in method_order(run.methods):
                    ov = used(run, method)
                    md, tex = method_label(method, run.settings(method))
                    sav = None if is_baseline(method) else _get(ov, "savings_pct")
                    rows.append(
                        [
                            text(block if first else ""),
                            text(f"{md} · `{method}`", tex=tex),
                            pct(_get(ov, "accuracy_pct")),
                            integer(_get(ov, "tokens_mean")),
                            pct(sav, mark=narrow.mark(pair, run, method)),
                        ]
                    )
                    data.append(
                        {
                            "model": model,
                            "dataset": pair[1],
                            "setting": run.setting,
                            "method": method,
                            "label": md,
                            "accuracy_pct": _get(ov, "accuracy_pct"),
                            "tokens_mean": _get(ov, "tokens_mean"),
                            "savings_pct": sav,
                        }
                    )
                    first = False
        out.append(
            Table(
                key=f"table{3 + i}-full-{_slug(model)}",
                title=f"Table {3 + i}: full results for {model}",
                caption=f"Full results for {model}: every simulated method. Accuracy, mean tokens "
                "per question (all sampled traces, warmup included) and mean per-question savings "
                "against the pipeline's own full-budget baseline (SC or DCO).",
                headers=["Dataset", "Method", "Accuracy", "Mean tokens", "Savings"],
                rows=rows,
                data=pd.DataFrame(
                    data,
                    columns=[
                        "model",
                        "dataset",
                        "setting",
                        "method",
                        "label",
                        "accuracy_pct",
                        "tokens_mean",
                        "savings_pct",
                    ],
                ),
                tex_headers=["", "Method", "Accuracy", "Mean Tokens", "Savings"],
                breaks=breaks,
                align="llrrr",
                notes=narrow.notes(),
                commands=used.commands(command),
                source=used.source(results),
            )
        )
    return out


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "-" for c in s).strip("-") or "model"


# -- new: the oracle stopping rules --------------------------------------------------------------
def table_oracle(results: Results, command: str | None = None) -> Table:
    """MARS beside the oracle stopping rules: how much of oracle-first's saving it gets."""
    used = _Used()
    fams = [
        (CALIBRATED_MARS.of(base), ORACLE_FIRST_STOP.of(base), ORACLE_LAST_STOP.of(base))
        for base in PIPELINES
    ]
    rows, data, prev = [], [], None
    for pair in results.pairs:
        rec: dict[str, Any] = {"model": pair[0], "dataset": pair[1]}
        cells = list(_model_cells(results, pair, prev))
        for mars, first, last in fams:
            vals = {
                m: _get(used(results.find(*pair, m), m), "savings_pct") for m in (mars, first, last)
            }
            share = None
            if vals[mars] is not None and vals[first] not in (None, 0.0):
                share = 100.0 * vals[mars] / vals[first]
            for m in (mars, first, last):
                rec[f"{m}.savings_pct"] = vals[m]
            rec[f"{mars}.share_of_oracle_pct"] = share
            cells += [num(vals[mars]), num(vals[first]), num(vals[last]), pct(share, 0)]
        if all(v is None for k, v in rec.items() if k not in ("model", "dataset")):
            continue
        rows.append(cells)
        data.append(rec)
        prev = pair[0]
    return Table(
        key="table-oracle-bounds",
        title="MARS against the oracle stopping rules",
        caption="Token savings (%) of calibrated MARS and of the two oracle stopping rules, which "
        "know the full-budget vote: first = stop at the first checkpoint whose leader equals it, "
        "absorbing = stop one checkpoint after the last checkpoint whose leader differs. Share = "
        f"MARS savings / {ORACLE_FIRST} savings. Oracle-first is the most a rule that always "
        "returns the full-budget answer can save; a rule that sometimes returns another answer "
        "can save more (a share above 100 %).",
        headers=["Model", "Dataset"] + ["MARS", "Oracle first", "Oracle absorbing", "Share"] * 2,
        groups=[("", 2, None), *((title, 4, None) for title in PIPELINES.values())],
        rows=rows,
        data=pd.DataFrame(data),
        breaks=_breaks_by_model([(d["model"], 0) for d in data]),
        align="ll" + "r" * 8,
        commands=used.commands(command),
        source=used.source(results),
    )


def _stopping_methods(results: Results) -> Iterator[tuple[tuple[str, str], Run, str, bool]]:
    """(pool, its main run, method, first of the pool?) for every early-stopping method."""
    for pair in results.pairs:
        run = results.main_run(*pair)
        first = True
        for method in method_order(run.methods):
            m = METHODS.get(method)
            if is_baseline(method) or (m.rule.reads_future if m else method.startswith("oracle")):
                continue
            yield pair, run, method, first
            first = False


# -- new: probe cost ------------------------------------------------------------------------------
def table_probe_cost(results: Results, command: str | None = None) -> Table:
    """Savings with and without the probes' own tokens, for every early-stopping method."""
    used = _Used()
    narrow = _Narrow(results)
    rows: list[list[Cell]] = []
    data, breaks, prev = [], [], None
    for pair, run, method, first in _stopping_methods(results):
        ov = used(run, method)
        pq = run.per_question(method)
        probe = (
            float(pq["probe_tokens_mean"].mean()) if pq["probe_tokens_mean"].notna().all() else None
        )
        s, sp = _get(ov, "savings_pct"), _get(ov, "savings_with_probes_pct")
        cost = None if sp is None or s is None else s - sp
        if first:
            breaks.append(len(rows))
        md, tex = method_label(method, run.settings(method))
        rows.append(
            [
                text(pair[0] if first and pair[0] != prev else ""),
                text(pair[1] if first else ""),
                text(f"{md} · `{method}`", tex=tex),
                num(s, mark=narrow.mark(pair, run, method)),
                num(sp),
                num(cost, 2),
                integer(probe),
            ]
        )
        prev = pair[0]
        data.append(
            {
                "model": pair[0],
                "dataset": pair[1],
                "setting": run.setting,
                "method": method,
                "savings_pct": s,
                "savings_with_probes_pct": sp,
                "probe_cost_pp": cost,
                "probe_tokens_mean": probe,
            }
        )
    notes = narrow.notes()
    if data and all(d["savings_with_probes_pct"] is None for d in data):
        notes.append(
            "No run records probe costs (published pools carry none); generate a pool with "
            "`mars generate` to measure them."
        )
    return Table(
        key="table-probe-cost",
        title="Probe cost: savings with and without the probes' tokens",
        caption="Token savings (%) without and with the probe completions charged (each probe's "
        "prompt tokens not served from the prefix cache plus its generated tokens); probe cost = "
        "the difference in percentage points; probe tokens = mean per question. The paper excludes "
        "probe tokens.",
        headers=[
            "Model",
            "Dataset",
            "Method",
            "Savings",
            "Savings w/ probes",
            "Probe cost (pp)",
            "Probe tokens",
        ],
        rows=rows,
        data=pd.DataFrame(
            data,
            columns=[
                "model",
                "dataset",
                "setting",
                "method",
                "savings_pct",
                "savings_with_probes_pct",
                "probe_cost_pp",
                "probe_tokens_mean",
            ],
        ),
        breaks=breaks,
        align="lllrrrr",
        notes=notes,
        commands=used.commands(command),
        source=used.source(results),
    )


# -- new: risk audit of the certified rule ---------------------------------------------------------
def audit_methods() -> list[str]:
    """The certified rule's methods, then calibrated MARS (no guarantee, audited beside them)."""
    certified = [name for name, m in METHODS.items() if m.rule == MARS_CERTIFIED]
    return certified + CALIBRATED_MARS.members()


def _reference_run(results: Results, run: Run, method: str) -> Run | None:
    base = family_baseline(method)
    s = run.settings(method)
    for r in [run, *results.runs_of(run.model, run.dataset)]:
        if base in r.overall and same_sampling(s, r.settings(base)):
            return r
    return None


def clopper_pearson_upper(k: int, n: int, level: float = 0.95) -> float:
    if n == 0:
        return float("nan")
    if k >= n:
        return 1.0
    return float(beta.ppf(level, k + 1, n - k))


def risk_audit(results: Results) -> pd.DataFrame:
    """Per (run, MARS method): runs whose stopped answer differs from the full-budget vote."""
    recs = []
    for run in results.runs:
        for method in [m for m in audit_methods() if m in run.overall]:
            ref = _reference_run(results, run, method)
            if ref is None:
                continue
            base = family_baseline(method)
            a = run.per_iteration(method)[["qid", "iteration", "answer"]]
            b = ref.per_iteration(base)[["qid", "iteration", "answer"]]
            j = a.merge(b, on=["qid", "iteration"], suffixes=("", "_full"), validate="one_to_one")
            differ = j["answer"] != j["answer_full"]
            per_q = differ.groupby(j["qid"]).mean()
            n, k = len(j), int(differ.sum())
            s = run.settings(method)
            recs.append(
                {
                    "model": run.model,
                    "dataset": run.dataset,
                    "setting": run.setting,
                    "method": method,
                    "reference": base,
                    "reference_run": str(ref.path),
                    "certified": method.endswith("-cert"),
                    "delta": float(s.get("delta", 0.05)),
                    "runs": n,
                    "differ": k,
                    "rate_pct": 100.0 * k / n if n else float("nan"),
                    "rate_upper95_pct": 100.0 * clopper_pearson_upper(k, n),
                    "worst_question_pct": 100.0 * float(per_q.max())
                    if len(per_q)
                    else float("nan"),
                    "questions_over_delta": int((per_q > s.get("delta", 0.05)).sum()),
                }
            )
    return pd.DataFrame(
        recs,
        columns=[
            "model",
            "dataset",
            "setting",
            "method",
            "reference",
            "reference_run",
            "certified",
            "delta",
            "runs",
            "differ",
            "rate_pct",
            "rate_upper95_pct",
            "worst_question_pct",
            "questions_over_delta",
        ],
    )


def table_risk(results: Results, command: str | None = None) -> Table:
    df = risk_audit(results)
    used = _Used()
    rows: list[list[Cell]] = []
    breaks, prev, prev_model = [], None, None
    n_settings = df.groupby(["model", "dataset"]).setting.nunique() if len(df) else None
    for _, r in df.iterrows():
        assert n_settings is not None  # df has rows
        run = next(
            x
            for x in results.runs
            if (x.model, x.dataset, x.setting) == (r.model, r.dataset, r.setting)
        )
        used(run, r.method)
        ref = next(x for x in results.runs if str(x.path) == r.reference_run)
        used(ref, r.reference)
        block = (r.model, r.dataset, r.setting)
        if block != prev:
            breaks.append(len(rows))
        md, tex = method_label(r.method, run.settings(r.method))
        if r.certified:
            verdict = "holds" if r.rate_pct <= 100 * r.delta else "violated"
        else:
            verdict = "no guarantee"
        ds = f"{r.dataset} · {r.setting}" if n_settings[(r.model, r.dataset)] > 1 else r.dataset
        if results.sampling_difference(run):
            ds += f" ({results.sampling_difference(run)})"
        rows.append(
            [
                text(r.model if block != prev and r.model != prev_model else ""),
                text(ds if block != prev else ""),
                text(f"{md} · `{r.method}`", tex=tex),
                text(r.reference),
                integer(r.runs),
                integer(r.differ),
                num(r.rate_pct, 2),
                num(r.rate_upper95_pct, 2),
                num(100 * r.delta if r.certified else None, 1),
                num(r.worst_question_pct, 1),
                text(verdict),
            ]
        )
        prev, prev_model = block, r.model
    notes = [
        "A run is one (question, bootstrap iteration); the full-budget vote is the pipeline's "
        f"baseline ({SELF_CONSISTENCY}, or {DEEPCONF} for DeepConf methods) on the same bootstrap "
        "sample. Rate upper = "
        "one-sided 95% Clopper–Pearson bound.",
        "The certificate bounds P(stopped answer ≠ full-budget vote) by δ when q is the true "
        "switch probability; the learned-q certified rows test it with estimated q, the calibrated "
        "rows (γ < 1) carry no guarantee.",
    ]
    if df.empty:
        notes.insert(
            0,
            f"No audited method found ({', '.join(audit_methods())} with their baseline in the "
            "same sampling settings).",
        )
    return Table(
        key="table-risk-audit",
        title="Risk audit of the certified rule",
        caption="Share of runs whose early-stopped answer differs from the full-budget vote, "
        "against the risk level δ of the certified MARS rule (Corollary 1).",
        headers=[
            "Model",
            "Dataset",
            "Method",
            "Full-budget vote",
            "Runs",
            "Differ",
            "Rate (%)",
            "Rate upper (%)",
            "δ (%)",
            "Worst question (%)",
            "Verdict",
        ],
        tex_headers=[
            "Model",
            "Dataset",
            "Method",
            "Reference",
            "Runs",
            "Differ",
            r"Rate (\%)",
            r"Upper (\%)",
            r"$\delta$ (\%)",
            r"Worst q. (\%)",
            "Verdict",
        ],
        rows=rows,
        data=df,
        breaks=breaks,
        align="llllrrrrrrl",
        notes=notes,
        commands=used.commands(command),
        source=used.source(results),
    )


def _oracle_of(method: str) -> str:
    return ORACLE_FIRST_STOP.of(family_baseline(method))


def table_oracle_share(results: Results, command: str | None = None) -> Table:
    """Every early-stopping method against its pipeline's oracle-first savings and full-budget
    accuracy."""
    used = _Used()
    narrow = _Narrow(results)
    rows: list[list[Cell]] = []
    data, breaks, prev = [], [], None
    for pair, run, method, first in _stopping_methods(results):
        ov = used(run, method)
        base_run = results.find(*pair, family_baseline(method))
        oracle_run = results.find(*pair, _oracle_of(method))
        base = _get(used(base_run, family_baseline(method)), "accuracy_pct")
        oracle = _get(used(oracle_run, _oracle_of(method)), "savings_pct")
        acc, sav = _get(ov, "accuracy_pct"), _get(ov, "savings_pct")
        sav_p = _get(ov, "savings_with_probes_pct")
        delta = None if acc is None or base is None else acc - base
        share = None if sav is None or not oracle else 100.0 * sav / oracle
        if first:
            breaks.append(len(rows))
        md, tex = method_label(method, run.settings(method))
        rows.append(
            [
                text(pair[0] if first and pair[0] != prev else ""),
                text(pair[1] if first else ""),
                text(f"{md} · `{method}`", tex=tex),
                num(acc),
                num(delta),
                num(sav, mark=narrow.mark(pair, run, method)),
                num(sav_p),
                num(oracle),
                pct(share, 0),
            ]
        )
        prev = pair[0]
        data.append(
            {
                "model": pair[0],
                "dataset": pair[1],
                "method": method,
                "accuracy_pct": acc,
                "accuracy_delta_pp": delta,
                "savings_pct": sav,
                "savings_with_probes_pct": sav_p,
                "oracle_savings_pct": oracle,
                "share_of_oracle_pct": share,
            }
        )
    share_headers = [
        "Model",
        "Dataset",
        "Method",
        "Accuracy",
        "Δ acc (pp)",
        "Savings",
        "Savings w/ probes",
        "Oracle-first savings",
        f"Share of {ORACLE_FIRST}",
    ]
    return Table(
        key="table-oracle-share",
        title=f"Share of {ORACLE_FIRST}'s savings, every method",
        caption="Accuracy (%) and its difference from the method's full-budget baseline (SC or "
        "DeepConf, pp), token savings (%) without and with the probes' tokens, the savings of the "
        f"{ORACLE_FIRST} stop of the same pipeline (first checkpoint whose leader is the "
        "full-budget vote) and each method's savings as a share of it. Oracle-first is not a "
        "bound: a rule that sometimes returns another answer than the full-budget vote can stop "
        "earlier (a share above 100 %). The goal of MARS2 (docs/beyond.md): Δ ≥ −0.5 pp and "
        "share ≥ 85 %.",
        headers=share_headers,
        tex_headers=[tex_escape(h) for h in share_headers],
        rows=rows,
        data=pd.DataFrame(data),
        breaks=breaks,
        align="lll" + "r" * 6,
        notes=narrow.notes(),
        commands=used.commands(command),
        source=used.source(results),
    )


def table_switch_models(results: Results, command: str | None = None) -> Table:
    """What the fit stage learned: the per-question switch models, summarised per pool."""
    used = _Used()
    rows: list[list[Cell]] = []
    data = []
    for pair in results.pairs:
        found = results.analysis_of(*pair)
        if found is None or not len(found[1].switch_models):
            run = results.main_run(*pair)
            if run.methods:
                used(run, run.methods[0])  # read, found no fit: its provenance still shows
            continue
        run, df = found[0], found[1].switch_models
        used(run, next(iter(found[1].inputs), run.methods[0]))
        names = [f"coef_{n}" for n in SWITCH_FEATURES]
        fitted = df[df[names].notna().all(axis=1)]
        coefs = fitted[names].to_numpy(dtype=float) if len(fitted) else np.zeros((0, len(names)))
        share = float((df.n_positive / df.n_rows.where(df.n_rows > 0)).mean())
        rec = {
            "model": pair[0],
            "dataset": pair[1],
            "questions": len(df),
            "rows_mean": float(df.n_rows.mean()),
            "switch_share": share,
            "log_loss": float(fitted.log_loss.mean()) if len(fitted) else None,
            "brier": float(fitted.brier.mean()) if len(fitted) else None,
        }
        for k, name in enumerate(SWITCH_FEATURES):
            rec[f"coef_{name}_mean"] = float(coefs[:, k].mean()) if len(coefs) else None
            rec[f"coef_{name}_sd"] = float(coefs[:, k].std()) if len(coefs) else None
        data.append(rec)
        rows.append(
            [
                text(pair[0]),
                text(pair[1]),
                integer(rec["questions"]),
                integer(rec["rows_mean"]),
                pct(100 * share),
                num(rec["log_loss"], 3),
                num(rec["brier"], 3),
                *(
                    text(
                        f"{rec[f'coef_{n}_mean']:+.2f} ± {rec[f'coef_{n}_sd']:.2f}"
                        if rec[f"coef_{n}_mean"] is not None
                        else "–"
                    )
                    for n in SWITCH_FEATURES
                ),
            ]
        )
    notes = (
        []
        if data
        else ["No analysis with a fit (`mars analyze --fit`; the workflow always makes one)."]
    )
    headers = [
        "Model",
        "Dataset",
        "Questions",
        "Rows",
        "Switch share",
        "Log-loss",
        "Brier",
        *(f"β {n.replace('_', ' ')}" for n in SWITCH_FEATURES),
    ]
    return Table(
        key="table-switch-models",
        title="Switch models of the fit stage",
        caption="Per pool: the per-question switch models q (L2 logistic regression on the "
        "warmup traces × checkpoints, Platt-scaled; `mars fit`): training rows per question, the "
        "share of rows whose answer differs from the trace's final one, in-sample log-loss and "
        "Brier score, and the coefficients on standardised features (mean ± sd over questions).",
        headers=headers,
        tex_headers=[tex_escape(h) for h in headers],
        rows=rows,
        data=pd.DataFrame(data),
        notes=notes,
        commands=used.commands(command),
        source=used.source(results),
    )


# -- new: both axes, total and sequential tokens ------------------------------------------------
#: Parallel-Probe's printed columns, for runs under its evaluation protocol
PP_PRINTED = ("Acc", "Cost", "Seq_Cost")


def table_latency(results: Results, command: str | None = None) -> Table:
    """Every method of every run on both cost axes: total tokens and sequential tokens (what a
    user waits for); runs under Parallel-Probe's protocol also as that protocol prints them."""
    used = _Used()
    rows: list[list[Cell]] = []
    data, breaks = [], []
    printed = False
    for pair in results.pairs:
        for run in results.runs_of(*pair):
            protocol = run.settings(run.methods[0]).get("protocol") if run.methods else None
            block = f"{pair[0]} · {pair[1]}"
            if len(results.runs_of(*pair)) > 1:
                block += f" · {run.setting}"
            if protocol and protocol != "bootstrap":
                block += f" ({protocol} protocol)"
            breaks.append(len(rows))
            first = True
            for method in method_order(run.methods):
                ov = used(run, method)
                md, tex = method_label(method, run.settings(method))
                pp = (ov or {}).get("parallel_probe") or {}
                printed |= bool(pp)
                rows.append(
                    [
                        text(block if first else ""),
                        text(f"{md} · `{method}`", tex=tex),
                        pct(_get(ov, "accuracy_pct")),
                        integer(_get(ov, "tokens_mean")),
                        integer(_get(ov, "seq_tokens_mean")),
                        *(
                            [
                                num(pp.get("Acc"), 2),
                                integer(pp.get("Cost")),
                                integer(pp.get("Seq_Cost")),
                            ]
                            if pp
                            else [text("–"), text("–"), text("–")]
                        ),
                    ]
                )
                data.append(
                    {
                        "model": pair[0],
                        "dataset": pair[1],
                        "setting": run.setting,
                        "protocol": protocol,
                        "method": method,
                        "label": md,
                        "accuracy_pct": _get(ov, "accuracy_pct"),
                        "tokens_mean": _get(ov, "tokens_mean"),
                        "seq_tokens_mean": _get(ov, "seq_tokens_mean"),
                        **{f"pp_{k}": pp.get(k) for k in PP_PRINTED},
                    }
                )
                first = False
    headers = ["Pool", "Method", "Accuracy", "Total tokens", "Sequential tokens"]
    headers += ["Acc (PP)", "Cost (PP)", "Seq_Cost (PP)"]
    return Table(
        key="table-latency",
        title="Both axes: total and sequential tokens of every method",
        caption="Accuracy, mean total tokens per question (every trace run, as charged by the "
        "method) and mean sequential tokens: what a user waits for — the longest trace at the "
        "stop for methods that stop running traces, the longest trace of each round summed over "
        "rounds for methods that sample more (Adaptive-Consistency one trace per round: fully "
        "sequential; ESC one window per round). Runs under Parallel-Probe's evaluation protocol "
        "also show its printed row (PP): accuracy rounded to two decimals, costs truncated, and "
        "its CSV's Seq_Cost, which is the longest started trace except for ESC (so for "
        "Adaptive-Consistency it differs from the sequential tokens)."
        + ("" if printed else " No run here used that protocol."),
        headers=headers,
        rows=rows,
        data=pd.DataFrame(
            data,
            columns=[
                "model",
                "dataset",
                "setting",
                "protocol",
                "method",
                "label",
                "accuracy_pct",
                "tokens_mean",
                "seq_tokens_mean",
                *(f"pp_{k}" for k in PP_PRINTED),
            ],
        ),
        breaks=breaks,
        align="llrrrrrr",
        commands=used.commands(command),
        source=used.source(results),
    )


def all_tables(results: Results, command: str | None = None) -> list[Table]:
    return [
        table_main(results, command),
        table_pp(results, command),
        *tables_full(results, command),
        table_latency(results, command),
        table_oracle(results, command),
        table_probe_cost(results, command),
        table_risk(results, command),
        table_oracle_share(results, command),
        table_switch_models(results, command),
    ]
