"""Fitting the presets: a coordinate search of ``qwen3-8b`` against the real Qwen3-8B traces,
and per-dataset skill/length of the paper-model presets against the paper's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mars.engines.synthetic import PRESET_DIR, SyntheticBackend, load_preset
from mars.store.problems import Problem, load_problems
from mars.store.userfiles import read_json_object

from .common import DATASET_FILES, FIT_SEEDS, PAPER, REAL_TRACES
from .stats import EARLY, compute_stats, mars_stats
from .views import views_from_backend


def _curve_mae(a: dict, b: dict, key: str, upto: int, weight_key: str | None = None) -> float:
    m = min(len(a["P"]), len(b["P"]))
    P = a["P"][:m]
    sel = P <= upto
    x, y = a[key][:m][sel], b[key][:m][sel]
    w = a[weight_key][:m][sel] if weight_key else np.ones(sel.sum())
    ok = np.isfinite(x) & np.isfinite(y) & (w > 0)
    if not ok.any():
        return 0.0
    return float(np.average(np.abs(x[ok] - y[ok]), weights=w[ok]))


def _sorted_mae(a: np.ndarray, b: np.ndarray) -> float:
    qs = np.linspace(0, 1, 31)
    return float(np.mean(np.abs(np.quantile(a, qs) - np.quantile(b, qs))))


def switch_histogram(sw: np.ndarray, top: int = 10) -> np.ndarray:
    h = np.bincount(np.minimum(sw, top), minlength=top + 1).astype(float)
    return h / h.sum()


def fit_loss(real: dict, syn: dict) -> dict:
    """Discrepancy terms between real and synthetic statistics (each about 0..1)."""
    r2, s2, r5, s5 = real[2048], syn[2048], real[500], syn[500]
    t = np.arange(0, 42001, 1000)
    sr = np.interp(t, r2["t"], r2["running"])
    ss = np.interp(t, s2["t"], s2["running"])
    terms = {
        "running": 6 * float(np.mean(np.abs(sr - ss))),
        "probe_final": 3 * _curve_mae(r2, s2, "probe_final", 30000, "probe_final_n"),
        "probe_final_500": 2 * _curve_mae(r5, s5, "probe_final", 30000, "probe_final_n"),
        "probe_none": 4 * _curve_mae(r5, s5, "probe_none", 30000, "running_n"),
        "majority": 3 * _curve_mae(r2, s2, "majority", 30000),
        "switches": abs(s2["switches"].mean() - r2["switches"].mean()) / r2["switches"].mean()
        + abs(s5["switches"].mean() - r5["switches"].mean()) / r5["switches"].mean(),
        "switch_hist": float(
            np.abs(switch_histogram(r2["switches"]) - switch_histogram(s2["switches"])).sum()
        ),
        "entropy": _sorted_mae(r2["entropy"], s2["entropy"]),
        "acc_q": 3 * _sorted_mae(r2["acc_q"], s2["acc_q"]),
        "sc64": 2 * abs(r2["sc64"] - s2["sc64"]),
        "no_final": 5 * abs(r2["no_final"] - s2["no_final"]),
        "capped": 5 * abs(r2["capped"] - s2["capped"]),
        "distinct": abs(np.log((1 + s2["distinct"].mean()) / (1 + r2["distinct"].mean()))),
        # how a question's early vote looks: the final majority's share and the leader's share
        # at 2k / 4k / 6k tokens, as distributions over questions
        "early_votes": 2
        * float(
            np.mean(
                [
                    _sorted_mae(r2["early_final"][:, k], s2["early_final"][:, k])
                    + _sorted_mae(r2["early_leader"][:, k], s2["early_leader"][:, k])
                    for k in range(len(EARLY))
                ]
            )
        ),
        "never_switch": 3
        * abs(float((r2["switches"] == 0).mean()) - float((s2["switches"] == 0).mean())),
    }
    if "mars" in real and "mars" in syn:
        # what the stopping rules do on the traces: calibrated MARS's accuracy change against SC
        # (points), and the token savings of MARS (γ = 1 and calibrated) and Parallel-Probe (%)
        rm, sm = real["mars"], syn["mars"]
        d_real = rm["sc-mars-cal"]["acc"] - rm["sc"]["acc"]
        d_syn = sm["sc-mars-cal"]["acc"] - sm["sc"]["acc"]
        terms["mars"] = 0.15 * abs(d_syn - d_real) + 0.02 * sum(
            abs(sm[m]["savings"] - rm[m]["savings"]) for m in ("sc-mars", "sc-mars-cal", "sc-pp")
        )
    terms["total"] = float(sum(terms.values()))
    return terms


#: Bootstrap iterations per question of the MARS statistics during the fit (64 in the comparison).
FIT_MARS_ITERATIONS = 32


def synthetic_stats(
    params: dict,
    problems: list[Problem],
    seeds=FIT_SEEDS,
    n: int = REAL_TRACES,
    base: str = "qwen3-8b",
    with_mars: bool = True,
) -> dict:
    """Fast-path statistics of a parameter set on both grids, pooled over ``seeds`` (with the
    stopping-method statistics of :func:`mars_stats` under ``"mars"``)."""
    preset = {"name": "fit", "base": base, "params": params}
    backend = SyntheticBackend(preset, with_confs=False)
    out: dict[int | str, dict] = {}
    for spacing in (2048, 500):
        views = [v for s in seeds for v in views_from_backend(backend, problems, n, s, spacing)]
        out[spacing] = compute_stats(views, spacing, with_sc=spacing == 2048)
        if spacing == 2048 and with_mars:
            out["mars"] = mars_stats(views, iterations=FIT_MARS_ITERATIONS)
    return out


#: (parameter, kind, first-sweep step, bounds) searched by :func:`fit_qwen3_8b`.
FIT_SPACE = [
    ("skill", "add", 0.04, (0.05, 0.99)),
    ("trap_frac", "add", 0.1, (0.0, 2.0)),
    ("difficulty_sd", "mul", 0.3, (0.2, 6.0)),
    ("len_median", "mul", 0.2, (1500, 40000)),
    ("len_hard_slope", "add", 0.3, (0.0, 4.0)),
    ("len_hard_pow", "mul", 0.4, (0.1, 3.0)),
    ("len_question_sd", "mul", 0.3, (0.02, 1.5)),
    ("len_trace_sd", "mul", 0.2, (0.05, 1.0)),
    ("len_wrong_shift", "add", 0.15, (0.0, 1.5)),
    ("conv_logit", "add", 0.5, (-5.0, 5.0)),
    ("conv_hard_slope", "add", 0.5, (-3.0, 6.0)),
    ("conv_q_sd", "mul", 0.3, (0.05, 4.0)),
    ("conv_trace_sd", "mul", 0.3, (0.05, 3.0)),
    ("seg_tokens", "mul", 0.3, (200, 20000)),
    ("explore_own_final", "add", 0.08, (0.0, 0.8)),
    ("explore_unique", "add", 0.05, (0.0, 0.6)),
    ("n_explore", "add", 2, (1, 15)),
    ("explore_own_pow", "mul", 0.4, (0.2, 8.0)),
    ("explore_alpha", "mul", 0.4, (0.05, 5.0)),
    ("attractor_share_hi", "add", 0.1, (0.05, 1.0)),
    ("attractor_release_hi", "add", 0.1, (0.05, 1.0)),
    ("err_explore", "mul", 0.3, (0.0, 0.5)),
    ("err_converged", "mul", 0.4, (0.0, 0.3)),
    ("err_early", "mul", 0.5, (0.0, 0.5)),
    ("err_early_tokens", "mul", 0.4, (200, 20000)),
    ("probe_noise", "mul", 0.4, (0.0, 0.4)),
    ("unique_rate", "add", 0.08, (0.01, 0.95)),
    ("distractor_alpha", "mul", 0.4, (0.05, 5.0)),
    ("attractor_base", "add", 0.1, (0.0, 1.0)),
    ("attractor_rate", "mul", 0.4, (0.0, 10.0)),
    ("attractor_share_lo", "add", 0.1, (0.0, 0.95)),
    ("attractor_release_lo", "add", 0.1, (0.0, 1.0)),
    ("none_rate", "mul", 0.4, (0.0, 1.0)),
    ("cut_boxed_prob", "add", 0.1, (0.0, 1.0)),
]


def _step(value, kind, step, bounds, sign):
    v = value * (1 + step) ** sign if kind == "mul" else value + sign * step
    v = min(max(v, bounds[0]), bounds[1])
    if isinstance(value, int) or (kind == "add" and float(step).is_integer()):
        v = round(v)
    return v


def fit_qwen3_8b(
    real: dict, problems: list[Problem], start: dict, sweeps: int = 3, log=print
) -> tuple[dict, list]:
    """Coordinate search: for each parameter in :data:`FIT_SPACE`, try one step up and one down
    (multiplicative or additive), keep the best if it lowers :func:`fit_loss`; the steps halve
    after every sweep. Common random numbers (fixed seeds) make the loss deterministic."""
    params = dict(start)
    best = fit_loss(real, synthetic_stats(params, problems))["total"]
    history = [("start", None, best)]
    log(f"fit: start loss {best:.4f}")
    for sweep in range(sweeps):
        scale = 0.5**sweep
        for name, kind, step, bounds in FIT_SPACE:
            cur = params[name]
            tried = {cur}
            for sign in (+1, -1):
                cand = _step(cur, kind, step * scale, bounds, sign)
                if cand in tried:
                    continue
                tried.add(cand)
                trial = {**params, name: cand}
                loss = fit_loss(real, synthetic_stats(trial, problems))["total"]
                if loss < best - 1e-6:
                    best, params = loss, trial
                    history.append((name, cand, loss))
                    log(f"fit: sweep {sweep} {name} = {cand:.4g}  loss {loss:.4f}")
                    break
    return params, history


def sc_baseline(
    backend: SyntheticBackend,
    problems: list[Problem],
    n: int,
    seeds=FIT_SEEDS,
    budget: int = 512,
    iterations: int = 64,
) -> tuple[float, float]:
    """MARS SC baseline on synthetic traces: per question, 64 bootstrap draws of 512 answered
    traces, majority of final answers (lowest code on ties); returns (accuracy %, mean tokens per
    answered trace)."""
    accs, toks = [], []
    for seed in seeds:
        for prob in problems:
            b = backend.start(prob, n, seed)
            F = b.final_codes()
            L = b.latent["length"]
            pool = np.flatnonzero(F >= 0)
            if pool.size == 0:
                accs.append(0.0)
                continue
            Fp = F[pool]
            u, inv = np.unique(Fp, return_inverse=True)
            hits = 0
            for i in range(iterations):
                rng = np.random.default_rng(42 + 10000 * prob.qid + i)
                draw = inv[rng.integers(0, pool.size, size=budget)]
                hits += u[np.argmax(np.bincount(draw, minlength=len(u)))] == 0
            accs.append(hits / iterations)
            toks.append(float(L[pool].mean()))
    return 100 * float(np.mean(accs)), float(np.mean(toks))


def fit_paper_presets(dynamics: dict, n: int = 128, log=print) -> dict:
    """Per paper model and dataset: bisection of ``skill`` on the SC accuracy and a fixed point of
    ``len_median`` on the mean tokens per trace (two alternations). Dynamics (convergence,
    exploration, probes, confidence) are the Qwen3-8B fit's."""
    fitted: dict[str, dict] = {}
    for name, table in PAPER.items():
        preset = load_preset(name)
        fitted[name] = {}
        for key, (acc_t, tokens) in table.items():
            probs = load_problems(DATASET_FILES[key])
            tok_t = tokens / 512
            ds = dict(preset["datasets"].get(key, {}))
            skill = ds.get("skill", dynamics.get("skill", 0.75))
            lm = ds.get("len_median", dynamics.get("len_median", 6000.0))

            def backend(s, m, preset=preset, key=key):
                return SyntheticBackend(
                    {**preset, "datasets": {key: {"skill": s, "len_median": m}}}, with_confs=False
                )

            for _ in range(2):
                for _ in range(3):
                    _, tok = sc_baseline(backend(skill, lm), probs, n)
                    lm *= tok_t / tok
                lo, hi = 0.02, 0.995
                best = (1e9, skill)
                for _ in range(9):
                    mid = 0.5 * (lo + hi)
                    acc, _ = sc_baseline(backend(mid, lm), probs, n)
                    best = min(best, (abs(acc - acc_t), mid))
                    lo, hi = (mid, hi) if acc < acc_t else (lo, mid)
                skill = best[1]
            acc, tok = sc_baseline(backend(skill, lm), probs, n)
            fitted[name][key] = {"skill": round(skill, 4), "len_median": round(lm, 1)}
            log(
                f"paper fit {name} {key}: skill {skill:.3f} len_median {lm:.0f} -> SC {acc:.1f} "
                f"(paper {acc_t}), tokens/trace {tok:.0f} (paper {tok_t:.0f})"
            )
    return fitted


def write_preset(name: str, update: dict) -> Path:
    path = PRESET_DIR / f"{name}.json"
    cur = read_json_object(path)
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(cur.get(k), dict):
            cur[k] = {**cur[k], **v}
        else:
            cur[k] = v
    path.write_text(json.dumps(cur, indent=2) + "\n")
    return path


def round_params(params: dict) -> dict:
    out = {}
    for k, v in params.items():
        out[k] = v if isinstance(v, int) else float(f"{v:.4g}")
    return out
