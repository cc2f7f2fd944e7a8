"""Table cells and the three renderings: Markdown, LaTeX (booktabs) and CSV.

A :class:`Table` is a grid of :class:`Cell` values plus the raw numbers behind it (``data``, the
CSV). Cells know how to print themselves in Markdown and in LaTeX, so number formats (``93.2``,
``33.7\\%``, ``11{,}795{,}919``, ``---``) live in one place and LaTeX escaping is applied to every
text cell. The LaTeX needs only ``booktabs``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import cast

import pandas as pd

MISSING_MD = "—"
MISSING_TEX = "---"

_TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
_TEX_RE = re.compile("|".join(re.escape(k) for k in _TEX_SPECIAL))
#: non-ASCII characters that appear in labels, as plain-LaTeX text
_TEX_UNICODE = {
    "γ": r"$\gamma$",
    "β": r"$\beta$",
    "Δ": r"$\Delta$",
    "−": "-",
    "±": r"$\pm$",
    "δ": r"$\delta$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "×": r"$\times$",
    "—": "---",
    "–": "--",
    "·": r"$\cdot$",
    "’": "'",
    "✓": "yes",
    "✗": "no",
}


def tex_escape(text: object) -> str:
    """Escape LaTeX's special characters (and the few non-ASCII ones labels use)."""
    out = _TEX_RE.sub(lambda m: _TEX_SPECIAL[m.group(0)], str(text))
    for k, v in _TEX_UNICODE.items():
        out = out.replace(k, v)
    return out


def md_escape(text: object) -> str:
    return str(text).replace("|", r"\|").replace("\n", " ")


def is_missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


#: a note's sign in LaTeX (math mode)
TEX_MARKS = {"†": r"\dagger", "‡": r"\ddagger", "*": r"\ast"}


@dataclass
class Cell:
    """One table cell: ``value`` printed by ``kind``.

    kinds: ``text`` (escaped; ``tex`` overrides the LaTeX form), ``num`` (``decimals``), ``pct``
    (number with a percent sign), ``int`` (thousands separators). A number that is not zero but
    rounds to it is "<0.1" (">-0.1"), never "0.0". ``mark`` follows a number: a note's sign.
    """

    value: object = None
    kind: str = "text"
    decimals: int = 1
    bold: bool = False
    tex: str | None = None  # raw LaTeX for a text cell (already safe)
    mark: str = ""  # after a number: the sign of a note under the table

    def _number(self, sep: str, less: str = "<", more: str = ">") -> str:
        if self.kind == "int":
            s = f"{self.value:,.0f}"
            return s.replace(",", sep)
        value = float(cast(float, self.value))
        s = f"{value:.{self.decimals}f}"
        if float(s) == 0 and value != 0:  # 0.04 % is not nothing: say how small
            least = f"{10.0**-self.decimals:.{self.decimals}f}"
            return f"{less}{least}" if value > 0 else f"{more}-{least}"
        if s.startswith("-") and float(s) == 0:
            s = s[1:]  # no "-0.0"
        return s

    def md(self) -> str:
        if is_missing(self.value):
            return MISSING_MD
        if self.kind == "text":
            s = md_escape(self.value)
        else:
            s = self._number(",") + ("%" if self.kind == "pct" else "") + self.mark
        return f"**{s}**" if self.bold and s else s

    def latex(self) -> str:
        if is_missing(self.value):
            return MISSING_TEX
        if self.kind == "text":
            s = self.tex if self.tex is not None else tex_escape(self.value)
        else:
            s = self._number("{,}", "$<$", "$>$") + (r"\%" if self.kind == "pct" else "")
            s += f"$^{{{TEX_MARKS.get(self.mark, self.mark)}}}$" if self.mark else ""
        return rf"\textbf{{{s}}}" if self.bold and s else s


def text(value, tex: str | None = None, bold: bool = False) -> Cell:
    return Cell(value, "text", tex=tex, bold=bold)


def num(value, decimals: int = 1, bold: bool = False, mark: str = "") -> Cell:
    return Cell(None if is_missing(value) else float(value), "num", decimals, bold, mark=mark)


def pct(value, decimals: int = 1, bold: bool = False, mark: str = "") -> Cell:
    return Cell(None if is_missing(value) else float(value), "pct", decimals, bold, mark=mark)


def integer(value) -> Cell:
    return Cell(None if is_missing(value) else float(value), "int")


