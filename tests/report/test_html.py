"""The tables as web pages and the figure captions as HTML fragments (what `snakemake
--report` shows inline)."""

from __future__ import annotations

from .trees import md_rows


def test_html_tables_hold_the_markdown_cells(tree):
    """Each table also as a web page (what `snakemake --report` shows inline): the title and,
    row by row, the cells of the Markdown table, escaped."""
    from html import escape
    from html.parser import HTMLParser

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.cell = [], None

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append([])
            elif tag == "td":
                self.cell = ""

        def handle_endtag(self, tag):
            if tag == "td":
                self.rows[-1].append(self.cell)
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

    _, out, rep = tree
    assert rep.tables
    for t in rep.tables:
        page = (out / "tables" / f"{t.key}.html").read_text()
        assert page.startswith("<!DOCTYPE html>") and f"<h3>{escape(t.title)}</h3>" in page
        parser = Cells()
        parser.feed(page)
        md = [
            [c.replace("**", "").replace("\\|", "|") for c in row]
            for row in md_rows(out / "tables" / f"{t.key}.md")
        ]
        assert [r for r in parser.rows if r] == (md if t.rows else [["(no data)"]]), t.key


def test_figure_captions_as_html(tree):
    """Each figure's caption beside it as an HTML fragment (the workflow's HTML report shows
    it under the figure): the title, the caption and the notes, escaped."""
    from html import escape

    _, out, rep = tree
    for f in rep.figures:
        text = (out / "figures" / f"{f.stem}.caption.html").read_text()
        assert f"<b>{escape(f.title)}</b>" in text and escape(f.caption) in text
        assert all(f"<li>{escape(n)}</li>" in text for n in f.notes)
