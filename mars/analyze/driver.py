"""`mars analyze`: what the report draws beyond simulation summaries, computed from the traces.

Three of the report's figures show more than a simulation's per-question numbers: the vote shares
and MARS's slack on one question (Fig. 1 right), a question where consensus stopping fails
(Fig. 2), and the learned switch model against the oracle (Fig. 4 c-d); a table summarises the fit
stage's switch models. This stage computes them from a pool, its fit and one simulation run, and
writes them as files (:mod:`mars.store.analysis`), so the report only draws and Snakemake knows
when a figure is stale.

Every quantity is the simulator's own: the same arrays, the same bootstrap samples, warmup,
switch model and calibrated γ (:class:`~mars.method.walk.QuestionContext`), and the rule's decision
at every checkpoint (:meth:`~mars.method.walk.MethodRun.snapshot`,
:meth:`~mars.method.stopping.Mars.explain`), so a figure shows exactly the rule its tables report.
The analysis keeps every candidate a report may choose (the first :data:`CANDIDATES` of each kind,
in the report's order), so a report over several pools picks across them as if it had the pools.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import MarsError
from ..method.arrays import QuestionArrays, load_arrays
from ..method.features import FEATURE_NAMES
from ..method.registry import METHODS
from ..method.settings import Settings, pool_settings
from ..method.stopping import UNSEEN, Mars
from ..method.walk import MethodRun, QuestionContext
from ..progress import Progress, counted
from ..simulate.candidates import (
    CANDIDATES,
    FIXED_SC,
    MARS_SC,
    PP_SC,
    example_candidates,
    pp_failure_candidates,
)
from ..simulate.runs import PER_ITERATION, Run, discover
from ..store import analysis as files
from ..store.atomic import check_output_dir, make_dirs, make_temp_dir, replace_dir
from ..store.pool import Pool, open_pool
from ..store.provenance import checksum_of, package_versions

#: questions of the q-calibration panels (the first ones of the run)
Q_QUESTIONS = 10


class AnalysisError(MarsError):
    """Inputs an analysis cannot use (one line, before any work)."""


def trajectory(
    arr: QuestionArrays, ctx: QuestionContext, iteration: int, purpose: str
) -> files.Trajectory:
    """Vote shares and the MARS slack at every checkpoint of one bootstrap sample, as the
    simulator's calibrated-γ MARS (self-consistency votes) sees them."""
    run = MethodRun(ctx, METHODS[MARS_SC])
    rows = np.array([iteration])
    m, n_answers = arr.n_checkpoints, arr.n_answers
    shares = np.zeros((m, n_answers))
    lead = np.full(m, -1, dtype=np.int64)
    slack = np.full(m, np.nan)
    binding = np.full(m, UNSEEN, dtype=np.int64)
    fires = np.zeros(m, dtype=bool)
    for k in range(m):
        snap = run.snapshot(k, rows)
        tot = snap.votes[0].sum()
        if tot > 0:
            shares[k] = snap.votes[0] / tot
        lead[k] = snap.lead[0]
        if isinstance(run.rule, Mars):
            out = run.rule.explain(snap)
            assert out.slack is not None and out.binding is not None
            slack[k], binding[k], fires[k] = out.slack[0], out.binding[0], out.passed[0]
        else:
            fires[k] = run.rule.check(snap)[0]
    return files.Trajectory(
        qid=arr.qid,
        iteration=iteration,
        purpose=purpose,
        positions=arr.grid.copy(),
        shares=shares,
        lead=lead,
        slack=slack,
        binding=binding,
        fires=fires,
        gamma=float(run.gamma),
        final_answer=int(run.full_budget_vote(rows)[0]),
        representatives=list(arr.representatives),
        correct=np.asarray(arr.correct, dtype=bool),
    )


def q_calibration(contexts: list[QuestionContext], n_bins: int = 10) -> pd.DataFrame:
    """Learned q against the oracle switch indicator on held-out (non-warmup) running traces:
    reliability bins, and per checkpoint position the mean learned q against the switch rate
    (pooled over questions, weighted by running traces)."""
    edges = np.linspace(0, 1, n_bins + 1)
    ql_all, qo_all, rows = [], [], []
    for ctx in contexts:
        arr = ctx.arr
        ql, qo = ctx.q_learned, ctx.q_oracle
        held = np.ones(arr.n_traces, dtype=bool)
        held[ctx.warm] = False
        mask = held[:, None] & (arr.grid[None, :] < arr.lengths[:, None]) & (arr.ids >= 0)
        ql_all.append(ql[mask].astype(np.float64))
        qo_all.append(qo[mask].astype(np.float64))
        for k, p in enumerate(arr.grid):
            mk = mask[:, k]
            if mk.any():
                n = int(mk.sum())
                rows.append((int(p), n, float(ql[mk, k].mean()) * n, float(qo[mk, k].mean()) * n))
    ql = np.concatenate(ql_all) if ql_all else np.zeros(0)
    qo = np.concatenate(qo_all) if qo_all else np.zeros(0)
    b = np.clip(np.digitize(ql, edges[1:-1]), 0, n_bins - 1)
    out = []
    for i in range(n_bins):
        sel = b == i
        out.append(
            {
                "kind": "bin",
                "bin": i,
                "lo": edges[i],
                "hi": edges[i + 1],
                "n": int(sel.sum()),
                "q_learned_mean": float(ql[sel].mean()) if sel.any() else np.nan,
                "q_oracle_rate": float(qo[sel].mean()) if sel.any() else np.nan,
            }
        )
    per_k = pd.DataFrame(rows, columns=["position", "n", "l", "o"]).groupby("position").sum()
    for p, r in per_k.iterrows():
        out.append(
            {
                "kind": "checkpoint",
                "position": int(p),
                "n": int(r.n),
                "q_learned_mean": r.l / r.n,
                "q_oracle_rate": r.o / r.n,
            }
        )
    df = pd.DataFrame(out, columns=files.Q_CALIBRATION_COLUMNS)
    return df.assign(n_questions=len(contexts))


