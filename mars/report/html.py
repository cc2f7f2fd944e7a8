"""HTML of the report's tables and figure captions, for browsers and `snakemake --report`.

Snakemake's HTML report shows HTML files inline (Markdown, LaTeX and CSV only as downloads), and
its captions are reStructuredText that can take raw HTML from a file. So each table also gets a
standalone page (``tables/<table>.html``) and each figure its caption as an HTML fragment
(``figures/<figure>.caption.html``); the workflow's report captions
(``workflow/report/result.rst``) include them, so a figure's caption is written once, here.
"""

from __future__ import annotations

import re
from dataclasses import replace
from html import escape

from .fmt import Cell, Table, is_missing

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h3 { margin: 0 0 .4em; }
p.caption { max-width: 60em; }
table { border-collapse: collapse; margin: .8em 0; }
th, td { padding: .25em .7em; }
thead tr:last-child th { border-bottom: 1px solid #444; }
th.group { border-bottom: 1px solid #999; }
tbody tr.break td { border-top: 1px solid #bbb; }
tbody tr:last-child td { border-bottom: 1px solid #444; }
.l { text-align: left; } .r { text-align: right; } .c { text-align: center; }
td.r, code, .nw { white-space: nowrap; }
code { font-size: 92%; }
.tick { display: none; }
pre { white-space: pre-wrap; font-size: 85%; color: #555; }
pre div { padding-left: 2em; text-indent: -2em; }
""".strip()

_CODE = re.compile(r"`([^`]+)`")


def inline_html(text: object) -> str:
    """Text as the Markdown shows it, escaped; its `code` spans as <code>. The backticks stay in
    the page's text (hidden), so a cell reads as the same text in the HTML and the Markdown."""
    return _CODE.sub(
        r'<code><span class="tick">`</span>\1<span class="tick">`</span></code>', escape(str(text))
    )


def _unbroken(html: str, sep: str) -> str:
    """``html`` that a line wraps only at ``sep``."""
    parts = html.split(sep)
    return html if len(parts) == 1 else sep.join(f'<span class="nw">{p}</span>' for p in parts)


def cell_html(cell: Cell) -> str:
    """A cell as the Markdown shows it (same number formats), escaped; bold as <b>."""
    if cell.kind == "text" and not is_missing(cell.value):
        s = inline_html(cell.value)
    else:
        s = escape(replace(cell, bold=False).md())
    return f"<b>{s}</b>" if cell.bold and s else s


def _notes(notes: list[str], html=escape) -> list[str]:
    if not notes:
        return []
    return ["<ul>", *(f"<li>{html(n)}</li>" for n in notes), "</ul>"]


def _align(table: Table) -> str:
    """Each column's alignment: the table's ("c" as "r"), but a column of words on the left."""
    align = list((table.align or "ll" + "r" * (len(table.headers) - 2)).replace("c", "r"))
    for j in range(min(len(align), len(table.headers))):
        cells = [row[j] for row in table.rows if j < len(row) and not is_missing(row[j].value)]
        if cells and all(
            c.kind == "text" and any(ch.isalpha() for ch in str(c.value)) for c in cells
        ):
            align[j] = "l"
    return "".join(align)


def table_html(table: Table) -> str:
    """A table as a standalone HTML page: title, caption, the table, its notes and commands."""
    align = _align(table)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(table.title)}</title><style>{_STYLE}</style></head><body>",
        f"<h3>{escape(table.title)}</h3>",
    ]
    if table.caption:
        out.append(f'<p class="caption">{inline_html(table.caption)}</p>')
    if table.source:
        out.append(f'<p class="caption"><b>{escape(table.source)}</b></p>')
    out += ["<table>", "<thead>"]
    if table.groups:
        cells = [
            f'<th colspan="{span}" class="{"group c" if label else "c"}">{escape(label)}</th>'
            for label, span, _ in table.groups
        ]
        out.append("<tr>" + "".join(cells) + "</tr>")
    heads = (f'<th class="{a}">{escape(h)}</th>' for a, h in zip(align, table.headers))
    out += ["<tr>" + "".join(heads) + "</tr>", "</thead>", "<tbody>"]
    for i, row in enumerate(table.rows):
        tr = '<tr class="break">' if i in table.breaks and i > 0 else "<tr>"
        tds = (f'<td class="{a}">{cell_html(c)}</td>' for a, c in zip(align, row))
        out.append(tr + "".join(tds) + "</tr>")
    if not table.rows:
        out.append(f'<tr><td colspan="{len(table.headers)}">(no data)</td></tr>')
    out += ["</tbody>", "</table>", *_notes(table.notes, inline_html)]
    if table.commands:
        # one line per command, wrapped between its words only (not at the hyphens of options)
        lines = [f"<div>{_unbroken(escape(c), ' ')}</div>" for c in table.commands]
        out += ["<p>Made by:</p>", "<pre>" + "".join(lines) + "</pre>"]
    out += ["</body></html>", ""]
    return "\n".join(out)


def caption_html(title: str, caption: str, notes: list[str]) -> str:
    """A figure's caption as an HTML fragment: its title, caption and notes."""
    out = [f"<p><b>{escape(title)}</b></p>", f'<p class="caption">{escape(caption)}</p>']
    return "\n".join([*out, *_notes(notes), ""])
