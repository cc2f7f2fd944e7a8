"""The report tests' inputs: a hand-made results tree (two models, every reference method, a
second Parallel-Probe setting; names with every LaTeX special), and the helpers that read a
rendered report back. Nothing here simulates."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from mars.method.registry import METHODS as REGISTRY
from mars.report.fmt import read_table_csv

# names with every LaTeX special a label is likely to carry
MODEL = "toy_model&co"
DATASET = "set_50%#1"
MODEL2 = "other-model"

SETTINGS = {
    "budget": 16,
    "iterations": 4,
    "warmup": 16,
    "seed": 42,
    "window": 2048,
    "gamma": 1.0,
    "ucb_z": 1.0,
    "gamma_min": 0.5,
    "pp_conv": 3,
    "pp_warmup": 4,
    "pp_patience": 2,
    "delta": 0.05,
    "consensus": 0.9,
    "spacing": 2048,
}
METHODS = [
    "sc",
    "sc-mars",
    "sc-mars-cal",
    "sc-mars-oracle",
    "sc-mars-oracle-cal",
    "sc-mars-cert",
    "sc-mars-oracle-cert",
    "dco",
    "dco-mars",
    "dco-mars-cal",
    "dco-mars-oracle",
    "sc-pp",
    "oracle-first",
    "oracle-last",
    "oracle-dco-first",
    "oracle-dco-last",
]
QIDS = [0, 1, 2]
ITERS = 4


# -- a hand-made results tree ---------------------------------------------------------------------
def write_method(run_dir: Path, method: str, rng, settings: dict, answers=None, probes=True):
    d = run_dir / method
    d.mkdir(parents=True)
    baseline = method in ("sc", "dco")
    pq_rows, it_rows = [], []
    for qid in QIDS:
        base = float(rng.integers(50_000, 90_000))
        sav = 0.0 if baseline else float(rng.uniform(5, 60))
        acc = float(rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]))
        wp = (
            sav - float(rng.uniform(0.1, 2.0))
            if probes and not baseline
            else (0.0 if baseline else np.nan)
        )
        pq_rows.append(
            {
                "qid": qid,
                "accuracy": acc,
                "tokens_mean": base * (1 - sav / 100),
                "baseline_tokens_mean": base,
                "savings_pct": sav,
                "stop_position_mean": 8192.0,
                "accuracy_std": 0.5,
                "n_iterations": ITERS,
                "savings_with_probes_pct": wp,
                "probe_tokens_mean": float(rng.uniform(100, 900)) if probes else np.nan,
                "gamma": 1.0,
                "stopped_early": 0 if baseline else ITERS,
                "stopped_by_budget": ITERS if baseline else 0,
                "ground_truth": "7",
                # a method reading a warmup pays it (no random draw: the tree stays the same)
                "savings_paid_pct": sav - 20.0 if "mars" in method else sav,
            }
        )
        for i in range(ITERS):
            ans = answers(qid, i) if answers else "7"
            it_rows.append(
                {
                    "qid": qid,
                    "iteration": i,
                    "answer": ans,
                    "correct": ans == "7",
                    "tokens": int(base),
                    "baseline_tokens": int(base),
                    "stop_position": 8192 if not baseline else 14336,
                    "stopped_by": "budget" if baseline else "margin",
                    "probe_tokens": 10.0,
                }
            )
    pq = pd.DataFrame(pq_rows)
    pq.to_csv(d / "per_question.csv", index=False)
    pd.DataFrame(it_rows).to_csv(d / "per_iteration.csv", index=False)
    ov = {
        "method": method,
        "n_questions": len(pq),
        "accuracy_pct": float(100 * pq.accuracy.mean()),
        "savings_pct": float(pq.savings_pct.mean()),
        "savings_with_probes_pct": None
        if pq.savings_with_probes_pct.isna().any()
        else float(pq.savings_with_probes_pct.mean()),
        "tokens_mean": float(pq.tokens_mean.mean()),
        "baseline_tokens_mean": float(pq.baseline_tokens_mean.mean()),
        "stop_position_mean": 8192.0,
        "savings_paid_pct": float(pq.savings_paid_pct.mean()),
        "settings": settings,
        "input": {"source": "/nonexistent/pool.parquet", "checksum": "x"},
        "versions": {},
    }
    (d / "overall.json").write_text(json.dumps(ov, indent=2))


def make_tree(root: Path) -> Path:
    rng = np.random.default_rng(7)
    results = root / "results"
    for model in (MODEL, MODEL2):
        run = results / model / DATASET / "default" / "sim"
        for m in METHODS:
            answers = None
            if (
                m == "sc-mars-cert"
            ):  # one run of 12 differs from the full-budget vote: 8.3 % > δ = 5 %
                answers = lambda q, i: "8" if (q, i) == (1, 2) else "7"  # noqa: E731
            write_method(run, m, rng, SETTINGS, answers, probes=model == MODEL)
        u4 = results / model / DATASET / "pp-u4" / "sim"
        write_method(u4, "sc-pp", rng, {**SETTINGS, "pp_conv": 4})
    return results


def overall(results: Path, model: str, setting: str, method: str) -> dict:
    return json.loads(
        (results / model / DATASET / setting / "sim" / method / "overall.json").read_text()
    )


def read_csv(path: Path) -> pd.DataFrame:
    return read_table_csv(path)


def md_rows(path: Path) -> list[list[str]]:
    """Body rows of the first Markdown table in a file."""
    lines = [line for line in path.read_text().splitlines() if line.startswith("|")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines[2:]]


def close(a, b, tol=1e-9):
    if a is None or (isinstance(a, float) and np.isnan(a)):
        return b is None or (isinstance(b, float) and np.isnan(b))
    return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(b)))


SMALL_METHODS = ["sc", "sc-mars-cal", "dco", "dco-mars-cal", "sc-mars-cert", "sc-pp"]


def small_tree(root: Path, settings: dict | None = None) -> Path:
    """One model × dataset run of a few methods (fast to report)."""
    rng = np.random.default_rng(3)
    run = root / "results" / MODEL / DATASET / "default" / "sim"
    for m in SMALL_METHODS:
        write_method(run, m, rng, settings or SETTINGS)
    return root / "results"


def edit_json(path: Path, edit) -> None:
    ov = json.loads(path.read_text())
    edit(ov)
    path.write_text(json.dumps(ov))


def report_cli(results: Path, out: Path, *extra):
    """``mars report RESULTS --out OUT --no-figures`` through the command line."""
    from typer.testing import CliRunner

    from mars.cli import app

    return CliRunner().invoke(
        app, ["report", str(results), "--out", str(out), "--no-figures", *map(str, extra)]
    )


def assert_one_line(res, *needles) -> None:
    """Exit 2 with one line saying ``needles``."""
    assert res.exit_code == 2, (res.output, res.exception)
    assert res.output.startswith("error: ") and res.output.count("\n") == 1, res.output
    for needle in needles:
        assert needle in res.output, res.output


def savings_against_the_vote(run, method: str) -> float:
    """A method's savings against its pipeline's full-budget vote: its own for a method on the
    whole budget; worked out here for one on fewer traces (single-sac), whose own are against
    its one trace."""
    m = REGISTRY[method]
    if m.width is None:
        return run.overall[method]["savings_pct"]
    mine = run.per_iteration(method).set_index(["qid", "iteration"]).tokens
    vote = run.per_iteration(m.baseline).set_index(["qid", "iteration"]).tokens
    saved = 1 - mine / vote.loc[mine.index]
    return 100 * saved.groupby(level="qid").mean().mean()


def drop_paid(results: Path) -> None:
    """Every run of ``results`` as simulated before paid savings were recorded: no
    ``savings_paid_pct`` in its overall.json."""
    for path in sorted(results.rglob("overall.json")):
        edit_json(path, lambda ov: ov.pop("savings_paid_pct", None))


#: the fixed γ of :func:`tradeoff_tree`'s curve, one setting each
TRADEOFF_GAMMAS = (0.5, 0.75, 1.0)


def tradeoff_tree(root: Path) -> Path:
    """One pool as the workflow's tradeoff section leaves it: MARS at three fixed γ on the same
    samples (a curve), the full-budget vote, calibrated MARS and the oracle stop beside them."""
    rng = np.random.default_rng(5)
    results = root / "results"
    for i, gamma in enumerate(TRADEOFF_GAMMAS, 1):
        run = results / MODEL / DATASET / f"tradeoff-{i}" / "sim"
        points = ["sc", "sc-mars-cal", "oracle-first"] if i == 1 else []
        for m in ["sc-mars", *points]:
            write_method(run, m, rng, {**SETTINGS, "gamma": gamma})
    return results