class _Questions:
    """Each question's arrays and context at the run's settings, built once: from the fit when
    there is one (its switch models, nothing refitted), else from the pool."""

    def __init__(self, pool: Pool, settings: Settings, fit=None):
        self.pool, self.s, self.fit = pool, settings, fit
        self._ctx: dict[int, QuestionContext] = {}

    def __call__(self, qid: int) -> QuestionContext:
        if qid not in self._ctx:
            if len(self._ctx) > 16:
                self._ctx.clear()
            q = self.pool.read_question(qid).with_finals(self.s.finals)
            if self.fit is not None:
                arr = self.fit.arrays(q, self.s)
                fitted = self.fit.question(q, arr, self.s.warmup)
                self._ctx[qid] = QuestionContext.sample(arr, self.s, fitted=fitted)
            else:
                assert self.s.spacing is not None  # pool_settings fills it in
                arr = load_arrays(q, None, spacing=self.s.spacing, window=self.s.window)
                self._ctx[qid] = QuestionContext.sample(arr, self.s)
        return self._ctx[qid]


#: switch_models.csv: the fit's summary numbers and each feature's coefficient (empty: no model)
SWITCH_COLUMNS = files.SWITCH_MODEL_COLUMNS + [f"coef_{n}" for n in FEATURE_NAMES]


def _check_same_traces(run: Run, pool: Pool, qids: list[int], finals: str, fit=None) -> None:
    """The run was simulated on the traces this analysis reads: its input checksum is that of
    the questions' content (with the final answers the run voted on), as the fit recorded it
    (each question read is checked against the fit) or, without a fit, as the pool holds it
    now."""
    if fit is not None:
        content = {q: fit.hashes.get(q, "") for q in qids}
    else:
        content = {q: pool.read_question(q).with_finals(finals).content_hash() for q in qids}
    if checksum_of(content) != run.checksum:
        source = "the fit's" if fit is not None else str(pool.source)
        raise AnalysisError(
            f"{run.path}: simulated on other traces than {source} (its input checksum differs): "
            "analyse it with the pool and fit it was simulated with"
        )


def _switch_models(fit, qids: list[int], warmup: int) -> pd.DataFrame:
    rows = []
    for qid in qids:
        row = fit.rows.get((qid, warmup))
        if row is None:
            continue
        coef = row.get("coef") or [None] * len(FEATURE_NAMES)
        rec = {k: row[k] for k in files.SWITCH_MODEL_COLUMNS}
        rec.update({f"coef_{n}": c for n, c in zip(FEATURE_NAMES, coef)})
        rows.append(rec)
    return pd.DataFrame(rows, columns=SWITCH_COLUMNS)


def parse_example(spec: str | None) -> tuple[int, int] | None:
    """``QID[:ITERATION]`` (iteration 0 by default)."""
    if not spec:
        return None
    bits = spec.split(":")
    if len(bits) > 2 or not all(b.isdigit() for b in bits):
        raise AnalysisError(f"--example {spec}: expected QID[:ITERATION]")
    return int(bits[0]), int(bits[1]) if len(bits) > 1 else 0


def _load_run(run_dir: Path, label: str | None) -> Run:
    runs = discover(Path(run_dir), label)
    if len(runs) != 1 or runs[0].path != Path(run_dir):
        raise AnalysisError(
            f"{run_dir}: not one `mars simulate` output folder (<method>/overall.json in it)"
        )
    return runs[0]


