"""`mars report`: every table and figure from simulate outputs, plus an index (``report.md``).

Layout of ``OUT``::

    OUT/report.md                      index: every table inline, every figure linked, then the
                                       provenance (the command, the inputs, the simulate commands)
    OUT/tables/<table>.md|.tex|.csv    Markdown, LaTeX (booktabs) and CSV (unrounded numbers)
    OUT/tables/<table>.html            the table as a web page (mars.report.html)
    OUT/figures/<figure>.png|.pdf|.csv the figure and the numbers it plots
    OUT/figures/<figure>.caption.html  its caption, for `snakemake --report`

The report owns ``OUT`` as a whole, so that it holds exactly this run's report: it is built in a
hidden sibling folder and swapped in when complete (a failed report leaves the previous one as it
was; a second report leaves no table of the first). A folder holding anything a report does not
write is refused before any work, so no user file is ever replaced.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..store.atomic import check_output_dir, make_dirs, make_temp_dir, replace_dir
from .collect import DEFAULT_SETTING, ReportError, Results, collect
from .fmt import Table, md_escape
from .html import caption_html, table_html
from .names import run_commands
from .provenance import describe, describe_grids
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
    analyses=None,
    main_setting=DEFAULT_SETTING,
    figures=True,
) -> str:
    """The `mars report` command line equivalent to these arguments."""
    args = ["mars", "report", *map(str, paths), "--out", str(out_dir)]
    for lab in labels or []:
        args += ["--label", lab]
    for a in analyses or []:
        args += ["--analysis", str(a)]
    if main_setting != DEFAULT_SETTING:
        args += ["--main-setting", main_setting]
    if not figures:
        args.append("--no-figures")
    return shlex.join(args)


def render_report(
    paths,
    out_dir,
    labels: list[str] | None = None,
    analyses: list | None = None,
    main_setting: str = DEFAULT_SETTING,
    figures: bool = True,
    formats=("png", "pdf"),
    command: str | None = None,
) -> Report:
    """Render every table and figure of the simulate outputs under ``paths`` (and the analyses
    under ``analyses`` and ``paths``) into ``out_dir``."""
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    analyses = [Path(a) for a in analyses or []]
    out_dir = Path(out_dir)
    command = command or report_command(paths, out_dir, labels, analyses, main_setting, figures)
    check_report_dir(out_dir)
    results = collect(paths, labels, main_setting, analyses)  # all checked before any output
    target = Path(os.path.realpath(out_dir))  # a symlinked --out: its folder is replaced
    make_dirs(target.parent)
    stage = make_temp_dir(target.parent, f".{target.name}.report-")
    try:
        rep = Report(out_dir=stage, index=stage / "report.md", results=results, command=command)
        _render(rep, figures, formats)
        replace_dir(stage, target, out_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    rep.out_dir, rep.index = out_dir, out_dir / "report.md"
    for f in rep.figures:
        f.files = [out_dir / p.relative_to(stage) for p in f.files]
    return rep


def _render(rep: Report, figures: bool, formats) -> None:
    """Write every table, figure and the index into ``rep.out_dir``."""
    results, command = rep.results, rep.command
    tdir, fdir = rep.out_dir / "tables", rep.out_dir / "figures"
    tdir.mkdir()

    rep.tables = all_tables(results, command)
    for t in rep.tables:
        (tdir / f"{t.key}.md").write_text(t.markdown() + "\n")
        (tdir / f"{t.key}.tex").write_text(t.latex())
        (tdir / f"{t.key}.csv").write_text(t.csv())
        (tdir / f"{t.key}.html").write_text(table_html(t))

    if figures:  # matplotlib is imported only when there is something to draw
        from .figures import all_figures

        rep.figures = all_figures(results, fdir, formats)
    for f in rep.figures:
        (fdir / f"{f.stem}.caption.html").write_text(caption_html(f.title, f.caption, f.notes))
    rep.index.write_text(_index(rep))


#: What a report writes in its folder (all of it replaced by the next report into the folder).
REPORT_ENTRIES = frozenset({"report.md", "tables", "figures"})
#: Left in an output folder by the tools that manage it (Snakemake marks directory outputs).
TOOL_ENTRIES = frozenset({".snakemake_timestamp"})


def check_report_dir(out_dir: Path) -> None:
    """Refuse, before any work, an output folder the report cannot own as a whole: one holding
    anything a report does not write (results, a pool, notes: they would be replaced), or the
    current directory (swapping it would strand the shell in a deleted folder)."""
    check_output_dir(out_dir)
    check_output_dir(out_dir.absolute().parent)  # the report is built beside it
    if not out_dir.is_dir():
        return
    if Path.cwd().resolve().is_relative_to(out_dir.resolve()):
        raise ReportError(f"--out {out_dir}: is or holds the current directory; run from elsewhere")
    try:
        entries = sorted(os.listdir(out_dir))
    except OSError as exc:
        raise ReportError(f"--out {out_dir}: unreadable ({exc.strerror or exc})") from None
    foreign = [e for e in entries if e not in REPORT_ENTRIES | TOOL_ENTRIES]
    if foreign:
        raise ReportError(
            f"--out {out_dir}: holds {foreign[0]!r}, which a report does not write; a report "
            "replaces its whole folder (report.md, tables/, figures/): choose a new or empty "
            "folder, or an earlier report's"
        )


def _index(rep: Report) -> str:
    """report.md: what the data is, every table and figure, then where they came from (the
    command, once; the runs; the simulate commands)."""
    results = rep.results
    about = " ".join(
        t
        for t in (
            describe(results.sources(results.runs)),
            describe_grids(results.grids(results.runs)),
        )
        if t
    )
    out = ["# MARS report", ""]
    if about:
        out += [f"> {about}", ""]
    out += [
        "Tables first, then figures; the command, the runs and how each was simulated are under "
        "[Provenance](#provenance) at the end.",
        "",
        "## Tables",
        "",
    ]
    for t in rep.tables:
        out.append(t.markdown(commands=False))
        out.append(
            f"Made by the command in Provenance, from the runs listed there. Files: "
            f"[Markdown](tables/{t.key}.md) · [LaTeX](tables/{t.key}.tex) · "
            f"[CSV](tables/{t.key}.csv) (each with the commands that made it)"
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
    out += _provenance(rep)
    return "\n".join(out).rstrip() + "\n"


def _provenance(rep: Report) -> list[str]:
    """The index's last section: the report command, its inputs, the simulate commands and the
    analyses."""
    results = rep.results
    out = [
        "## Provenance",
        "",
        "Rendered from `mars simulate` outputs by:",
        "",
        "```",
        rep.command,
        "```",
        "",
        "### Inputs",
        "",
        "| Model | Dataset | Setting | Data | Methods | Questions | Budget | Iterations | Warmup "
        "| Seed | Directory |",
        "|:---|:---|:---|:---|---:|---:|---:|---:|---:|---:|:---|",
    ]
    for r in results.runs:
        s = r.sampling
        nq = max((int(ov.get("n_questions") or 0) for ov in r.overall.values()), default=0)
        cells = [r.model, r.dataset, r.setting, results.source_of(r).text, len(r.methods), nq]
        cells += [s.get(k, "") for k in ("budget", "iterations", "warmup", "seed")]
        out.append("| " + " | ".join(md_escape(c) for c in cells) + f" | `{r.path}` |")
    commands = run_commands([(r, m) for r in results.runs for m in r.methods])
    out += ["", "Each run was simulated by:", "", "```", *commands, "```", ""]
    analysed = [(r, r.analysis) for r in results.runs if r.analysis is not None]
    if analysed:
        out += [
            "The single-question figures, the q calibration and the switch models come from:",
            "",
        ]
        out += [f"- {md_escape(r.label)}: `{a.path}` (mars analyze)" for r, a in analysed]
        out.append("")
    return out
