"""`mars report`: every table and figure from simulate outputs, plus an index (``report.md``).

Layout of ``OUT``::

    OUT/report.md                      index: every table inline, every figure linked, the inputs
    OUT/tables/<table>.md|.tex|.csv    Markdown, LaTeX (booktabs) and CSV (unrounded numbers)
    OUT/tables/<table>.html            the table as a web page (mars.report.html)
    OUT/figures/<figure>.png|.pdf|.csv the figure and the numbers it plots
    OUT/figures/<figure>.caption.html  its caption, for `snakemake --report`
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from .collect import DEFAULT_SETTING, Results, collect, parse_pool_overrides
from .fmt import Table, md_escape
from .html import caption_html, table_html
from .tables import all_tables


@dataclass
class Report:
    out_dir: Path
    index: Path
    results: Results
    tables: list[Table] = field(default_factory=list)
    figures: list = field(default_factory=list)
    command: str = ""


def report_command(
    paths,
    out_dir,
    labels=None,
    pools=None,
    main_setting=DEFAULT_SETTING,
    example=None,
    q_questions=10,
    figures=True,
    tradeoff=None,
    tradeoff_budget=128,
    tradeoff_iterations=8,
    tradeoff_questions=None,
) -> str:
    """The `mars report` command line equivalent to these arguments."""
    args = ["mars", "report", *map(str, paths), "--out", str(out_dir)]
    for lab in labels or []:
        args += ["--label", lab]
    for p in pools or []:
        args += ["--pool", p]
    if main_setting != DEFAULT_SETTING:
        args += ["--main-setting", main_setting]
    if example:
        args += ["--example", example]
    if q_questions != 10:
        args += ["--q-questions", str(q_questions or 0)]
    if not figures:
        args.append("--no-figures")
    for t in tradeoff or []:
        args += ["--tradeoff", t]
    if tradeoff:
        if tradeoff_budget != 128:
            args += ["--tradeoff-budget", str(tradeoff_budget)]
        if tradeoff_iterations != 8:
            args += ["--tradeoff-iterations", str(tradeoff_iterations)]
        if tradeoff_questions:
            args += ["--tradeoff-questions", str(tradeoff_questions)]
    return shlex.join(args)


def render_report(
    paths,
    out_dir,
    labels: list[str] | None = None,
    pools: list[str] | None = None,
    main_setting: str = DEFAULT_SETTING,
    example: str | None = None,
    q_questions: int | None = 10,
    figures: bool = True,
    tradeoff: list[str] | None = None,
    tradeoff_budget: int = 128,
    tradeoff_iterations: int = 8,
    tradeoff_questions: int | None = None,
    cache_dir=None,
    formats=("png", "pdf"),
    command: str | None = None,
) -> Report:
    """Render every table and figure of the simulate outputs under ``paths`` into ``out_dir``."""
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    out_dir = Path(out_dir)
    command = command or report_command(
        paths,
        out_dir,
        labels,
        pools,
        main_setting,
        example,
        q_questions,
        figures,
        tradeoff,
        tradeoff_budget,
        tradeoff_iterations,
        tradeoff_questions,
    )
    results = collect(paths, labels, main_setting)
    pool_map = parse_pool_overrides(pools)
    rep = Report(out_dir=out_dir, index=out_dir / "report.md", results=results, command=command)
    tdir, fdir = out_dir / "tables", out_dir / "figures"
    tdir.mkdir(parents=True, exist_ok=True)

    rep.tables = all_tables(results, command)
    for t in rep.tables:
        (tdir / f"{t.key}.md").write_text(t.markdown() + "\n")
        (tdir / f"{t.key}.tex").write_text(t.latex())
        (tdir / f"{t.key}.csv").write_text(t.csv())
        (tdir / f"{t.key}.html").write_text(table_html(t))

    if figures:
        from .figures import all_figures

        rep.figures = all_figures(results, fdir, pool_map, example, q_questions, cache_dir, formats)
        for f in rep.figures:
            f.notes.append(f"made by: {command}")
    if tradeoff:
        from .tradeoff import tradeoff_all

        rep.figures.append(
            tradeoff_all(
                tradeoff,
                fdir,
                tradeoff_budget,
                tradeoff_iterations,
                tradeoff_questions,
                cache_dir,
                command,
                formats,
            )
        )
    for f in rep.figures:
        (fdir / f"{f.stem}.caption.html").write_text(caption_html(f.title, f.caption, f.notes))
    rep.index.write_text(_index(rep))
    return rep


def _index(rep: Report) -> str:
    out = [
        "# MARS report",
        "",
        "Rendered from `mars simulate` outputs by:",
        "",
        "```",
        rep.command,
        "```",
        "",
        "## Inputs",
        "",
        "| Model | Dataset | Setting | Methods | Questions | Budget | Iterations | Directory |",
        "|:---|:---|:---|---:|---:|---:|---:|:---|",
    ]
    for r in rep.results.runs:
        s = r.settings(r.methods[0]) if r.methods else {}
        nq = max((int(ov.get("n_questions") or 0) for ov in r.overall.values()), default=0)
        out.append(
            f"| {md_escape(r.model)} | {md_escape(r.dataset)} | {md_escape(r.setting)} | "
            f"{len(r.methods)} | {nq} | {s.get('budget', '')} | {s.get('iterations', '')} | "
            f"`{r.path}` |"
        )
    out += ["", "## Tables", ""]
    for t in rep.tables:
        out.append(t.markdown().replace("### ", "### ", 1))
        out.append(
            f"Files: [Markdown](tables/{t.key}.md) · [LaTeX](tables/{t.key}.tex) · "
            f"[CSV](tables/{t.key}.csv)"
        )
        out.append("")
    if rep.figures:
        out += ["## Figures", ""]
        for f in rep.figures:
            png = next((p for p in f.files if p.suffix == ".png"), None)
            out += [f"### {f.title}", ""]
            if png is not None:
                out += [f"![{f.title}](figures/{png.name})", ""]
            out += [f.caption, ""]
            for n in f.notes:
                out.append(f"- {n}")
            links = " · ".join(f"[{p.suffix[1:].upper()}](figures/{p.name})" for p in f.files)
            out += ["", f"Files: {links}", ""]
    return "\n".join(out).rstrip() + "\n"
