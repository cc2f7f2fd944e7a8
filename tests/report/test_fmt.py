"""Table cells and their renderings: LaTeX escaped (pdflatex-safe), Markdown rectangular,
small numbers never shown as zero."""

from __future__ import annotations

import re

from mars.report.fmt import num, pct, tex_escape

from .trees import DATASET, MODEL


def test_tex_escape_unit():
    assert (
        tex_escape("a_b & 50% #1 {x} $y ~^\\")
        == r"a\_b \& 50\% \#1 \{x\} \$y \textasciitilde{}\textasciicircum{}\textbackslash{}"
    )
    assert tex_escape("γ=1") == r"$\gamma$=1"


def test_latex_is_escaped(tree):
    _, out, rep = tree
    for t in rep.tables:
        tex = (out / "tables" / f"{t.key}.tex").read_text()
        body = [line for line in tex.splitlines() if not line.startswith("%")]
        ncol = len(t.headers)
        for line in body:
            assert not re.search(r"(?<!\\)%", line), line  # no bare % (a LaTeX comment)
            assert not re.search(r"(?<!\\)_", line), line  # no bare _ (math subscript)
            assert not re.search(r"(?<!\\)#", line), line
            assert line.isascii(), line  # pdflatex-safe: γ, δ, —, · are written as LaTeX
            if line.endswith(r"\\") and "multicolumn" not in line:
                assert len(re.findall(r"(?<!\\)&", line)) == ncol - 1, (
                    line
                )  # & only separates columns
        joined = "\n".join(body)
        assert (
            joined.count(r"\begin{tabular}") == 1
            and r"\toprule" in joined
            and r"\bottomrule" in joined
        )
    t1 = (out / "tables" / "table1-main.tex").read_text()
    assert tex_escape(MODEL) in t1 and tex_escape(DATASET) in t1
    assert re.search(r"\d\\%", t1)  # savings carry an escaped percent


def test_markdown_tables_are_rectangular(tree):
    _, out, rep = tree
    for t in rep.tables:
        lines = [
            line
            for line in (out / "tables" / f"{t.key}.md").read_text().splitlines()
            if line.startswith("|")
        ]
        widths = {len(re.split(r"(?<!\\)\|", line)) for line in lines}
        assert len(widths) == 1, t.key


def test_a_small_number_is_never_shown_as_zero():
    """Issue 35 (10): 0.04 % of savings is "<0.1%", not "0.0%"."""
    assert pct(0.04).md() == "<0.1%" and pct(0.04).latex() == r"$<$0.1\%"
    assert num(-0.03).md() == ">-0.1" and num(0.004, 2).md() == "<0.01"
    assert pct(0.0).md() == "0.0%" and pct(-0.0).md() == "0.0%" and pct(0.05).md() == "0.1%"
    assert pct(2.1, mark="†").md() == "2.1%†" and pct(2.1, mark="†").latex() == r"2.1\%$^{\dagger}$"
