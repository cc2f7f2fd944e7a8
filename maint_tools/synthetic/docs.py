"""The calibration figures and the generated ``research/synthetic/results/calibration.md``."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np

from mars.engines.synthetic import SyntheticBackend
from mars.store.pool import open_pool
from mars.store.problems import load_problems

from .common import DATASET_FILES, EVAL_SEEDS, PAPER
from .fitting import sc_baseline, switch_histogram
from .stats import EARLY, MARS_BUDGET, interp_curve
from .views import probe_grid


def _fmt(x, pct=False, nd=2):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{100 * x:.1f} %" if pct else f"{x:,.{nd}f}"


def comparison_rows(real: dict, syn: dict) -> list[tuple[str, ...]]:
    r2, s2, r5, s5 = real[2048], syn[2048], real[500], syn[500]
    rows: list[tuple[str, ...]] = [
        (
            "questions × traces",
            f"{r2['n_questions']} × {r2['n_traces'] // r2['n_questions']}",
            f"{s2['n_questions']} × {s2['n_traces'] // s2['n_questions']}",
        ),
        (
            "mean / median trace length (tokens)",
            f"{r2['mean_len']:,.0f} / {r2['median_len']:,.0f}",
            f"{s2['mean_len']:,.0f} / {s2['median_len']:,.0f}",
        ),
    ]
    for t in (8192, 16384, 24576, 32768):
        a, b = (np.interp(t, s["t"], s["running"]) for s in (r2, s2))
        rows.append((f"still running at {t:,} tokens", _fmt(a, True), _fmt(b, True)))
    rows += [
        ("cut at the token cap", _fmt(r2["capped"], True), _fmt(s2["capped"], True)),
        ("traces without a final answer", _fmt(r2["no_final"], True), _fmt(s2["no_final"], True)),
    ]
    for p in (2048, 4096, 8192, 16384, 24576):
        a, b = (interp_curve(s, "probe_final", p)[0] for s in (r2, s2))
        rows.append((f"P(probe = own final answer) at {p:,}", _fmt(a, True), _fmt(b, True)))
    for p in (500, 2000, 5000, 10000):
        a, b = (interp_curve(s, "probe_none", p)[0] for s in (r5, s5))
        rows.append(
            (f"P(probe unparseable | running) at {p:,} (500 grid)", _fmt(a, True), _fmt(b, True))
        )
    for p in (2048, 4096, 8192, 16384, 24576):
        a, b = (interp_curve(s, "majority", p)[0] for s in (r2, s2))
        rows.append(
            (f"P(snapshot majority = final majority) at {p:,}", _fmt(a, True), _fmt(b, True))
        )
    rows += [
        (
            "answer switches per trace, mean (2048 grid)",
            _fmt(r2["switches"].mean()),
            _fmt(s2["switches"].mean()),
        ),
        (
            "answer switches per trace, share with none (2048 grid)",
            _fmt((r2["switches"] == 0).mean(), True),
            _fmt((s2["switches"] == 0).mean(), True),
        ),
        (
            "answer switches per trace, mean (500 grid)",
            _fmt(r5["switches"].mean()),
            _fmt(s5["switches"].mean()),
        ),
        (
            "final-answer entropy per question, mean / median / max (bits)",
            " / ".join(_fmt(f(r2["entropy"])) for f in (np.mean, np.median, np.max)),
            " / ".join(_fmt(f(s2["entropy"])) for f in (np.mean, np.median, np.max)),
        ),
        (
            "distinct final answers per question, mean",
            _fmt(r2["distinct"].mean(), nd=1),
            _fmt(s2["distinct"].mean(), nd=1),
        ),
        (
            "share of questions with per-trace accuracy < 20 % / > 90 %",
            f"{_fmt((r2['acc_q'] < 0.2).mean(), True)} / {_fmt((r2['acc_q'] > 0.9).mean(), True)}",
            f"{_fmt((s2['acc_q'] < 0.2).mean(), True)} / {_fmt((s2['acc_q'] > 0.9).mean(), True)}",
        ),
        ("per-trace accuracy (mean over questions)", _fmt(r2["acc"], True), _fmt(s2["acc"], True)),
        (
            "SC@64 accuracy (Parallel-Probe protocol, 100 shuffles)",
            _fmt(r2["sc64"], True),
            _fmt(s2["sc64"], True),
        ),
    ]
    for k, p in enumerate(EARLY):
        rows.append(
            (
                f"vote share of the final majority / of the snapshot leader at {p:,}, median over "
                "questions",
                *(
                    f"{_fmt(float(np.median(s['early_final'][:, k])), True)} / "
                    f"{_fmt(float(np.median(s['early_leader'][:, k])), True)}"
                    for s in (r2, s2)
                ),
            )
        )
    if "mars" in real and "mars" in syn:
        for m, label in (
            ("sc", "`sc`"),
            ("sc-mars", "`sc-mars` (γ = 1)"),
            ("sc-mars-cal", "`sc-mars-cal`"),
            ("sc-pp", "`sc-pp` (u = 3)"),
        ):
            rows.append(
                (
                    f"{label} accuracy / token savings (budget {MARS_BUDGET}, 64 iterations)",
                    *(
                        f"{s[m]['acc']:.1f} % / {s[m]['savings']:.1f} %"
                        for s in (real["mars"], syn["mars"])
                    ),
                )
            )
    return rows


def plot_comparison(real: dict, syn: dict, path: Path, syn_label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper")
    colors = {"real": "#1f77b4", "syn": "#d62728"}
    fig, ax = plt.subplots(2, 3, figsize=(14, 7.8))
    r2, s2, r5, s5 = real[2048], syn[2048], real[500], syn[500]
    lab = {"real": "real Qwen3-8B (AIME 2024)", "syn": syn_label}
    for key, s in (("real", r2), ("syn", s2)):
        ax[0, 0].plot(s["t"] / 1000, s["running"], color=colors[key], label=lab[key])
    ax[0, 0].set(title="Traces still running", xlabel="tokens (k)", ylabel="fraction")
    for key, s, s_5 in (("real", r2, r5), ("syn", s2, s5)):
        sel = s["probe_final_n"] >= 30
        ax[0, 1].plot(
            s["P"][sel] / 1000,
            s["probe_final"][sel],
            "o-",
            ms=3,
            color=colors[key],
            label=lab[key] + " (2048 grid)",
        )
        sel5 = s_5["running_n"] >= 30
        ax[0, 1].plot(
            s_5["P"][sel5] / 1000,
            s_5["probe_none"][sel5],
            ":",
            color=colors[key],
            label="unparseable probes (500 grid)",
        )
    ax[0, 1].set(
        title="P(probe answer = the trace's own final answer)",
        xlabel="tokens (k)",
        ylabel="probability",
        ylim=(0, 1),
    )
    for key, s in (("real", r2), ("syn", s2)):
        ax[0, 2].plot(s["P"] / 1000, s["majority"], "o-", ms=3, color=colors[key], label=lab[key])
    ax[0, 2].set(
        title="P(snapshot majority = final majority)",
        xlabel="tokens (k)",
        ylabel="share of questions",
        ylim=(0, 1.02),
    )
    top = 10
    x = np.arange(top + 1)
    for off, (key, s) in zip((-0.2, 0.2), (("real", r2), ("syn", s2))):
        ax[1, 0].bar(
            x + off,
            switch_histogram(s["switches"], top),
            width=0.4,
            color=colors[key],
            label=lab[key],
        )
    ax[1, 0].set(
        title="Answer switches per trace (2048 grid)",
        xlabel="switches (10 = 10 or more)",
        ylabel="share of traces",
    )

    def rank(v):  # questions sorted, descending, on a 0..1 scale so 30 and 120 questions overlay
        return (np.arange(len(v)) + 0.5) / len(v), np.sort(v)[::-1]

    for key, s in (("real", r2), ("syn", s2)):
        ax[1, 1].plot(*rank(s["entropy"]), "o-", ms=3, color=colors[key], label=lab[key])
    ax[1, 1].set(
        title="Final-answer entropy per question (sorted)",
        xlabel="question quantile",
        ylabel="bits",
    )
    for key, s in (("real", r2), ("syn", s2)):
        ax[1, 2].plot(
            *rank(s["acc_q"]),
            "o-",
            ms=3,
            color=colors[key],
            label=f"{lab[key]}; SC@64 {100 * s['sc64']:.1f} %",
        )
    ax[1, 2].set(
        title="Per-trace accuracy per question (sorted)",
        xlabel="question quantile",
        ylabel="accuracy",
        ylim=(-0.02, 1.02),
    )
    for a in ax.flat:
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_anatomy(pool_dir: Path, path: Path, title: str) -> None:
    """Vote shares over checkpoints on the question whose early leader is wrong the longest, and
    one trace's windowed confidence with its answer changes (the dips)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper")
    pool = open_pool(pool_dir)
    best = None
    for q in pool.questions():
        L = q.lengths
        grid = probe_grid(L.max(), 2048)
        fin = q.final_answers
        tr = np.repeat(np.arange(q.n_traces), np.diff(q.probe_offsets))
        snap_share = []
        answers = Counter(a for a in fin if a)
        if not answers:
            continue
        final_major = answers.most_common(1)[0][0]
        wrong_lead = 0
        for p in grid:
            votes: Counter[str] = Counter()
            sel = q.probe_positions == p
            for _, c in zip(tr[sel], q.probe_codes[sel]):
                if c >= 0:
                    votes[q.probe_strings[c]] += 1
            for i in np.flatnonzero(L <= p):
                if fin[i]:
                    votes[fin[i]] += 1
            snap_share.append(votes)
            if votes and votes.most_common(1)[0][0] != final_major:
                wrong_lead += 1
        if final_major == q.ground_truth and (best is None or wrong_lead > best[0]):
            best = (wrong_lead, q, grid, snap_share)
    fig, ax = plt.subplots(1, 2, figsize=(13, 4.2))
    if best is not None:
        _, q, grid, shares = best
        tot = np.array([sum(s.values()) for s in shares], float)
        keys: Counter[str] = Counter()
        for s in shares:
            keys.update(s)
        for a, _ in keys.most_common(4):
            y = np.array([s.get(a, 0) for s in shares]) / np.maximum(tot, 1)
            lab = f"{a} (correct)" if a == q.ground_truth else a
            ax[0].plot(grid / 1000, y, "o-", ms=3, label=lab)
        ax[0].set(
            title=f"{title}: vote shares, question {q.qid}",
            xlabel="tokens (k)",
            ylabel="share of votes",
            ylim=(0, 1),
        )
        ax[0].legend(fontsize=8)
        # a trace of that question with several answer changes
        counts = np.diff(q.probe_offsets)
        j = int(np.argmax(counts * (q.lengths > 8000)))
        c = q.confs(j).astype(np.float32)
        w = 512
        if c.size > w:
            cs = np.concatenate([[0], np.cumsum(c, dtype=np.float64)])
            win = (cs[w:] - cs[:-w]) / w
            ax[1].plot(
                np.arange(w, c.size + 1) / 1000,
                win,
                lw=0.8,
                label=f"trace {j}: {w}-token mean confidence",
            )
        ps = q.probe_positions[q.probe_offsets[j] : q.probe_offsets[j + 1]]
        cd = q.probe_codes[q.probe_offsets[j] : q.probe_offsets[j + 1]]
        prev = None
        for p, cc in zip(ps, cd):
            ans = q.probe_strings[cc] if cc >= 0 else None
            if ans is not None and prev is not None and ans != prev:
                ax[1].axvline(p / 1000, color="grey", ls=":", lw=0.8)
            if ans is not None:
                prev = ans
        ax[1].set(
            title="confidence of one trace; dotted: probe answer changed",
            xlabel="tokens (k)",
            ylabel="confidence",
        )
        ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