def analyze(
    pool_path,
    run_dir,
    out_dir,
    fit_dir=None,
    label: str | None = None,
    example: str | None = None,
    q_questions: int = Q_QUESTIONS,
    progress: Progress | None = None,
) -> Path:
    """Analyse one simulation run of ``pool_path`` into ``out_dir`` (replaced whole when
    complete). ``example``: ``QID[:ITERATION]`` for Fig. 1 instead of the automatic candidates;
    ``progress(done, total)``: questions analysed (:mod:`mars.progress`)."""
    out_dir = Path(out_dir)
    spec = parse_example(example)
    if q_questions < 0:
        raise AnalysisError(f"--q-questions {q_questions}: must be 0 or more")
    check_analysis_dir(out_dir)
    run = _load_run(Path(run_dir), label)
    pool = open_pool(pool_path)
    fit = None
    q_method = MARS_SC if MARS_SC in run.overall else FIXED_SC if FIXED_SC in run.overall else None
    settings = pool_settings(pool, run.sim_settings(q_method or run.methods[0]))
    if settings.protocol != "bootstrap":
        raise AnalysisError(
            f"{run_dir}: simulated with --protocol {settings.protocol}; the analysis draws the "
            "bootstrap protocol's samples"
        )
    qids = sorted(int(q) for q in run.per_question(run.methods[0]).qid)
    missing = sorted(set(qids) - set(pool.qids))
    if missing:
        raise AnalysisError(f"{run_dir}: question {missing[0]} is not in {pool.source}")
    if fit_dir is not None:
        from ..fit.fitdir import FitDir

        fit = FitDir(fit_dir)
        fit.check(pool, settings, qids)
    _check_same_traces(run, pool, qids, settings.finals, fit)
    if spec is not None:
        if MARS_SC not in run.overall:
            raise AnalysisError(f"--example {example}: {run_dir} has no {MARS_SC} results")
        it = run.per_iteration(MARS_SC)
        if not ((it.qid == spec[0]) & (it.iteration == spec[1])).any():
            raise AnalysisError(
                f"--example {example}: {run_dir} has no question {spec[0]} with iteration {spec[1]}"
            )

    wanted: list[tuple[str, int, int]] = []  # (purpose, qid, iteration)
    if MARS_SC in run.overall:
        if spec is not None:
            wanted.append((files.EXAMPLE, *spec))
        else:
            ex = example_candidates(run).head(CANDIDATES)
            wanted += [(files.EXAMPLE, int(q), 0) for q in ex.qid]
        if PP_SC in run.overall:
            pp = pp_failure_candidates(run).head(CANDIDATES)
            wanted += [(files.PP_FAILURE, int(r.qid), int(r.iteration)) for r in pp.itertuples()]
    calib = qids[:q_questions] if q_method is not None else []
    todo = list(dict.fromkeys([q for _, q, _ in wanted] + calib))
    questions = _Questions(pool, settings, fit)
    trajectories, contexts = [], []
    for qid in counted(todo, len(todo), progress):
        ctx = questions(qid)
        trajectories += [
            trajectory(ctx.arr, ctx, it, purpose) for purpose, q, it in wanted if q == qid
        ]
        if qid in calib:
            contexts.append(ctx)
    order = {w: i for i, w in enumerate(wanted)}
    trajectories.sort(key=lambda t: order[(t.purpose, t.qid, t.iteration)])
    contexts.sort(key=lambda c: c.arr.qid)
    read = [m for m in (MARS_SC, FIXED_SC, PP_SC) if m in run.overall]
    meta = {
        "format": files.ANALYSIS_FORMAT,
        "label": run.label,
        "run": str(run_dir),
        "pool": str(pool_path),
        "fit": None if fit_dir is None else str(fit_dir),
        "inputs": {m: files.file_digest(run.path / m / PER_ITERATION) for m in read},
        "example_spec": None if spec is None else {"qid": spec[0], "iteration": spec[1]},
        "q_method": q_method,
        "trajectories": [t.to_dict() for t in trajectories],
        "versions": package_versions(),
    }
    calibration = (
        q_calibration(contexts) if contexts else pd.DataFrame(columns=files.Q_CALIBRATION_COLUMNS)
    )
    models = (
        _switch_models(fit, qids, settings.warmup)
        if fit is not None
        else pd.DataFrame(columns=SWITCH_COLUMNS)
    )
    _write(out_dir, meta, calibration, models)
    return out_dir


def check_analysis_dir(out_dir: Path) -> None:
    """Refuse, before any work, an output folder holding anything an analysis does not write
    (it is replaced whole)."""
    check_output_dir(out_dir)
    check_output_dir(out_dir.absolute().parent)
    if out_dir.is_dir():
        foreign = sorted(
            e.name
            for e in out_dir.iterdir()
            if e.name not in files.ANALYSIS_ENTRIES and e.name != ".snakemake_timestamp"
        )
        if foreign:
            raise AnalysisError(
                f"--out {out_dir}: holds {foreign[0]!r}, which an analysis does not write; an "
                "analysis replaces its whole folder: choose a new or empty folder, or an earlier "
                "analysis's"
            )


def _write(out_dir: Path, meta: dict, calibration: pd.DataFrame, models: pd.DataFrame) -> None:
    target = out_dir.resolve()
    make_dirs(target.parent)
    stage = make_temp_dir(target.parent, f".{target.name}.analysis-")
    try:
        text = json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=False)
        (stage / files.ANALYSIS_FILE).write_text(text + "\n")
        calibration.to_csv(stage / files.Q_CALIBRATION_FILE, index=False)
        models.to_csv(stage / files.SWITCH_MODELS_FILE, index=False)
        replace_dir(stage, target, out_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