@dataclass
class Table:
    """A rendered table: header, body rows (with group breaks), the CSV data and provenance."""

    key: str  # file stem
    title: str
    caption: str
    headers: list[str]  # plain column headers (Markdown)
    rows: list[list[Cell]]
    data: pd.DataFrame  # raw numbers, one row per body row (the CSV)
    tex_headers: list[str] | None = None  # LaTeX column headers (already safe)
    groups: list[tuple[str, int, str | None]] = field(
        default_factory=list
    )  # (label, span, tex label) above headers
    breaks: list[int] = field(
        default_factory=list
    )  # body row indices that start a new block (\midrule)
    align: str | None = None  # LaTeX column spec, e.g. "llcccc"
    notes: list[str] = field(default_factory=list)
    commands: list[str] = field(
        default_factory=list
    )  # the report command first, then the simulate commands
    source: str = ""  # what the data is (mars.report.provenance.describe): synthetic is flagged

    # -- Markdown ----------------------------------------------------------------------------------
    def markdown(self, heading: bool = True, commands: bool = True) -> str:
        """The table in Markdown; ``commands``: with its "Made by" block (the index, which
        shows the commands once, leaves it out)."""
        out = []
        if heading:
            out += [f"### {self.title}", ""]
        if self.caption:
            out += [self.caption, ""]
        if self.source:
            out += [f"> {self.source}", ""]
        headers = self._md_headers()
        ncol = len(headers)
        out.append("| " + " | ".join(headers) + " |")
        align = self._align()
        out.append("|" + "|".join(":---" if a == "l" else "---:" for a in align[:ncol]) + "|")
        for row in self.rows:
            out.append("| " + " | ".join(c.md() for c in row) + " |")
        if not self.rows:
            out.append("| " + " | ".join(["(no data)"] + [""] * (ncol - 1)) + " |")
        out.append("")
        for n in self.notes:
            out.append(f"- {n}")
        if self.notes:
            out.append("")
        if self.commands and commands:
            out.append("Made by:")
            out.append("")
            out.append("```")
            out += self.commands
            out.append("```")
            out.append("")
        return "\n".join(out)

    def _md_headers(self) -> list[str]:
        if not self.groups:
            return [md_escape(h) for h in self.headers]
        labels = []
        for g, span, _ in self.groups:
            labels += [g] * span
        return [
            md_escape(f"{g} {h}".strip()) if g else md_escape(h)
            for g, h in zip(labels, self.headers)
        ]

    def _align(self) -> str:
        if self.align:
            return self.align
        return "l" * 2 + "r" * (len(self.headers) - 2)

    # -- LaTeX -------------------------------------------------------------------------------------
    def latex(self) -> str:
        ncol = len(self.headers)
        spec = self._align().replace("r", "c")
        out = [f"% {line}" for line in self._comment_lines()]
        out += [
            r"\begin{table}[t]",
            r"\centering",
            r"\small",
            rf"\begin{{tabular}}{{{spec}}}",
            r"\toprule",
        ]
        if self.groups:
            cells, rules, col = [], [], 1
            for g, span, gtex in self.groups:
                label = gtex if gtex is not None else tex_escape(g)
                if g and span > 1:
                    cells.append(rf"\multicolumn{{{span}}}{{c}}{{{label}}}")
                else:
                    cells.append(label if g else "")
                    if span > 1:
                        cells += [""] * (span - 1)
                if g:
                    rules.append(rf"\cmidrule(lr){{{col}-{col + span - 1}}}")
                col += span
            out.append(" & ".join(cells) + r" \\")
            out.append(" ".join(rules))
        heads = self.tex_headers or [tex_escape(h) for h in self.headers]
        out.append(" & ".join(heads) + r" \\")
        out.append(r"\midrule")
        for i, row in enumerate(self.rows):
            if i in self.breaks and i > 0:
                out.append(r"\midrule")
            out.append(" & ".join(c.latex() for c in row) + r" \\")
        if not self.rows:
            out.append(r"\multicolumn{" + str(ncol) + r"}{c}{(no data)} \\")
        out += [
            r"\bottomrule",
            r"\end{tabular}",
            rf"\caption{{{tex_escape(' '.join(filter(None, (self.caption, self.source))))}}}",
            rf"\label{{tab:{self.key}}}",
            r"\end{table}",
            "",
        ]
        return "\n".join(out)

    def _comment_lines(self) -> list[str]:
        lines = [f"{self.title} (generated; do not edit)"]
        if self.source:
            lines.append(f"data: {self.source}")
        if self.commands:
            lines.append("made by:")
            lines += [f"  {c}" for c in self.commands]
        return [line.replace("\n", " ") for line in lines]

    # -- CSV ---------------------------------------------------------------------------------------
    def csv(self) -> str:
        head = "".join(f"# {line}\n" for line in self._comment_lines())
        return head + self.data.to_csv(index=False, lineterminator="\n")


def read_table_csv(path) -> pd.DataFrame:
    """A table CSV written here: the leading ``#`` provenance lines skipped
    (labels may contain ``#``)."""
    import io
    from pathlib import Path

    lines = Path(path).read_text().splitlines(keepends=True)
    n = 0
    while n < len(lines) and lines[n].startswith("#"):
        n += 1
    return pd.read_csv(io.StringIO("".join(lines[n:])))