BEGIN = "<!-- BEGIN GENERATED: python -m maint_tools.synthetic -->"


END = "<!-- END GENERATED -->"


def write_doc(doc: Path, section: str) -> None:
    text = doc.read_text() if doc.exists() else f"# Synthetic backend\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text = text.rstrip() + f"\n\n{BEGIN}\n{END}\n"
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    doc.write_text(text[:a] + "\n" + section.strip() + "\n" + text[b:])


def paper_rows(n: int = 256, seeds=EVAL_SEEDS) -> list[str]:
    lines = [
        "| preset | dataset | SC accuracy: paper | synthetic | tokens / trace: paper | synthetic |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, table in PAPER.items():
        backend = SyntheticBackend(name, with_confs=False)
        for key, (acc_t, tokens) in table.items():
            acc, tok = sc_baseline(backend, load_problems(DATASET_FILES[key]), n, seeds=seeds)
            lines.append(
                f"| `{name}` | {DATASET_FILES[key]} | {acc_t:.1f} % | {acc:.1f} % | "
                f"{tokens / 512:,.0f} | {tok:,.0f} |"
            )
    return lines


def preset_table() -> list[str]:
    """Markdown: every parameter, its meaning, and its value in each bundled preset."""
    from mars.engines.synthetic import PARAMS, list_presets

    names = list_presets()
    resolved = {n: SyntheticBackend(n).params_for("") for n in names}
    lines = [
        "| parameter | meaning | " + " | ".join(f"`{n}`" for n in names) + " |",
        "|---|---|" + "---:|" * len(names),
    ]

    def fmt(v):
        return f"{v:,}" if isinstance(v, int) else f"{v:.4g}"

    for k, (_, doc) in PARAMS.items():
        lines.append(f"| `{k}` | {doc} | " + " | ".join(fmt(resolved[n][k]) for n in names) + " |")
    for ds in DATASET_FILES.values():
        for k in ("skill", "len_median"):
            vals = [fmt(SyntheticBackend(n).params_for(ds)[k]) for n in names]
            lines.append(f"| `{k}` on {ds} | per-dataset value | " + " | ".join(vals) + " |")
    return lines
